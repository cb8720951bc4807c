package plan

import "strings"

// Peak is a GPU's peak dense tensor-core throughput, TFLOPS, as its vendor publishes it.
// Datasheets give most figures "with sparsity" (2:4 structured); training is dense, so the dense
// figure, half the sparse one, is used. BF16 is with FP32 accumulation, as training accumulates
// (on data-centre GPUs the FP16-accumulate rate is the same; on GeForce cards it is twice the
// FP32-accumulate rate, and the FP32-accumulate one is used here). FP16 runs at the BF16 rate on
// every GPU listed. FP8 is 0 where the GPU has no FP8 tensor cores.
type Peak struct {
	Match  string  `json:"-"` // a substring of the GPU's name, case-insensitive
	BF16   float64 `json:"bf16_tflops"`
	FP8    float64 `json:"fp8_tflops"`
	Source string  `json:"source"`
}

// peaks is searched in order: the more specific names first.
var peaks = []Peak{
	{"GB200", 2500, 5000, "NVIDIA GB200 NVL72 datasheet: 360 PFLOPS FP16/BF16 and 720 PFLOPS FP8 with sparsity for 72 GPUs"},
	{"B200", 2250, 4500, "NVIDIA HGX B200 datasheet: 4.5 PFLOPS FP16/BF16 and 9 PFLOPS FP8 per GPU with sparsity"},
	{"H200 NVL", 835.5, 1670.5, "NVIDIA H200 NVL datasheet: 1,671 TFLOPS BF16 and 3,341 TFLOPS FP8 with sparsity"},
	{"H200", 989.4, 1978.9, "NVIDIA H200 datasheet (SXM): 1,979 TFLOPS BF16 and 3,958 TFLOPS FP8 with sparsity"},
	{"H100 NVL", 835.5, 1670.5, "NVIDIA H100 datasheet (H100 NVL): 1,671 TFLOPS BF16 and 3,341 TFLOPS FP8 with sparsity"},
	{"H100 PCIe", 756.5, 1513, "NVIDIA H100 datasheet (H100 PCIe): 1,513 TFLOPS BF16 and 3,026 TFLOPS FP8 with sparsity"},
	{"H100", 989.4, 1978.9, "NVIDIA H100 datasheet (H100 SXM): 1,979 TFLOPS BF16 and 3,958 TFLOPS FP8 with sparsity"},
	{"H800", 989.4, 1978.9, "NVIDIA H800 datasheet (H800 SXM): 1,979 TFLOPS BF16 and 3,958 TFLOPS FP8 with sparsity"},
	{"H20", 148, 296, "NVIDIA H20 product brief: 148 TFLOPS FP16/BF16 and 296 TFLOPS FP8 dense"},
	{"A100", 312, 0, "NVIDIA A100 datasheet: 312 TFLOPS BF16 dense (624 with sparsity); no FP8"},
	{"L40S", 362.05, 733, "NVIDIA L40S datasheet: 362.05 TFLOPS BF16 and 733 TFLOPS FP8 dense (733 and 1,466 with sparsity)"},
	{"RTX 4090", 165.2, 330.3, "NVIDIA Ada Lovelace architecture whitepaper, GeForce RTX 4090: 165.2 TFLOPS FP16/BF16 and 330.3 TFLOPS FP8 with FP32 accumulate, dense (330.3 and 660.6 with FP16 accumulate)"},
	{"RTX 3090", 71, 0, "NVIDIA Ampere GA102 whitepaper, GeForce RTX 3090: 71 TFLOPS FP16/BF16 with FP32 accumulate, dense (142 with FP16 accumulate); no FP8"},
}

// PeakOf returns the peak throughput of the GPU named name, and false when the table has no
// figure for it.
func PeakOf(name string) (Peak, bool) {
	n := strings.ToLower(name)
	for _, p := range peaks {
		if strings.Contains(n, strings.ToLower(p.Match)) {
			return p, true
		}
	}
	return Peak{}, false
}
