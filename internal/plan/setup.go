package plan

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Setup is the training run to plan: its batch, its numbers and what it keeps in memory, and the
// layout choices the user forced (0: searched).
type Setup struct {
	Seq         int    `json:"seq"`
	GlobalBatch int    `json:"global_batch"` // sequences per optimizer step
	MicroBatch  int    `json:"micro_batch"`  // sequences per micro-batch
	Precision   string `json:"precision"`    // bf16, fp16, fp8
	Optimizer   string `json:"optimizer"`    // adam, sgd
	ZeRO        int    `json:"zero"`         // 0-3 (FSDP is 3)
	Recompute   string `json:"recompute"`    // none, selective, full
	Schedule    string `json:"schedule"`     // auto, 1f1b, interleaved
	// ComputeEfficiency is the fraction of the GPU's peak dense throughput its matrix
	// multiplications reach, before communication and the pipeline bubble.
	ComputeEfficiency float64 `json:"compute_efficiency"`
	// PeakTFLOPS, when above 0, replaces the GPU table's figure.
	PeakTFLOPS float64 `json:"peak_tflops_override,omitempty"`
	// ReserveBytes, when set, replaces the assumed CUDA, NCCL and allocator reserve per GPU (nil:
	// the assumption, docs/plan.md).
	ReserveBytes *int64 `json:"reserve_bytes_override"`

	AllowTPAcrossNodes bool `json:"allow_tp_across_nodes"`
	UnevenPP           bool `json:"uneven_pp"` // stages may hold ceil(layers / PP) layers

	// Forced layout: 0 searches that dimension.
	TP, PP, DP, EP, CP, VPP int `json:"-"`
}

// The values the setup's words take.
var (
	Precisions = []string{"bf16", "fp16", "fp8"}
	Optimizers = []string{"adam", "sgd"}
	Recomputes = []string{"none", "selective", "full"}
	Schedules  = []string{"auto", "1f1b", "interleaved"}
)

// DefaultSetup is what the flags default to.
func DefaultSetup() Setup {
	return Setup{Seq: 4096, GlobalBatch: 512, MicroBatch: 1, Precision: "bf16", Optimizer: "adam", ZeRO: 1,
		Recompute: "selective", Schedule: "auto", ComputeEfficiency: 0.5}
}

// ParseZeRO reads --zero: a stage 0 to 3, or fsdp (stage 3).
func ParseZeRO(s string) (int, error) {
	if strings.EqualFold(s, "fsdp") {
		return 3, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 3 {
		return 0, fmt.Errorf("zero %q: use 0, 1, 2, 3 or fsdp", s)
	}
	return n, nil
}

// maxSeq and maxBatch bound the setup to what the arithmetic handles exactly.
const (
	maxSeq   = 1 << 24
	maxBatch = 1 << 24
)

// Validate checks the setup against itself and the model; errors name the flag.
func (s *Setup) Validate(m *Model) error {
	switch {
	case s.Seq < 1 || s.Seq > maxSeq:
		return fmt.Errorf("seq %d: use 1 to %d tokens", s.Seq, maxSeq)
	case s.GlobalBatch < 1 || s.GlobalBatch > maxBatch:
		return fmt.Errorf("global-batch %d: use 1 to %d sequences", s.GlobalBatch, maxBatch)
	case s.MicroBatch < 1 || s.MicroBatch > s.GlobalBatch:
		return fmt.Errorf("micro-batch %d: use 1 to the global batch, %d", s.MicroBatch, s.GlobalBatch)
	case s.GlobalBatch%s.MicroBatch != 0:
		return fmt.Errorf("global-batch %d is not a multiple of micro-batch %d", s.GlobalBatch, s.MicroBatch)
	case !slices.Contains(Precisions, s.Precision):
		return fmt.Errorf("precision %q: use %s", s.Precision, strings.Join(Precisions, ", "))
	case !slices.Contains(Optimizers, s.Optimizer):
		return fmt.Errorf("optimizer %q: use %s", s.Optimizer, strings.Join(Optimizers, ", "))
	case s.ZeRO < 0 || s.ZeRO > 3:
		return fmt.Errorf("zero %d: use 0 to 3 or fsdp", s.ZeRO)
	case !slices.Contains(Recomputes, s.Recompute):
		return fmt.Errorf("recompute %q: use %s", s.Recompute, strings.Join(Recomputes, ", "))
	case !slices.Contains(Schedules, s.Schedule):
		return fmt.Errorf("schedule %q: use %s", s.Schedule, strings.Join(Schedules, ", "))
	case !(s.ComputeEfficiency > 0 && s.ComputeEfficiency <= 1):
		return fmt.Errorf("compute-efficiency %v: use a fraction above 0, at most 1", s.ComputeEfficiency)
	case !(s.PeakTFLOPS >= 0 && s.PeakTFLOPS < 1e6):
		return fmt.Errorf("peak-tflops %v: use a positive figure", s.PeakTFLOPS)
	case s.ReserveBytes != nil && *s.ReserveBytes < 0:
		return fmt.Errorf("reserve %d: use 0 or more bytes", *s.ReserveBytes)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"tp", s.TP}, {"pp", s.PP}, {"dp", s.DP}, {"ep", s.EP}, {"cp", s.CP}, {"vpp", s.VPP}} {
		if f.v < 0 || f.v > maxBatch {
			return fmt.Errorf("%s %d: use a positive size, or 0 to search it", f.name, f.v)
		}
	}
	// Forced sizes are held to the model's constraints here, so that a layout that can never run
	// is a usage error naming the field, not a silent empty plan.
	switch {
	case s.TP > 0 && m.Heads%s.TP != 0:
		return fmt.Errorf("tp %d: the model's %d attention heads are not divisible by it", s.TP, m.Heads)
	case s.TP > 0 && !m.MLA() && m.KVHeads%s.TP != 0:
		return fmt.Errorf("tp %d: the model's %d KV heads are not divisible by it", s.TP, m.KVHeads)
	case s.PP > 0 && s.PP > m.Layers:
		return fmt.Errorf("pp %d: the model has only %d layers", s.PP, m.Layers)
	case s.PP > 0 && !s.UnevenPP && m.Layers%s.PP != 0:
		return fmt.Errorf("pp %d: the model's %d layers are not divisible by it (--uneven-pp lets stages differ by a layer)", s.PP, m.Layers)
	case s.DP > 0 && s.GlobalBatch%(s.DP*s.MicroBatch) != 0:
		return fmt.Errorf("dp %d: global-batch %d is not divisible by dp x micro-batch (%d)", s.DP, s.GlobalBatch, s.DP*s.MicroBatch)
	case s.EP > 1 && !m.MoE():
		return fmt.Errorf("ep %d: the model has no experts", s.EP)
	case s.EP > 0 && m.MoE() && m.Experts%s.EP != 0:
		return fmt.Errorf("ep %d: the model's %d experts are not divisible by it", s.EP, m.Experts)
	case s.EP > 0 && s.DP > 0 && s.DP%s.EP != 0:
		return fmt.Errorf("ep %d: expert parallelism is carved out of data parallelism, and dp %d is not divisible by it", s.EP, s.DP)
	case s.CP > 1 && s.Seq%(2*s.CP) != 0:
		return fmt.Errorf("cp %d: seq %d is not divisible by 2 x cp (each rank takes two chunks, for balance)", s.CP, s.Seq)
	case s.TP > 1 && (s.Seq/max(s.CP, 1))%s.TP != 0:
		return fmt.Errorf("tp %d: sequence parallelism splits each rank's %d tokens %d ways, which they do not divide: give a --seq they do", s.TP, s.Seq/max(s.CP, 1), s.TP)
	case s.Schedule == "interleaved" && s.PP == 1:
		return fmt.Errorf("schedule interleaved: pp 1 has no pipeline to interleave; give --pp 2 or more, or --schedule 1f1b or auto")
	case s.VPP > 1 && s.Schedule == "1f1b":
		return fmt.Errorf("vpp %d: the 1f1b schedule has one stage per GPU; use --schedule interleaved or auto", s.VPP)
	case s.VPP > maxVPP:
		return fmt.Errorf("vpp %d: the interleaved schedule is weighed with 2 to %d model chunks a GPU", s.VPP, maxVPP)
	case s.VPP > 1 && s.PP > 0 && (s.PP < 2 || !chunksFit(m.Layers, s.PP, s.VPP, s.UnevenPP)):
		return fmt.Errorf("vpp %d: the interleaved schedule needs pp of 2 or more and the %d layers divisible by pp x vpp (with --uneven-pp, at least vpp layers a stage)", s.VPP, m.Layers)
	case s.VPP > 1 && s.PP == 0 && !anyPipeline(m.Layers, s.VPP, s.UnevenPP):
		return fmt.Errorf("vpp %d: no pipeline of 2 or more stages splits the model's %d layers into %d chunks a stage (with --uneven-pp, at least vpp layers a stage)", s.VPP, m.Layers, s.VPP)
	}
	return nil
}

// anyPipeline reports whether some pipeline of 2 or more stages splits layers into v chunks a stage.
func anyPipeline(layers, v int, uneven bool) bool {
	for pp := 2; pp <= layers; pp++ {
		if chunksFit(layers, pp, v, uneven) {
			return true
		}
	}
	return false
}

// chunksFit reports whether layers split into pp stages of v model chunks each: evenly, or with
// uneven stages (Llama 3's 126 layers over 16 stages and several chunks) at least a layer a chunk.
func chunksFit(layers, pp, v int, uneven bool) bool {
	if uneven {
		return layers/pp >= v
	}
	return layers%(pp*v) == 0
}

// ValidateMachine holds the forced sizes to the machine, so that a layout that can never run
// there is a usage error naming the flag: TP, CP, PP and DP each divide the machine's GPUs, and
// so does their product (which is the GPUs when all four are forced); EP divides what they leave
// to DP; and TP divides an NVLink domain's GPUs unless AllowTPAcrossNodes (docs/plan.md,
// "Layouts").
func (s *Setup) ValidateMachine(mc *Machine) error {
	n := mc.GPUs
	prod, forced := 1, 0
	var names []string
	for _, f := range []struct {
		name string
		v    int
	}{{"tp", s.TP}, {"cp", s.CP}, {"pp", s.PP}, {"dp", s.DP}} {
		switch {
		case f.v == 0:
			continue
		case f.v > n:
			return fmt.Errorf("%s %d: the machine has only %d GPUs (%s); use a size that divides %d, or 0 to search it", f.name, f.v, n, mc.Name, n)
		case n%f.v != 0:
			return fmt.Errorf("%s %d: the machine's %d GPUs are not divisible by it (%s); use a size that divides %d, or 0 to search it", f.name, f.v, n, mc.Name, n)
		}
		prod *= f.v
		forced++
		names = append(names, fmt.Sprintf("%s %d", f.name, f.v))
	}
	list := strings.Join(names, " x --")
	switch {
	case forced == 4 && prod != n:
		return fmt.Errorf("%s: TP x CP x PP x DP is %d GPUs, and the machine has %d (%s); make the product %d, or leave a size at 0 to search it", list, prod, n, mc.Name, n)
	case n%prod != 0:
		return fmt.Errorf("%s: their product, %d GPUs, does not divide the machine's %d (%s); force sizes whose product divides %d", list, prod, n, mc.Name, n)
	case s.TP > 0 && !s.AllowTPAcrossNodes && mc.DomainGPUs%s.TP != 0:
		return fmt.Errorf("tp %d: TP groups stay inside an NVLink domain, and the machine's hold %d GPUs (%s); use a --tp that divides %d, or --allow-tp-across-nodes", s.TP, mc.DomainGPUs, mc.Name, mc.DomainGPUs)
	case s.EP > 1 && s.DP == 0 && (n/prod)%s.EP != 0:
		return fmt.Errorf("ep %d: expert parallelism is carved out of data parallelism, and the other forced sizes leave DP a divisor of %d on the machine's %d GPUs (%s); use an --ep that divides %d, or force less TP x CP x PP", s.EP, n/prod, n, mc.Name, n/prod)
	}
	return nil
}
