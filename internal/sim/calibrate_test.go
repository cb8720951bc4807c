package sim_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/sim"
)

// measure runs an all-reduce sweep on t, timing only, launched from threads host threads, and
// returns it as a run to calibrate from.
func measure(t *testing.T, topo *gpu.Topology, threads int, sizes string) sim.CollRun {
	t.Helper()
	b, err := sim.New(topo, sim.Options{LaunchThreads: threads})
	if err != nil {
		t.Fatal(err)
	}
	w, err := coll.ParseSizes(sizes)
	if err != nil {
		t.Fatal(err)
	}
	s, err := coll.Run(context.Background(), b, coll.Options{Coll: coll.AllReduce, Sweep: w, DTypes: []gpu.DType{gpu.Float},
		Ops: []gpu.RedOp{gpu.Sum}, Iters: 20, Warmup: 1, Average: 1})
	if err != nil {
		t.Fatal(err)
	}
	run := sim.CollRun{File: "run", Coll: "allreduce", Ranks: len(s.Devices), PerThread: len(s.Devices) / threads, Iters: 20}
	for _, r := range s.Results {
		run.Rows = append(run.Rows, sim.MeasuredRow{Bytes: r.Size, TimeUS: r.OutOfPlace.TimeUS})
	}
	return run
}

func load(t *testing.T, name string) *gpu.Topology {
	t.Helper()
	topo, err := sim.LoadTopology(name)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// Runs of a machine whose figures differ from the model's (a slower launch, a Ring/LL with more
// start-up and less bandwidth, an NVLS that reaches less): calibrating from them recovers each
// figure within 2%, says what the runs could not constrain, and brings every size band within 3%.
func TestCalibrateRecoversPerturbedFigures(t *testing.T) {
	truth := &gpu.Calibration{LaunchUS: 6.5, Algorithms: map[string]gpu.AlgoCalibration{
		"Ring/LL":     {LatencyUS: 4, Bandwidth: 0.8},
		"NVLS/Simple": {LatencyUS: 12, Bandwidth: 0.85},
	}}
	real := load(t, "dgx-h100")
	real.Calibration = truth
	runs := []sim.CollRun{measure(t, real, 1, "8B:8GB"), measure(t, real, 8, "8B:8GB")}
	cal, err := sim.Calibrate(load(t, "dgx-h100"), runs, nil)
	if err != nil {
		t.Fatal(err)
	}
	near := func(what string, got, want, tol float64) {
		if math.Abs(got-want) > tol*math.Abs(want) {
			t.Errorf("%s: fitted %v, truth %v (tolerance %.0f%%)", what, got, want, 100*tol)
		}
	}
	near("launch_us", cal.LaunchUS, truth.LaunchUS, 0.02)
	for k, want := range truth.Algorithms {
		got, ok := cal.Algorithms[k]
		if !ok {
			t.Errorf("%s not fitted: %+v", k, cal.Algorithms)
			continue
		}
		near(k+" bandwidth", got.Bandwidth, want.Bandwidth, 0.02)
		near(k+" latency_us", got.LatencyUS, want.LatencyUS, 0.1)
	}
	if len(cal.Defaults) == 0 || !strings.Contains(strings.Join(cal.Defaults, "\n"), "local_copy_efficiency: no local copy was measured") {
		t.Errorf("defaults %q; want the local copy named as not constrained", cal.Defaults)
	}
	for _, e := range cal.Error {
		if e.After > 3 {
			t.Errorf("band %s: %.2f%% off after calibration (%.2f%% before)", e.Band, e.After, e.Before)
		}
	}
	if cal.Measured != (gpu.MeasuredRange{MinBytes: 8, MaxBytes: 8 << 30, MaxRanks: 8}) {
		t.Errorf("measured range %+v", cal.Measured)
	}

	// The calibrated topology reproduces the runs.
	fitted := load(t, "dgx-h100")
	fitted.Calibration = cal
	again := measure(t, fitted, 1, "8B:8GB")
	for i, r := range again.Rows {
		if want := runs[0].Rows[i].TimeUS; r.Bytes > 1<<20 && math.Abs(r.TimeUS/want-1) > 0.03 {
			t.Errorf("%d B: calibrated %.2f µs, measured %.2f", r.Bytes, r.TimeUS, want)
		}
	}
}

// Rows of large sizes only (512 MiB to 8 GiB, milliseconds each) say what a bandwidth is, not
// what a latency is: the fit keeps NCCL's latency and says so, so that a small call on the
// calibrated machine is not set by an intercept read off milliseconds. A run that fits no figure
// at all (point to point) is refused, naming why.
func TestCalibrateFitsOnlyWhatRowsInform(t *testing.T) {
	real := load(t, "dgx-h100")
	real.Calibration = &gpu.Calibration{Algorithms: map[string]gpu.AlgoCalibration{"NVLS/Simple": {LatencyUS: 300, Bandwidth: 0.8}}}
	cal, err := sim.Calibrate(load(t, "dgx-h100"), []sim.CollRun{measure(t, real, 1, "512M:8G")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := cal.Algorithms["NVLS/Simple"]
	if !ok || got.LatencyUS != 0 || got.Bandwidth < 0.7 || got.Bandwidth > 0.9 {
		t.Errorf("NVLS/Simple fitted %+v (ok %v); want NCCL's latency kept, the bandwidth near 0.8", got, ok)
	}
	// Its record: the rows it was fitted from, their sizes, the error left.
	if got.Rows != 5 || got.MinBytes != 512<<20 || got.MaxBytes != 8<<30 || !(got.ErrorPercent > 0) {
		t.Errorf("NVLS/Simple's record: %d rows, %d to %d B, %g%%; want 5 rows, 512 MiB to 8 GiB", got.Rows, got.MinBytes, got.MaxBytes, got.ErrorPercent)
	}
	if d := strings.Join(cal.Defaults, "\n"); !strings.Contains(d, "NVLS/Simple: its latency is under a tenth of every row's time in the model; NCCL's latency is kept") ||
		!strings.Contains(d, "every other algorithm and protocol: no row ran it") {
		t.Errorf("defaults %q", cal.Defaults)
	}
	p2p := sim.CollRun{File: "sr.log", Coll: "sendrecv", Ranks: 8, PerThread: 1, Iters: 20, Rows: []sim.MeasuredRow{{Bytes: 1 << 20, TimeUS: 30}}}
	if _, err := sim.Calibrate(load(t, "dgx-h100"), []sim.CollRun{p2p}, nil); err == nil ||
		!strings.Contains(err.Error(), "these runs constrain none of the simulator's figures (sr.log: sendrecv on 8 ranks fits no algorithm's figures (NCCL's tuner picks none for point to point)") {
		t.Errorf("a send/recv run alone: %v", err)
	}
}

// Two nodes whose network answers slower than NCCL's tables (10 µs more on every pick across
// them), timed from one thread a node: the small calls are slower, but the host launched as fast
// as the model says, and the fit must not take the network's time for the host's. The launch
// cost is fitted only from rows whose launches the model puts at twice the device's time.
func TestCalibrateKeepsTheNetworkOutOfTheLaunch(t *testing.T) {
	two := func() *gpu.Topology {
		tp, err := load(t, "dgx-h100").WithNodes(2)
		if err != nil {
			t.Fatal(err)
		}
		return tp
	}
	real := two()
	slow := map[string]gpu.AlgoCalibration{}
	for _, k := range []string{"Ring/LL", "Ring/LL128", "Ring/Simple", "Tree/LL", "Tree/LL128", "Tree/Simple", "NVLSTree/Simple", "NVLSTree/LL128"} {
		slow[k] = gpu.AlgoCalibration{LatencyUS: 10, Bandwidth: 1}
	}
	real.Calibration = &gpu.Calibration{Algorithms: slow}
	cal, err := sim.Calibrate(two(), []sim.CollRun{measure(t, real, 2, "8B:1M")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// No row's launches take twice its device time here, so none fits the launch (before the
	// rule, 4.37 µs was fitted): the model's 4.9 is kept, and said so.
	if cal.LaunchUS != 0 || !strings.Contains(strings.Join(cal.Defaults, "\n"), "launch_us: no row was paced") {
		t.Errorf("launch_us fitted %v, defaults %q; want the model's 4.9 kept, and said", cal.LaunchUS, cal.Defaults)
	}
}

// A measured local copy sets the local copy's efficiency: the H200 of docs/validation.md copied
// 512 MiB inside the GPU at 2101.19 GB/s, where the model's hgx-h200 gives about 1788.
func TestCalibrateLocalCopy(t *testing.T) {
	h200 := load(t, "hgx-h200")
	cal, err := sim.Calibrate(h200, nil, []sim.LocalCopy{{File: "p2p.json", Device: 0, Bytes: 512 << 20, GBs: 2101.19}})
	if err != nil {
		t.Fatal(err)
	}
	h200.Calibration = cal
	b, err := sim.New(h200, sim.Options{}) // timing only: the copy times, not its bytes
	if err != nil {
		t.Fatal(err)
	}
	x, err := b.Alloc(0, 512<<20)
	if err != nil {
		t.Fatal(err)
	}
	y, err := b.Alloc(0, 512<<20)
	if err != nil {
		t.Fatal(err)
	}
	times, err := b.TimedCopies(context.Background(), []gpu.Copy{{Dst: y, Src: x, Repeat: 1}})
	if err != nil {
		t.Fatal(err)
	}
	gbs := float64(512<<20) / (times[0].Seconds() * 1e9)
	if math.Abs(gbs/2101.19-1) > 0.03 {
		t.Errorf("calibrated local copy %.1f GB/s; want within 3%% of the measured 2101.19", gbs)
	}
}

func TestCalibrateRefuses(t *testing.T) {
	topo := load(t, "dgx-h100")
	for _, tc := range []struct {
		runs []sim.CollRun
		want string
	}{
		{[]sim.CollRun{{File: "big.json", Coll: "allreduce", Ranks: 16}}, "big.json ran on 16 ranks; topology dgx-h100 has 8 GPUs"},
		{[]sim.CollRun{{File: "h.log", Coll: "hypercube", Ranks: 8}}, "h.log is a hypercube run, which the simulator does not model"},
	} {
		if _, err := sim.Calibrate(topo, tc.runs, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v; want %q", err, tc.want)
		}
	}
	topo.Calibration = &gpu.Calibration{LaunchUS: 3}
	if _, err := sim.Calibrate(topo, nil, nil); err == nil || !strings.Contains(err.Error(), "already calibrated") {
		t.Errorf("a calibrated topology: %v", err)
	}
}

// A GPU with no link to a CPU has no host memory, and the copies through it that gpubench p2p
// makes without peer access have no route: such a topology is refused when it is read, naming
// the GPU, rather than failing (or, before that, timing a copy as infinitely fast) in a run.
func TestGPUWithoutCPURefused(t *testing.T) {
	_, err := gpu.ParseTopology([]byte(`{"format": "gpubench-topology/1", "name": "nv", "nodes": [{"hostname": "h",
		"gpus": [{"name": "H100", "memory_bytes": 85520809984, "memory_bandwidth_gbs": 3350, "compute_capability": "9.0", "id": "g0"},
		         {"name": "H100", "memory_bytes": 85520809984, "memory_bandwidth_gbs": 3350, "compute_capability": "9.0", "id": "g1"}],
		"links": [{"a": "g0", "b": "g1", "kind": "nvlink", "gbs": 450}]}]}`))
	if err == nil || !strings.Contains(err.Error(), "h/g0 reaches no CPU over PCIe") {
		t.Errorf("GPUs with no CPU: %v; want them refused", err)
	}
}
