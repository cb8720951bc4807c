package burnin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/metrics"
	"github.com/gpubench/gpubench/internal/metrics/telemetry"
	"github.com/gpubench/gpubench/internal/sim"
)

func simBackend(t *testing.T) *sim.Backend {
	t.Helper()
	topo, err := sim.LoadTopology("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(topo, sim.Options{DataCap: sim.DefaultDataCap})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func options(t *testing.T, collectives ...string) Options {
	t.Helper()
	sw, err := coll.ParseSizes("256K:16M:x64")
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{Duration: time.Hour, Baseline: time.Minute, Sweep: sw, Iters: 1, Floor: 0.75, Timeout: time.Minute}
	for _, name := range collectives {
		opt.Collectives = append(opt.Collectives, coll.Find(name))
	}
	return opt
}

func verdictOf(rep *Report, subject, check string) Check {
	for _, c := range rep.Checks {
		if c.Subject == subject && c.Check == check {
			return c
		}
	}
	return Check{}
}

// Copies that stop fitting leave nothing to run: the burn-in ends with an error instead of
// spinning on a clock that no longer moves.
func TestRunEndsWhenNothingIsLeft(t *testing.T) {
	opt := options(t)
	opt.P2PSize = 100 << 30 // more than a GPU holds
	rep, err := Run(context.Background(), simBackend(t), opt)
	if err == nil || !strings.Contains(err.Error(), "nothing left to run") {
		t.Fatalf("err %v; want nothing left to run", err)
	}
	if c := verdictOf(rep, "all", CheckP2PBandwidth); rep.Verdict != Incomplete || c.Verdict != Skip || !strings.Contains(c.Reason, "stopped fitting") {
		t.Errorf("verdict %s, p2p_bandwidth %s (%s); want incomplete, and the copies skipped with why", rep.Verdict, c.Verdict, c.Reason)
	}
}

// A cancelled context stops the burn-in at the next step, whatever runs; the verdict says it was
// interrupted, and a check that never ran is skipped, not passed.
func TestRunHonoursCancel(t *testing.T) {
	for _, opt := range []Options{options(t), options(t, "allreduce")} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		opt.P2PSize = 100 << 30
		rep, err := Run(ctx, simBackend(t), opt)
		if !errors.Is(err, context.Canceled) || !rep.Interrupted || rep.Verdict != Interrupted {
			t.Errorf("%d collectives: err %v, verdict %s; want canceled and interrupted", len(opt.Collectives), err, rep.Verdict)
		}
		if c := verdictOf(rep, "all", CheckData); c.Verdict != Skip {
			t.Errorf("data check %s (%s) when nothing was checked", c.Verdict, c.Reason)
		}
	}
}

// A record that cannot be written ends the burn-in at once with that error: nothing more is
// measured or written, and the verdict says the run is incomplete.
func TestRunStopsOnWriteError(t *testing.T) {
	opt := options(t, "allreduce", "allgather")
	opt.P2PSize = 1 << 20
	full := errors.New("no space left on device")
	var after int
	opt.Record = func(r Record) error {
		if r.Record == "result" && r.Collective == "allgather" || after > 0 {
			after++
			return full
		}
		return nil
	}
	steps := 0
	opt.Progress = func(time.Duration, int, int) { steps++ }
	rep, err := Run(context.Background(), simBackend(t), opt)
	if !errors.Is(err, full) || rep.Interrupted || rep.Verdict != Incomplete {
		t.Fatalf("err %v, interrupted %v, verdict %s; want the write error and incomplete", err, rep.Interrupted, rep.Verdict)
	}
	if after != 1 || steps != 1 || rep.Passes != 0 {
		t.Errorf("%d records tried after the failure, %d steps, %d passes; want 1 (the failing one), 1 and 0", after-1, steps, rep.Passes)
	}
}

// Sizes all past the simulator's data cap leave nothing checked, and the data check says so and
// what to do, not that the burn-in ended too soon.
func TestDataSkippedPastTheCap(t *testing.T) {
	opt := options(t, "allreduce")
	sw, err := coll.ParseSizes("64M:1G:x4")
	if err != nil {
		t.Fatal(err)
	}
	opt.Sweep, opt.Duration = sw, 50*time.Millisecond
	rep, err := Run(context.Background(), simBackend(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	if c := verdictOf(rep, "all", CheckData); c.Verdict != Skip || !strings.Contains(c.Reason, "past the simulator's --sim-data-cap") {
		t.Errorf("data check %s (%s); want skipped, naming --sim-data-cap", c.Verdict, c.Reason)
	}
}

// Ctrl-C while the GPUs hang (GPU 3 never finishes the first collective, and the timeout is far
// off) stops the burn-in; the hang check says no hang was confirmed, not that every operation
// finished in time: the collective it cut short did not finish.
func TestRunInterruptedInAHang(t *testing.T) {
	topo, err := sim.LoadTopology("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(topo, sim.Options{DataCap: sim.DefaultDataCap, Faults: []sim.Fault{{Kind: "hang", Device: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(200*time.Millisecond, cancel)
	rep, err := Run(ctx, b, options(t, "allreduce"))
	if !errors.Is(err, context.Canceled) || rep.Verdict != Interrupted {
		t.Fatalf("err %v, verdict %s; want canceled and interrupted", err, rep.Verdict)
	}
	if c := verdictOf(rep, "all", CheckHang); c.Verdict != Skip || !strings.Contains(c.Reason, "no hang was confirmed") {
		t.Errorf("hang check %s (%s); want skip: no hang was confirmed", c.Verdict, c.Reason)
	}
}

// slowingSource is one GPU's telemetry whose second sample, alone, has the hardware thermal
// slowdown active.
type slowingSource struct{ n int }

func (s *slowingSource) Inventory() telemetry.Inventory {
	return telemetry.Inventory{Devices: []telemetry.Device{{Index: 0, UUID: "GPU-0"}}}
}

func (s *slowingSource) Sample() telemetry.Sample {
	s.n++
	g := telemetry.NewGPU(0)
	g.ReasonsKnown, g.TemperatureCelsius = true, 70
	if s.n == 2 {
		g.ClockReasons, g.TemperatureCelsius = telemetry.ReasonHWThermal, 91
	}
	return telemetry.Sample{GPUs: []telemetry.GPU{g}}
}

func (s *slowingSource) Close() error { return nil }

// On real GPUs the sampler's timer samples between the burn-in's steps, which read only its latest
// sample: a hardware slowdown in a sample in between fails the throttle check all the same
// ("active in any sample"), with that sample's figures.
func TestThrottleSeenBetweenSteps(t *testing.T) {
	sampler := metrics.NewSampler(&slowingSource{}, time.Second)
	sampler.Refresh() // as gpubench burnin does before the run: no slowdown
	opt := options(t, "allreduce")
	opt.Duration, opt.Sampler = time.Millisecond, sampler
	opt.Record = func(r Record) error {
		if r.Record == "result" && sampler.Latest().Samples == 1 { // the timer's samples, during a step
			sampler.Refresh() // slowed down
			sampler.Refresh() // clear again
		}
		return nil
	}
	rep, err := Run(context.Background(), simBackend(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	if c := verdictOf(rep, "0", CheckThrottle); c.Verdict != Fail || !strings.Contains(c.Reason, "hw_thermal_slowdown active") || !strings.Contains(c.Reason, "91 C") {
		t.Errorf("throttle check %s (%s); want fail, naming the slowdown and its sample's 91 C", c.Verdict, c.Reason)
	}
}

// The counted checks' failure series exist from the start at 0, so that a scrape before any
// failure already has them (rate() and increase() need a first sample).
func TestCheckFailureSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	opt := options(t, "allreduce")
	opt.Duration, opt.Bench = time.Millisecond, metrics.NewBench(reg)
	if _, err := Run(context.Background(), simBackend(t), opt); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() == "gpubench_bench_check_failures_total" {
			for _, m := range f.GetMetric() {
				got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{"hang": 0, "calls": 0, "data": 0, "bandwidth": 0, "p2p_bandwidth": 0, "xid": 0}
	if !maps.Equal(got, want) {
		t.Errorf("series %v; want %v", got, want)
	}
}

// A call that fails on its own (here a link the simulator drops calls on, as NCCL reports a
// network error) is a finding: the calls check fails with the error, the burn-in stops there and
// its verdict is fail, not incomplete; a run without one passes the check.
func TestFailedCallFailsTheCallsCheck(t *testing.T) {
	topo, err := sim.LoadTopology("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(topo, sim.Options{DataCap: sim.DefaultDataCap, Faults: []sim.Fault{{Kind: "flaky-link", A: "gpu0", B: "nvswitch", Every: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), b, options(t, "allreduce"))
	c := verdictOf(rep, "all", CheckCalls)
	if err != nil || rep.Verdict != Fail || c.Verdict != Fail || !strings.Contains(c.Reason, "a link failed during the call") || !strings.Contains(c.Reason, "stopped there") {
		t.Errorf("err %v, verdict %s, calls %s (%s); want no error, fail, and the call's error", err, rep.Verdict, c.Verdict, c.Reason)
	}
	if rep.Passes != 0 {
		t.Errorf("%d passes; want 0: the first failed in its warm-up", rep.Passes)
	}
	opt := options(t, "allreduce")
	opt.Duration = time.Millisecond
	if rep, err = Run(context.Background(), simBackend(t), opt); err != nil || verdictOf(rep, "all", CheckCalls).Verdict != Pass {
		t.Errorf("a healthy run: err %v, calls %+v; want pass", err, verdictOf(rep, "all", CheckCalls))
	}
}

// A run past the baseline window whose collectives all came inside it (the last pass's copies ran
// past it) says so, not that it did not run past the window.
func TestBandwidthSkipSaysNoRowAfterTheWindow(t *testing.T) {
	opt := options(t, "allreduce")
	opt.Duration, opt.Baseline, opt.P2PSize = 100*time.Millisecond, 100*time.Millisecond, 64<<20
	rep, err := Run(context.Background(), simBackend(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Elapsed <= opt.Baseline {
		t.Fatalf("the run ended at %v, inside the window; the test needs copies past it", rep.Elapsed)
	}
	c := verdictOf(rep, "all", CheckBandwidth)
	if c.Verdict != Skip || !strings.Contains(c.Reason, "no collective row was measured after the 100ms baseline window") || strings.Contains(c.Reason, "not past") {
		t.Errorf("bandwidth %s (%s); want skip: no collective row after the window", c.Verdict, c.Reason)
	}
}

// Two different XIDs on a GPU are both named, not only the first.
func TestXIDReasonNamesEveryXID(t *testing.T) {
	topo, err := sim.LoadTopology("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(topo, sim.Options{DataCap: sim.DefaultDataCap, Faults: []sim.Fault{
		{Kind: "xid", Device: 3, Code: 79}, {Kind: "xid", Device: 3, Code: 48, At: time.Millisecond}, {Kind: "xid", Device: 3, Code: 79, At: 2 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	opt := options(t, "allreduce")
	opt.Duration, opt.Sampler, opt.PollEachPass = 20*time.Millisecond, metrics.NewSampler(sim.NewTelemetry(b), time.Second), true
	rep, err := Run(context.Background(), b, opt)
	if err != nil {
		t.Fatal(err)
	}
	if c := verdictOf(rep, "3", CheckXID); c.Verdict != Fail || !strings.HasPrefix(c.Reason, "XIDs 79 at ") || !strings.Contains(c.Reason, ", 48 at ") || strings.Count(c.Reason, "79") != 1 || c.Failures != 3 {
		t.Errorf("xid %s (%s), %d failures; want fail naming XIDs 79 and 48 once each, 3 failures", c.Verdict, c.Reason, c.Failures)
	}
}

// On the simulator the telemetry is sampled while the copies hold their buffers, so that the
// memory in use a scrape shows is not always 0: every copies' step ends on a sample of two buffers
// of --p2p-size on every GPU, not on one after they were freed.
func TestSimulatedMemoryInUseShowsTheCopies(t *testing.T) {
	b := simBackend(t)
	sampler := metrics.NewSampler(sim.NewTelemetry(b), time.Second)
	opt := options(t)
	opt.Duration, opt.P2PSize, opt.Sampler, opt.PollEachPass = time.Second, 64<<20, sampler, true
	var used [][]float64
	opt.Progress = func(time.Duration, int, int) {
		var step []float64
		for _, g := range sampler.Latest().Sample.GPUs {
			step = append(step, g.MemoryUsedBytes)
		}
		used = append(used, step)
	}
	if _, err := Run(context.Background(), b, opt); err != nil {
		t.Fatal(err)
	}
	if len(used) < 2 {
		t.Fatalf("%d steps; want two passes or more", len(used))
	}
	for i, step := range used {
		for g, u := range step {
			if u < 2*64<<20 {
				t.Errorf("step %d: GPU %d's memory in use %v; want at least the copies' two buffers of 64 MiB", i+1, g, u)
			}
		}
	}
}

// Sizes past what the GPUs' memory holds are cut, as nccl-tests cuts them, and the burn-in says so.
func TestSweepCutIsSaid(t *testing.T) {
	opt := options(t, "allreduce", "alltoall")
	sw, err := coll.ParseSizes("1T")
	if err != nil {
		t.Fatal(err)
	}
	opt.Sweep, opt.Duration = sw, time.Millisecond
	var notices []string
	opt.Notice = func(s string) { notices = append(notices, s) }
	if _, err := Run(context.Background(), simBackend(t), opt); err != nil {
		t.Fatal(err)
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "not the 1099511627776 B of --sizes") || !strings.Contains(notices[0], "Reducing maxBytes to ") {
		t.Errorf("notices %q; want one, naming the cut", notices)
	}
}

// A cluster's copies are measured host by host: a slow link on the second host is found and its
// GPU named, and no pair across hosts is held to a floor.
func TestCopiesHostByHost(t *testing.T) {
	topo, err := sim.LoadTopology("dgx-h100x2")
	if err != nil {
		t.Fatal(err)
	}
	fault, err := sim.ParseFault("slow-link=dgx-h100-1/gpu3,dgx-h100-1/nvswitch,0.25@2s")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(topo, sim.Options{DataCap: sim.DefaultDataCap, Faults: []sim.Fault{fault}})
	if err != nil {
		t.Fatal(err)
	}
	opt := options(t)
	opt.Duration, opt.Baseline, opt.P2PSize = 20*time.Second, 2*time.Second, 64<<20
	rep, err := Run(context.Background(), b, opt)
	if err != nil {
		t.Fatal(err)
	}
	if c := verdictOf(rep, "all", CheckP2PBandwidth); c.Verdict != Fail || !strings.Contains(c.Reason, "every slow pair involves GPU 11") {
		t.Errorf("p2p_bandwidth of all: %s (%s); want a fail naming GPU 11", c.Verdict, c.Reason)
	}
	if c := verdictOf(rep, "all", CheckData); c.Verdict != Pass {
		t.Errorf("data of all: %s (%s); want pass, as every GPU's copies were checked", c.Verdict, c.Reason)
	}
	if c := verdictOf(rep, "8-11", CheckP2PBandwidth); c.Verdict != Fail {
		t.Errorf("p2p_bandwidth of 8-11: %s (%s); want fail", c.Verdict, c.Reason)
	}
	for _, c := range rep.Checks {
		var a, d int
		if _, err := fmt.Sscanf(c.Subject, "%d-%d", &a, &d); err == nil && a/8 != d/8 {
			t.Errorf("pair %s across hosts judged: %s (%s)", c.Subject, c.Verdict, c.Reason)
		}
	}
}

// When the duration is up the copies stop after the host being measured, and the next pass goes
// on from the host after it: the run ends within one host's copies (0.72 s here) of the duration,
// not a whole cluster's (2.9 s), and every host's GPUs are checked over the passes.
func TestCopiesTakeTurns(t *testing.T) {
	one, err := sim.LoadTopology("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	four, err := one.WithNodes(4)
	if err != nil {
		t.Fatal(err)
	}
	run := func(d time.Duration) *Report {
		b, err := sim.New(four, sim.Options{DataCap: sim.DefaultDataCap})
		if err != nil {
			t.Fatal(err)
		}
		opt := options(t)
		opt.Duration, opt.Baseline, opt.P2PSize = d, time.Second, 64<<20
		rep, err := Run(context.Background(), b, opt)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := run(time.Second); rep.Passes != 1 || rep.Elapsed > 2*time.Second {
		t.Errorf("a 1 s burn-in: %d passes in %v; want one, ending within one host's copies of 1 s", rep.Passes, rep.Elapsed)
	}
	rep := run(12 * time.Second)
	if rep.Passes < 2 {
		t.Errorf("a 12 s burn-in: %d pass in %v; want the hosts' copies spread over passes", rep.Passes, rep.Elapsed)
	}
	for g := range 32 {
		if c := verdictOf(rep, fmt.Sprint(g), CheckData); c.Verdict != Pass {
			t.Errorf("GPU %d data: %s (%s); want pass", g, c.Verdict, c.Reason)
		}
	}
}
