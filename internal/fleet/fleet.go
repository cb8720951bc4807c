// Package fleet finds the bad node, GPU, NIC or link of a cluster: each node on its own, each
// rail across the nodes, and the nodes together by group testing, every figure set beside what
// the machine should do (docs/fleet.md). It sees the cluster only through backends.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
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
}

// Rail is one rail's test across the nodes.
type Rail struct {
	Rail   int     `json:"rail"`
	NIC    string  `json:"nic"`
	Status Status  `json:"status"`
	Figure *Figure `json:"allreduce"`
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
	// Interrupted: the run was stopped (its context ended); the report holds the nodes and the
	// rounds that finished before, and nothing of the one under way.
	Interrupted bool `json:"interrupted,omitempty"`
}

// Healthy reports whether every node is.
func (r *Report) Healthy() bool {
	for _, n := range r.Nodes {
		if n.Status != Healthy {
			return false
		}
	}
	return len(r.Suspects) == 0
}

// The sizes tested by default: large enough that bandwidth sets the time; and the size whose
// data each node's all-reduce checks (a simulator backs little memory).
const (
	defaultBytes = 256 << 20
	checkBytes   = 256 << 10
)

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
	p2pWant   map[string]*p2p.Matrix // the fault-free machine's P2P matrix, by node shape
	cross     CrossTest              // the tests across nodes, run by other processes (Across)
	gone      map[int]bool           // nodes whose process left the run (Across)
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
	f.progress("%d nodes of %d GPUs: each node on its own", len(f.nodes), len(f.nodes[0]))
	f.nodeRound()
	if f.ctx.Err() != nil {
		f.rep.Interrupted = true
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
	sort.SliceStable(f.rep.Suspects, func(i, j int) bool { return f.rep.Suspects[i].Host < f.rep.Suspects[j].Host })
	return f.rep, f.ctx.Err()
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
}

func (o outcome) failed() bool { return o.hang != nil || o.err != nil || len(o.wrong) > 0 }

// run times collective c over the GPUs ords on b at size bytes, checking data at checkBytes first
// when check is set.
func (f *fleet) run(b gpu.Backend, c *coll.Collective, ords []int, bytes int64, check bool) outcome {
	f.rep.Tests++
	w := coll.Sweep{Min: bytes, Max: bytes, Factor: 2}
	if check && bytes > checkBytes {
		w = coll.Sweep{Min: checkBytes, Max: bytes, Factor: bytes / checkBytes}
	}
	s, err := coll.Run(f.ctx, b, coll.Options{Coll: c, Sweep: w, DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum},
		Iters: 2, Check: 1, Average: 1, Timeout: f.opt.Timeout, Ordinals: ords})
	var o outcome
	if errors.As(err, &o.hang) {
		return o
	}
	if err != nil {
		o.err = err
		return o
	}
	for _, r := range s.Results {
		for rank, n := range r.OutOfPlace.WrongByRank {
			if n > 0 && !slices.Contains(o.wrong, rank) {
				o.wrong = append(o.wrong, rank)
			}
		}
		if r.Size == bytes {
			o.busbw, o.measured = r.OutOfPlace.BusBW, true
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
		shape := fmt.Sprintf("node %d %s", len(gpus), gpuName(f.topo, gpus[0]))
		for _, c := range []*coll.Collective{coll.AllReduce, coll.AllToAll} {
			if len(gpus) < 2 {
				break // nothing moves between one GPU and itself: its rail round tests its NIC
			}
			o := f.run(f.b, c, gpus, f.opt.Bytes, true)
			runs, fails := 1, 0
			if o.failed() {
				fails++
				for range f.opt.Repeat - 1 {
					if o.hang != nil {
						break // a hung GPU stays hung
					}
					runs++
					if again := f.run(f.b, c, gpus, f.opt.Bytes, true); again.failed() {
						fails++
					}
				}
			}
			fig := figure(o, f.expect(shape+c.Name, f.twin, c, f.nodes[0], f.opt.Bytes))
			if c == coll.AllReduce {
				node.AllReduce = fig
			} else {
				node.AllToAll = fig
			}
			if o.failed() && node.Status != Failed {
				node.Status, node.Why = Failed, f.failure(n, c, o, fails, runs)
			}
			if o.hang != nil {
				break // a hung GPU stays hung: the node's other tests would only hang too
			}
		}
		if node.Status == Healthy {
			node.P2P, f.slow[n] = f.p2pNode(gpus, shape)
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
				node.Status, node.Why = Degraded, fmt.Sprintf("%s %.1f GB/s busbw, %.0f%% of the expected %.1f", c, fig.BusBW, 100*fig.Ratio, fig.Expected)
			case fig.Ratio < low:
				node.Status, node.Why = Degraded, fmt.Sprintf("%s %.1f GB/s busbw, an outlier among the nodes (%.0f%% of expected, the fleet's median %.0f%%)", c, fig.BusBW, 100*fig.Ratio, 100*median(ratios))
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

func gpuName(t *gpu.Topology, g int) string {
	x, _ := t.GPU(g)
	return x.Name
}

// failure names what failed on node n, and records the suspect: the GPU that hung or whose
// output was wrong, or the node when the error names none.
func (f *fleet) failure(n int, c *coll.Collective, o outcome, fails, runs int) string {
	var ranks []int
	var why string
	switch {
	case o.hang != nil:
		ranks, why = o.hang.Ranks, fmt.Sprintf("%s hung: %v", c.Name, o.hang)
	case len(o.wrong) > 0:
		ranks, why = o.wrong, fmt.Sprintf("%s delivered wrong data", c.Name)
	default:
		why = fmt.Sprintf("%s failed in %d of %d runs: %v", c.Name, fails, runs, o.err)
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

// p2pNode measures a node's unidirectional P2P copies and sets them beside the fault-free
// machine's (measured once per node shape): the slowest pair's figure, and the ordered pairs
// under the floor. Nil, nil where the backends cannot copy.
func (f *fleet) p2pNode(gpus []int, shape string) (*Figure, [][2]int) {
	b, okB := f.b.(p2p.Backend)
	t, okT := f.twin.(p2p.Backend)
	if !okB || !okT || len(gpus) < 2 {
		return nil, nil
	}
	opt := p2p.Options{Size: min(64<<20, f.opt.Bytes), Repeat: 1, Samples: 1, Devices: gpus, Timeout: f.opt.Timeout}
	uni := func(r *p2p.Result, err error) *p2p.Matrix {
		if err != nil {
			return nil
		}
		return r.Matrix("uni_enabled")
	}
	want, ok := f.p2pWant[shape]
	if !ok {
		want = uni(p2p.Run(f.ctx, t, p2p.Options{Size: opt.Size, Repeat: 1, Samples: 1, Devices: f.nodes[0]}))
		f.p2pWant[shape] = want
	}
	f.rep.Tests++
	got := uni(p2p.Run(f.ctx, b, opt))
	if got == nil || want == nil {
		return nil, nil
	}
	var slow [][2]int
	var worst *Figure
	for i := range gpus {
		for j := range gpus {
			a, w := got.Cells[i][j].Value, want.Cells[i][j].Value
			if i == j || a == nil || w == nil || *w <= 0 {
				continue
			}
			if r := *a / *w; worst == nil || r < worst.Ratio {
				worst = &Figure{BusBW: *a, Expected: *w, Ratio: r}
			}
			if *a < f.opt.Floor**w {
				slow = append(slow, [2]int{gpus[i], gpus[j]})
			}
		}
	}
	return worst, slow
}

// railRound tests each rail (GPU k of every node, through its NIC alone) across the nodes still
// good, and bisects a rail that falls short to the node whose NIC it is.
func (f *fleet) railRound() error {
	f.rep.Rounds++
	for k := range f.nodes[0] {
		nic := f.topo.NICOf(f.nodes[0][k])
		if nic == "" {
			continue
		}
		env := map[string]string{"NCCL_IB_HCA": "=" + nic}
		twin, err := f.opt.Open(env, true)
		if err != nil {
			return err
		}
		ords := func(nodes []int) []int {
			var out []int
			for _, n := range nodes {
				if k < len(f.nodes[n]) {
					out = append(out, f.nodes[n][k])
				}
			}
			return out
		}
		run := func(nodes []int) outcome { return f.crossRun(k, nodes) }
		var b gpu.Backend
		if f.cross == nil {
			if b, err = f.opt.Open(env, false); err != nil {
				twin.Close()
				return err
			}
			run = func(nodes []int) outcome { return f.run(b, coll.AllReduce, ords(nodes), f.crossBytes(), false) }
		}
		rail := Rail{Rail: k, NIC: nic, Status: Healthy}
		test := func(nodes []int) (bool, *Figure) {
			o := run(nodes)
			fig := figure(o, f.expect(fmt.Sprintf("rail %d %v", k, nodes), twin, coll.AllReduce, ords(nodes), f.crossBytes()))
			return !o.failed() && fig.Ratio >= f.opt.Floor, fig
		}
		good := f.good()
		if len(good) >= 2 {
			lost := len(f.gone)
			ok, fig := test(good)
			rail.Figure = fig
			if !ok {
				rail.Status = Degraded
				named := 0
				for _, n := range f.bisect(good, test) {
					if f.gone[n] { // its process left the run: reported as such, not as its NIC
						continue
					}
					named++
					k := k
					f.bad[n] = true
					f.markNode(n, Degraded, fmt.Sprintf("NIC %s (rail %d) falls short of what its rail should do", nic, k))
					f.rep.Suspects = append(f.rep.Suspects, Suspect{Kind: "nic", Host: f.hosts[n], NIC: nic, Rail: &k, Status: Degraded,
						Why: fmt.Sprintf("rail %d's all-reduce through %s is below %.0f%% of expected with this node, and at it without", k, nic, 100*f.opt.Floor)})
				}
				// A process that left during the rail's tests failed them: the rail is judged
				// again without it.
				if again := f.good(); named == 0 && len(f.gone) > lost && len(again) >= 2 {
					if ok, fig := test(again); ok {
						rail.Status, rail.Figure = Healthy, fig
					}
				}
			}
		}
		f.rep.Rails = append(f.rep.Rails, rail)
		if b != nil {
			b.Close()
		}
		twin.Close()
	}
	return nil
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

// groupRound tests the good nodes together in groups of opt.Group (all their GPUs), and bisects
// a group that falls short.
func (f *fleet) groupRound() {
	f.rep.Rounds++
	test := func(nodes []int) (bool, *Figure) {
		var ords []int
		for _, n := range nodes {
			ords = append(ords, f.nodes[n]...)
		}
		var o outcome
		if f.cross != nil {
			o = f.crossRun(-1, nodes)
		} else {
			o = f.run(f.b, coll.AllReduce, ords, f.crossBytes(), false)
		}
		fig := figure(o, f.expect(fmt.Sprint("group ", nodes), f.twin, coll.AllReduce, ords, f.crossBytes()))
		return !o.failed() && fig.Ratio >= f.opt.Floor, fig
	}
	good := f.good()
	for start := 0; start < len(good); start += f.opt.Group {
		group := good[start:min(start+f.opt.Group, len(good))]
		if len(group) < 2 {
			break
		}
		if ok, _ := test(group); ok {
			continue
		}
		for _, n := range f.bisect(group, test) {
			if f.gone[n] {
				continue
			}
			f.bad[n] = true
			f.markNode(n, Degraded, "falls short of what the nodes should do together")
			f.rep.Suspects = append(f.rep.Suspects, Suspect{Kind: "node", Host: f.hosts[n], Status: Degraded,
				Why: fmt.Sprintf("an all-reduce across nodes is below %.0f%% of expected with this node, and at it without", 100*f.opt.Floor)})
		}
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

func (f *fleet) markNode(n int, s Status, why string) {
	node := &f.rep.Nodes[n]
	if node.Status == Healthy {
		node.Status, node.Why = s, why
	}
}

// bisect finds the nodes of set that make test fail: each half is tested beside as many nodes
// cleared of suspicion as it has (padded), so that a half of one node is still a test across
// nodes; a half that fails is split again. A node found is confirmed beside cleared nodes Repeat
// times before it is named (confirm).
func (f *fleet) bisect(set []int, test func([]int) (bool, *Figure)) []int {
	b := &bisection{f: f, set: set, cleared: map[int]bool{}, test: test}
	var walk func(part []int, depth int)
	walk = func(part []int, depth int) {
		f.depth = max(f.depth, depth)
		if len(part) == 1 {
			if b.confirm(part[0]) {
				b.found = append(b.found, part[0])
			}
			return
		}
		for _, half := range [][]int{part[:len(part)/2], part[len(part)/2:]} {
			if !b.try(b.padded(half, part)) {
				walk(half, depth+1)
			}
		}
	}
	walk(set, 1)
	return b.found
}

// bisection is one bisection's state: the nodes a passed test cleared, and those found.
type bisection struct {
	f       *fleet
	set     []int
	cleared map[int]bool
	found   []int
	test    func([]int) (bool, *Figure)
}

// try runs test on nodes; a pass clears every one of them.
func (b *bisection) try(nodes []int) bool {
	ok, _ := b.test(nodes)
	if ok {
		for _, n := range nodes {
			b.cleared[n] = true
		}
	}
	return ok
}

// padded is part beside as many other nodes (at least one), the least suspect first: good nodes
// outside the set, nodes a passed test cleared, the set's nodes outside avoid (the part that
// failed: part's sibling is as suspect as part) and not found, and lacking those, the set's
// other nodes.
func (b *bisection) padded(part, avoid []int) []int {
	out := slices.Clone(part)
	want := len(part) + max(len(part), 1)
	add := func(ok func(n int) bool, from []int) {
		for _, n := range from {
			if len(out) < want && ok(n) && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	add(func(n int) bool { return !slices.Contains(b.set, n) }, b.f.good())
	add(func(n int) bool { return b.cleared[n] }, b.set)
	add(func(n int) bool { return !slices.Contains(avoid, n) && !slices.Contains(b.found, n) }, b.set)
	add(func(n int) bool { return !slices.Contains(b.found, n) }, b.set)
	add(func(int) bool { return true }, b.set)
	return out
}

// confirm tests node n beside cleared nodes Repeat times: a suspect only if it fails every time.
// Where no node is cleared yet, the set's other nodes are tested together first, to clear them;
// if that fails too, n is not named (the test cannot tell n from the others), unless the set is
// two nodes, which nothing can tell apart: both are named.
func (b *bisection) confirm(n int) bool {
	partners := b.padded([]int{n}, nil)
	if !b.trusted(partners[1:]) && len(b.set) > 2 {
		var others []int
		for _, m := range b.set {
			if m != n && !slices.Contains(b.found, m) {
				others = append(others, m)
			}
		}
		if len(others) >= 2 {
			b.try(others)
		}
		if partners = b.padded([]int{n}, nil); !b.trusted(partners[1:]) {
			return false
		}
	}
	for range b.f.opt.Repeat {
		if b.try(partners) {
			return false
		}
	}
	b.f.confirmed[n] = true
	return true
}

// trusted reports whether any of nodes is cleared or a good node outside the set.
func (b *bisection) trusted(nodes []int) bool {
	for _, m := range nodes {
		if b.cleared[m] || !slices.Contains(b.set, m) {
			return true
		}
	}
	return false
}

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
