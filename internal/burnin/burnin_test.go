package burnin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/coll"
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
