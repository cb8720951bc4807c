package sim

import (
	"context"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
)

// allReduceUntil runs 1 GiB all-reduces on every device until the clock passes t, and returns the
// last one's duration.
func allReduceUntil(tb testing.TB, b *Backend, t time.Duration) time.Duration {
	tb.Helper()
	n := len(b.Devices())
	comm, err := b.NewComm(ranks(n))
	if err != nil {
		tb.Fatal(err)
	}
	bufs := make([]gpu.Buffer, n)
	for i := range bufs {
		if bufs[i], err = b.Alloc(i, 1<<30); err != nil {
			tb.Fatal(err)
		}
	}
	defer func() {
		for _, x := range bufs {
			_ = b.Free(x)
		}
	}()
	var last time.Duration
	for b.Now() < t {
		start := b.Now()
		if err := comm.AllReduce(bufs, bufs, 1<<28, gpu.Float, gpu.Sum); err != nil {
			tb.Fatal(err)
		}
		if err := comm.Synchronize(context.Background()); err != nil {
			tb.Fatal(err)
		}
		last = b.Now() - start
	}
	return last
}

// A slow link with a start time leaves the bandwidth alone until then, and slows communicators
// made after it.
func TestTimedSlowLink(t *testing.T) {
	t.Parallel()
	f := Fault{Kind: "slow-link", A: "gpu0", B: "nvswitch", Factor: 0.25, At: time.Second}
	opt := Options{Faults: []Fault{f}}
	b := backend(t, "dgx-h100", opt)
	before := allReduceUntil(t, b, 900*time.Millisecond)
	healthy := allReduceUntil(t, backend(t, "dgx-h100", Options{}), 900*time.Millisecond)
	if before != healthy {
		t.Errorf("before its time the slow link changed an all-reduce: %v, healthy %v", before, healthy)
	}
	allReduceUntil(t, b, 1100*time.Millisecond)  // the first launch past 1 s starts the fault
	after := allReduceUntil(t, b, 2*time.Second) // a communicator made after it sees the slow link
	if after < 2*before {
		t.Errorf("after its time the all-reduce took %v, before %v; want it much slower", after, before)
	}
	if opt.Faults[0] != f {
		t.Errorf("the caller's fault changed to %+v", opt.Faults[0])
	}
}

// Temperature, power and utilization follow the load on the virtual clock; an xid fault is
// reported once, when its time has come, on its device.
func TestTelemetryFollowsLoad(t *testing.T) {
	t.Parallel()
	b := backend(t, "dgx-h100", Options{Faults: []Fault{{Kind: "xid", Device: 3, At: 90 * time.Second, Code: 48}}})
	tel := NewTelemetry(b)
	inv := tel.Inventory()
	if len(inv.Devices) != 8 || inv.Devices[0].NVLinks != 18 || inv.Devices[0].UUID == inv.Devices[1].UUID {
		t.Fatalf("inventory %+v", inv.Devices[0])
	}
	if again := NewTelemetry(b).Inventory(); again.Devices[5].UUID != inv.Devices[5].UUID {
		t.Error("simulated UUIDs are not stable")
	}
	idle := tel.Sample()
	if g := idle.GPUs[0]; g.TemperatureCelsius != idleC || g.Utilization != 0 || len(idle.XIDs) != 0 {
		t.Fatalf("idle sample %+v", g)
	}
	allReduceUntil(t, b, time.Minute)
	hot := tel.Sample()
	g := hot.GPUs[0]
	if g.Utilization < 0.9 || g.TemperatureCelsius < 55 || g.PowerWatts < 500 || g.SMClockHz != boostSMHz || g.EnergyJoules <= 0 {
		t.Errorf("after a minute of all-reduces: %+v", g)
	}
	if len(hot.XIDs) != 0 {
		t.Errorf("XID before its time: %+v", hot.XIDs)
	}
	allReduceUntil(t, b, 100*time.Second)
	s := tel.Sample()
	if len(s.XIDs) != 1 || s.XIDs[0].GPU != 3 || s.XIDs[0].Code != 48 {
		t.Fatalf("XIDs at 100 s: %+v; want XID 48 on GPU 3", s.XIDs)
	}
	if s := tel.Sample(); len(s.XIDs) != 0 {
		t.Errorf("the XID was reported again: %+v", s.XIDs)
	}
}
