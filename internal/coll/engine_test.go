package coll_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/sim"
)

func newSim(t *testing.T, topo string, opt sim.Options) *sim.Backend {
	t.Helper()
	tp, err := sim.LoadTopology(topo)
	if err != nil {
		t.Fatal(err)
	}
	if opt.DataCap == 0 {
		opt.DataCap = sim.DefaultDataCap
	}
	b, err := sim.New(tp, opt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sweep(t *testing.T, s string) coll.Sweep {
	t.Helper()
	w, err := coll.ParseSizes(s)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// The size and count columns and the busbw factors, as nccl-tests defines them
// (nccl-tests' doc/PERFORMANCE.md and each test's GetBw in src/*.cu): 8 ranks of float at 1 MiB.
func TestCountsMatchNCCLTests(t *testing.T) {
	t.Parallel()
	cases := []struct {
		c           *coll.Collective
		size, count int64
		send, recv  int64
		f1, f2, f8  float64
	}{
		{coll.AllReduce, 1048576, 262144, 262144, 262144, 0, 1, 1.75},
		{coll.AllGather, 1048576, 32768, 32768, 262144, 0, 0.5, 0.875},
		{coll.ReduceScatter, 1048576, 32768, 262144, 32768, 0, 0.5, 0.875},
		{coll.AllToAll, 1048576, 32768, 262144, 262144, 0, 0.5, 0.875},
		{coll.Broadcast, 1048576, 262144, 262144, 262144, 1, 1, 1},
		{coll.Reduce, 1048576, 262144, 262144, 262144, 1, 1, 1},
		{coll.SendRecv, 1048576, 262144, 262144, 262144, 1, 1, 1},
	}
	for _, c := range cases {
		k := c.c.Counts(1048576/4, 4, 8)
		if k.Bytes != c.size || k.Param != c.count || k.Send != c.send || k.Recv != c.recv {
			t.Errorf("%s: counts %+v; want size %d count %d send %d recv %d", c.c.Name, k, c.size, c.count, c.send, c.recv)
		}
		for n, want := range map[int]float64{1: c.f1, 2: c.f2, 8: c.f8} {
			if got := c.c.Factor(n); got != want {
				t.Errorf("%s: factor(%d) = %v; want %v", c.c.Name, n, got, want)
			}
		}
	}
	// Per-rank chunks are rounded down to 16 bytes: 8 bytes over 8 ranks is nothing.
	if k := coll.AllGather.Counts(2, 4, 8); k.Bytes != 0 || k.Param != 0 {
		t.Errorf("allgather 8B on 8 ranks: %+v; want 0 bytes", k)
	}
	if k := coll.AllGather.Counts(1000/8, 8, 3); k.Param != 40 || k.Bytes != 960 {
		t.Errorf("allgather 1000B of double on 3 ranks: %+v; want count 40, size 960", k)
	}
}

// Every collective, every type and every op, on 1, 2, 3 and 8 ranks: the simulator's results
// match the exact expectations bit for bit (2 units for floating-point avg).
func TestEveryCollectiveTypeAndOpIsExact(t *testing.T) {
	t.Parallel()
	for _, c := range coll.Collectives {
		for _, n := range []int{1, 2, 3, 8} {
			t.Run(c.Name+"/"+string(rune('0'+n)), func(t *testing.T) {
				t.Parallel()
				b := newSim(t, "dgx-h100", sim.Options{})
				s, err := coll.Run(context.Background(), b, coll.Options{
					Coll: c, Sweep: sweep(t, "8B:8K:x32"), DTypes: gpu.DTypes, Ops: gpu.RedOps,
					Root: -1, NGPUs: n, Iters: 2, Warmup: 1, Check: 1, Average: 1, Seed: 7,
				})
				if err != nil {
					t.Fatal(err)
				}
				checked := 0
				for _, r := range s.Results {
					for _, p := range []coll.Placement{r.OutOfPlace, r.InPlace} {
						if p.Wrong == nil {
							continue
						}
						checked++
						if *p.Wrong != 0 {
							t.Errorf("%s %s %s root %d size %d: %d wrong", c.Name, r.Type, r.Op, r.Root, r.Size, *p.Wrong)
						}
					}
				}
				if s.OutOfBounds != 0 || checked == 0 {
					t.Errorf("out of bounds %d, checked %d placements", s.OutOfBounds, checked)
				}
			})
		}
	}
}

// A corrupted result is caught: #wrong > 0 and the run counts it out of bounds.
func TestCorruptFaultIsDetected(t *testing.T) {
	t.Parallel()
	for _, c := range coll.Collectives {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			b := newSim(t, "dgx-h100", sim.Options{Faults: []sim.Fault{{Kind: "corrupt", Device: 2}}})
			root := 0
			if c == coll.Gather { // only the root receives
				root = 2
			}
			s, err := coll.Run(context.Background(), b, coll.Options{
				Coll: c, Sweep: sweep(t, "1K:64K:x8"), DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum},
				Root: root, Iters: 1, Check: 1, Average: 1,
			})
			if err != nil {
				t.Fatal(err)
			}
			if s.OutOfBounds == 0 {
				t.Fatal("corrupted results were not counted")
			}
			for _, r := range s.Results {
				if w := r.OutOfPlace.Wrong; w == nil || *w == 0 {
					t.Errorf("size %d: out-of-place #wrong = %v; want > 0", r.Size, w)
				}
			}
		})
	}
}

// A device that never finishes is reported, within the timeout, naming the collective, the size
// and the rank.
func TestHangIsReportedWithinTimeout(t *testing.T) {
	t.Parallel()
	b := newSim(t, "dgx-h100", sim.Options{Faults: []sim.Fault{{Kind: "hang", Device: 3, After: 10}}})
	var rows int
	s, err := coll.Run(context.Background(), b, coll.Options{
		Coll: coll.AllReduce, Sweep: sweep(t, "1K:1M"), DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum},
		Iters: 4, Warmup: 0, Check: 0, Average: 1, Timeout: 20 * time.Millisecond,
		OnResult: func(coll.Result) { rows++ },
	})
	var hang *gpu.HangError
	var step *coll.StepError
	if !errors.As(err, &hang) || !errors.As(err, &step) {
		t.Fatalf("err = %v; want a hang inside a step", err)
	}
	if len(hang.Ranks) != 1 || hang.Ranks[0] != 3 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hang = %+v; want rank 3 past its deadline", hang)
	}
	if !strings.Contains(err.Error(), "allreduce at 2048 bytes") || !strings.Contains(err.Error(), "rank 3 did not finish") {
		t.Errorf("error %q does not name the collective, size and rank", err)
	}
	if s == nil || s.Interrupted || len(s.Results) != rows {
		t.Errorf("summary %+v; want the %d rows measured before the hang", s, rows)
	}
}

// Ctrl-C keeps the rows measured so far.
func TestInterruptKeepsResults(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := newSim(t, "dgx-h100", sim.Options{})
	rows := 0
	s, err := coll.Run(ctx, b, coll.Options{
		Coll: coll.AllReduce, Sweep: sweep(t, "8B:1M"), DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum},
		Iters: 1, Check: 1, Average: 1,
		OnResult: func(coll.Result) {
			if rows++; rows == 3 {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) || s == nil || !s.Interrupted || len(s.Results) != 3 {
		t.Fatalf("err %v, summary %+v; want 3 rows and an interruption", err, s)
	}
}

// nccl-tests' memory limit, and the clamp it leads to on a 24 GB card.
func TestMemoryLimitClamps(t *testing.T) {
	t.Parallel()
	if got := coll.MemoryLimit(85520809984, true); got != 26717366954 {
		t.Errorf("80 GB limit = %d; want 26717366954", got)
	}
	if got := coll.MemoryLimit(25757220864, false); got != 11267997696 {
		t.Errorf("24 GB limit without checking = %d; want 11267997696", got)
	}
	if got := coll.MemoryLimit(math.MaxInt64, true); got != (math.MaxInt64-5*(1<<30))/3 {
		t.Errorf("the largest memory's limit = %d; want %d (no overflow)", got, (math.MaxInt64-5*(1<<30))/3)
	}
	b := newSim(t, "pcie-4090x8", sim.Options{})
	s, err := coll.Run(context.Background(), b, coll.Options{
		Coll: coll.AllReduce, Sweep: sweep(t, "4G:8G"), DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum},
		Iters: 1, Check: 1, Average: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.ClampedFrom != 8<<30 || s.Sweep.Max != 7511998464 || len(s.Results) != 1 || s.Results[0].Size != 4<<30 {
		t.Errorf("clamped from %d to %d with %d rows; want 8GiB -> 7511998464 and only 4GiB measured", s.ClampedFrom, s.Sweep.Max, len(s.Results))
	}
}

func TestCombine(t *testing.T) {
	t.Parallel()
	times := []float64{3, 1, 2}
	for mode, want := range []float64{3, 2, 1, 3} {
		if got := coll.Combine(times, coll.Average(mode)); got != want {
			t.Errorf("Combine(%v, %d) = %v; want %v", times, mode, got, want)
		}
	}
}

// Modes outside nccl-tests' four are refused before anything runs, never combined as some mode.
func TestInvalidModesRefused(t *testing.T) {
	t.Parallel()
	b := newSim(t, "dgx-h100", sim.Options{})
	for _, opt := range []coll.Options{
		{Coll: coll.AllReduce, Sweep: coll.Sweep{Min: 1024, Max: 1024, Factor: 2}, DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum}, Iters: 1, Average: 4},
		{Coll: coll.AllReduce, Sweep: coll.Sweep{Min: 1024, Max: 1024, Factor: 2}, DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum}, Iters: 1, Blocking: -1},
	} {
		if _, err := coll.Run(context.Background(), b, opt); !errors.Is(err, coll.ErrOption) {
			t.Errorf("-a %d -z %d: %v; want ErrOption", opt.Average, opt.Blocking, err)
		}
	}
}

// The simulator's time is the engine's: algbw is bytes over the measured time, busbw algbw times
// the factor, and the average is over every printed cell.
func TestBandwidthArithmetic(t *testing.T) {
	t.Parallel()
	b := newSim(t, "dgx-a100", sim.Options{})
	s, err := coll.Run(context.Background(), b, coll.Options{
		Coll: coll.AllReduce, Sweep: sweep(t, "1G:2G"), DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum},
		Iters: 5, Check: 0, Average: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, r := range s.Results {
		for _, p := range []coll.Placement{r.OutOfPlace, r.InPlace} {
			alg := float64(r.Size) / 1e3 / p.TimeUS
			if d := p.AlgBW - alg; d > 1e-9 || d < -1e-9 || p.BusBW != p.AlgBW*1.75 || p.Wrong != nil {
				t.Errorf("size %d: %+v; want algbw %v and busbw 1.75x, unchecked", r.Size, p, alg)
			}
			sum += p.BusBW
		}
	}
	if s.AvgBusBW != sum/4 {
		t.Errorf("avg busbw %v; want %v", s.AvgBusBW, sum/4)
	}
	// DGX A100 rings run at NCCL's 240 GB/s model figure: at 2 GiB busbw is within 1% of it.
	if bw := s.Results[1].OutOfPlace.BusBW; bw < 237 || bw > 240 {
		t.Errorf("dgx-a100 allreduce busbw at 2 GiB = %.1f; want about 240", bw)
	}
	if s.BusPeak != 300 || s.PeakLimit != "nvlink" {
		t.Errorf("bus peak %v %s; want 300 nvlink", s.BusPeak, s.PeakLimit)
	}
}

// Graph mode replays a captured loop: the simulator charges one host launch per graph instead of
// one per call, so small collectives get faster, and the data is still right. Blocking mode waits
// after every call, so the launch cost and the collective no longer overlap.
func TestGraphAndBlockingModes(t *testing.T) {
	t.Parallel()
	run := func(graph int, blocking coll.Blocking) *coll.Summary {
		b := newSim(t, "dgx-h100", sim.Options{})
		s, err := coll.Run(context.Background(), b, coll.Options{
			Coll: coll.AllReduce, Sweep: sweep(t, "1K:1K"), DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum},
			Iters: 10, Check: 1, Average: 1, Graph: graph, Blocking: blocking,
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	plain, graph, blocking := run(0, 0), run(5, 0), run(0, 1)
	p, g, z := plain.Results[0].OutOfPlace, graph.Results[0].OutOfPlace, blocking.Results[0].OutOfPlace
	if !(g.TimeUS < p.TimeUS) || !(z.TimeUS > p.TimeUS) {
		t.Errorf("time per call: plain %.2f, graph %.2f, blocking %.2f µs; want graph < plain < blocking", p.TimeUS, g.TimeUS, z.TimeUS)
	}
	if g.Wrong == nil || *g.Wrong != 0 || graph.OutOfBounds != 0 {
		t.Errorf("graph mode broke the check: %+v", g)
	}
}

// --per-iter: every timed iteration's stream time, whose statistics agree with the loop's time.
func TestPerIterationTimes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		jitter float64
		graph  int
	}{{"steady", 0, 0}, {"jittery", 0.2, 0}, {"graph", 0, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			b := newSim(t, "dgx-h100", sim.Options{DataCap: 1 << 20, Jitter: tc.jitter, Seed: 7})
			w, _ := coll.ParseSizes("64M")
			s, err := coll.Run(context.Background(), b, coll.Options{Coll: coll.AllReduce, Sweep: w, DTypes: []gpu.DType{gpu.Float},
				Ops: []gpu.RedOp{gpu.Sum}, Iters: 40, Warmup: 1, Average: 1, PerIter: true, Graph: tc.graph})
			if err != nil {
				t.Fatal(err)
			}
			p := s.Results[0].OutOfPlace
			st := p.PerIter
			want := 40
			if tc.graph > 0 {
				want = tc.graph
			}
			if st == nil || len(st.TimesUS) != want {
				t.Fatalf("per-iteration times: %+v", st)
			}
			if !(st.P50US <= st.P95US && st.P95US <= st.P99US && st.P99US <= st.MaxUS) || st.MeanUS <= 0 {
				t.Errorf("percentiles out of order: %+v", st)
			}
			// At 64 MiB the stream, not the host, sets the pace: the iterations add up to the loop.
			if math.Abs(st.MeanUS-p.TimeUS) > 0.02*p.TimeUS {
				t.Errorf("mean iteration %.3f µs, loop %.3f µs per iteration", st.MeanUS, p.TimeUS)
			}
			// Without jitter only the first iteration differs (it waits for its launch); with it
			// the rest spread too.
			rest := st.TimesUS[1:]
			same := slices.Max(rest)-slices.Min(rest) <= 1e-9*slices.Max(rest)
			if steady := tc.jitter == 0; steady != same {
				t.Errorf("jitter %v: iterations after the first %v", tc.jitter, rest)
			}
		})
	}
}

func TestIterStats(t *testing.T) {
	s := coll.NewIterStats([]float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10})
	if s.MinUS != 1 || s.P50US != 5 || s.P95US != 10 || s.P99US != 10 || s.MaxUS != 10 || s.MeanUS != 5.5 || math.Abs(s.CV-0.5222) > 1e-4 {
		t.Errorf("%+v", s)
	}
}

// With one rank, NCCL queues no work for an in-place collective (an H200 took 0.7-1 µs in place,
// 5-500 µs out of place, from 8 B to 1 GiB; docs/validation.md), and the simulator agrees.
func TestOneRankInPlaceMovesNothing(t *testing.T) {
	b := newSim(t, "hgx-h200", sim.Options{DataCap: 1 << 20})
	w, _ := coll.ParseSizes("8B:1GB:x134217728")
	for _, c := range []*coll.Collective{coll.AllReduce, coll.Broadcast, coll.Reduce} {
		s, err := coll.Run(context.Background(), b, coll.Options{Coll: c, Sweep: w, DTypes: []gpu.DType{gpu.Float},
			Ops: []gpu.RedOp{gpu.Sum}, NGPUs: 1, Iters: 5, Warmup: 1, Check: 1, Average: 1})
		if err != nil {
			t.Fatal(err)
		}
		big := s.Results[len(s.Results)-1]
		if big.Size != 1<<30 || big.InPlace.TimeUS > 5 || big.OutOfPlace.TimeUS < 100*big.InPlace.TimeUS {
			t.Errorf("%s at %d B: in place %.2f µs, out of place %.2f µs", c.Name, big.Size, big.InPlace.TimeUS, big.OutOfPlace.TimeUS)
		}
	}
}

// turnsBackend records where rank 0's all-reduces read from, as a real GPU's caches would see it.
type turnsBackend struct {
	*sim.Backend
	sends []gpu.Buffer
}

func (b *turnsBackend) NewComm(devs []int) (gpu.Comm, error) {
	c, err := b.Backend.NewComm(devs)
	return &turnsComm{Comm: c, b: b}, err
}

type turnsComm struct {
	gpu.Comm
	b *turnsBackend
}

func (c *turnsComm) AllReduce(send, recv []gpu.Buffer, count int64, dt gpu.DType, op gpu.RedOp) error {
	c.b.sends = append(c.b.sends, send[0])
	return c.Comm.AllReduce(send, recv, count, dt, op)
}

// As nccl-tests, the timed iterations move along memory rather than run on one buffer (which a
// GPU's cache would hold from one to the next): each of 5 iterations at 1 KiB in a sweep up to
// 4 KiB runs at one of 4 places, the first twice; at 4 KiB, the sweep's largest, all run at one.
// The untimed call and the check use the first place, and the check still finds every element.
func TestTimedIterationsMoveAlongMemory(t *testing.T) {
	b := &turnsBackend{Backend: newSim(t, "dgx-h100", sim.Options{})}
	s, err := coll.Run(context.Background(), b, coll.Options{Coll: coll.AllReduce, Sweep: sweep(t, "1K:4K:x4"),
		DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum}, Iters: 5, Check: 1, Average: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Results {
		if r.OutOfPlace.Wrong == nil || *r.OutOfPlace.Wrong != 0 || *r.InPlace.Wrong != 0 {
			t.Errorf("%d B: the check found wrong elements or did not run: %+v", r.Size, r)
		}
	}
	// Per size: out of place, then in place; each one untimed call, 5 timed, 1 checked.
	if len(b.sends) != 4*7 {
		t.Fatalf("%d all-reduce calls; want 28", len(b.sends))
	}
	for i, want := range []int{4, 4, 1, 1} {
		calls := b.sends[7*i : 7*i+7]
		places := map[gpu.Buffer]bool{}
		for _, x := range calls[1:6] {
			places[x] = true
		}
		if len(places) != want || calls[0] != calls[1] || calls[6] != calls[0] || (want > 1 && calls[5] != calls[1]) {
			t.Errorf("placement %d: timed iterations at %d places (want %d); untimed, first, fifth and checked call at %p %p %p %p",
				i, len(places), want, calls[0], calls[1], calls[5], calls[6])
		}
	}
}

// Until interrupted (-N 0), the summary holds the last sweep's rows alone, so memory stays
// bounded; every row still reaches OnResult.
func TestEndlessRunKeepsTheLastSweep(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rows := 0
	s, err := coll.Run(ctx, newSim(t, "dgx-h100", sim.Options{}), coll.Options{Coll: coll.AllReduce, Sweep: sweep(t, "8:64"),
		DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum}, Iters: 1, Check: 1, Average: 1, Cycles: -1,
		OnResult: func(coll.Result) {
			if rows++; rows == 40 {
				cancel()
			}
		}})
	if !errors.Is(err, context.Canceled) || rows < 40 || len(s.Results) > 4 {
		t.Errorf("err %v, %d rows seen, %d kept; want canceled, 40 seen, at most one sweep's 4 kept", err, rows, len(s.Results))
	}
}

// Runs that share Inputs, as a burn-in's passes do, reuse the host memory of their checks: a
// second pass of a checked all-to-all (whose expected outputs are built per rank) and all-gather
// allocates far less than one rank's buffer, where fresh memory for every check allocated tens.
func TestRunsReuseHostMemory(t *testing.T) {
	const size = 512 << 10
	for _, c := range []*coll.Collective{coll.AllToAll, coll.AllGather, coll.AllReduce} {
		b := newSim(t, "dgx-h100", sim.Options{})
		in := &coll.Inputs{}
		opt := coll.Options{Coll: c, Sweep: sweep(t, "512K:512K"), DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum},
			Iters: 2, Check: 1, Average: 1, Seed: 1, Inputs: in}
		var m0, m1 runtime.MemStats
		for pass := range 2 {
			runtime.ReadMemStats(&m0)
			s, err := coll.Run(context.Background(), b, opt)
			runtime.ReadMemStats(&m1)
			if err != nil {
				t.Fatal(err)
			}
			if r := s.Results[0]; r.OutOfPlace.Wrong == nil || *r.OutOfPlace.Wrong != 0 {
				t.Fatalf("%s pass %d: the check did not run or found wrong elements: %+v", c.Name, pass, r)
			}
		}
		if got := m1.TotalAlloc - m0.TotalAlloc; got > size/2 {
			t.Errorf("%s: the second pass allocated %d bytes; want under %d", c.Name, got, size/2)
		}
	}
}
