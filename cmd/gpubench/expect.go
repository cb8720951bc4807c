package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/report"
	"github.com/gpubench/gpubench/internal/sim"
	"github.com/gpubench/gpubench/internal/topo"
)

// defaultExpectFloor is --expect-floor's default: on the one-box rows of docs/accuracy.md, the
// simulator is at most 1.28x the published figure (the 64-128 MiB ramp), so a healthy box measures
// at least 0.78 of what it expects; 0.75 names what falls below that.
const defaultExpectFloor = 0.75

// expectFlags are --expect and --expect-floor.
type expectFlags struct {
	on    bool
	floor float64
}

func (x *expectFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&x.on, "expect", false, "set every row beside what the simulator gives for the same machine, size and settings (default on for real GPUs, where the machine is discovered as gpubench topo does, or read from --topology FILE)")
	cmd.Flags().Float64Var(&x.floor, "expect-floor", defaultExpectFloor, "with --expect, name what measured under this fraction of the expected figure (busbw; for p2p each bandwidth, and latency inverted)")
}

// check validates the flags; a flag set without --expect is an error, not ignored.
func (x *expectFlags) check(cmd *cobra.Command) error {
	if !(x.floor > 0 && x.floor <= 10) {
		return usageErr("invalid --expect-floor %g: give a fraction of the expected figure above 0 and at most 10 (0.75 names what measured under 75%% of it)", x.floor)
	}
	if cmd.Flags().Changed("expect-floor") && cmd.Flags().Changed("expect") && !x.on {
		return usageErr("--expect-floor needs --expect: drop --expect=false, or drop --expect-floor")
	}
	return nil
}

// wanted says whether this run sets its rows beside expectations: as asked, or by default on real
// GPUs. --expect-floor where there are none is refused: it would do nothing.
func (x *expectFlags) wanted(cmd *cobra.Command, simulated bool) (bool, error) {
	on := x.on
	if !cmd.Flags().Changed("expect") {
		on = !simulated
	}
	if !on && cmd.Flags().Changed("expect-floor") {
		return false, usageErr("--expect-floor needs --expect (off on the simulator unless asked): add --expect, or drop --expect-floor")
	}
	return on, nil
}

// simulated reports whether a backend is the simulator.
func simulated(b any) bool {
	_, ok := b.(*sim.Backend)
	return ok
}

// expectTopology is the machine expectations are computed on, and how to name it: on the
// simulator the run's own topology without its faults or jitter; on real GPUs --topology when
// given, else the machine as gpubench topo discovers it. A nil topology and a reason mean there
// are no expectations for this run.
func expectTopology(cmd *cobra.Command, g *globals, simulated bool, ranks int) (*gpu.Topology, string, error) {
	if simulated || cmd.Flags().Changed("topology") {
		t, err := g.loadTopology()
		if err != nil {
			return nil, "", err
		}
		what := "topology " + t.Name
		if simulated {
			what += " without --sim-fault or --sim-jitter"
		}
		return t, "the simulator on " + what, nil
	}
	r, err := topo.Discover(topo.Options{DeviceOrder: os.Getenv("CUDA_DEVICE_ORDER")})
	switch {
	case err != nil:
		return nil, fmt.Sprintf("gpubench topo cannot read this machine (%v)", err), nil
	case r.Topology == nil:
		return nil, fmt.Sprintf("this machine cannot be described as a topology (%v)", r.TopologyErr), nil
	case r.Topology.NumGPUs() < ranks:
		return nil, fmt.Sprintf("the run has %d ranks and this host %d GPUs: give the whole machine with --topology FILE", ranks, r.Topology.NumGPUs()), nil
	}
	return r.Topology, "the simulator on this machine as gpubench topo sees it", nil
}

// rowKey names a row of a sweep.
type rowKey struct {
	size    int64
	typ, op string
	root    int
}

func keyOf(res coll.Result) rowKey {
	return rowKey{size: res.Size, typ: res.Type, op: res.Op, root: res.Root}
}

// expectations runs the sweep opt describes on the simulator over t (expectedRows) and returns a
// function that sets each measured row beside its expected figures.
func expectations(ctx context.Context, t *gpu.Topology, opt coll.Options, ranks, threads int) (func(*coll.Result), error) {
	rows, err := expectedRows(ctx, t, opt, ranks, threads)
	if err != nil {
		return nil, err
	}
	want := map[rowKey]coll.Result{}
	for _, res := range rows {
		want[keyOf(res)] = res
	}
	return func(res *coll.Result) {
		e, ok := want[keyOf(*res)]
		if !ok {
			return
		}
		set := func(p *coll.Placement, x coll.Placement) {
			if p.TimeUS > 0 && x.TimeUS > 0 {
				p.Expected = &coll.Expected{TimeUS: x.TimeUS, BusBW: x.BusBW, Ratio: x.TimeUS / p.TimeUS}
			}
		}
		set(&res.OutOfPlace, e.OutOfPlace)
		set(&res.InPlace, e.InPlace)
	}, nil
}

// expectedRows runs the sweep opt describes on the simulator over t, timing only, with ranks
// ranks launched from threads host threads: what the machine should do.
func expectedRows(ctx context.Context, t *gpu.Topology, opt coll.Options, ranks, threads int) ([]coll.Result, error) {
	b, err := sim.New(t, sim.Options{Env: ncclEnv(), LaunchThreads: threads})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	o := opt
	o.NGPUs, o.Check, o.PerIter, o.CPUTime, o.Cycles = ranks, 0, false, false, 1
	o.Comm, o.Group, o.Devices, o.Rank, o.Inputs, o.Timeout = nil, nil, nil, 0, nil, 0
	o.OnStart, o.OnResult, o.Expect = nil, nil, nil
	s, err := coll.Run(ctx, b, o)
	if err != nil {
		return nil, err
	}
	return s.Results, nil
}

// setExpect prepares --expect for a run of ranks ranks: it sets opt.Expect and r.Expect, or says
// on stderr why the run has no expectations.
func setExpect(cmd *cobra.Command, e *env, g *globals, x *expectFlags, b gpu.Backend, opt *coll.Options, r *report.CollRun, ranks, threads int) error {
	if on, err := x.wanted(cmd, simulated(b)); !on {
		return err
	}
	t, source, err := expectTopology(cmd, g, simulated(b), ranks)
	if err != nil {
		return err
	}
	if t == nil {
		fmt.Fprintf(e.stderr, "gpubench: no expected figures: %s\n", source)
		return nil
	}
	expect, err := expectations(cmd.Context(), t, *opt, ranks, threads)
	if err != nil {
		fmt.Fprintf(e.stderr, "gpubench: no expected figures: the simulator cannot run this sweep on %s: %v\n", t.Name, err)
		return nil
	}
	opt.Expect = expect
	r.Expect = &report.Expectation{Source: source, Floor: x.floor}
	if !simulated(b) { // a simulated run has said so already
		unmodelledNotice(e, ncclEnv())
	}
	return nil
}
