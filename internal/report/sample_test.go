package report

import (
	"errors"
	"time"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/p2p"
)

// Runs built by hand, so that every field a writer can fill is filled: the round trip and the
// golden files cover them all.

func ptr[T any](v T) *T { return &v }

var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// sampleColl is a simulated reduce across two hosts' processes with every option that adds a field: two
// cycles (-N), -C, per-iteration statistics with -K, a graph, blocking, a data cap past which
// rows are timing-only, wrong data in one rank's output, the slowest rank, and a hang that
// stopped it.
func sampleColl() *CollRun {
	minBusBW := 0.2 // NCCL_TESTS_MIN_BW: the average, 0.1, fails it
	devs := []gpu.Device{
		{Ordinal: 0, Name: "NVIDIA H100 80GB HBM3", PCIBusID: "0000:18:00.0", MemoryBytes: 85520809984, Host: "node-a.cluster"},
		{Ordinal: 1, Name: "NVIDIA H100 80GB HBM3", PCIBusID: "0000:2a:00.0", MemoryBytes: 85520809984, Host: "node-a.cluster"},
		{Ordinal: 0, Name: "NVIDIA H100 80GB HBM3", PCIBusID: "0000:18:00.0", MemoryBytes: 85520809984, Host: "node-b.cluster"},
		{Ordinal: 1, Name: "NVIDIA H100 80GB HBM3", PCIBusID: "0000:2a:00.0", MemoryBytes: 85520809984, Host: "node-b.cluster"},
	}
	iter := func(times ...float64) *coll.IterStats {
		return &coll.IterStats{TimesUS: times, MinUS: 9, MeanUS: 10.5, P50US: 10, P95US: 12, P99US: 12.5, MaxUS: 13, CV: 0.08}
	}
	row := func(cycle int, size int64, timingOnly bool) coll.Result {
		p := coll.Placement{TimeUS: 10.25, AlgBW: 0.1, BusBW: 0.1, CPUTimeUS: 3.5, TimingOnly: timingOnly,
			RankTimesUS: []float64{10.25, 10, 9.5, 9.75}, SlowestRank: ptr(0), PerIter: iter(14, 10, 12, 13),
			Expected: &coll.Expected{TimeUS: 6.5, BusBW: 0.16, Ratio: 6.5 / 10.25}}
		ip := p
		ip.SlowestRank, ip.RankTimesUS = nil, []float64{11, 11, 11, 11} // every rank took the same time
		if !timingOnly {
			p.Wrong, p.WrongByRank = ptr(int64(3)), []int64{0, 0, 0, 3}
			ip.Wrong, ip.WrongByRank = ptr(int64(0)), []int64{0, 0, 0, 0}
		}
		return coll.Result{Cycle: cycle, Algo: "Ring", Proto: "Simple", Channels: 8, Size: size, Count: size / 4, Type: "float", Op: "sum", Root: 2, OutOfPlace: p, InPlace: ip}
	}
	return &CollRun{
		Version: "test", Coll: coll.Reduce, Backend: "sim", Topology: "dgx-h100x2",
		Opt: coll.Options{Sweep: coll.Sweep{Min: 1024, Max: 1 << 30, Factor: 1024}, DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum},
			Root: 2, Iters: 4, Warmup: 2, Check: 1, Average: 3, Seed: 7, Graph: 1, Blocking: 1,
			PerIter: true, PerIterSkip: 1, CPUTime: true, Cycles: 2},
		PID: 4242, PIDs: []int{4242, 4243, 5150, 5151}, Launch: "mpirun, 4 processes, rendezvous node-a:29500",
		Start: start, DataCap: 8 << 20, Expect: &Expectation{Source: "the simulator on topology dgx-h100x2", Floor: 0.75},
		MinBusBW: &minBusBW,
		Summary: &coll.Summary{
			Devices: devs, Sweep: coll.Sweep{Min: 1024, Max: 1 << 20, Factor: 1024}, ClampedFrom: 1 << 30,
			Results:     []coll.Result{row(0, 1024, false), row(0, 1<<20, true), row(1, 1024, false)},
			OutOfBounds: 2, AvgBusBW: 0.1, BestBusBW: 0.1, BestSize: 1024, BusPeak: 400, PeakLimit: "infiniband",
			TimingOnlyFrom: 1 << 20, Interrupted: true, Err: errors.New("hang: reduce at 1024 bytes (in-place): rank 3 did not finish"),
		},
	}
}

// sampleOneRank is an all-reduce on one real GPU, where busbw is 0 by definition, swept by a step.
func sampleOneRank() *CollRun {
	p := coll.Placement{TimeUS: 5, AlgBW: 0.0016, Wrong: ptr(int64(0))}
	return &CollRun{
		Version: "test", Coll: coll.AllReduce, Backend: "cuda",
		Runtime: "CUDA driver 12.8, runtime 12.8, libcudart.so.12, NCCL 2.26.2 (libnccl.so.2)",
		Opt: coll.Options{Sweep: coll.Sweep{Min: 8, Max: 16, Step: 8}, DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum},
			Iters: 20, Warmup: 1, Check: 1, Average: 1},
		PID: 4242, Start: start,
		Summary: &coll.Summary{
			Devices: []gpu.Device{{Ordinal: 3, Name: "NVIDIA H100 80GB HBM3", PCIBusID: "0000:5d:00.0", MemoryBytes: 85520809984, Host: "dgx-h100-0"}},
			Sweep:   coll.Sweep{Min: 8, Max: 16, Step: 8},
			Results: []coll.Result{{Size: 8, Count: 2, Type: "float", Op: "sum", OutOfPlace: p, InPlace: p},
				{Size: 16, Count: 4, Type: "float", Op: "sum", OutOfPlace: p, InPlace: p}},
		},
	}
}

// sampleP2P is a p2p run of three GPUs: one pair without peer access (N/A cells and their
// reason), a copy whose data did not match, a host copy that could not run, and a size sweep
// over one pair with an N/A size.
func sampleP2P() *P2PRun {
	devs := []gpu.Device{
		{Ordinal: 0, Name: "NVIDIA GeForce RTX 4090", PCIBusID: "0000:01:00.0", MemoryBytes: 25757220864, Host: "box"},
		{Ordinal: 1, Name: "NVIDIA GeForce RTX 4090", PCIBusID: "0000:21:00.0", MemoryBytes: 25757220864, Host: "box"},
		{Ordinal: 2, Name: "NVIDIA GeForce RTX 4090", PCIBusID: "0000:41:00.0", MemoryBytes: 25757220864, Host: "box"},
	}
	yes := gpu.PeerInfo{Access: true, PerfRank: 1, NativeAtomics: true}
	no := gpu.PeerInfo{}
	access := [][]p2p.Access{
		{{}, {Info: yes, Enable: "ok"}, {Info: no}},
		{{Info: yes, Enable: "ok"}, {}, {Info: yes, Enable: "not requested"}},
		{{Info: no}, {Info: yes, Enable: "cudaErrorPeerAccessUnsupported"}, {}},
	}
	v := func(x float64) p2p.Cell { return p2p.Cell{Value: &x} }
	na := p2p.Cell{NA: "no P2P access between these GPUs"}
	bad := v(24.5)
	bad.Bad = true
	matrix := func(key, title, unit string, diag, peer float64) p2p.Matrix {
		return p2p.Matrix{Key: key, Title: title, Unit: unit, Cells: [][]p2p.Cell{
			{v(diag), v(peer), na},
			{v(peer), v(diag), bad},
			{na, v(peer), v(diag)},
		}}
	}
	// What the simulator expects: the peers twice as fast, latencies the same, host copies the same.
	expected := &p2p.Result{Devices: devs, Matrices: []p2p.Matrix{
		matrix("uni_enabled", "", "GB/s", 900.5, 50.5),
		matrix("lat_enabled", "", "us", 2.5, 11.75),
	}, Host: []p2p.HostRow{{H2D: v(25.5), D2H: v(26.25), Bidir: v(40), Local: v(900.5)}}}
	return &P2PRun{
		Version: "test", Backend: "cuda", Topology: "pcie-4090x8", Runtime: "CUDA driver 12.8, runtime 12.8, libcudart.so.12",
		Expect: &P2PExpectation{Source: "the simulator on topology pcie-4090x8", Floor: 0.75, Result: expected},
		Opt:    p2p.Options{Size: 4 << 20, Repeat: 5, Samples: 3, Verify: true, Pairs: []p2p.Pair{{A: 0, B: 1}}, Sweep: []int64{4096, 1 << 20}},
		Start:  start,
		Result: &p2p.Result{
			Devices: devs, Access: access,
			Matrices: []p2p.Matrix{
				matrix("uni_enabled", "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)", "GB/s", 900.5, 25.25),
				matrix("lat_enabled", "P2P=Enabled Latency (P2P Writes) Matrix (us)", "us", 2.5, 11.75),
			},
			Host: []p2p.HostRow{
				{H2D: v(25.5), D2H: v(26.25), Bidir: v(40), Local: v(900.5)},
				{H2D: v(25.5), D2H: v(26.25), Bidir: v(40), Local: v(900.5)},
				{H2D: v(12.5), D2H: p2p.Cell{NA: "the driver refused the copy"}, Bidir: v(20), Local: v(900.5)},
			},
			Sweep: []p2p.SweepRow{
				{Size: 4096, Uni: v(1.5), Bidir: v(2.75), P2P: true},
				{Size: 1 << 20, Uni: v(20.25), Bidir: p2p.Cell{NA: "the driver refused the copy"}, P2P: true},
			},
			SweepPair: &p2p.Pair{A: 0, B: 1},
			Verified:  40, Mismatched: 1, Unverified: 6,
		},
	}
}
