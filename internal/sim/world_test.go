package sim_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/sim"
)

// A communicator across processes may join any devices of the topology, as ncclCommInitRank may:
// three ranks on GPUs 3 and 6 of one node and 3 of the other, each in its own backend as each
// would be in its own process, reduce their data right and take the time one process's
// communicator over the same GPUs takes when a thread launches each GPU's work.
func TestJoinCommOnAnyDevices(t *testing.T) {
	devs := []int{3, 11, 6}
	n := int64(1 << 20) // floats
	one, err := sim.New(backed(t).Topology(), sim.Options{LaunchThreads: len(devs)})
	if err != nil {
		t.Fatal(err)
	}
	want := allReduceTime(t, one, devs, n)

	hub := faulty(t, nil)
	defer hub.Close()
	times := make([]float64, len(devs))
	errs := joinEach(t, hub, devs, nil, func(rank int, b *sim.Backend, c gpu.Comm) error {
		out, us, err := reduceJoined(b, c, devs, rank, n)
		times[rank] = us
		if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*(n-1):])); err == nil && got != 6 {
			t.Errorf("rank %d on GPU %d: sum %v, want 6", rank, devs[rank], got)
		}
		return err
	})
	for rank, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
		if math.Abs(times[rank]-want) > 1e-6*want {
			t.Errorf("rank %d took %v; one process's communicator over GPUs %v takes %v", rank, times[rank], devs, want)
		}
	}
}

// Two ranks on one device, or a device the topology lacks, are refused with what was wrong.
func TestJoinCommRefusesDevices(t *testing.T) {
	b := faulty(t, nil)
	defer b.Close()
	id, _ := b.NewUniqueID()
	if _, err := b.JoinComm(context.Background(), id, 2, 0, 16); err == nil || !strings.Contains(err.Error(), "rank 0 on device 16; dgx-h100 x2 has devices 0 to 15") {
		t.Errorf("device 16 of 16: %v", err)
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for rank := range 2 {
		wg.Go(func() {
			_, errs[rank] = b.JoinComm(context.Background(), id, 2, rank, 5)
		})
	}
	wg.Wait()
	if errs[0] == nil || errs[1] == nil || !strings.Contains(errs[0].Error()+errs[1].Error(), "joined on device 5, which another rank has") {
		t.Errorf("two ranks on device 5: %v, %v", errs[0], errs[1])
	}
}

// Each process moves its own rank's data alone: the exchange runs an all-reduce's data once and
// sends each rank its own output, so a rank reads about its output's size from the exchange, not
// every rank's data; and a corrupt fault on one rank's GPU spoils that rank's output, no other's.
// The exchange is served by a process that is no rank of the communicator.
func TestJoinCommSendsEachRankItsOwn(t *testing.T) {
	devs := []int{0, 1, 8, 9}
	const n = 1 << 18 // floats: 1 MiB per rank
	faults := []sim.Fault{{Kind: "corrupt", Device: 8}}
	hub := backed(t)
	defer hub.Close()
	read := make([]int64, len(devs))
	wrong := make([]int, len(devs))
	errs := joinEach(t, hub, devs, faults, func(rank int, b *sim.Backend, c gpu.Comm) error {
		before := sim.Received(c)
		out, _, err := reduceJoined(b, c, devs, rank, n)
		read[rank] = sim.Received(c) - before
		for i := range n {
			if math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])) != 10 {
				wrong[rank]++
			}
		}
		return err
	})
	for rank, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
		if read[rank] < 4*n || read[rank] > 4*n+4*n/8 {
			t.Errorf("rank %d read %d bytes from the exchange for its output of %d", rank, read[rank], 4*n)
		}
		want := 0 // wrong elements: the fault flips a bit of the first
		if devs[rank] == 8 {
			want = 1
		}
		if wrong[rank] != want {
			t.Errorf("rank %d on GPU %d: %d wrong elements, want %d", rank, devs[rank], wrong[rank], want)
		}
	}
}

// joinEach joins a communicator whose exchange hub serves, as ranks on devs, each in its own
// backend (backed, with faults) as each would be in its own process, runs body on every rank at
// once, and returns each rank's error.
func joinEach(t testing.TB, hub *sim.Backend, devs []int, faults []sim.Fault, body func(rank int, b *sim.Backend, c gpu.Comm) error) []error {
	id, err := hub.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for rank, dev := range devs {
		wg.Go(func() {
			b := backed(t, faults...)
			defer b.Close()
			c, err := b.JoinComm(context.Background(), id, len(devs), rank, dev)
			if err != nil {
				errs[rank] = err
				return
			}
			defer c.Close()
			errs[rank] = body(rank, b, c)
		})
	}
	wg.Wait()
	return errs
}

// rankInput is n floats on device dev, each rank+1: an all-reduce of ranks 0..k-1 sums to
// k(k+1)/2 in every element.
func rankInput(b gpu.Backend, dev, rank int, n int64) gpu.Buffer {
	buf, _ := b.Alloc(dev, 4*n)
	in := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(float32(rank+1)))
	}
	b.CopyIn(buf, in)
	return buf
}

// reduceJoined all-reduces rankInput over a communicator across processes from rank's side: what
// its buffer then holds, and the simulated µs from the call to the end of its synchronization.
func reduceJoined(b *sim.Backend, c gpu.Comm, devs []int, rank int, n int64) (out []byte, us float64, err error) {
	buf := rankInput(b, devs[rank], rank, n)
	bufs := make([]gpu.Buffer, len(devs))
	bufs[rank] = buf
	start := b.Now()
	err = c.AllReduce(bufs, bufs, n, gpu.Float, gpu.Sum)
	if err == nil {
		err = c.Synchronize(context.Background())
	}
	us = float64(b.Now() - start)
	out = make([]byte, 4*n)
	if err == nil {
		err = b.CopyOut(out, buf)
	}
	return out, us, err
}

// backed is two simulated DGX H100 whose buffers hold data (64 MiB of it).
func backed(t testing.TB, faults ...sim.Fault) *sim.Backend {
	t.Helper()
	topo, err := sim.LoadTopology("dgx-h100")
	if err == nil {
		topo, err = topo.WithNodes(2)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(topo, sim.Options{DataCap: 64 << 20, Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func allReduceTime(t *testing.T, b gpu.Backend, devs []int, n int64) float64 {
	t.Helper()
	c, err := b.NewComm(devs)
	if err != nil {
		t.Fatal(err)
	}
	bufs := make([]gpu.Buffer, len(devs))
	for i, d := range devs {
		if bufs[i], err = b.Alloc(d, 4*n); err != nil {
			t.Fatal(err)
		}
	}
	start := b.Now()
	if err := c.AllReduce(bufs, bufs, n, gpu.Float, gpu.Sum); err != nil {
		t.Fatal(err)
	}
	if err := c.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	return float64(b.Now() - start)
}

// Rank 0 of a communicator need not be the process serving its exchange (fleet's tests across
// nodes): when it leaves while another rank still calls, that rank hears who left.
func TestJoinCommNamesRankZeroLeaving(t *testing.T) {
	hub := backed(t)
	defer hub.Close()
	errs := joinEach(t, hub, []int{0, 8}, nil, func(rank int, b *sim.Backend, c gpu.Comm) error {
		buf, _ := b.Alloc(8*rank, 1<<10)
		bufs := make([]gpu.Buffer, 2)
		bufs[rank] = buf
		for range 1 + rank { // rank 1 calls once more than rank 0
			if err := c.AllReduce(bufs, bufs, 256, gpu.Float, gpu.Sum); err != nil {
				return err
			}
			if err := c.Synchronize(context.Background()); err != nil {
				return err
			}
		}
		return nil
	})
	if errs[0] != nil || errs[1] == nil || !strings.Contains(errs[1].Error(), "rank 0 left the communicator") {
		t.Errorf("rank 0: %v; rank 1: %v; want rank 1 told that rank 0 left", errs[0], errs[1])
	}
}

// Calls that move no data do not meet at the exchange (every process knows every time), but the
// exchange still sees them with the next call that does: a rank that made one timing-only call
// more than the others is named there.
func TestJoinCommDefersTimingOnlyCalls(t *testing.T) {
	devs := []int{0, 8}
	const n = 1 << 10
	hub := backed(t)
	defer hub.Close()
	read := make([]int64, len(devs))
	errs := joinEach(t, hub, devs, nil, func(rank int, b *sim.Backend, c gpu.Comm) error {
		bufs := make([]gpu.Buffer, len(devs))
		bufs[rank] = rankInput(b, devs[rank], rank, n)
		before := sim.Received(c)
		c.(gpu.DataSkipper).SkipData(true)
		for range 3 + rank { // rank 1 makes one call more
			if err := c.AllReduce(bufs, bufs, n, gpu.Float, gpu.Sum); err != nil {
				return err
			}
			if err := c.Synchronize(context.Background()); err != nil {
				return err
			}
		}
		read[rank] = sim.Received(c) - before
		c.(gpu.DataSkipper).SkipData(false)
		_, _, err := reduceJoined(b, c, devs, rank, n)
		return err
	})
	for rank := range devs {
		if read[rank] != 0 {
			t.Errorf("rank %d read %d bytes from the exchange for timing-only calls", rank, read[rank])
		}
		if errs[rank] == nil || !strings.Contains(errs[rank].Error(), "rank 1 made 5 calls since the ranks last met at the exchange, rank 0 made 4") {
			t.Errorf("rank %d: %v; want the extra timing-only call named", rank, errs[rank])
		}
	}
}

// Timing-only calls meet anyway once a rank has kept MaxDeferred of them, so that a long run with
// no data to move keeps bounded memory and still sees a process that is gone.
func TestJoinCommMeetsPastMaxDeferred(t *testing.T) {
	devs := []int{0, 8}
	hub := backed(t)
	defer hub.Close()
	read := make([]int64, len(devs))
	errs := joinEach(t, hub, devs, nil, func(rank int, b *sim.Backend, c gpu.Comm) error {
		bufs := make([]gpu.Buffer, len(devs))
		bufs[rank] = rankInput(b, devs[rank], rank, 16)
		c.(gpu.DataSkipper).SkipData(true)
		before := sim.Received(c)
		for i := range sim.MaxDeferred + 1 {
			if i == sim.MaxDeferred {
				read[rank] = sim.Received(c) - before // none yet
			}
			if err := c.AllReduce(bufs, bufs, 16, gpu.Float, gpu.Sum); err != nil {
				return err
			}
			if err := c.Synchronize(context.Background()); err != nil {
				return err
			}
		}
		if sim.Received(c) == before {
			return errors.New("no meeting after MaxDeferred + 1 timing-only calls")
		}
		return nil
	})
	for rank, err := range errs {
		if err != nil || read[rank] != 0 {
			t.Errorf("rank %d: %v; read %d bytes before the bound", rank, err, read[rank])
		}
	}
}

// A flaky link fails a communicator's calls across processes as it fails one process's: every
// rank's call that crosses it, each process counting the calls it makes.
func TestJoinCommFlakyLink(t *testing.T) {
	f, err := sim.ParseFault("flaky-link=dgx-h100-0/mlx5_0,dgx-h100-0/pcie0,1")
	if err != nil {
		t.Fatal(err)
	}
	hub := faulty(t, nil)
	defer hub.Close()
	devs := []int{0, 8}
	errs := joinEach(t, hub, devs, []sim.Fault{f}, func(rank int, b *sim.Backend, c gpu.Comm) error {
		_, _, err := reduceJoined(b, c, devs, rank, 1<<10)
		return err
	})
	for rank, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "flaky") {
			t.Errorf("rank %d: %v; want the flaky link's failure", rank, err)
		}
	}
}

// BenchmarkJoinedTimingOnlyCall is what a timing-only all-reduce costs a communicator across
// processes of 16 ranks (here goroutines, each with a backend of its own), every rank making the
// call and synchronizing, as in a timed loop; the ranks meet every MaxDeferred calls. Each op is
// one call on every rank.
func BenchmarkJoinedTimingOnlyCall(b *testing.B) {
	const n = 1 << 20
	devs := make([]int, 16)
	for i := range devs {
		devs[i] = i
	}
	hub := backed(b)
	defer hub.Close()
	var joined sync.WaitGroup // every rank has joined: the clock starts
	joined.Add(len(devs))
	start := make(chan struct{})
	go func() {
		joined.Wait()
		b.ResetTimer()
		close(start)
	}()
	b.ReportAllocs()
	errs := joinEach(b, hub, devs, nil, func(rank int, bk *sim.Backend, c gpu.Comm) error {
		bufs := make([]gpu.Buffer, len(devs))
		bufs[rank] = rankInput(bk, devs[rank], rank, n)
		c.(gpu.DataSkipper).SkipData(true)
		joined.Done()
		<-start
		for range b.N {
			if err := c.AllReduce(bufs, bufs, n, gpu.Float, gpu.Sum); err != nil {
				return err
			}
			if err := c.Synchronize(context.Background()); err != nil {
				return err
			}
		}
		return nil
	})
	b.StopTimer()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}
