//go:build cgo

package nccl_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/cuda"
	"github.com/gpubench/gpubench/internal/cuda/cudatest"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/nccl"
)

func TestVersionString(t *testing.T) {
	for v, want := range map[int]string{2804: "2.8.4", 21805: "2.18.5", 23007: "2.30.7", 22703: "2.27.3"} {
		if got := nccl.VersionString(v); got != want {
			t.Errorf("VersionString(%d) = %s; want %s", v, got, want)
		}
	}
}

// Libraries load once per process: one test walks through the load failure, then every
// collective, every type and op, through the real binding on the stand-in libraries.
func TestBindingAgainstStandins(t *testing.T) {
	t.Setenv("GPUBENCH_STANDIN_DEVICES", "3")
	t.Setenv("GPUBENCH_STANDIN_MEMORY", "8589934592")
	trace := filepath.Join(t.TempDir(), "trace")
	t.Setenv("GPUBENCH_STANDIN_NCCL_TRACE", trace)
	rt, lib := cudatest.StandinNCCL(t)
	cb, err := cuda.Open(rt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nccl.Open(cb, "/nonexistent/libnccl.so.2"); !errors.Is(err, nccl.ErrNotFound) || !strings.Contains(err.Error(), "/nonexistent/libnccl.so.2") {
		t.Errorf("missing library: %v; want ErrNotFound naming the path", err)
	}
	b, err := nccl.Open(cb, lib)
	if err != nil {
		t.Fatal(err)
	}
	if b.Version != 23007 || b.Describe() != "CUDA driver 12.4, runtime 12.4, "+rt+", NCCL 2.30.7 ("+lib+")" {
		t.Errorf("version %d, %q", b.Version, b.Describe())
	}
	if err := b.CheckTypes(gpu.DTypes, gpu.RedOps); err != nil {
		t.Errorf("NCCL 2.30 lacks nothing: %v", err)
	}
	// Every collective, type and operation, checked; then in graph mode, each size's timed
	// iterations captured once and the graph launched: the stand-ins run a captured call anew at
	// every launch, so its results are checked as ever.
	for _, mode := range []struct {
		name   string
		dtypes []gpu.DType
		ops    []gpu.RedOp
		graph  int
	}{{"", gpu.DTypes, gpu.RedOps, 0}, {"graph mode/", []gpu.DType{gpu.Float}, []gpu.RedOp{gpu.Sum}, 2}} {
		for _, c := range coll.Collectives {
			t.Run(mode.name+c.Name, func(t *testing.T) {
				w, _ := coll.ParseSizes("8B:64K:x32")
				s, err := coll.Run(context.Background(), b, coll.Options{Coll: c, Sweep: w, DTypes: mode.dtypes, Ops: mode.ops,
					Root: -1, Iters: 3, Warmup: 1, Check: 1, Average: 1, Graph: mode.graph, Timeout: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				checked := 0
				for _, r := range s.Results {
					for _, p := range []coll.Placement{r.OutOfPlace, r.InPlace} {
						if p.Wrong != nil {
							checked++
							if *p.Wrong != 0 {
								t.Errorf("%s %s root %d size %d: %d wrong", r.Type, r.Op, r.Root, r.Size, *p.Wrong)
							}
						}
					}
				}
				if checked == 0 || s.OutOfBounds != 0 {
					t.Errorf("checked %d placements, %d out of bounds", checked, s.OutOfBounds)
				}
			})
		}
	}
	// As nccl-tests calls NCCL: a thread that drives one GPU makes its collective alone, one that
	// drives several opens a group around them.
	t.Run("a group only around several GPUs' calls", func(t *testing.T) {
		for _, gpus := range []int{1, 2} {
			if err := os.Truncate(trace, 0); err != nil {
				t.Fatal(err)
			}
			w, _ := coll.ParseSizes("1K")
			if _, err := coll.Run(context.Background(), b, coll.Options{Coll: coll.AllReduce, Sweep: w, DTypes: []gpu.DType{gpu.Float},
				Ops: []gpu.RedOp{gpu.Sum}, Iters: 2, Check: 1, Average: 1, NGPUs: gpus, Timeout: time.Minute}); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(trace)
			if err != nil {
				t.Fatal(err)
			}
			calls, grouped, depth := 0, 0, 0
			for l := range strings.Lines(string(data)) {
				switch strings.TrimSpace(l) {
				case "ncclGroupStart":
					depth++
				case "ncclGroupEnd":
					depth--
				case "ncclAllReduce":
					calls++
					if depth > 0 {
						grouped++
					}
				}
			}
			if want := map[int]int{1: 0, 2: calls}[gpus]; calls == 0 || grouped != want {
				t.Errorf("%d GPUs on one thread: %d of %d all-reduce calls in a group; want %d", gpus, grouped, calls, want)
			}
		}
	})
	// As nccl-tests allocates from NCCL 2.19: memory NCCL can register for zero-copy, every
	// allocation given back.
	t.Run("buffers from ncclMemAlloc", func(t *testing.T) {
		if err := os.Truncate(trace, 0); err != nil {
			t.Fatal(err)
		}
		w, _ := coll.ParseSizes("1K:4K")
		if _, err := coll.Run(context.Background(), b, coll.Options{Coll: coll.AllGather, Sweep: w, DTypes: []gpu.DType{gpu.Float},
			Iters: 3, Check: 1, Average: 1, Timeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(trace)
		if err != nil {
			t.Fatal(err)
		}
		allocs, frees := strings.Count(string(data), "ncclMemAlloc\n"), strings.Count(string(data), "ncclMemFree\n")
		if allocs == 0 || frees != allocs {
			t.Errorf("%d ncclMemAlloc and %d ncclMemFree calls; want some, as many of each", allocs, frees)
		}
	})
	t.Run("one rank per thread, as one per process", func(t *testing.T) {
		id, err := b.NewUniqueID()
		if err != nil {
			t.Fatal(err)
		}
		const size = 3
		w := newMemWorld(size)
		devs := b.Devices()[:size]
		sums, errs := make([]*coll.Summary, size), make([]error, size)
		var wg sync.WaitGroup
		for rank := range size {
			wg.Go(func() {
				comm, err := b.JoinComm(context.Background(), id, size, rank, rank)
				if err != nil {
					errs[rank] = err
					return
				}
				defer comm.Close()
				// No warm-up: it frees each size's buffers and issues the next size at once, with
				// no exchange between ranks. Here the ranks share one process, whose cudaFree
				// waits for every device's streams (the CUDA stand-in's does, as CUDA's does with
				// peers), so a rank freeing would wait for a rank already in the next collective,
				// which waits for it. Ranks in their own processes do not share that wait. Between
				// measured sizes the engine exchanges over Group first, so the sweep runs as here.
				sweep, _ := coll.ParseSizes("1K:1M:x32")
				sums[rank], errs[rank] = coll.Run(context.Background(), b, coll.Options{Coll: coll.AllReduce, Sweep: sweep,
					DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum}, Iters: 2, Check: 1, Average: 1,
					Timeout: time.Minute, Comm: comm, Rank: rank, Devices: devs, Group: w.rank(rank)})
			})
		}
		wg.Wait()
		for rank, err := range errs {
			if err != nil {
				t.Errorf("rank %d: %v", rank, err)
				continue
			}
			s := sums[rank]
			if len(s.Results) != 3 || s.OutOfBounds != 0 || s.Results[0].OutOfPlace.Wrong == nil || len(s.Results[0].OutOfPlace.RankTimesUS) != size {
				t.Errorf("rank %d: %d results, %d wrong: %+v", rank, len(s.Results), s.OutOfBounds, s.Results)
			}
		}
		if _, err := b.JoinComm(context.Background(), id[:64], size, 0, 0); !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("a short id: %v", err)
		}
	})
	t.Run("per-iteration times from events", func(t *testing.T) {
		w, _ := coll.ParseSizes("4K:64K:x16")
		for _, graph := range []int{0, 3} {
			s, err := coll.Run(context.Background(), b, coll.Options{Coll: coll.AllReduce, Sweep: w, DTypes: []gpu.DType{gpu.Float},
				Ops: []gpu.RedOp{gpu.Sum}, Iters: 7, Warmup: 1, Check: 1, Average: 1, PerIter: true, Graph: graph, Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			want := 7
			if graph > 0 {
				want = graph
			}
			for _, r := range s.Results {
				st := r.OutOfPlace.PerIter
				if st == nil || len(st.TimesUS) != want || st.MaxUS <= 0 || st.P50US > st.MaxUS {
					t.Errorf("graph %d, %d B: %+v", graph, r.Size, st)
				}
			}
		}
	})
	t.Run("buffers on the wrong device", func(t *testing.T) {
		comm, err := b.NewComm([]int{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		defer comm.Close()
		x, _ := b.Alloc(1, 64)
		defer b.Free(x)
		if err := comm.AllReduce([]gpu.Buffer{x, x}, []gpu.Buffer{x, x}, 16, gpu.Float, gpu.Sum); !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("rank 0 with device 1's buffer: %v; want ErrInvalid", err)
		}
	})
}

// memWorld is a coll.Group for ranks that are goroutines of one process.
type memWorld struct {
	mu      sync.Mutex
	cond    *sync.Cond
	vals    [][]float64
	out     [][]float64
	arrived int
	gen     int
}

func newMemWorld(n int) *memWorld {
	w := &memWorld{vals: make([][]float64, n)}
	w.cond = sync.NewCond(&w.mu)
	return w
}

type memRank struct {
	w    *memWorld
	rank int
}

func (w *memWorld) rank(r int) coll.Group { return memRank{w, r} }

func (m memRank) AllGather(_ context.Context, v []float64) ([][]float64, error) {
	w := m.w
	w.mu.Lock()
	defer w.mu.Unlock()
	gen := w.gen
	w.vals[m.rank] = v
	if w.arrived++; w.arrived == len(w.vals) {
		w.out = append([][]float64(nil), w.vals...)
		w.arrived = 0
		w.gen++
		w.cond.Broadcast()
	}
	for w.gen == gen {
		w.cond.Wait()
	}
	return w.out, nil
}

// One rank's all-reduce and send/receive pair as the timed loop makes them: the binding's own part
// of a call allocates nothing (the stand-in's host-side work, in C, is not counted), so that what
// a call costs over NCCL's is the cgo crossing alone (gpubench's 8 B call against a bare
// ncclAllReduce).
func BenchmarkAllReduceCall(b *testing.B) {
	benchmarkCall(b, func(c gpu.Comm, bufs []gpu.Buffer) error { return c.AllReduce(bufs, bufs, 2, gpu.Float, gpu.Sum) })
}

func BenchmarkSendRecvCall(b *testing.B) {
	var ops []gpu.P2POp
	benchmarkCall(b, func(c gpu.Comm, bufs []gpu.Buffer) error {
		if ops == nil {
			ops = []gpu.P2POp{{Rank: 0, Peer: 0, Send: true, Buf: bufs[0]}, {Rank: 0, Peer: 0, Buf: bufs[0]}}
		}
		return c.SendRecv(ops, 2, gpu.Float)
	})
}

func benchmarkCall(b *testing.B, call func(gpu.Comm, []gpu.Buffer) error) {
	b.Setenv("GPUBENCH_STANDIN_DEVICES", "1")
	rt, lib := cudatest.StandinNCCL(b)
	cb, err := cuda.Open(rt)
	if err != nil {
		b.Fatal(err)
	}
	nb, err := nccl.Open(cb, lib)
	if err != nil {
		b.Fatal(err)
	}
	c, err := nb.NewComm([]int{0})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf, err := nb.Alloc(0, 8)
	if err != nil {
		b.Fatal(err)
	}
	defer nb.Free(buf)
	bufs := []gpu.Buffer{buf}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := call(c, bufs); err != nil {
			b.Fatal(err)
		}
		if i%1024 == 1023 {
			if err := c.Synchronize(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := c.Synchronize(context.Background()); err != nil {
		b.Fatal(err)
	}
}
