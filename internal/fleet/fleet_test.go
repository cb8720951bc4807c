package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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
		if len(rep.NotReached) != 4-tc.nodes {
			t.Errorf("stopped at %q: not reached %q; want the %d nodes not tested", tc.at, rep.NotReached, 4-tc.nodes)
		}
		if !rep.Interrupted || len(rep.Nodes) != tc.nodes || healthy != tc.nodes || len(rep.Rails) != 0 || len(rep.Suspects) != 0 {
			t.Errorf("stopped at %q: interrupted %v, %d nodes (%d healthy), %d rails, suspects %+v; want %d healthy nodes and nothing else",
				tc.at, rep.Interrupted, len(rep.Nodes), healthy, len(rep.Rails), rep.Suspects, tc.nodes)
		}
	}
}

// openSim opens nodes simulated DGX H100 of perNode GPUs each, carrying no data (a slow NIC is
// found by time alone), with faults on the cluster and none on the machine it is set beside.
func openSim(nodes, perNode int, faults ...sim.Fault) func(map[string]string, bool) (gpu.Backend, error) {
	return func(env map[string]string, expected bool) (gpu.Backend, error) {
		topo, err := sim.LoadTopology("dgx-h100")
		if err == nil {
			topo, err = topo.WithNodes(nodes)
		}
		if err == nil {
			topo, err = topo.WithGPUsPerNode(perNode)
		}
		if err != nil {
			return nil, err
		}
		o := sim.Options{Env: env}
		if !expected {
			o.Faults = faults
		}
		return sim.New(topo, o)
	}
}

// Several slow NICs on one rail are each found and named as NICs, and no healthy one, however
// many there are and wherever they sit: seeded random cases over several fleet sizes, with as
// many good nodes as bad ones at least (fewer leave no two nodes that pass together, and no test
// can tell the bad from the good).
func TestSlowNICsOnOneRail(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := [][]int{{16, 1, 2}, {16, 0, 9}, {256, 0, 1}, {256, 1, 2}, {9, 0, 3, 5, 8}, {4, 0, 3}, {3, 2}}
	for len(cases) < 40 {
		n := 3 + rng.IntN(31)
		k := 1 + rng.IntN(min(4, (n-1)/2))
		c := append([]int{n}, rng.Perm(n)[:k]...)
		slices.Sort(c[1:])
		cases = append(cases, c)
	}
	for _, c := range cases {
		n, bad := c[0], c[1:]
		var faults []sim.Fault
		for _, b := range bad {
			faults = append(faults, sim.Fault{Kind: "slow-nic", A: fmt.Sprintf("dgx-h100-%d/mlx5_0", b), Factor: 0.3 + 0.15*rng.Float64()})
		}
		rep, err := Run(context.Background(), Options{Open: openSim(n, 1, faults...), Floor: 0.75, Repeat: 3, Group: 16, Bytes: 64 << 20, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, s := range rep.Suspects {
			var h int
			if _, err := fmt.Sscanf(s.Host, "dgx-h100-%d", &h); err != nil || s.Kind != "nic" || s.NIC != "mlx5_0" || s.Status != Degraded {
				t.Errorf("%d nodes, slow NICs on %v: suspect %+v", n, bad, s)
			}
			got = append(got, h)
		}
		if !slices.Equal(got, bad) || rep.Healthy() {
			t.Errorf("%d nodes, slow NICs on %v: named %v (%d tests), healthy %v", n, bad, got, rep.Tests, rep.Healthy())
		}
	}
}

// A rail that falls short is not healthy even when its bisection names no one: every NIC of the
// rail slow (its switch, say) leaves no two nodes that pass together.
func TestRailShortNamingNoOne(t *testing.T) {
	var faults []sim.Fault
	for n := range 4 {
		faults = append(faults, sim.Fault{Kind: "slow-nic", A: fmt.Sprintf("dgx-h100-%d/mlx5_0", n), Factor: 0.4})
	}
	rep, err := Run(context.Background(), Options{Open: openSim(4, 1, faults...), Floor: 0.75, Repeat: 3, Group: 16, Bytes: 64 << 20, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Suspects) != 0 || len(rep.Rails) != 1 || rep.Rails[0].Status != Degraded || rep.Healthy() {
		t.Errorf("rails %+v, suspects %+v, healthy %v; want rail 0 degraded, no one named, not healthy", rep.Rails, rep.Suspects, rep.Healthy())
	}
}

// A GPU that hangs in a test across nodes is named from the rank that did not finish, at the first
// hang, and the rail is tested again without its node: one timeout, not one per step of a
// bisection.
func TestHangOnARail(t *testing.T) {
	rep, err := Run(context.Background(), Options{Open: openSim(8, 1, sim.Fault{Kind: "hang", Device: 5}), Floor: 0.75, Repeat: 3, Group: 16, Bytes: 1 << 20, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Suspects) != 1 || rep.Suspects[0].Kind != "gpu" || rep.Suspects[0].Host != "dgx-h100-5" || rep.Suspects[0].Status != Failed ||
		!strings.Contains(rep.Suspects[0].Why, "hung: rank 5 did not finish") {
		t.Errorf("suspects %+v; want GPU 0 of dgx-h100-5 failed, hung", rep.Suspects)
	}
	// The rail's first test hangs, the one without node 5 passes and stands for the rail (the hang
	// is the GPU's, named), and the group passes.
	if r := rep.Rails[0]; r.Status != Healthy || !slices.Equal(r.Untested, []string{"dgx-h100-5"}) || rep.Nodes[5].Status != Failed {
		t.Errorf("rail %+v, node %+v; want the rail healthy, not tested on the node, and the node failed", r, rep.Nodes[5])
	}
	if rep.Tests != 3 {
		t.Errorf("%d tests; want 3", rep.Tests)
	}
}

// A GPU that hangs after its first call stalls every rank of the test (the next call waits on
// it): they are too many to name, and a bisection finds the one node whose test hangs beside
// nodes that passed; its GPU alone is named, and the rail passes without it.
func TestWideHangOnARail(t *testing.T) {
	rep, err := Run(context.Background(), Options{Open: openSim(8, 1, sim.Fault{Kind: "hang", Device: 5, After: 1}), Floor: 0.75, Repeat: 3, Group: 16, Bytes: 1 << 20, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Suspects) != 1 || rep.Suspects[0].Kind != "gpu" || rep.Suspects[0].Host != "dgx-h100-5" || rep.Suspects[0].Status != Failed ||
		!strings.Contains(rep.Suspects[0].Why, "hung with this node, and passed without it") {
		t.Errorf("suspects %+v; want GPU 0 of dgx-h100-5 alone, failed, hung", rep.Suspects)
	}
	if r := rep.Rails[0]; r.Status != Healthy || !slices.Equal(r.Untested, []string{"dgx-h100-5"}) {
		t.Errorf("rail %+v; want healthy without dgx-h100-5", r)
	}
}

// A rail's untested nodes include the node whose GPU hung during its tests, and the one node
// left when fewer than two remain, whose rail is then untested, and says why.
func TestRailUntestedAfterHang(t *testing.T) {
	rep, err := Run(context.Background(), Options{Open: openSim(2, 1, sim.Fault{Kind: "hang", Device: 1}), Floor: 0.75, Repeat: 3, Group: 16, Bytes: 1 << 20, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Rails[0]
	if r.Status != Untested || r.Why == "" || !slices.Equal(r.Untested, []string{"dgx-h100-0", "dgx-h100-1"}) || len(rep.Suspects) != 1 {
		t.Errorf("rail %+v, suspects %+v; want the rail untested on both nodes, GPU 0 of dgx-h100-1 named", r, rep.Suspects)
	}
}

// A NIC whose rail's test failed in one run and fell short in the others is named with the error
// of the run that failed, and says so.
func TestFailedThenShort(t *testing.T) {
	rep, err := Run(context.Background(), Options{Open: openSim(8, 4,
		sim.Fault{Kind: "flaky-link", A: "dgx-h100-3/mlx5_4", B: "dgx-h100-3/pcie1", Every: 20},
		sim.Fault{Kind: "slow-nic", A: "dgx-h100-3/mlx5_4", Factor: 0.4}), Floor: 0.75, Repeat: 3, Group: 16, Bytes: 64 << 20, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Suspects) != 1 || !strings.Contains(rep.Suspects[0].Why, " failed in 1 of 3 runs and fell short in the others ") ||
		!strings.Contains(rep.Suspects[0].Why, "dropped it") {
		t.Errorf("suspects %+v; want the NIC, failed in 1 of 3 runs and short in the others, with the error", rep.Suspects)
	}
}

// One test of the whole set that falls short, and in which the bisection finds no one, is run
// again before it stands: a rerun that passes leaves the set healthy; one that falls short every
// time leaves it degraded, after Repeat runs in all.
func TestHuntRunsAgain(t *testing.T) {
	topo, err := sim.LoadTopology("dgx-h100")
	if err == nil {
		topo, err = topo.WithNodes(4)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		short int // whole-set tests that fall short before one passes
		want  Status
		runs  int
	}{{1, Healthy, 2}, {5, Degraded, 3}} {
		f := newFleet(context.Background(), Options{Floor: 0.75, Repeat: 3, Group: 16}, nil, nil, topo)
		runs := 0
		first, found, untested := f.hunt([]int{0, 1, 2, 3}, func(nodes []int) verdict {
			if !slices.Equal(nodes, []int{0, 1, 2, 3}) { // every part passes: no one to find
				return verdict{ok: true, fig: &Figure{Ratio: 1}}
			}
			if runs++; runs <= tc.short {
				return verdict{fig: &Figure{Ratio: 0.5}}
			}
			return verdict{ok: true, fig: &Figure{Ratio: 1}}
		})
		if first == nil || first.status() != tc.want || runs != tc.runs || len(found) != 0 || len(untested) != 0 {
			t.Errorf("%d short: verdict %+v after %d runs, found %v, untested %v; want %s after %d", tc.short, first, runs, found, untested, tc.want, tc.runs)
		}
	}
}

// failingCopies is a simulated node whose first fail P2P copies fail.
type failingCopies struct {
	*sim.Backend
	fail int
}

func (b *failingCopies) TimedCopies(ctx context.Context, copies []gpu.Copy) ([]time.Duration, error) {
	if b.fail > 0 {
		b.fail--
		return nil, errors.New("copy engine error")
	}
	return b.Backend.TimedCopies(ctx, copies)
}

// P2P copies that fail are run again, up to Repeat times in all, as a failed collective is, so
// that the verdict says how often they fail.
func TestP2PFailureRunsAgain(t *testing.T) {
	open := func(env map[string]string, expected bool) (gpu.Backend, error) {
		b, err := openSim(1, 4)(env, expected)
		if err != nil || expected {
			return b, err
		}
		return &failingCopies{Backend: b.(*sim.Backend), fail: 1}, nil
	}
	rep, err := Run(context.Background(), Options{Open: open, Floor: 0.75, Repeat: 3, Group: 2, Bytes: 1 << 20, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.Nodes[0]; n.Status != Failed || !strings.HasPrefix(n.Why, "p2p failed in 1 of 3 runs: ") {
		t.Errorf("node %+v; want failed in 1 of 3 runs", n)
	}
}

// A GPU that hangs in the P2P copies of its node fails the node, and is named.
func TestHangInP2P(t *testing.T) {
	rep, err := Run(context.Background(), Options{Open: openSim(1, 4, sim.Fault{Kind: "hang", Device: 2, After: 40}), Floor: 0.75, Repeat: 1, Group: 2, Bytes: 1 << 20, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	n := rep.Nodes[0]
	if n.Status != Failed || n.P2P == nil || n.P2P.Error == "" || len(rep.Suspects) != 1 || rep.Suspects[0].GPU == nil || *rep.Suspects[0].GPU != 2 ||
		!strings.HasPrefix(rep.Suspects[0].Why, "p2p hung: ") {
		t.Errorf("node %+v, suspects %+v; want the node failed and GPU 2 named for the p2p hang", n, rep.Suspects)
	}
}

func TestNaturalCompare(t *testing.T) {
	hosts := []string{"dgx-100", "dgx-42", "dgx-7", "a", "dgx-042b", "dgx-42a"}
	slices.SortFunc(hosts, naturalCompare)
	if want := []string{"a", "dgx-7", "dgx-42", "dgx-42a", "dgx-042b", "dgx-100"}; !slices.Equal(hosts, want) {
		t.Errorf("%q, want %q", hosts, want)
	}
}

// A NIC link that drops every call fails the rail through that NIC, and names that NIC: the
// rails' calls cross the NIC NCCL_IB_HCA leaves them, not every NIC near their GPU (on a DGX
// H100, mlx5_4 and mlx5_5 share GPU 2's and GPU 3's PCIe switch).
func TestFlakyNICLink(t *testing.T) {
	for _, tc := range []struct {
		nic, sw string
		rail    int
	}{{"mlx5_5", "pcie1", 3}, {"mlx5_11", "pcie3", 7}, {"mlx5_4", "pcie1", 2}} {
		rep, err := Run(context.Background(), Options{Open: openSim(4, 8,
			sim.Fault{Kind: "flaky-link", A: "dgx-h100-2/" + tc.nic, B: "dgx-h100-2/" + tc.sw, Every: 1}), Floor: 0.75, Repeat: 3, Group: 16, Bytes: 1 << 20, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Suspects) != 1 || rep.Suspects[0].Kind != "nic" || rep.Suspects[0].Host != "dgx-h100-2" || rep.Suspects[0].NIC != tc.nic ||
			*rep.Suspects[0].Rail != tc.rail || rep.Suspects[0].Status != Failed {
			t.Errorf("flaky %s: suspects %+v; want NIC %s of dgx-h100-2 (rail %d) failed", tc.nic, rep.Suspects, tc.nic, tc.rail)
		}
		for _, r := range rep.Rails {
			if want := Healthy; r.Rail != tc.rail && r.Status != want || r.Rail == tc.rail && r.Status != Failed {
				t.Errorf("flaky %s: rail %+v", tc.nic, r)
			}
		}
	}
}

// A GPU that hangs partway through its node's tests holds up every rank waiting on it: the GPU is
// named alone, found by the node's P2P copies on the cluster opened again, wherever in the tests
// it starts to hang; where the cluster cannot be opened again (real GPUs stay held), the node is
// named, never its GPUs that did not hang.
func TestHangMidNodeTest(t *testing.T) {
	for after := 0; after <= 16; after++ {
		rep, err := Run(context.Background(), Options{Open: openSim(2, 8, sim.Fault{Kind: "hang", Device: 13, After: after}), Floor: 0.75, Repeat: 3, Group: 16, Bytes: 1 << 20, Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Suspects) != 1 || rep.Suspects[0].Kind != "gpu" || rep.Suspects[0].Host != "dgx-h100-1" || *rep.Suspects[0].GPU != 5 || rep.Suspects[0].Status != Failed {
			t.Errorf("hang=13@%d: suspects %+v; want GPU 5 of dgx-h100-1 alone", after, rep.Suspects)
		}
	}
	var held gpu.Backend // the cluster, opened once: a hung GPU stays hung
	open := func(env map[string]string, expected bool) (gpu.Backend, error) {
		if expected {
			return openSim(1, 8)(env, true)
		}
		if held == nil {
			b, err := openSim(1, 8, sim.Fault{Kind: "hang", Device: 5, After: 1})(env, false)
			if err != nil {
				return nil, err
			}
			held = &heldOpen{b}
		}
		return held, nil
	}
	rep, err := Run(context.Background(), Options{Open: open, Floor: 0.75, Repeat: 3, Group: 16, Bytes: 1 << 20, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Suspects) != 1 || rep.Suspects[0].Kind != "node" || !strings.Contains(rep.Suspects[0].Why, "which one hung cannot be told") {
		t.Errorf("held GPUs: suspects %+v; want the node, saying which GPU hung cannot be told", rep.Suspects)
	}
}

// heldOpen is a backend that each Open returns again, as real GPUs are: Close leaves it open.
type heldOpen struct{ gpu.Backend }

func (heldOpen) Close() error { return nil }

// openPreset opens nodes of the simulated preset topo, with faults on the cluster and none on the
// machine it is set beside.
func openPreset(topo string, nodes int, faults ...sim.Fault) func(map[string]string, bool) (gpu.Backend, error) {
	return func(env map[string]string, expected bool) (gpu.Backend, error) {
		t, err := sim.LoadTopology(topo)
		if err == nil {
			t, err = t.WithNodes(nodes)
		}
		if err != nil {
			return nil, err
		}
		o := sim.Options{Env: env}
		if !expected {
			o.Faults = faults
		}
		return sim.New(t, o)
	}
}

// On racks of GB200 trays, an NVLink domain of 18 nodes, a rail's test of many trays crosses
// only the NICs its rings enter and leave each rack by, and one of trays in one rack none: each
// tray's NIC is tested with one tray of another rack, the two alone, and a slow NIC is named
// wherever its tray sits, never said healthy.
func TestSlowNICAcrossRacks(t *testing.T) {
	for _, tc := range []struct{ nodes, tray int }{{36, 20}, {36, 0}, {36, 17}, {36, 35}, {36, 18}, {20, 5}, {20, 19}} {
		host := fmt.Sprintf("nvl72-tray-%d", tc.tray)
		rep, err := Run(context.Background(), Options{Open: openPreset("gb200-nvl72", tc.nodes, sim.Fault{Kind: "slow-nic", A: host + "/mlx5_1", Factor: 0.1}),
			Floor: 0.75, Repeat: 3, Group: 16, Bytes: 16 << 20, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Suspects) != 1 || rep.Suspects[0].Kind != "nic" || rep.Suspects[0].Host != host || rep.Suspects[0].NIC != "mlx5_1" || rep.Healthy() {
			t.Errorf("%d trays, slow mlx5_1 on %s: suspects %+v, rails %+v; want that NIC alone", tc.nodes, host, rep.Suspects, rep.Rails)
		}
	}
}

// Percentages round down: a figure under a 75% floor never reads 75%.
func TestPercentRoundsDown(t *testing.T) {
	for r, want := range map[float64]float64{0.7499: 74, 0.75: 75, 0.999999999: 100, 1: 100, 0.0049: 0} {
		if got := Percent(r); got != want {
			t.Errorf("Percent(%v) = %v; want %v", r, got, want)
		}
	}
}

// A cluster of two kinds of node is judged node by node against the same node without faults:
// DGX A100 nodes beside DGX H100 ones, and nodes of the same GPU wired otherwise (NVLink at half
// the bandwidth), are healthy, each with its own expected figures.
func TestMixedNodes(t *testing.T) {
	body := func(preset string, nvlink float64) gpu.Node {
		topo, err := sim.LoadTopology(preset)
		if err != nil {
			t.Fatal(err)
		}
		n := topo.Nodes[0]
		n.Hostname = ""
		n.Links = slices.Clone(n.Links)
		for i := range n.Links {
			if n.Links[i].Kind == gpu.LinkNVLink {
				n.Links[i].GBs *= nvlink
			}
		}
		return n
	}
	for _, other := range []gpu.Node{body("dgx-a100", 1), body("dgx-h100", 0.5)} {
		mixed := &gpu.Topology{Format: "gpubench-topology/2", Name: "mixed", Network: &gpu.Network{Kind: "infiniband"},
			Templates: map[string]gpu.Node{"h": body("dgx-h100", 1), "o": other},
			Nodes:     []gpu.Node{{Hostname: "h{i}", Template: "h", Count: 2}, {Hostname: "o{i}", Template: "o", Count: 2}}}
		data, err := json.Marshal(mixed)
		if err != nil {
			t.Fatal(err)
		}
		open := func(env map[string]string, _ bool) (gpu.Backend, error) {
			topo, err := gpu.ParseTopology(data)
			if err != nil {
				return nil, err
			}
			return sim.New(topo, sim.Options{Env: env})
		}
		rep, err := Run(context.Background(), Options{Open: open, Floor: 0.75, Repeat: 1, Group: 16, Bytes: 64 << 20, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Healthy() || len(rep.Nodes) != 4 {
			t.Fatalf("%s beside DGX H100: not healthy: nodes %+v, suspects %+v", other.GPUs[0].Name, rep.Nodes, rep.Suspects)
		}
		h, o := rep.Nodes[0], rep.Nodes[2]
		for _, f := range []struct {
			what   string
			fh, fo *Figure
		}{{"allreduce", h.AllReduce, o.AllReduce}, {"alltoall", h.AllToAll, o.AllToAll}, {"p2p", h.P2P, o.P2P}} {
			if f.fo.Ratio < 0.95 || f.fo.Expected > 0.9*f.fh.Expected {
				t.Errorf("%s beside DGX H100: %s %+v, the H100 node's %+v; want its own, lower expected figure", o.Host, f.what, *f.fo, *f.fh)
			}
		}
	}
}

// Nodes of kinds whose rails' NICs are named apart (a DGX H100's GPU 4 leaves by mlx5_6, an L40S
// box's by mlx5_2, which it shares with GPU 5) are tested on every rail, each node through its own
// NIC of the rail, and a slow NIC is named by the node's own name for it.
func TestMixedNodesRailNICs(t *testing.T) {
	kinds := map[string]gpu.Node{}
	for name, preset := range map[string]string{"h": "dgx-h100", "l": "pcie-l40s-8"} {
		topo, err := sim.LoadTopology(preset)
		if err != nil {
			t.Fatal(err)
		}
		n := topo.Nodes[0]
		n.Hostname = ""
		kinds[name] = n
	}
	mixed := &gpu.Topology{Format: "gpubench-topology/2", Name: "mixed", Network: &gpu.Network{Kind: "infiniband"}, Templates: kinds,
		Nodes: []gpu.Node{{Hostname: "h{i}", Template: "h", Count: 2}, {Hostname: "l{i}", Template: "l", Count: 2}}}
	data, err := json.Marshal(mixed)
	if err != nil {
		t.Fatal(err)
	}
	open := func(env map[string]string, expected bool) (gpu.Backend, error) {
		topo, err := gpu.ParseTopology(data)
		if err != nil {
			return nil, err
		}
		opt := sim.Options{Env: env}
		if !expected {
			opt.Faults = []sim.Fault{{Kind: "slow-nic", A: "l1/mlx5_2", Factor: 0.3}}
		}
		return sim.New(topo, opt)
	}
	rep, err := Run(context.Background(), Options{Open: open, Floor: 0.75, Repeat: 1, Group: 16, Bytes: 64 << 20, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, s := range rep.Suspects {
		named = append(named, fmt.Sprintf("%s %s %s rail %d", s.Kind, s.Host, s.NIC, *s.Rail))
	}
	if want := []string{"nic l1 mlx5_2 rail 4", "nic l1 mlx5_2 rail 5"}; !slices.Equal(named, want) || len(rep.Rails) != 8 {
		t.Errorf("suspects %q, %d rails; want %q of 8", named, len(rep.Rails), want)
	}
	if r := rep.Rails[4]; r.NIC != "mlx5_6,mlx5_2" || r.Status != Degraded {
		t.Errorf("rail 4: %+v; want mlx5_6,mlx5_2 degraded", r)
	}
}

// A node's collectives check their data at a size the simulator's data cap holds: a GPU that
// corrupts what it receives is named with a cap too small for 256 KiB a GPU; where not even
// 1 KiB fits, the nodes' data is listed as not tested, never passed over.
func TestDataCheckedWithinTheCap(t *testing.T) {
	open := func(dataCap int64) func(map[string]string, bool) (gpu.Backend, error) {
		return func(env map[string]string, expected bool) (gpu.Backend, error) {
			topo, err := sim.LoadTopology("dgx-h100")
			if err == nil {
				topo, err = topo.WithNodes(2)
			}
			if err != nil {
				return nil, err
			}
			o := sim.Options{Env: env, DataCap: dataCap}
			if !expected {
				o.Faults = []sim.Fault{{Kind: "corrupt", Device: 3}}
			}
			return sim.New(topo, o)
		}
	}
	rep, err := Run(context.Background(), Options{Open: open(3 << 20), Floor: 0.75, Repeat: 1, Group: 16, Bytes: 64 << 20, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.Nodes[0]; n.Status != Failed || n.DataNotChecked || len(rep.Suspects) != 1 || rep.Suspects[0].GPU == nil || *rep.Suspects[0].GPU != 3 {
		t.Errorf("3 MiB cap: node %+v, suspects %+v; want GPU 3 of dgx-h100-0 failed for wrong data", n, rep.Suspects)
	}
	rep, err = Run(context.Background(), Options{Open: open(8 << 10), Floor: 0.75, Repeat: 1, Group: 16, Bytes: 64 << 20, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	want := "the GPUs' data on dgx-h100-0, dgx-h100-1 (their collectives carried none even at 1KiB"
	if !rep.Nodes[0].DataNotChecked || len(rep.NotTested) != 1 || !strings.HasPrefix(rep.NotTested[0], want) {
		t.Errorf("8 KiB cap: nodes %+v, not tested %q; want the data of both nodes not tested", rep.Nodes, rep.NotTested)
	}
}
