// Package fleet finds the bad node, GPU, NIC or link of a cluster: each node on its own, each
// rail across the nodes, and the nodes together by group testing, every figure set beside what
// the machine should do (docs/fleet.md). It sees the cluster only through backends.
package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/p2p"
)

// Status is a verdict.
type Status string

// The verdicts. Untestable is never bad hardware: the test could not run (a library, a join).
const (
	Healthy    Status = "healthy"
	Degraded   Status = "degraded" // below its floor
	Failed     Status = "failed"   // an error, wrong data or a hang
	Untestable Status = "untestable"
	// Untested is a rail with fewer than two nodes to test it across: no verdict of its NIC.
	Untested Status = "untested"
)

// Options say what to test and how.
type Options struct {
	// Open returns the cluster with NCCL_* variables env (nil: none): the cluster itself, or with
	// expected set, the same machine without its faults, whose figures are what the cluster should
	// reach. Rails are tested with NCCL_IB_HCA pinned to the rail's NIC.
	Open func(env map[string]string, expected bool) (gpu.Backend, error)
	// Floor is the fraction of the expected figure a test must reach (0.75).
	Floor float64
	// Repeat is how often a suspect is confirmed, and a failed test run again, before a verdict.
	Repeat int
	// Group is the nodes of one group in the round across nodes.
	Group int
	// Timeout bounds each wait for the GPUs: longer is a hang.
	Timeout time.Duration
	// Bytes is the size each node's tests time (0: 256 MiB); the tests across nodes time a
	// quarter of it.
	Bytes int64
	// Only, when set, tests that node alone (its index in the topology): the per-node round of a
	// process that drives one node of many.
	Only *int
	// Host names the machine on real GPUs (the backend has no topology of its own, and the node
	// the expected figures come from is named after the topology).
	Host string
	// Diag, when set, is a quick diag of the machine this process runs on, run with the node's
	// tests when the process tests its own node: the failed checks of its hardware (a GPU, its
	// memory, PCIe or NVLink links, RDMA ports), and the others (software, settings). A hardware
	// failure fails the node; the others are reported with it, never as bad hardware.
	Diag func() (hardware, other []string)
	// Progress, when set, hears each phase.
	Progress func(string)
}

// Figure is a test's busbw against what was expected of it.
type Figure struct {
	BusBW    float64 `json:"busbw_gbs"`
	Expected float64 `json:"expected_gbs"`
	Ratio    float64 `json:"ratio"`
	Error    string  `json:"error,omitempty"`
}

// Node is one node's verdict and figures.
type Node struct {
	Host      string  `json:"host"`
	Status    Status  `json:"status"`
	Why       string  `json:"why,omitempty"`
	AllReduce *Figure `json:"allreduce"`
	AllToAll  *Figure `json:"alltoall"`
	// P2P is the node's slowest P2P pair (unidirectional copies), against the same pair on the
	// fault-free machine; nil where P2P was not measured.
	P2P *Figure `json:"p2p"`
	// Diag lists the checks of a quick diag that failed on the node (Options.Diag), if it ran.
	Diag []string `json:"diag,omitempty"`
	// DataNotChecked: the node's collectives carried no data at any size the simulator's data
	// cap allows, so nothing checked it (the report lists it under not_tested).
	DataNotChecked bool `json:"data_not_checked,omitempty"`
}

// Rail is one rail's test across the nodes.
type Rail struct {
	Rail   int     `json:"rail"`
	NIC    string  `json:"nic"`
	Status Status  `json:"status"`
	Figure *Figure `json:"allreduce"`
	// Why says why an untested rail was not tested: one NVLink domain, or fewer than two nodes.
	Why string `json:"why,omitempty"`
	// Untested names the nodes whose NIC on this rail was not tested: nodes failed or degraded by
	// their own tests; failed on an earlier rail (a GPU that hung, an error a bisection ended at);
	// whose process left, or whose GPU hung, before or during this rail's tests; and the one node
	// left when fewer than two remained to test the rail across.
	Untested []string `json:"untested,omitempty"`
}

// Suspect is something found not healthy, and why.
type Suspect struct {
	Kind   string `json:"kind"` // node, gpu, nic, link
	Host   string `json:"host"`
	GPU    *int   `json:"gpu"`  // the GPU's index on its node
	NIC    string `json:"nic"`  // the NIC's id, for a NIC
	Rail   *int   `json:"rail"` // the rail, for a NIC
	Status Status `json:"status"`
	Why    string `json:"why"`
}

// Report is a fleet run.
type Report struct {
	Nodes    []Node    `json:"nodes"`
	Rails    []Rail    `json:"rails"`
	Suspects []Suspect `json:"suspects"`
	Tests    int       `json:"tests"`
	Rounds   int       `json:"rounds"`
	Floor    float64   `json:"floor"`
	// NotTested says what no test of the run measured, each with why: the NICs on no rail of the
	// run's GPUs, the GPUs' data where no test checks it (one GPU a node).
	NotTested []string `json:"not_tested,omitempty"`
	// Interrupted: the run was stopped (its context ended); the report holds the nodes and the
	// rounds that finished before, and nothing of the one under way.
	Interrupted bool `json:"interrupted,omitempty"`
	// NotReached names the nodes an interrupted run stopped before testing on their own.
	NotReached []string `json:"not_reached,omitempty"`
}

// Healthy reports whether every node and every rail tested is, and nothing is suspect: a rail
// that falls short is not healthy even where its bisection named no one.
func (r *Report) Healthy() bool {
	for _, n := range r.Nodes {
		if n.Status != Healthy {
			return false
		}
	}
	for _, rl := range r.Rails {
		if rl.Status != Healthy && rl.Status != Untested {
			return false
		}
	}
	return len(r.Suspects) == 0
}

// The size tested by default: large enough that bandwidth sets the time. Each node's data is
// checked at coll.CheckSize, as diag checks it (a simulator backs little memory).
const defaultBytes = 256 << 20

type fleet struct {
	ctx       context.Context
	opt       Options
	b, twin   gpu.Backend
	topo      *gpu.Topology
	nodes     [][]int // GPU ordinals per node
	hosts     []string
	rep       *Report
	bad       map[int]bool // nodes found failed or degraded: left out of later rounds
	expected  map[string]float64
	depth     int // the deepest bisection, in rounds
	confirmed map[int]bool
	slow      map[int][][2]int       // per node: the P2P pairs under the floor
	p2pWant   map[string]*p2p.Matrix // the fault-free machine's P2P matrix, by node wiring
	cross     CrossTest              // the tests across nodes, run by other processes (Across)
	gone      map[int]bool           // nodes whose process left the run (Across)
	// inputs are the tests' crafted inputs and their checks' host memory, kept from test to
	// test: every node's test of a size checks the same inputs, which took a third of the time
	// of 1,024 simulated nodes to make afresh for each.
	inputs coll.Inputs
}

// ErrSize is Run's error for a size the GPUs cannot hold: each node's test would run a smaller
// one, as nccl-tests does, and then match no figure of the size asked for.
var ErrSize = errors.New("fleet: invalid size")

// Run tests the cluster: per node, per rail, then across nodes in groups, bisecting what falls
// short and confirming each suspect against nodes already found good.
func Run(ctx context.Context, opt Options) (*Report, error) {
	if opt.Floor <= 0 || opt.Floor > 1 || opt.Repeat < 1 || opt.Group < 2 {
		return nil, fmt.Errorf("fleet: floor %v, repeat %d, group %d: want a floor in (0, 1], at least 1 repeat and groups of 2 or more", opt.Floor, opt.Repeat, opt.Group)
	}
	b, err := opt.Open(nil, false)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	twin, err := opt.Open(nil, true)
	if err != nil {
		return nil, err
	}
	defer twin.Close()
	t := b.Topology()
	if t == nil { // real GPUs: the machine is the one the expected figures are computed on
		t = twin.Topology()
	}
	if t == nil || t.NumGPUs() != len(b.Devices()) {
		return nil, fmt.Errorf("fleet: the backend has %d GPUs and the machine it is set beside another count: give --topology for this machine", len(b.Devices()))
	}
	f := newFleet(ctx, opt, b, twin, t)
	mem := int64(math.MaxInt64)
	for i := range t.NumGPUs() {
		g, _ := t.GPU(i)
		mem = min(mem, g.MemoryBytes)
	}
	if most := coll.MemoryLimit(mem, true) &^ (1<<20 - 1); f.opt.Bytes > most {
		return nil, fmt.Errorf("%w: more than the GPUs hold for a checked all-reduce (%.1f GiB of memory): give at most %s",
			ErrSize, float64(mem)/(1<<30), coll.FormatSize(most))
	}
	if b.Topology() == nil && opt.Host != "" && len(f.hosts) == 1 {
		f.hosts[0] = opt.Host
	}
	if k := opt.Only; k != nil {
		if *k < 0 || *k >= len(f.nodes) {
			return nil, fmt.Errorf("fleet: node %d of %d", *k, len(f.nodes))
		}
		f.nodes, f.hosts = f.nodes[*k:*k+1], f.hosts[*k:*k+1]
	}
	if len(f.nodes[0]) == 1 {
		f.rep.NotTested = append(f.rep.NotTested, "the GPUs' data on their own (one GPU a node: no test of a node checks it)")
	}
	f.progress("%d nodes of %d GPUs: each node on its own", len(f.nodes), len(f.nodes[0]))
	f.nodeRound()
	if f.ctx.Err() != nil {
		f.rep.Interrupted = true
		f.rep.NotReached = slices.Clone(f.hosts[len(f.rep.Nodes):])
		return f.report()
	}
	return f.acrossNodes()
}

// acrossNodes runs the rounds across nodes, each rail then the nodes in groups, and reports. A
// round cut short by the end of the run's context leaves nothing in the report: its tests failed
// for that, not for the hardware.
func (f *fleet) acrossNodes() (*Report, error) {
	if len(f.nodes) > 1 {
		f.progress("each rail across the nodes")
		before := f.snapshot()
		if err := f.railRound(); f.ctx.Err() != nil {
			return f.stopped(before)
		} else if err != nil {
			return nil, err
		}
		f.progress("the nodes together, in groups of %d", f.opt.Group)
		before = f.snapshot()
		if f.groupRound(); f.ctx.Err() != nil {
			return f.stopped(before)
		}
	}
	return f.report()
}

// state is the run as it stood before a round: the report and what report() adds to it.
type state struct {
	rep       Report
	depth     int
	confirmed map[int]bool
}

func (f *fleet) snapshot() state {
	rep := *f.rep
	rep.Nodes, rep.Rails, rep.Suspects = slices.Clone(rep.Nodes), slices.Clone(rep.Rails), slices.Clone(rep.Suspects)
	return state{rep, f.depth, maps.Clone(f.confirmed)}
}

// stopped reports the run as it stood before the round under way when its context ended.
func (f *fleet) stopped(s state) (*Report, error) {
	*f.rep, f.depth, f.confirmed = s.rep, s.depth, s.confirmed
	f.rep.Interrupted = true
	return f.report()
}

func newFleet(ctx context.Context, opt Options, b, twin gpu.Backend, t *gpu.Topology) *fleet {
	if opt.Bytes <= 0 {
		opt.Bytes = defaultBytes
	}
	f := &fleet{ctx: ctx, opt: opt, b: b, twin: twin, topo: t, rep: &Report{Floor: opt.Floor, Nodes: []Node{}, Rails: []Rail{}, Suspects: []Suspect{}},
		bad: map[int]bool{}, expected: map[string]float64{}, confirmed: map[int]bool{}, slow: map[int][][2]int{}, p2pWant: map[string]*p2p.Matrix{}, gone: map[int]bool{}}
	f.nodes = t.NodeGPUs()
	for _, n := range t.Nodes {
		f.hosts = append(f.hosts, n.Hostname)
	}
	return f
}

func (f *fleet) report() (*Report, error) {
	f.rep.Rounds += f.depth
	if len(f.confirmed) > 0 {
		f.rep.Rounds += f.opt.Repeat
	}
	slices.SortStableFunc(f.rep.Suspects, func(a, b Suspect) int { return naturalCompare(a.Host, b.Host) })
	var unchecked []string
	for _, n := range f.rep.Nodes {
		if n.DataNotChecked {
			unchecked = append(unchecked, n.Host)
		}
	}
	if len(unchecked) > 0 {
		hosts := strings.Join(unchecked, ", ")
		if len(unchecked) > 8 {
			hosts = fmt.Sprintf("%s and %d others", strings.Join(unchecked[:8], ", "), len(unchecked)-8)
		}
		f.rep.NotTested = append(f.rep.NotTested, fmt.Sprintf("the GPUs' data on %s (their collectives carried none even at %s: the simulator's --sim-data-cap is too small; raise it)",
			hosts, coll.FormatSize(coll.MinCheckBytes)))
	}
	return f.rep, f.ctx.Err()
}

// naturalCompare orders host names as people number them: node-42 before node-100.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Or(cmp.Compare(len(na), len(nb)), strings.Compare(na, nb)); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

// digits is the length of s's leading run of decimal digits.
func digits(s string) int {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return i
}

// CrossTest runs, in other processes, an all-reduce of bytes over GPU rail of each of nodes (one
// process per node), or over every GPU of each when rail is -1, and returns its busbw; an error
// wrapping a *gpu.HangError for a hang, a *GoneError for nodes whose process left the run.
type CrossTest func(rail int, nodes []int, bytes int64) (busbw float64, err error)

// GoneError names the nodes whose process left the run, and why.
type GoneError struct{ Why map[int]string }

func (e *GoneError) Error() string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(e.Why)) {
		out = append(out, fmt.Sprintf("node %d: %s", n, e.Why[n]))
	}
	return "processes left the run: " + strings.Join(out, "; ")
}

// Across runs the rounds across nodes of a launcher's run, one process per node: reports are the
// per-node round of each process, in process order (one node each; for a process that left the
// run, that node failed), and test runs each test across the processes. opt.Open(env, true) gives the whole
// fleet's fault-free machine, whose figures the tests are set beside. The nodes are also held to
// the robust outlier rule among themselves, which no process could apply alone; then the rails
// and the groups are tested as in Run.
func Across(ctx context.Context, opt Options, reports []*Report, test CrossTest) (*Report, error) {
	twin, err := opt.Open(nil, true)
	if err != nil {
		return nil, err
	}
	defer twin.Close()
	t := twin.Topology()
	f := newFleet(ctx, opt, nil, twin, t)
	if len(f.nodes) != len(reports) {
		return nil, fmt.Errorf("fleet: %d processes for the %d nodes of %s", len(reports), len(f.nodes), t.Name)
	}
	f.cross = test
	f.rep.Rounds = 1
	for n, r := range reports {
		if len(r.Nodes) != 1 {
			return nil, fmt.Errorf("fleet: process %d reported %d nodes, not its own alone", n, len(r.Nodes))
		}
		f.hosts[n] = r.Nodes[0].Host
		f.rep.Nodes = append(f.rep.Nodes, r.Nodes[0])
		f.rep.Suspects = append(f.rep.Suspects, r.Suspects...)
		f.rep.Tests += r.Tests
		if r.Nodes[0].Status != Healthy {
			f.bad[n] = true
		}
	}
	for _, n := range f.judgeNodes() {
		f.bad[n] = true
		f.suspectNode(n, f.rep.Nodes[n].Why)
	}
	return f.acrossNodes()
}

// crossBytes is what the tests across nodes time: a quarter of a node's, at least 1 KiB.
func (f *fleet) crossBytes() int64 { return max(f.opt.Bytes/4, 1<<10) }

func (f *fleet) progress(format string, a ...any) {
	if f.opt.Progress != nil {
		f.opt.Progress(fmt.Sprintf(format, a...))
	}
}

// outcome is one test's result.
type outcome struct {
	busbw    float64
	hang     *gpu.HangError
	err      error
	wrong    []int // ranks whose output held wrong data
	measured bool
	checked  bool // some of its data was checked
}

func (o outcome) failed() bool { return o.hang != nil || o.err != nil || len(o.wrong) > 0 }

// run times collective c over the GPUs ords on b at size bytes, checking data at coll.CheckSize first
// when check is set.
func (f *fleet) run(b gpu.Backend, c *coll.Collective, ords []int, bytes int64, check bool) outcome {
	f.rep.Tests++
	w := coll.Sweep{Min: bytes, Max: bytes}
	if size := coll.CheckSize(b, len(ords)); check && size > 0 && size < bytes {
		w = coll.Sweep{Min: size, Max: bytes, Step: bytes - size} // these two sizes alone
	}
	s, err := coll.Run(f.ctx, b, coll.Options{Coll: c, Sweep: w, DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum},
		Iters: 2, Check: 1, Average: 1, Timeout: f.opt.Timeout, Ordinals: ords, Inputs: &f.inputs})
	var o outcome
	if errors.As(err, &o.hang) {
		return o
	}
	if err != nil {
		o.err = err
		return o
	}
	top := int64(-1)
	for _, r := range s.Results {
		for rank, n := range r.OutOfPlace.WrongByRank {
			if n > 0 && !slices.Contains(o.wrong, rank) {
				o.wrong = append(o.wrong, rank)
			}
		}
		o.checked = o.checked || r.OutOfPlace.Wrong != nil
		// The timed size is the sweep's largest, rounded down as the collective needs: an
		// all-to-all of 64 MiB on 3 GPUs runs 67108848 bytes.
		if r.Size > top {
			top, o.busbw, o.measured = r.Size, r.OutOfPlace.BusBW, true
		}
	}
	return o
}

// expect is the busbw the fault-free machine reaches for the same test, once per key.
func (f *fleet) expect(key string, b gpu.Backend, c *coll.Collective, ords []int, bytes int64) float64 {
	if v, ok := f.expected[key]; ok {
		return v
	}
	tests := f.rep.Tests
	v := f.run(b, c, ords, bytes, false).busbw
	f.rep.Tests = tests // what the machine should do is not a test of it
	f.expected[key] = v
	return v
}

func figure(o outcome, expected float64) *Figure {
	fig := &Figure{BusBW: o.busbw, Expected: expected}
	if expected > 0 && o.measured {
		fig.Ratio = o.busbw / expected
	}
	switch {
	case o.hang != nil:
		fig.Error = o.hang.Error()
	case o.err != nil:
		fig.Error = o.err.Error()
	case len(o.wrong) > 0:
		fig.Error = fmt.Sprintf("wrong data in ranks %v", o.wrong)
	}
	return fig
}

// nodeRound tests every node on its own: an all-reduce and an all-to-all over its GPUs (a node of
// one GPU has none to run), their data checked, and its GPUs' P2P copies, against the same on the
// fault-free machine and the collectives against the other nodes too (a robust outlier rule). A
// failed test runs again, Repeat times, so that an intermittent failure is told apart.
func (f *fleet) nodeRound() {
	f.rep.Rounds++
	for n, gpus := range f.nodes {
		if f.ctx.Err() != nil {
			break // the nodes tested so far are reported
		}
		suspects, tests := len(f.rep.Suspects), f.rep.Tests
		node := Node{Host: f.hosts[n], Status: Healthy}
		shape := f.wiring(gpus[0])
		for _, c := range []*coll.Collective{coll.AllReduce, coll.AllToAll} {
			if len(gpus) < 2 {
				break // nothing moves between one GPU and itself: its rail round tests its NIC
			}
			o := f.run(f.b, c, gpus, f.opt.Bytes, true)
			fails, runs := f.retry(o, func() outcome { return f.run(f.b, c, gpus, f.opt.Bytes, true) })
			fig := figure(o, f.expect(shape+c.Name, f.twin, c, gpus, f.opt.Bytes))
			node.DataNotChecked = node.DataNotChecked || !o.failed() && !o.checked
			if c == coll.AllReduce {
				node.AllReduce = fig
			} else {
				node.AllToAll = fig
			}
			if o.failed() && node.Status != Failed {
				node.Status, node.Why = Failed, f.failure(n, c.Name, o, fails, runs, f.hungGPU(o, gpus, shape))
			}
			if o.hang != nil {
				break // a hung GPU stays hung: the node's other tests would only hang too
			}
		}
		if node.Status == Healthy {
			var o outcome
			node.P2P, f.slow[n], o = f.p2pNode(f.b, gpus, shape)
			if o.failed() {
				fails, runs := f.retry(o, func() outcome { _, _, again := f.p2pNode(f.b, gpus, shape); return again })
				node.Status, node.Why = Failed, f.failure(n, "p2p", o, fails, runs, -1)
			}
		}
		if f.opt.Diag != nil && len(f.nodes) == 1 {
			f.diagNode(&node)
		}
		if f.ctx.Err() != nil { // its tests were cut short by the run's end, not by the node: it is left out
			f.rep.Suspects, f.rep.Tests = f.rep.Suspects[:suspects], tests
			break
		}
		f.rep.Nodes = append(f.rep.Nodes, node)
	}
	f.judgeNodes()
	for n := range f.rep.Nodes {
		if node := &f.rep.Nodes[n]; node.Status == Healthy && len(f.slow[n]) > 0 {
			p := node.P2P
			node.Status, node.Why = Degraded, fmt.Sprintf("%d P2P pairs under %.0f%% of expected, the slowest %.1f GB/s of %.1f", len(f.slow[n]), 100*f.opt.Floor, p.BusBW, p.Expected)
		}
	}
	for n, node := range f.rep.Nodes {
		switch node.Status {
		case Failed:
			f.bad[n] = true
		case Degraded:
			f.bad[n] = true
			f.suspectNode(n, node.Why)
		}
	}
}

// retry runs a failed test again, up to Repeat times in all, and counts its failures, so that
// the verdict says how often it fails; a hang is not run again: a hung GPU stays hung, and each
// wait costs the timeout.
func (f *fleet) retry(first outcome, run func() outcome) (fails, runs int) {
	if !first.failed() {
		return 0, 1
	}
	fails, runs = 1, 1
	for first.hang == nil && runs < f.opt.Repeat {
		runs++
		if run().failed() {
			fails++
		}
	}
	return fails, runs
}

// judgeNodes marks degraded the healthy nodes whose collectives are below the floor of what is
// expected, or far below the other nodes', and returns them.
func (f *fleet) judgeNodes() []int {
	var marked []int
	for _, c := range []string{coll.AllReduce.Name, coll.AllToAll.Name} {
		var ratios []float64
		for _, node := range f.rep.Nodes {
			if fig := nodeFigure(node, c); fig != nil && fig.Error == "" {
				ratios = append(ratios, fig.Ratio)
			}
		}
		low := outlierBelow(ratios)
		for n := range f.rep.Nodes {
			node := &f.rep.Nodes[n]
			fig := nodeFigure(*node, c)
			if node.Status != Healthy || fig == nil || fig.Error != "" {
				continue
			}
			switch {
			case fig.Ratio < f.opt.Floor:
				node.Status, node.Why = Degraded, fmt.Sprintf("%s %.1f GB/s busbw, %.0f%% of the expected %.1f", c, fig.BusBW, Percent(fig.Ratio), fig.Expected)
			case fig.Ratio < low:
				node.Status, node.Why = Degraded, fmt.Sprintf("%s %.1f GB/s busbw, an outlier among the nodes (%.0f%% of expected, the fleet's median %.0f%%)", c, fig.BusBW, Percent(fig.Ratio), Percent(median(ratios)))
			default:
				continue
			}
			marked = append(marked, n)
		}
	}
	return marked
}

// diagNode runs the quick diag of the node this process runs on: a failed hardware check fails
// the node, unless its tests already failed it; the other failed checks are listed with it.
func (f *fleet) diagNode(node *Node) {
	hw, other := f.opt.Diag()
	node.Diag = append(hw, other...)
	if len(hw) == 0 || node.Status == Failed {
		return
	}
	why := "diag: " + strings.Join(hw, "; ")
	node.Status, node.Why = Failed, why
	f.rep.Suspects = append(f.rep.Suspects, Suspect{Kind: "node", Host: node.Host, Status: Failed, Why: why})
}

func nodeFigure(n Node, c string) *Figure {
	if c == coll.AllReduce.Name {
		return n.AllReduce
	}
	return n.AllToAll
}

// wiring is what a node's own tests depend on, for the node of GPU g: its parts and links,
// without its name or what tells one machine's GPUs from another's (UUIDs, bus ids, the facts
// gpubench topo records and the simulator does not use: docs/topology.md), so that the nodes
// of one template share their expected figures and nodes wired otherwise (another GPU, another
// PCIe or NVLink layout) have their own.
func (f *fleet) wiring(g int) string {
	_, n := f.topo.GPU(g)
	body := *n
	body.Hostname, body.Template, body.Count = "", "", 0
	body.GPUs = slices.Clone(n.GPUs)
	for i, g := range body.GPUs { // what one machine's GPUs do not share with another's
		body.GPUs[i] = gpu.GPU{ID: g.ID, Name: g.Name, MemoryBytes: g.MemoryBytes, MemoryGBs: g.MemoryGBs,
			ComputeCapability: g.ComputeCapability, NUMANode: g.NUMANode, NIC: g.NIC}
	}
	key, _ := json.Marshal(body)
	return "node " + string(key)
}

// failure names what failed on node n in test what, and records the suspect: the GPU that hung
// or whose output was wrong (its rank, its index on the node; or a copy's device), or the node
// when the error names none. A hang that several GPUs did not finish names the GPU hung, its
// index on the node, when hungGPU found it, and the node otherwise: a GPU that hangs holds up
// every rank waiting on it, so the ranks that did not finish do not say which one it was.
func (f *fleet) failure(n int, what string, o outcome, fails, runs, hung int) string {
	var ranks []int
	var why string
	switch {
	case o.hang != nil:
		ranks, why = o.hang.Ranks, fmt.Sprintf("%s hung: %v", what, o.hang)
		if o.hang.Devices {
			ranks = nil
			for _, d := range o.hang.Ranks {
				if i := slices.Index(f.nodes[n], d); i >= 0 {
					ranks = append(ranks, i)
				}
			}
		}
		switch {
		case len(ranks) < 2:
		case hung >= 0:
			ranks, why = []int{hung}, fmt.Sprintf("%s; GPU %d hung alone in the node's P2P copies, run on it opened again", why, hung)
		default:
			ranks, why = nil, fmt.Sprintf("%s (a GPU that hangs holds up every rank waiting on it: which one hung cannot be told)", why)
		}
	case len(o.wrong) > 0:
		ranks, why = o.wrong, fmt.Sprintf("%s delivered wrong data", what)
	default:
		why = fmt.Sprintf("%s failed in %d of %d runs: %v", what, fails, runs, o.err)
	}
	if len(ranks) == 0 {
		f.rep.Suspects = append(f.rep.Suspects, Suspect{Kind: "node", Host: f.hosts[n], Status: Failed, Why: why})
		return why
	}
	for _, r := range ranks {
		g := r
		f.rep.Suspects = append(f.rep.Suspects, Suspect{Kind: "gpu", Host: f.hosts[n], GPU: &g, Status: Failed, Why: why})
	}
	return why
}

// hungGPU finds which GPU of a node hung in o, a test that several of its GPUs did not finish (a
// GPU that hangs holds up every rank waiting on it): it opens the cluster again (a hung kernel
// holds its GPUs) and runs the node's P2P copies, pair by pair, which name the one GPU that hangs.
// It returns that GPU's index on the node, or -1: the test did not hang on several GPUs, the
// cluster opens as the same backend (real GPUs, still held), or the copies did not name one GPU.
func (f *fleet) hungGPU(o outcome, gpus []int, shape string) int {
	if o.hang == nil || len(o.hang.Ranks) < 2 {
		return -1
	}
	b, err := f.opt.Open(nil, false)
	if err != nil {
		return -1
	}
	if b == f.b {
		return -1 // real GPUs open as the same backend: it stays open
	}
	defer b.Close()
	tests := f.rep.Tests
	_, _, again := f.p2pNode(b, gpus, shape)
	f.rep.Tests = tests + 1
	if again.hang == nil || !again.hang.Devices || len(again.hang.Ranks) != 1 {
		return -1
	}
	return slices.Index(gpus, again.hang.Ranks[0])
}

// suspectNode looks inside a degraded node for the GPU at fault: the GPU common to every pair
// whose P2P copies fall short of the fault-free machine's; the node when there is none.
func (f *fleet) suspectNode(n int, why string) {
	gpus := f.nodes[n]
	slow := f.slow[n]
	count := map[int]int{}
	for _, p := range slow {
		count[p[0]]++
		count[p[1]]++
	}
	for local, g := range gpus {
		if len(slow) > 0 && count[g] == len(slow) {
			gl := local
			f.rep.Suspects = append(f.rep.Suspects, Suspect{Kind: "gpu", Host: f.hosts[n], GPU: &gl, Status: Degraded,
				Why: fmt.Sprintf("%s; every slow P2P pair of the node has GPU %d", why, local)})
			return
		}
	}
	f.rep.Suspects = append(f.rep.Suspects, Suspect{Kind: "node", Host: f.hosts[n], Status: Degraded, Why: why})
}

// p2pNode measures a node's unidirectional P2P copies on cluster and sets them beside the fault-free
// machine's (measured once per node wiring): the slowest pair's figure, and the ordered pairs
// under the floor; or, when the copies hang or fail, why (a hang names device ordinals). Pairs
// under the floor are measured again, up to Repeat times in all, and stay under it only if every
// measurement is: one noisy sample names no one. Nothing where the backends cannot copy.
func (f *fleet) p2pNode(cluster gpu.Backend, gpus []int, shape string) (*Figure, [][2]int, outcome) {
	b, okB := cluster.(p2p.Backend)
	t, okT := f.twin.(p2p.Backend)
	if !okB || !okT || len(gpus) < 2 {
		return nil, nil, outcome{}
	}
	// p2p's matrices grow with the square of their GPUs: a node of more than p2p.MaxDevices (the
	// most any machine has) has its first ones measured.
	gpus = gpus[:min(len(gpus), p2p.MaxDevices)]
	opt := p2p.Options{Size: min(64<<20, f.opt.Bytes), Repeat: 1, Samples: 1, Devices: gpus, Timeout: f.opt.Timeout}
	want, ok := f.p2pWant[shape]
	if !ok {
		if r, err := p2p.Run(f.ctx, t, p2p.Options{Size: opt.Size, Repeat: 1, Samples: 1, Devices: gpus}); err == nil {
			want = r.Matrix("uni_enabled")
		}
		f.p2pWant[shape] = want
	}
	// best holds each ordered pair's best measurement so far.
	var best *p2p.Matrix
	var pairs []p2p.Pair // to measure: every pair, then those still under the floor
	for range f.opt.Repeat {
		f.rep.Tests++
		opt.Pairs = pairs
		r, err := p2p.Run(f.ctx, b, opt)
		if err != nil {
			var o outcome
			if !errors.As(err, &o.hang) {
				o.err = err
			}
			return &Figure{Error: err.Error()}, nil, o
		}
		got := r.Matrix("uni_enabled")
		if got == nil || want == nil {
			return nil, nil, outcome{}
		}
		if best == nil {
			best = got
		} else {
			for i := range best.Cells {
				for j, c := range got.Cells[i] {
					if a, m := best.Cells[i][j].Value, c.Value; m != nil && (a == nil || *m > *a) {
						best.Cells[i][j].Value = m
					}
				}
			}
		}
		pairs = nil
		for _, p := range slowPairs(best, want, gpus, f.opt.Floor) {
			if q := (p2p.Pair{A: min(p[0], p[1]), B: max(p[0], p[1])}); !slices.Contains(pairs, q) {
				pairs = append(pairs, q)
			}
		}
		if len(pairs) == 0 {
			break
		}
	}
	var worst *Figure
	for i := range gpus {
		for j := range gpus {
			a, w := best.Cells[i][j].Value, want.Cells[i][j].Value
			if i == j || a == nil || w == nil || *w <= 0 {
				continue
			}
			if r := *a / *w; worst == nil || r < worst.Ratio {
				worst = &Figure{BusBW: *a, Expected: *w, Ratio: r}
			}
		}
	}
	return worst, slowPairs(best, want, gpus, f.opt.Floor), outcome{}
}

// slowPairs lists the ordered pairs of gpus whose copies in got are under floor × want's.
func slowPairs(got, want *p2p.Matrix, gpus []int, floor float64) [][2]int {
	var slow [][2]int
	for i := range gpus {
		for j := range gpus {
			a, w := got.Cells[i][j].Value, want.Cells[i][j].Value
			if i != j && a != nil && w != nil && *w > 0 && *a < floor**w {
				slow = append(slow, [2]int{gpus[i], gpus[j]})
			}
		}
	}
	return slow
}

// railRound tests each rail (GPU k of every node, through its NIC alone) across the nodes good
// after their own tests, and hunts down what makes a rail fall short: a GPU that hangs, the NIC
// a bisection ends at. Every such node is tested on every rail, since a NIC that falls short on
// one rail says nothing of the node's NICs on the others; a node that failed since (a GPU that
// hung, an error, a process that left: what failed may be shared by its rails) is not, and the
// rail lists it as untested.
func (f *fleet) railRound() error {
	f.rep.Rounds++
	base := f.good()
	var off []string // NICs on no rail of the run's GPUs
	for _, c := range f.topo.Nodes[0].NICs {
		if !slices.ContainsFunc(f.nodes[0], func(g int) bool { return f.topo.NICOf(g) == c.ID }) {
			off = append(off, c.ID)
		}
	}
	if len(off) > 0 && !f.topo.OneDomain() {
		f.rep.NotTested = append(f.rep.NotTested, fmt.Sprintf("NIC%s %s (no GPU of the run on %s rail%s)", plural(len(off)), strings.Join(off, ", "), map[bool]string{true: "its", false: "their"}[len(off) == 1], plural(len(off))))
	}
	for k := range f.nodes[0] {
		nic := f.topo.NICOf(f.nodes[0][k])
		if nic == "" {
			continue
		}
		if f.topo.OneDomain() { // one NVLink domain: its NICs carry nothing between its GPUs
			f.rep.Rails = append(f.rep.Rails, Rail{Rail: k, NIC: nic, Status: Untested, Why: "one NVLink domain"})
			continue
		}
		env := map[string]string{"NCCL_IB_HCA": RailHCA(f.topo, f.nodes, k)}
		nic = strings.TrimPrefix(env["NCCL_IB_HCA"], "=") // every kind of node's name for it
		twin, err := f.opt.Open(env, true)
		if err != nil {
			return err
		}
		var b gpu.Backend
		if f.cross == nil {
			if b, err = f.opt.Open(env, false); err != nil {
				twin.Close()
				return err
			}
		}
		var set []int
		for _, n := range base {
			if f.rep.Nodes[n].Status != Failed && k < len(f.nodes[n]) && f.topo.NICOf(f.nodes[n][k]) != "" { // a node with a GPU on the rail
				set = append(set, n)
			}
		}
		rail := Rail{Rail: k, NIC: nic, Status: Untested, Why: "fewer than two nodes to test it across"}
		what := fmt.Sprintf("rail %d's all-reduce through %s", k, nic)
		test, done := f.crossTest(k, env, b, twin, what)
		hunt := f.hunt
		if f.sharedDomains() {
			hunt = f.huntPairs
		}
		first, found, untested := hunt(set, test)
		done()
		if b != nil {
			b.Close()
		}
		twin.Close()
		if first != nil {
			rail.Status, rail.Figure, rail.Why = first.status(), first.fig, ""
		}
		// Untested only now: the hunt leaves out the nodes whose GPU hung or whose process left.
		for n, host := range f.hosts {
			if !slices.Contains(set, n) || slices.Contains(untested, n) {
				rail.Untested = append(rail.Untested, host)
			}
		}
		f.name(found, what, Suspect{Kind: "nic", Rail: &k}, "falls short of what its rail should do", "fails its rail's test")
		f.rep.Rails = append(f.rep.Rails, rail)
	}
	return nil
}

// verdict is one test across nodes.
type verdict struct {
	ok  bool
	fig *Figure
	// drop lists the nodes to leave out and test again without: a GPU of theirs hung (and is
	// named), or their process left the run.
	drop []int
	left bool // processes left the run during the test: it says nothing of the hardware
	// hung: the test hung on more than half of its nodes, too many to name at once (a hung GPU
	// holds up every rank that waits on it); a bisection finds the node.
	hung bool
}

func (v *verdict) status() Status {
	switch {
	case v.ok:
		return Healthy
	case v.fig.Error != "":
		return Failed
	}
	return Degraded
}

// RailHCA is the NCCL_IB_HCA that pins rail k's tests to its NIC on every node: the NIC of each
// node's k-th GPU, by exact name, all of them where nodes of several kinds name theirs apart
// ("=mlx5_4,mlx5_10"); "" where no node's k-th GPU has a NIC.
func RailHCA(t *gpu.Topology, nodes [][]int, k int) string {
	var names []string
	for _, gpus := range nodes {
		if k >= 0 && k < len(gpus) {
			if nic := t.NICOf(gpus[k]); nic != "" && !slices.Contains(names, nic) {
				names = append(names, nic)
			}
		}
	}
	if names == nil {
		return ""
	}
	return "=" + strings.Join(names, ",")
}

// crossTest is a test across nodes: an all-reduce over GPU rail of each node (-1: every GPU of
// each) on b (across the processes when the run has them), set beside the same on twin. A hang
// whose ranks that did not finish are at most half of the test's nodes names their GPUs at once,
// and drops their nodes: the caller tests again without them, instead of waiting out the timeout
// at every step of a bisection, and one process and a launcher's run give the same verdict. A
// hang on more nodes is only a failed test: one hung GPU stalls every rank of its communicator
// (on NCCL, and on the simulator once another call follows), so those ranks say nothing of
// which GPU it was, and a bisection finds it. A hung kernel holds its GPUs, so after a hang the
// cluster is opened again with env, as each test of a launcher's run opens its own; done closes
// what was opened so (b is the caller's to close).
func (f *fleet) crossTest(rail int, env map[string]string, b, twin gpu.Backend, what string) (test func([]int) verdict, done func()) {
	own := b
	done = func() {
		if b != own && b != nil {
			b.Close()
		}
	}
	var reopen error // why the cluster could not be opened again after a hang
	test = func(nodes []int) verdict {
		var ords []int
		var owner [][2]int // per rank: its node, and its GPU's index on the node
		for _, n := range nodes {
			for l, g := range f.nodes[n] {
				if rail < 0 || l == rail {
					ords, owner = append(ords, g), append(owner, [2]int{n, l})
				}
			}
		}
		var o outcome
		switch {
		case f.cross != nil:
			o = f.crossRun(rail, nodes)
		case b == nil:
			f.rep.Tests++
			o.err = reopen
		default:
			if o = f.run(b, coll.AllReduce, ords, f.crossBytes(), false); o.hang != nil {
				done() // real GPUs open as the same backend: it stays open
				if b, reopen = f.opt.Open(env, false); reopen != nil {
					b = nil
				}
			}
		}
		v := verdict{fig: figure(o, f.expect(fmt.Sprint(what, nodes), twin, coll.AllReduce, ords, f.crossBytes()))}
		v.ok = !o.failed() && v.fig.Ratio >= f.opt.Floor
		for _, n := range nodes {
			if f.gone[n] {
				v.drop, v.left = append(v.drop, n), true
			}
		}
		if o.hang == nil {
			return v
		}
		hung := map[int][]int{} // per node, its GPUs that did not finish
		for _, r := range o.hang.Ranks {
			if r >= 0 && r < len(owner) && !slices.Contains(v.drop, owner[r][0]) {
				hung[owner[r][0]] = append(hung[owner[r][0]], owner[r][1])
			}
		}
		if len(hung) == 0 || 2*len(hung) > len(nodes) {
			v.hung = true
			return v
		}
		why := fmt.Sprintf("%s hung: %v", what, o.hang)
		for _, n := range slices.Sorted(maps.Keys(hung)) {
			v.drop = append(v.drop, n)
			f.bad[n] = true
			f.markNode(n, Failed, why)
			if len(hung[n]) > 1 { // one GPU that hangs holds up the others: which one cannot be told
				f.rep.Suspects = append(f.rep.Suspects, Suspect{Kind: "node", Host: f.hosts[n], Status: Failed,
					Why: why + " (a GPU that hangs holds up every rank waiting on it: which one hung cannot be told)"})
				continue
			}
			for _, l := range hung[n] {
				f.rep.Suspects = append(f.rep.Suspects, Suspect{Kind: "gpu", Host: f.hosts[n], GPU: &l, Status: Failed, Why: why})
			}
		}
		return v
	}
	return test, done
}

// crossRun runs a rail's all-reduce across the processes of nodes. A node whose process has left
// the run fails the test at once; one that leaves now is reported failed, and left out of the
// tests after it.
func (f *fleet) crossRun(rail int, nodes []int) outcome {
	var o outcome
	for _, n := range nodes {
		if f.gone[n] {
			o.err = fmt.Errorf("the process of %s left the run", f.hosts[n])
			return o
		}
	}
	f.rep.Tests++
	bw, err := f.cross(rail, nodes, f.crossBytes())
	var gone *GoneError
	switch {
	case errors.As(err, &gone):
		for n, why := range gone.Why {
			if !f.gone[n] {
				f.gone[n], f.bad[n] = true, true
				why = "its process left the run: " + why
				f.rep.Nodes[n].Status, f.rep.Nodes[n].Why = Failed, why
				f.rep.Suspects = append(f.rep.Suspects, Suspect{Kind: "node", Host: f.hosts[n], Status: Failed, Why: why})
			}
		}
		o.err = err
	case errors.As(err, &o.hang):
	case err != nil:
		o.err = err
	default:
		o.busbw, o.measured = bw, true
	}
	return o
}

// groupRound tests the good nodes together in groups of opt.Group (all their GPUs), and hunts
// down what makes a group fall short.
func (f *fleet) groupRound() {
	f.rep.Rounds++
	what := "an all-reduce across nodes"
	test, done := f.crossTest(-1, nil, f.b, f.twin, what)
	defer done()
	good := f.good()
	for start := 0; start < len(good); start += f.opt.Group {
		group := good[start:min(start+f.opt.Group, len(good))]
		if len(group) < 2 {
			break
		}
		_, found, _ := f.hunt(group, test)
		f.name(found, what, Suspect{Kind: "node"}, "falls short of what the nodes should do together", "fails an all-reduce across nodes")
	}
}

// name records what a hunt in test what found: each node marked bad, why (short or failed as the
// finding fell short or failed, after the NIC for a rail's), and a suspect like s on that node:
// for a rail, the node's own NIC of it (kinds of node may name theirs apart). A finding that hung
// is named as a hang whose rank is named at once: on a rail, the node's GPU of that rail.
func (f *fleet) name(found []finding, what string, s Suspect, short, failed string) {
	for _, x := range found {
		st, why := x.judge(what, f.opt.Floor)
		named, prefix := s, ""
		if s.Kind == "nic" {
			named.NIC = f.topo.NICOf(f.nodes[x.node][*s.Rail])
			prefix = fmt.Sprintf("NIC %s (rail %d) ", named.NIC, *s.Rail)
		}
		mark := prefix + short
		switch {
		case x.hung:
			mark = why
			if s.Rail != nil {
				g := *s.Rail
				named = Suspect{Kind: "gpu", GPU: &g}
			}
		case st == Failed:
			mark = prefix + failed
		}
		f.bad[x.node] = true
		f.markNode(x.node, st, mark)
		named.Host, named.Status, named.Why = f.hosts[x.node], st, why
		f.rep.Suspects = append(f.rep.Suspects, named)
	}
}

// good lists the nodes not found bad so far.
func (f *fleet) good() []int {
	var out []int
	for n := range f.nodes {
		if !f.bad[n] {
			out = append(out, n)
		}
	}
	return out
}

// markNode gives node n status s for why: a healthy node takes it, a degraded one found failed
// now takes the failure, and a node found bad for another reason as well lists both.
func (f *fleet) markNode(n int, s Status, why string) {
	node := &f.rep.Nodes[n]
	switch {
	case node.Status == Healthy || node.Status == Degraded && s == Failed:
		node.Status, node.Why = s, why
	case node.Status == s && !strings.Contains(node.Why, why):
		node.Why += "; " + why
	}
}

// hunt tests set and finds what makes it fail: the nodes a test drops (a GPU that hung, named
// already, or a process that left) are left out and the rest tested again; what falls short or
// fails otherwise is bisected, and a node the bisection finds hung is left out in the same way.
// A set in which the bisection finds no one has its test run again, up to Repeat times in all
// (one noisy test is no verdict), unless it hung. It returns the test that stands for the set
// (the first that dropped no node, unless it hung on a node found and left out after it, or a
// run again that passed; nil when fewer than two nodes were left to test), the nodes the
// bisections found, and the nodes left untested: dropped, found hung, or left alone.
func (f *fleet) hunt(set []int, test func([]int) verdict) (first *verdict, found []finding, untested []int) {
	runs := 0 // of the set's test since a bisection that found no one in it
	for len(set) >= 2 {
		v := test(set)
		if len(v.drop) > 0 {
			set, untested, runs = without(set, v.drop), append(untested, v.drop...), 0
			continue
		}
		if first == nil || first.hung || v.ok && runs > 0 {
			first = &v
		}
		if v.ok {
			break
		}
		if runs > 0 && !v.hung { // run again, and fell short again
			if runs++; runs < f.opt.Repeat {
				continue
			}
			break
		}
		b := f.bisect(set, test)
		found = append(found, b.found...)
		for _, x := range b.found {
			f.bad[x.node] = true // not to pad a later test of this hunt
		}
		if len(b.drop) > 0 {
			set, untested, runs = without(set, b.drop), append(untested, b.drop...), 0
			for _, x := range b.found {
				set = without(set, []int{x.node})
			}
			continue
		}
		if len(b.found) > 0 || v.hung {
			break
		}
		runs = 1
	}
	if len(set) == 1 {
		untested = append(untested, set...)
	}
	return first, found, untested
}

// sharedDomains reports whether an NVLink domain holds several nodes (GB200 NVL72 racks): a
// rail's test of nodes in one domain crosses none of their NICs, and one across domains only
// the NICs its rings enter and leave by, so no test of many nodes measures each NIC.
func (f *fleet) sharedDomains() bool {
	seen := map[int]bool{}
	for _, gpus := range f.nodes {
		d := f.topo.DomainOf(gpus[0])
		if seen[d] {
			return true
		}
		seen[d] = true
	}
	return false
}

// huntPairs is hunt for a rail whose NVLink domains hold several nodes: each node is tested with
// one node of another domain, the two alone, which the rail's traffic crosses by each one's NIC;
// a node left over (its domain holds more than the others) is tested beside a node a pair cleared.
// A pair that falls short or fails has each of its nodes tested beside a cleared node of another
// domain, Repeat times, and named if it falls short every time; with no cleared node, the pair is
// confirmed as it is, and both named. The verdict standing for the rail is the first pair that
// fell short or failed, else the slowest pair; nil when no two nodes of different domains were
// left to test. Nodes a test drops (a GPU that hung, a process that left) are left untested.
func (f *fleet) huntPairs(set []int, test func([]int) verdict) (first *verdict, found []finding, untested []int) {
	domain := func(n int) int { return f.topo.DomainOf(f.nodes[n][0]) }
	byDomain := map[int][]int{}
	for _, n := range set {
		byDomain[domain(n)] = append(byDomain[domain(n)], n)
	}
	var pairs [][]int
	var left []int
	for {
		ds := slices.Collect(maps.Keys(byDomain))
		slices.SortFunc(ds, func(a, b int) int { return cmp.Or(cmp.Compare(len(byDomain[b]), len(byDomain[a])), cmp.Compare(a, b)) })
		if len(ds) == 0 {
			break
		}
		if len(ds) == 1 {
			left = byDomain[ds[0]]
			break
		}
		a, b := byDomain[ds[0]][0], byDomain[ds[1]][0]
		pairs = append(pairs, []int{min(a, b), max(a, b)})
		for _, d := range ds[:2] {
			if byDomain[d] = byDomain[d][1:]; len(byDomain[d]) == 0 {
				delete(byDomain, d)
			}
		}
	}
	f.depth = max(f.depth, 1)
	cleared := map[int]bool{}
	var short [][]int
	stand := func(v verdict) {
		switch {
		case first == nil, first.ok && !v.ok, first.ok && v.ok && v.fig.Ratio < first.fig.Ratio:
			first = &v
		}
	}
	for _, p := range pairs {
		v := test(p)
		if len(v.drop) > 0 {
			untested = append(untested, v.drop...)
			left = append(left, without(p, v.drop)...)
			continue
		}
		stand(v)
		if v.ok {
			cleared[p[0]], cleared[p[1]] = true, true
		} else {
			short = append(short, p)
		}
	}
	// partner is a cleared node of another domain than n's, to test n beside.
	partner := func(n int) (int, bool) {
		for _, c := range set {
			if cleared[c] && domain(c) != domain(n) && !slices.Contains(untested, c) {
				return c, true
			}
		}
		return 0, false
	}
	// confirm tests nodes Repeat times, stopping at a pass or a hang; ok when every run failed.
	confirm := func(nodes []int) (finding, bool) {
		x := finding{node: nodes[0]}
		for range f.opt.Repeat {
			v := test(nodes)
			if len(v.drop) > 0 {
				untested = append(untested, v.drop...)
				return x, false
			}
			if v.ok {
				return x, false
			}
			stand(v)
			if x.count(v) {
				break
			}
		}
		f.confirmed[nodes[0]] = true
		return x, true
	}
	for _, n := range left {
		c, ok := partner(n)
		if !ok {
			untested = append(untested, n)
			continue
		}
		if x, bad := confirm([]int{n, c}); bad {
			found = append(found, x)
		} else if !slices.Contains(untested, n) {
			cleared[n] = true
		}
	}
	for _, p := range short {
		_, okA := partner(p[0])
		_, okB := partner(p[1])
		if !okA || !okB { // no node cleared to tell them apart: the pair as it is
			if x, bad := confirm(p); bad {
				x.pair = true
				for _, n := range p {
					x.node = n
					found = append(found, x)
				}
			}
			continue
		}
		for _, n := range p {
			c, _ := partner(n)
			if x, bad := confirm([]int{n, c}); bad {
				found = append(found, x)
			}
		}
	}
	return first, found, untested
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func without(set, drop []int) []int {
	return slices.DeleteFunc(slices.Clone(set), func(n int) bool { return slices.Contains(drop, n) })
}

// finding is a node a bisection names: its confirmations all failed, errs of them with an
// error, the first err; a hang is not run again.
type finding struct {
	node       int
	err        string
	errs, runs int
	hung       bool
	pair       bool // one of two nodes, the only two tested, which no test can tell apart
}

// count adds a run that fell short or failed to x; true when it hung, which ends the confirming
// (a hung GPU stays hung, and each wait costs the timeout).
func (x *finding) count(v verdict) bool {
	x.runs++
	if v.fig.Error != "" {
		x.errs++
		x.err = cmp.Or(x.err, v.fig.Error)
	}
	x.hung = v.hung
	return x.hung
}

// judge says what a finding in test what is: failed when a run of it failed (an error, a hang),
// degraded when it fell short every time.
func (x finding) judge(what string, floor float64) (Status, string) {
	with := "with this node, and at it without"
	if x.pair {
		with = "across this node and one other, the only two tested, which no test can tell apart"
	}
	if x.errs == 0 {
		return Degraded, fmt.Sprintf("%s is below %.0f%% of expected %s", what, 100*floor, with)
	}
	if !x.pair {
		with = "with this node, and passed without it"
	}
	switch {
	case x.hung:
		return Failed, fmt.Sprintf("%s hung %s: %s", what, with, x.err)
	case x.errs < x.runs:
		return Failed, fmt.Sprintf("%s failed in %d of %d runs and fell short in the others %s: %s", what, x.errs, x.runs, with, x.err)
	}
	return Failed, fmt.Sprintf("%s failed in %d of %d runs %s: %s", what, x.errs, x.runs, with, x.err)
}

// bisect finds the nodes of set, whose test failed, that make it fail. Each half is tested
// beside as many nodes cleared of suspicion as it has, where there are any (good nodes outside
// the set, nodes of the set a passed test cleared), and never beside a node not cleared: a test
// that fails then says the half holds a bad node, however many the set holds. A half that fails
// is split again; a half of one node waits, and is confirmed beside cleared nodes Repeat times,
// named only if it fails every time. Where no test has passed yet, pairs of the set's nodes are
// tried to clear some first. k bad nodes among n take O(k log n) tests.
func (f *fleet) bisect(set []int, test func([]int) verdict) *bisection {
	b := &bisection{f: f, set: set, inSet: map[int]bool{}, test: test, cleared: map[int]bool{}, failed: map[[2]int]bool{}}
	for _, n := range set {
		b.inSet[n] = true
	}
	if len(set) == 2 {
		b.failed[pair(set)] = true // the set's own test
	}
	b.walk(set, 1)
	b.resolve()
	return b
}

// bisection is one bisection's state.
type bisection struct {
	f       *fleet
	set     []int
	inSet   map[int]bool
	test    func([]int) verdict
	cleared map[int]bool    // nodes a passed test cleared
	failed  map[[2]int]bool // pairs of nodes that failed a test of their own
	pending []int           // nodes the halving left alone, to confirm
	found   []finding
	drop    []int // a test dropped these: the bisection stops, and the caller tests again without them
}

func (b *bisection) walk(part []int, depth int) {
	b.f.depth = max(b.f.depth, depth)
	for _, half := range [][]int{part[:len(part)/2], part[len(part)/2:]} {
		switch {
		case len(b.drop) > 0:
			return
		case len(half) == 1:
			b.pending = append(b.pending, half[0])
		case !b.try(b.padded(half)).ok:
			b.walk(half, depth+1)
		}
	}
}

// resolve confirms each node the halving left alone beside cleared nodes. Where no test has
// passed yet, pairs of those nodes are tried first, to clear some; a set of two, which nothing
// can tell apart, has both named if their test keeps failing. A node with no cleared node to be
// tested beside is not named: the tests cannot tell it from the others.
func (b *bisection) resolve() {
	if len(b.drop) > 0 {
		return
	}
	if len(b.trusted()) == 0 {
		if len(b.set) == 2 {
			if x, ok := b.confirm(b.set); ok {
				x.pair = true
				for _, n := range b.set {
					x.node = n
					b.found = append(b.found, x)
				}
			}
			return
		}
		b.clearSome()
	}
	for _, n := range b.pending {
		if len(b.drop) > 0 {
			return
		}
		if partners := b.padded([]int{n}); !b.cleared[n] && len(partners) > 1 {
			if x, ok := b.confirm(partners); ok {
				x.node = n
				b.found = append(b.found, x)
				if x.hung { // beside cleared nodes, the hang is n's: the set is tested again without it
					b.drop = []int{n}
				}
			}
		}
	}
}

// clearSome looks for two nodes that pass together when no test has passed yet: pairs of the
// nodes left alone not already failed together, neighbours first, then farther apart, at most
// twice as many tests as there are such nodes. A rail whose every NIC is slow (its switch) clears
// no one, and names no one.
func (b *bisection) clearSome() {
	p := b.pending
	budget := 2 * len(p)
	for d := 1; d < len(p); d++ {
		for i := 0; i+d < len(p); i++ {
			if budget == 0 || len(b.drop) > 0 {
				return
			}
			if nodes := []int{p[i], p[i+d]}; !b.failed[pair(nodes)] {
				budget--
				if b.try(nodes).ok {
					return
				}
			}
		}
	}
}

// confirm tests nodes Repeat times, stopping at a pass (which clears them) or a hang (a hung GPU
// stays hung, and each wait costs the timeout): it reports the runs, and ok when every one failed.
func (b *bisection) confirm(nodes []int) (finding, bool) {
	x := finding{node: nodes[0]}
	for range b.f.opt.Repeat {
		v := b.try(nodes)
		if v.ok || len(b.drop) > 0 {
			return x, false
		}
		if x.count(v) {
			break
		}
	}
	b.f.confirmed[nodes[0]] = true
	return x, true
}

// try runs the test on nodes: a pass clears every one of them; a failure of two nodes alone is
// remembered; a test that drops nodes stops the bisection.
func (b *bisection) try(nodes []int) verdict {
	v := b.test(nodes)
	switch {
	case len(v.drop) > 0:
		b.drop = v.drop
	case v.ok:
		for _, n := range nodes {
			b.cleared[n] = true
		}
	case len(nodes) == 2:
		b.failed[pair(nodes)] = true
	}
	return v
}

// trusted lists the nodes a test may be padded with, the least suspect first: good nodes outside
// the set, then the set's nodes a passed test cleared.
func (b *bisection) trusted() []int {
	var out []int
	for _, n := range b.f.good() {
		if !b.inSet[n] {
			out = append(out, n)
		}
	}
	for _, n := range b.set {
		if b.cleared[n] {
			out = append(out, n)
		}
	}
	return out
}

// padded is part beside as many trusted nodes as it has, or as there are.
func (b *bisection) padded(part []int) []int {
	out := slices.Clone(part)
	for _, n := range b.trusted() {
		if len(out) == 2*len(part) {
			break
		}
		if !slices.Contains(part, n) {
			out = append(out, n)
		}
	}
	return out
}

func pair(nodes []int) [2]int { return [2]int{min(nodes[0], nodes[1]), max(nodes[0], nodes[1])} }

// outlierBelow is the robust outlier bound of the ratios: median - 5 × 1.4826 × MAD (the MAD
// scaled to a normal distribution's standard deviation), and no higher than 0.9 × the median, so
// that a fleet whose figures barely differ names no one.
func outlierBelow(v []float64) float64 {
	if len(v) < 3 {
		return 0
	}
	m := median(v)
	dev := make([]float64, len(v))
	for i, x := range v {
		dev[i] = math.Abs(x - m)
	}
	return math.Min(m-5*1.4826*median(dev), 0.9*m)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// Summary is one line per suspect, for the table and stderr.
func (r *Report) Summary() []string {
	var out []string
	for _, s := range r.Suspects {
		what := "node " + s.Host
		switch {
		case s.GPU != nil:
			what = fmt.Sprintf("GPU %d of %s", *s.GPU, s.Host)
		case s.NIC != "":
			what = fmt.Sprintf("NIC %s of %s (rail %d)", s.NIC, s.Host, *s.Rail)
		}
		out = append(out, fmt.Sprintf("%s %s: %s", what, strings.ToUpper(string(s.Status)), s.Why))
	}
	return out
}

// Percent is a ratio in whole percent, rounded down, so that a figure under a floor of 75% never
// reads 75% (the millionth of a percent forgives a ratio of 1 computed as 0.99999999).
func Percent(ratio float64) float64 { return math.Floor(100*ratio + 1e-6) }
