package fleet

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/sim"
)

// The outlier rule names a node far below the others, and no one in a fleet whose figures
// barely differ.
func TestOutlierBelow(t *testing.T) {
	tight := []float64{1, 0.99, 1.01, 1, 0.98, 1.02, 1}
	if low := outlierBelow(tight); low > 0.9 || 0.97 < low {
		t.Errorf("tight fleet: bound %v; want at most 0.9 of the median", low)
	}
	spread := append([]float64{0.6}, tight...)
	if low := outlierBelow(spread); !(0.6 < low) {
		t.Errorf("a node at 0.6 among nodes at 1: bound %v does not name it", low)
	}
	if low := outlierBelow([]float64{1, 0.5}); low != 0 {
		t.Errorf("two nodes: bound %v; want none (too few to tell)", low)
	}
}

func TestRunRefuses(t *testing.T) {
	open := func(map[string]string, bool) (gpu.Backend, error) { return nil, errors.New("no cluster") }
	for _, o := range []Options{{Open: open, Floor: 0, Repeat: 1, Group: 2}, {Open: open, Floor: 0.75, Repeat: 0, Group: 2}, {Open: open, Floor: 0.75, Repeat: 1, Group: 1}} {
		if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "want a floor in (0, 1]") {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if _, err := Run(context.Background(), Options{Open: open, Floor: 0.75, Repeat: 1, Group: 2}); err == nil || err.Error() != "no cluster" {
		t.Errorf("a cluster that does not open: %v", err)
	}
}

// A process testing its own node runs the quick diag too: a failed hardware check fails the node
// and names it; a failed software check is listed with the node and fails nothing.
func TestDiagPerNode(t *testing.T) {
	open := func(env map[string]string, _ bool) (gpu.Backend, error) {
		topo, err := sim.LoadTopology("dgx-h100")
		if err != nil {
			return nil, err
		}
		return sim.New(topo, sim.Options{Env: env})
	}
	for _, tc := range []struct {
		hw, other []string
		status    Status
		suspects  int
	}{
		{nil, []string{"nccl: no NCCL library"}, Healthy, 0},
		{[]string{"ecc: GPU 3: 2 uncorrected errors"}, []string{"dev-shm: 64 MiB"}, Failed, 1},
	} {
		opt := Options{Open: open, Floor: 0.75, Repeat: 1, Group: 2, Bytes: 4 << 20, Timeout: time.Second,
			Diag: func() ([]string, []string) { return tc.hw, tc.other }}
		rep, err := Run(context.Background(), opt)
		if err != nil {
			t.Fatal(err)
		}
		n := rep.Nodes[0]
		if n.Status != tc.status || len(rep.Suspects) != tc.suspects || len(n.Diag) != len(tc.hw)+len(tc.other) {
			t.Errorf("diag %q %q: node %+v, suspects %+v", tc.hw, tc.other, n, rep.Suspects)
		}
		if tc.status == Failed && n.Why != "diag: ecc: GPU 3: 2 uncorrected errors" {
			t.Errorf("why %q", n.Why)
		}
	}
}

// A run whose context ends reports the nodes and rounds that finished and nothing of the round
// under way, whose tests failed for the interruption, not the hardware: cut before the nodes are
// tested, it has none; cut as the rails start, the four healthy nodes and no rail or suspect.
func TestInterrupted(t *testing.T) {
	open := func(env map[string]string, _ bool) (gpu.Backend, error) {
		topo, err := sim.LoadTopology("dgx-h100")
		if err == nil {
			topo, err = topo.WithNodes(4)
		}
		if err != nil {
			return nil, err
		}
		return sim.New(topo, sim.Options{Env: env})
	}
	for _, tc := range []struct {
		at    string // the progress message at which the run is stopped
		nodes int
	}{{"each node on its own", 0}, {"each rail across the nodes", 4}} {
		ctx, cancel := context.WithCancel(context.Background())
		opt := Options{Open: open, Floor: 0.75, Repeat: 1, Group: 2, Bytes: 4 << 20, Timeout: 10 * time.Second,
			Progress: func(s string) {
				if strings.Contains(s, tc.at) {
					cancel()
				}
			}}
		rep, err := Run(ctx, opt)
		cancel()
		if !errors.Is(err, context.Canceled) || rep == nil {
			t.Fatalf("stopped at %q: report %v, error %v; want the report and context.Canceled", tc.at, rep, err)
		}
		healthy := 0
		for _, n := range rep.Nodes {
			if n.Status == Healthy {
				healthy++
			}
		}
		if !rep.Interrupted || len(rep.Nodes) != tc.nodes || healthy != tc.nodes || len(rep.Rails) != 0 || len(rep.Suspects) != 0 {
			t.Errorf("stopped at %q: interrupted %v, %d nodes (%d healthy), %d rails, suspects %+v; want %d healthy nodes and nothing else",
				tc.at, rep.Interrupted, len(rep.Nodes), healthy, len(rep.Rails), rep.Suspects, tc.nodes)
		}
	}
}
