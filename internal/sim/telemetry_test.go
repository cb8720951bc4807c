package sim

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
)

// allReduceUntil runs 1 GiB all-reduces on every device until the clock passes t, and returns the
// last one's duration.
func allReduceUntil(tb testing.TB, b *Backend, t time.Duration) time.Duration {
	tb.Helper()
	comm, bufs := commOn(tb, b, len(b.Devices()), 1<<30)
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

// A machine on which nothing runs (serve) idles on the wall clock: its energy is its idle power
// times the time passed, and a timed XID comes when that time reaches it.
func TestIdleTelemetryFollowsTheWallClock(t *testing.T) {
	t.Parallel()
	b := backend(t, "dgx-h100", Options{Faults: []Fault{{Kind: "xid", Device: 3, At: 30 * time.Second, Code: 79}}})
	wall := time.Unix(1000, 0)
	tel := NewIdleTelemetry(b, func() time.Time { return wall })
	if s := tel.Sample(); s.GPUs[0].EnergyJoules != 0 || len(s.XIDs) != 0 {
		t.Fatalf("first sample: %+v, XIDs %v", s.GPUs[0], s.XIDs)
	}
	wall = wall.Add(20 * time.Second)
	s := tel.Sample()
	if g := s.GPUs[0]; g.PowerWatts != 70 || g.EnergyJoules != 1400 || g.Utilization != 0 || len(s.XIDs) != 0 {
		t.Errorf("after 20 s idle: %+v, XIDs %v; want 70 W, 1400 J, no XID yet", g, s.XIDs)
	}
	wall = wall.Add(20 * time.Second)
	if s := tel.Sample(); len(s.XIDs) != 1 || s.XIDs[0].GPU != 3 || s.GPUs[3].EnergyJoules != 2800 {
		t.Errorf("after 40 s idle: XIDs %v, GPU 3 %+v; want XID 79 on GPU 3 and 2800 J", s.XIDs, s.GPUs[3])
	}
}

// Utilization is NVML's: the share of the interval in which a collective ran on the GPU, in
// whole percent. Two pairs of GPUs taking turns are each busy about half the time; the GPUs
// left out are idle; copies count as memory use only.
func TestTelemetryUtilizationIsBusyShare(t *testing.T) {
	t.Parallel()
	b := backend(t, "dgx-h100", Options{})
	tel := NewTelemetry(b)
	tel.Sample()
	var comms [2]gpu.Comm
	bufs := make([][]gpu.Buffer, 2)
	for k := range comms {
		devs := []int{2 * k, 2*k + 1}
		var err error
		if comms[k], err = b.NewComm(devs); err != nil {
			t.Fatal(err)
		}
		for _, d := range devs {
			x, err := b.Alloc(d, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			bufs[k] = append(bufs[k], x)
		}
	}
	for b.Now() < 10*time.Second {
		for k, c := range comms {
			if err := c.AllReduce(bufs[k], bufs[k], 1<<28, gpu.Float, gpu.Sum); err != nil {
				t.Fatal(err)
			}
			if err := c.Synchronize(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := tel.Sample()
	for i, g := range s.GPUs {
		want := 0.0
		if i < 4 {
			want = 0.5
		}
		if math.Abs(g.Utilization-want) > 0.05 || g.Utilization*100 != math.Round(g.Utilization*100) {
			t.Errorf("GPU %d: utilization %v; want about %v, in whole percent", i, g.Utilization, want)
		}
	}
	// A copy between GPUs 4 and 5 uses their memory, but runs no kernel.
	x, _ := b.Alloc(4, 1<<30)
	y, _ := b.Alloc(5, 1<<30)
	if _, err := b.TimedCopies(context.Background(), []gpu.Copy{{Src: x, Dst: y, Issuer: 4, Repeat: 100}}); err != nil {
		t.Fatal(err)
	}
	s = tel.Sample()
	if g := s.GPUs[5]; g.Utilization != 0 || g.MemoryUtilization < 0.99 || g.PowerWatts <= s.GPUs[6].PowerWatts {
		t.Errorf("GPU 5 during a copy: utilization %v, memory %v, %v W (idle GPU 6: %v W)", g.Utilization, g.MemoryUtilization, g.PowerWatts, s.GPUs[6].PowerWatts)
	}
}

// Under load the temperature rises towards the loaded steady state with the thermal time
// constant: 63 % of the way after one, nearly all of it after five.
func TestTelemetryThermalTimeConstant(t *testing.T) {
	t.Parallel()
	b := backend(t, "dgx-h100", Options{})
	tel := NewTelemetry(b)
	tel.Sample()
	prev := idleC
	var at []float64
	for _, until := range []time.Duration{thermalTau, 5 * thermalTau} {
		for b.Now() < until { // sample every few seconds, as the burn-in does
			allReduceUntil(t, b, b.Now()+5*time.Second)
			g := tel.Sample().GPUs[0]
			if g.TemperatureCelsius < prev {
				t.Fatalf("temperature fell from %v to %v under load", prev, g.TemperatureCelsius)
			}
			prev = g.TemperatureCelsius
		}
		at = append(at, prev)
	}
	steady := idleC + 0.99*(loadC-idleC) // utilization stays just under 1 (launch gaps)
	if want := idleC + (steady-idleC)*(1-math.Exp(-1)); math.Abs(at[0]-want) > 2 {
		t.Errorf("after one time constant %v °C; want about %.1f", at[0], want)
	}
	if at[1] < steady-1.5 || at[1] > loadC {
		t.Errorf("after five time constants %v °C; want about %.1f", at[1], steady)
	}
}

// A simulated GPU's power limit is its board's, by name: a PCIe or NVL H100 or A100 is not held
// to the SXM board's.
func TestSimPowerLimit(t *testing.T) {
	for name, want := range map[string]float64{
		"NVIDIA H100 80GB HBM3": 700, "NVIDIA H100 NVL": 400, "NVIDIA H100 PCIe": 350, "NVIDIA H800": 700,
		"NVIDIA H200": 700, "NVIDIA A100-SXM4-80GB": 400, "NVIDIA A100 80GB PCIe": 300, "NVIDIA B200": 1000,
		"NVIDIA GeForce RTX 3090": 350, "NVIDIA GeForce RTX 4090": 450, "NVIDIA GeForce RTX 5090": 575,
		"NVIDIA L40S": 350, "Some GPU": 300,
	} {
		if got := simPowerLimit(name); got != want {
			t.Errorf("%s: %v W; want %v", name, got, want)
		}
	}
}
