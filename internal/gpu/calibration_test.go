package gpu_test

import (
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/gpu"
)

// A calibration is read with its topology; each bad figure is refused naming its field.
func TestCalibrationFields(t *testing.T) {
	topo := func(format, cal string) string {
		return `{"format": "` + format + `", "name": "x", "calibration": ` + cal + `, "nodes": [{"hostname": "h", "cpus": [{"id": "c"}], "gpus": [{"id": "g", "name": "n", "memory_bytes": 1, "memory_bandwidth_gbs": 1, "compute_capability": "8.0"}],
			"links": [{"a": "g", "b": "c", "kind": "pcie", "gbs": 32}]}]}`
	}
	good := `{"launch_us": 4.3, "algorithms": {"Ring/LL": {"latency_us": -1.5, "bandwidth": 0.9}}, "local_copy_efficiency": 0.88,
		"measured": {"min_bytes": 8, "max_bytes": 8589934592, "max_ranks": 8}, "from": ["run.json"]}`
	x, err := gpu.ParseTopology([]byte(topo(gpu.TopologyFormat2, good)))
	if err != nil {
		t.Fatal(err)
	}
	if c := x.Calibration; c == nil || c.LaunchUS != 4.3 || c.Algorithms["Ring/LL"] != (gpu.AlgoCalibration{LatencyUS: -1.5, Bandwidth: 0.9}) || c.Measured.MaxRanks != 8 {
		t.Errorf("read %+v", x.Calibration)
	}
	for cal, want := range map[string]string{
		`{"launch_us": -1}`:                                                "calibration.launch_us is -1",
		`{"local_copy_efficiency": 1.5}`:                                   "calibration.local_copy_efficiency is 1.5",
		`{"algorithms": {"Ring": {"bandwidth": 1}}}`:                       `calibration.algorithms: key "Ring": name an algorithm and protocol`,
		`{"algorithms": {"Ring/LL": {"bandwidth": 0}}}`:                    "calibration.algorithms.Ring/LL.bandwidth is 0",
		`{"algorithms": {"Ring/LL": {"latency_us": 1e9, "bandwidth": 1}}}`: "calibration.algorithms.Ring/LL.latency_us is 1e+09",
		`{"algorithms": {"ring/simple": {"bandwidth": 1}}}`:                `calibration.algorithms: key "ring/simple": algorithm "ring" is spelt "Ring", as NCCL and rows spell it`,
		`{"algorithms": {"Ring/LL64": {"bandwidth": 1}}}`:                  `calibration.algorithms: key "Ring/LL64": NCCL has no protocol "LL64"; use one of LL, LL128, Simple`,
		`{"algorithms": {"Torus/Simple": {"bandwidth": 1}}}`:               `NCCL has no algorithm "Torus"; use one of Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT`,
		`{"measured": {"min_bytes": 10, "max_bytes": 1}}`:                  "calibration.measured is",
		`{"launch_ms": 3}`:                                                 `unknown field "launch_ms"`,
	} {
		if _, err := gpu.ParseTopology([]byte(topo(gpu.TopologyFormat2, cal))); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", cal, err, want)
		}
	}
	if _, err := gpu.ParseTopology([]byte(topo(gpu.TopologyFormat, good))); err == nil || !strings.Contains(err.Error(), "calibration is a version 2 field") {
		t.Errorf("version 1 with a calibration: %v", err)
	}
}
