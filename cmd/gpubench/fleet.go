package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/diag"
	"github.com/gpubench/gpubench/internal/fleet"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/input"
	"github.com/gpubench/gpubench/internal/launch"
	"github.com/gpubench/gpubench/internal/sim"
)

type fleetFlags struct {
	floor       float64
	repeat      int
	group       int
	timeout     float64
	drainFile   string
	metricsFile string
	size        string
	launch      launchFlags
}

func newFleetCmd(e *env, g *globals) *cobra.Command {
	f := &fleetFlags{}
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Find the bad node, GPU, NIC or link in a cluster: per node, per rail, then across nodes in few rounds",
		Long: "fleet tests every node on its own (a quick diag on real GPUs, an all-reduce with its data\n" +
			"checked, an all-to-all and every P2P pair), each rail (GPU k of every node, through its NIC\n" +
			"alone) across the nodes, then the nodes together in groups, bisecting what falls short and\n" +
			"confirming each suspect beside nodes found good. Every figure is set beside what the simulator\n" +
			"gives for the same machine without faults, and beside the other nodes. Verdicts per node, GPU\n" +
			"and NIC: healthy, degraded, failed, untestable. Exit 3 when any is not healthy. --drain-file\n" +
			"writes the Slurm and Kubernetes commands that would take the suspects out; gpubench never runs\n" +
			"them. Under a launcher, one process per node (srun --ntasks-per-node=1): each tests its node,\n" +
			"rank 0 runs the rails and groups across the processes and reports; a node that dies is\n" +
			"reported failed and the others finish (docs/fleet.md).",
		Example: "  gpubench fleet --backend sim --topology dgx-h100 --nodes 512 --sim-fault slow-nic=dgx-h100-317/mlx5_3,0.4\n" +
			"  gpubench fleet --backend sim --nodes 64 --drain-file drain.sh --output json\n" +
			"  srun --ntasks-per-node=1 gpubench fleet --drain-file drain.sh   # real nodes, one process each",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd, e, g) },
	}
	fl := cmd.Flags()
	fl.Float64Var(&f.floor, "floor", 0.75, "fraction of the expected busbw a test must reach")
	fl.IntVar(&f.repeat, "repeat", 3, "times a suspect is confirmed, and a failed test run again, before a verdict")
	fl.IntVar(&f.group, "group", 16, "nodes per group in the round across nodes")
	fl.Float64VarP(&f.timeout, "timeout", "T", 10, "seconds to wait for the GPUs in one test before calling it a hang")
	fl.StringVar(&f.drainFile, "drain-file", "", "write the scontrol and kubectl commands that would drain the suspects to FILE (never run)")
	fl.StringVar(&f.size, "size", "256MiB", "the size each node's tests time; the tests across nodes time a quarter of it")
	f.launch.add(cmd)
	fl.StringVar(&f.metricsFile, "metrics-file", "", "write per-node Prometheus metrics to FILE (node_exporter's textfile format)")
	return cmd
}

func (f *fleetFlags) run(cmd *cobra.Command, e *env, g *globals) error {
	if err := g.validate("auto", "cuda", "sim"); err != nil {
		return err
	}
	switch {
	case g.output != "table" && g.output != "json" && g.output != "markdown":
		return usageErr("unknown --output %q for fleet: use table, json or markdown", g.output)
	case !(f.floor > 0 && f.floor <= 1):
		return usageErr("invalid --floor %v: give a fraction of the expected busbw in (0, 1], e.g. 0.75", f.floor)
	case f.repeat < 1 || f.repeat > 100:
		return usageErr("invalid --repeat %d: confirm each suspect 1 to 100 times", f.repeat)
	case f.group < 2 || f.group > 4096:
		return usageErr("invalid --group %d: give 2 to 4096 nodes per group", f.group)
	case !(f.timeout > 0 && f.timeout <= 3600):
		return usageErr("invalid --timeout %v: give seconds, above 0 and at most 3600", f.timeout)
	}
	bytes, err := coll.ParseSize(f.size)
	if err != nil {
		return usageErr("invalid --size %q: %v; give 1KiB to 1TiB, e.g. 256MiB", f.size, err)
	}
	if bytes < 1<<10 || bytes > 1<<40 {
		return usageErr("invalid --size %q: give 1KiB to 1TiB, e.g. 256MiB", f.size)
	}
	if err := refuseBlindFaults(g.faults, map[string]string{"xid": "fleet reads no XID events (burnin does)"},
		"hang, corrupt, slow-link, slow-nic, slow-node or flaky-link"); err != nil {
		return err
	}
	if f.drainFile != "" && f.metricsFile != "" && sameFile(f.drainFile, f.metricsFile) {
		return usageErr("--drain-file %s and --metrics-file %s name the same file: give each its own file", input.Safe(f.drainFile), input.Safe(f.metricsFile))
	}
	for _, o := range []struct{ flag, path string }{{"--drain-file", f.drainFile}, {"--metrics-file", f.metricsFile}} {
		if err := checkOutFile(o.flag, o.path, g.topology); err != nil {
			return err
		}
	}
	proc, err := f.launch.process()
	if err != nil {
		return err
	}
	if proc.Notice != "" {
		fmt.Fprintf(e.stderr, "gpubench: %s\n", proc.Notice)
	}
	if g.backend == "cuda" { // before loading CUDA: the launch is wrong whatever the machine has
		if err := onePerHost(proc); err != nil {
			return err
		}
	}
	open, simulated, err := f.opener(cmd, e, g, proc)
	var broken error
	if ee := (*exitError)(nil); errors.As(err, &ee) && ee.code == exitNoGPU && proc.Multi() && proc.Rank != 0 {
		// Under a launcher, a node whose GPU libraries do not load is reported untestable, with
		// what its quick diag finds, and the others go on. Rank 0 cannot be spared: it makes the
		// communicators the tests across nodes join.
		broken, err = err, nil
		open = func(map[string]string, bool) (gpu.Backend, error) { return nil, broken }
	}
	if err != nil {
		return err
	}
	if proc.Rank == 0 { // the expected figures are the simulator's, on real GPUs too
		unmodelledNotice(e, ncclEnv())
	}
	opt := fleet.Options{Open: open, Floor: f.floor, Repeat: f.repeat, Group: f.group, Timeout: time.Duration(f.timeout * float64(time.Second)), Bytes: bytes}
	if !simulated { // a simulated node has no hardware of its own to check
		opt.Diag = func() ([]string, []string) { return quickDiag(cmd, g) }
		opt.Host, _ = os.Hostname()
	}
	if e.progress {
		opt.Progress = func(s string) { fmt.Fprintf(e.stderr, "gpubench: fleet: %s\n", s) }
	}
	var rep *fleet.Report
	if proc.Multi() {
		rep, err = f.acrossProcesses(cmd, e, g, proc, opt, simulated, broken)
		if err != nil {
			return err
		}
		if proc.Rank != 0 { // rank 0 reports for every node
			e = &env{stdout: io.Discard, stderr: e.stderr, pid: e.pid, now: e.now, version: e.version}
			f.drainFile, f.metricsFile = "", ""
		}
	} else if rep, err = fleet.Run(cmd.Context(), opt); errors.Is(err, fleet.ErrSize) {
		return usageErr("invalid --size %s: %s", input.Safe(f.size), strings.TrimPrefix(err.Error(), fleet.ErrSize.Error()+": "))
	} else if err != nil && (rep == nil || !rep.Interrupted) {
		return runtimeErr(err)
	}
	// An interrupted run reports what finished, then exits as interrupted. The report goes first:
	// a file that cannot be written then loses nothing.
	stopped := err
	if err := writeFleet(e.stdout, g.output, rep); err != nil {
		return runtimeErr(err)
	}
	if f.drainFile != "" {
		if err := writeAtomic(f.drainFile, drainCommands(rep)); err != nil {
			return runtimeErr(fmt.Errorf("cannot write --drain-file %s: %v", input.Safe(f.drainFile), err))
		}
	}
	if f.metricsFile != "" {
		if err := writeFleetMetrics(f.metricsFile, rep); err != nil {
			return runtimeErr(fmt.Errorf("cannot write --metrics-file %s: %v", input.Safe(f.metricsFile), err))
		}
	}
	if stopped != nil {
		return runtimeErr(stopped)
	}
	if !rep.Healthy() {
		if len(rep.Suspects) == 0 { // a rail fell short, and its bisection could tell no node from the others
			var rails []string
			for _, r := range rep.Rails {
				if r.Status != fleet.Healthy && r.Status != fleet.Untested {
					rails = append(rails, railLine(r))
				}
			}
			return &exitError{code: exitCheck, err: fmt.Errorf("fleet: no suspect named, but %s", strings.Join(rails, "; "))}
		}
		return &exitError{code: exitCheck, err: fmt.Errorf("fleet: %d suspect%s: %s", len(rep.Suspects), plural(len(rep.Suspects)), strings.Join(rep.Summary(), "; "))}
	}
	return nil
}

// quickDiag is `gpubench diag --quick` of this machine, as fleet runs it on each node it tests
// on its own: its failed checks, the hardware's apart from the rest.
func quickDiag(cmd *cobra.Command, g *globals) (hw, other []string) {
	o := diag.Options{Env: diagEnviron(), Quick: true, Context: cmd.Context()}
	var b gpu.Backend
	o.CUDA, o.NCCL, b, o.BackendErr = diag.OpenLibraries(g.cudaLib, g.ncclLib)
	if b != nil {
		defer b.Close()
	}
	return diag.Run(o).Failures()
}

// opener returns how the fleet opens its cluster: on the simulator, the topology with the run's
// faults, or without them for the expected figures; on real GPUs, this machine, and the
// simulator of it (as --expect finds it) for the expected figures.
//
// Under a launcher whose processes are not one per node of the simulated topology, --backend
// auto does not fall back to the simulator when the GPU libraries do not load: the run is on
// real GPUs, and that node is untestable.
func (f *fleetFlags) opener(cmd *cobra.Command, e *env, g *globals, proc launch.Process) (open func(map[string]string, bool) (gpu.Backend, error), simulated bool, err error) {
	opens := g
	if proc.Multi() && g.backend == "auto" {
		if t, err := g.loadTopology(); err != nil || len(t.Nodes) != proc.Size {
			real := *g
			real.backend = "cuda"
			opens = &real
		}
	}
	b, _, err := opens.openColl(e)
	if err != nil {
		return nil, false, err
	}
	sb, simulated := b.(*sim.Backend)
	if simulated {
		sb.Close()
		capBytes, _ := parseCap(g.dataCap) // openColl checked it
		var faults []sim.Fault
		for _, s := range g.faults {
			x, _ := sim.ParseFault(s) // and these
			faults = append(faults, x)
		}
		return func(env map[string]string, expected bool) (gpu.Backend, error) {
			t, err := g.loadTopology()
			if err != nil {
				return nil, err
			}
			all := ncclEnv()
			maps.Copy(all, env)
			o := sim.Options{DataCap: capBytes, Env: all}
			if !expected {
				o.Faults, o.Jitter, o.Seed = faults, g.jitter, g.seed
			}
			return sim.New(t, o)
		}, true, nil
	}
	t, source, err := expectTopology(cmd, g, false, len(b.Devices()))
	if err != nil {
		b.Close()
		return nil, false, err
	}
	if t == nil {
		b.Close()
		return nil, false, usageErr("fleet sets every figure beside what the machine should do, and %s: give --topology FILE", source)
	}
	return func(env map[string]string, expected bool) (gpu.Backend, error) {
		if expected {
			return sim.New(t, sim.Options{Env: ncclEnv()})
		}
		if len(env) > 0 {
			return nil, fmt.Errorf("fleet: NCCL_* variables are read when NCCL loads: one machine has no rails to pin")
		}
		return b, nil
	}, false, nil
}

func writeFleet(w io.Writer, format string, rep *fleet.Report) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case "markdown":
		nodes := fmt.Sprint(len(rep.Nodes))
		if len(rep.NotReached) > 0 {
			nodes = fmt.Sprintf("%d of %d", len(rep.Nodes), len(rep.Nodes)+len(rep.NotReached))
		}
		fmt.Fprintf(w, "**gpubench fleet**: %s nodes, %d tests in %d rounds, floor %.0f%% of expected\n\n", nodes, rep.Tests, rep.Rounds, 100*rep.Floor)
		if rep.Interrupted {
			fmt.Fprint(w, "Stopped early (interrupted): the nodes and rounds that finished, nothing of the one under way.\n\n")
		}
		fmt.Fprintln(w, "| host | status | all-reduce (% of expected) | all-to-all (% of expected) | slowest P2P pair (% of expected) | why |\n|---|---|---:|---:|---:|---|")
		for _, n := range rep.Nodes {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", n.Host, n.Status, pct(n.AllReduce), pct(n.AllToAll), pct(n.P2P), n.Why)
		}
		fmt.Fprintln(w)
		for _, r := range rep.Rails {
			fmt.Fprintf(w, "- %s\n", railLine(r))
		}
		for _, n := range rep.Nodes {
			if len(n.Diag) > 0 {
				fmt.Fprintf(w, "- diag on %s: %s\n", n.Host, strings.Join(n.Diag, "; "))
			}
		}
		if rep.Interrupted {
			fmt.Fprintf(w, "- %s\n", interruptedLine(rep))
		} else if rep.Healthy() {
			fmt.Fprintf(w, "- %s\n", healthyLine(rep))
		} else if len(rep.NotTested) > 0 {
			fmt.Fprintf(w, "- not tested: %s\n", strings.Join(rep.NotTested, "; "))
		}
		for _, s := range rep.Summary() {
			fmt.Fprintf(w, "- %s\n", s)
		}
		return nil
	case "table":
		nodes := fmt.Sprintf("%d node%s", len(rep.Nodes), plural(len(rep.Nodes)))
		if len(rep.NotReached) > 0 {
			nodes = fmt.Sprintf("%d of %d nodes", len(rep.Nodes), len(rep.Nodes)+len(rep.NotReached))
		}
		fmt.Fprintf(w, "# gpubench fleet: %s; %d test%s in %d round%s; floor %.0f%% of expected\n", nodes, rep.Tests, plural(rep.Tests), rep.Rounds, plural(rep.Rounds), 100*rep.Floor)
		if rep.Interrupted {
			fmt.Fprintln(w, "# Stopped early (interrupted): the nodes and rounds that finished, nothing of the one under way")
		}
		fmt.Fprintf(w, "%-20s  %-10s  %10s  %10s  %10s  %s\n", "host", "status", "allreduce", "alltoall", "p2p", "why")
		for _, n := range rep.Nodes {
			fmt.Fprintf(w, "%-20s  %-10s  %10s  %10s  %10s  %s\n", n.Host, n.Status, pct(n.AllReduce), pct(n.AllToAll), pct(n.P2P), n.Why)
		}
		for _, r := range rep.Rails {
			fmt.Fprintf(w, "# %s\n", railLine(r))
		}
		for _, n := range rep.Nodes {
			if len(n.Diag) > 0 {
				fmt.Fprintf(w, "# diag on %s: %s\n", n.Host, strings.Join(n.Diag, "; "))
			}
		}
		if rep.Interrupted {
			fmt.Fprintf(w, "# %s\n", interruptedLine(rep))
		} else if rep.Healthy() {
			_, err := fmt.Fprintf(w, "# %s\n", healthyLine(rep))
			return err
		}
		if len(rep.NotTested) > 0 {
			fmt.Fprintf(w, "# not tested: %s\n", strings.Join(rep.NotTested, "; "))
		}
		for _, s := range rep.Summary() {
			fmt.Fprintf(w, "# suspect: %s\n", s)
		}
		return nil
	}
	return fmt.Errorf("unknown --output %q for fleet: use table, json or markdown", format)
}

// interruptedLine says that an interrupted run gives no verdict of the fleet, and what it did not
// test: the nodes it did not reach, the rounds across nodes.
func interruptedLine(rep *fleet.Report) string {
	var parts []string
	if u := rep.NotReached; len(u) > 8 {
		parts = append(parts, fmt.Sprintf("%d nodes (%s and %d others)", len(u), strings.Join(u[:8], ", "), len(u)-8))
	} else if len(u) > 0 {
		parts = append(parts, fmt.Sprintf("%d node%s (%s)", len(u), plural(len(u)), strings.Join(u, ", ")))
	}
	if len(rep.Rails) == 0 && len(rep.Nodes)+len(rep.NotReached) > 1 {
		parts = append(parts, "the rails and the groups across nodes")
	}
	line := "interrupted: no verdict of the fleet"
	if len(parts) > 0 {
		line += "; not tested: " + strings.Join(parts, "; ")
	}
	return line
}

// healthyLine says what a healthy report found healthy: its NICs only if a rail tested them.
func healthyLine(rep *fleet.Report) string {
	why := "no rail" // a machine of GPUs without NICs
	if len(rep.Nodes) == 1 {
		why = "one node"
	}
	line := ""
	for _, r := range rep.Rails {
		if r.Status != fleet.Untested {
			line = "every node, GPU and NIC healthy"
			break
		}
		why = cmp.Or(r.Why, "untested")
	}
	if line == "" {
		line = fmt.Sprintf("every node and GPU healthy; NICs not tested (%s)", why)
	}
	if len(rep.NotTested) > 0 {
		line = strings.Replace(line, " healthy", " tested healthy", 1) + "; not tested: " + strings.Join(rep.NotTested, "; ")
	}
	return line
}

// railLine says how a rail's test went: its verdict, its figure or error, and the nodes it did
// not test.
func railLine(r fleet.Rail) string {
	s := fmt.Sprintf("rail %d (%s): %s", r.Rail, r.NIC, r.Status)
	if r.Why != "" {
		s += " (" + r.Why + ")"
	}
	switch f := r.Figure; {
	case f != nil && f.Error != "":
		s += ": " + f.Error
	case f != nil:
		s += fmt.Sprintf(", %.0f%% of expected", fleet.Percent(f.Ratio))
	}
	if u := r.Untested; len(u) > 8 {
		s += fmt.Sprintf("; not tested on %s and %d other nodes", strings.Join(u[:8], ", "), len(u)-8)
	} else if len(u) > 0 {
		s += "; not tested on " + strings.Join(u, ", ")
	}
	return s
}

func pct(f *fleet.Figure) string {
	switch {
	case f == nil:
		return "-"
	case f.Error != "":
		return "error"
	}
	return fmt.Sprintf("%.0f%%", fleet.Percent(f.Ratio))
}

// drainCommands are the commands that would take the suspect nodes out of service, for an
// operator to read and run: Slurm's drain with the reason, and a Kubernetes label and taint.
func drainCommands(rep *fleet.Report) []byte {
	var b strings.Builder
	b.WriteString("# gpubench fleet: the commands that would take the suspect nodes out of service.\n")
	b.WriteString("# gpubench has run none of them: read them, then run the ones you want (sh FILE).\n")
	seen := map[string]bool{}
	for _, s := range rep.Suspects {
		if seen[s.Host] || s.Status == fleet.Untestable {
			continue
		}
		seen[s.Host] = true
		why := strings.Map(func(r rune) rune {
			if r == '"' || r == '\\' || r == '$' || r == '`' || r < ' ' {
				return '\''
			}
			return r
		}, "gpubench fleet: "+s.Why)
		if len(why) > 200 {
			why = why[:200]
		}
		fmt.Fprintf(&b, "scontrol update NodeName=%s State=DRAIN Reason=\"%s\"\n", s.Host, why)
		fmt.Fprintf(&b, "kubectl label node %s gpubench.io/fleet=suspect --overwrite\n", s.Host)
		fmt.Fprintf(&b, "kubectl taint node %s gpubench.io/fleet=suspect:NoSchedule --overwrite\n", s.Host)
	}
	if len(seen) == 0 {
		b.WriteString("# no suspect: nothing to drain\n")
	}
	return []byte(b.String())
}

// sameFile reports whether paths a and b name one file: the same path once made absolute, or, where
// both exist, one file by two names (a link).
func sameFile(a, b string) bool {
	if x, err := filepath.Abs(a); err == nil {
		a = x
	}
	if y, err := filepath.Abs(b); err == nil {
		b = y
	}
	if a == b {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// writeFleetMetrics writes per-node gauges in Prometheus' text format.
func writeFleetMetrics(path string, rep *fleet.Report) error {
	reg := prometheus.NewRegistry()
	healthy := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpubench_fleet_node_healthy", Help: "1 when gpubench fleet found the node healthy, 0 otherwise."}, []string{"host", "status"})
	ratio := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpubench_fleet_node_busbw_ratio", Help: "The node's busbw over what the machine should reach, per collective (p2p: its slowest pair)."}, []string{"host", "collective"})
	suspects := prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpubench_fleet_suspects", Help: "Suspects gpubench fleet named."})
	rails := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpubench_fleet_rail_healthy", Help: "1 when gpubench fleet found the rail healthy, 0 otherwise (untested rails are left out)."}, []string{"rail", "nic", "status"})
	reg.MustRegister(healthy, ratio, suspects, rails)
	for _, r := range rep.Rails {
		v := 0.0
		if r.Status == fleet.Healthy {
			v = 1
		}
		if r.Status != fleet.Untested {
			rails.WithLabelValues(fmt.Sprint(r.Rail), r.NIC, string(r.Status)).Set(v)
		}
	}
	for _, n := range rep.Nodes {
		v := 0.0
		if n.Status == fleet.Healthy {
			v = 1
		}
		healthy.WithLabelValues(n.Host, string(n.Status)).Set(v)
		for c, f := range map[string]*fleet.Figure{"allreduce": n.AllReduce, "alltoall": n.AllToAll, "p2p": n.P2P} {
			if f != nil && f.Error == "" {
				ratio.WithLabelValues(n.Host, c).Set(f.Ratio)
			}
		}
	}
	suspects.Set(float64(len(rep.Suspects)))
	// Encoded here and written by writeAtomic, which writes through a device or a link, where
	// prometheus.WriteToTextfile renames over them.
	mfs, err := reg.Gather()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return err
		}
	}
	return writeAtomic(path, buf.Bytes())
}

// acrossProcesses is the fleet under a launcher, one process per node: each process tests its
// own node (the per-node round; on the simulator, node RANK of the topology), rank 0 gathers the
// verdicts, then drives the rails and the groups across the processes (crossing) and hands every
// rank the report. A process that leaves the run or stops answering is reported failed, and the
// others go on (launch.Group.KeepGoing).
//
// broken, when set, is why this node's GPUs could not be opened: the process joins the others,
// its node is reported untestable, and it takes part in no test across nodes.
func (f *fleetFlags) acrossProcesses(cmd *cobra.Command, e *env, g *globals, proc launch.Process, opt fleet.Options, simulated bool, broken error) (*fleet.Report, error) {
	addr, err := proc.Address(f.launch.rendezvous)
	if err != nil {
		return nil, usageErr("%v", launchMsg(err))
	}
	host, _ := os.Hostname()
	x := &crossing{f: f, e: e, g: g, proc: proc, simulated: simulated}
	if simulated {
		x.load = g.loadTopology
		if x.topo, err = x.load(); err != nil {
			return nil, err
		}
		x.nodes = x.topo.NodeGPUs()
		// A world of another size than the nodes is refused after the rendezvous, where every
		// rank hears it, and a rank started with other options is refused at it: none is left to
		// wait out the rendezvous timeout for one that exited on its own.
		if proc.Rank < len(x.nodes) {
			host = x.topo.Nodes[proc.Rank].Hostname
		}
	} else if broken == nil {
		if err := onePerHost(proc); err != nil {
			return nil, err
		}
		one, source, err := expectTopology(cmd, g, false, 0)
		if err != nil {
			return nil, err
		}
		if one == nil {
			return nil, usageErr("fleet sets every figure beside what the machine should do, and %s: give --topology FILE for one node", source)
		}
		if x.topo, err = one.WithNodes(proc.Size); err != nil {
			return nil, usageErr("invalid --topology for %d nodes: %v", proc.Size, err)
		}
		x.load = func() (*gpu.Topology, error) { return one.WithNodes(proc.Size) }
		x.nodes = x.topo.NodeGPUs()
	}
	run, err := f.runOf(g, x)
	if err != nil {
		return nil, err
	}
	grp, err := launch.Join(cmd.Context(), proc, addr, f.launch.timeout, launch.Member{Host: host, PID: e.pid, Run: run},
		func() ([]byte, error) { return []byte("gpubench fleet"), nil })
	if err != nil {
		if errors.Is(err, launch.ErrConfig) {
			return nil, usageErr("%s", launchMsg(err))
		}
		return nil, runtimeErr(fmt.Errorf("rank %d: %w", proc.Rank, err))
	}
	if simulated && proc.Size != len(x.nodes) {
		err := usageErr("gpubench fleet runs one process per node: %d processes for the %d nodes of %s; start %d, or give --nodes %d", proc.Size, len(x.nodes), x.topo.Name, len(x.nodes), proc.Size)
		grp.Close(err)
		return nil, err
	}
	if simulated {
		k := proc.Rank
		opt.Only = &k
	}
	x.grp, x.hub = grp, hubHost(addr)
	grp.KeepGoing(f.launch.timeout)
	mine, runErr := fleet.Run(grp.Context(), opt)
	if errors.Is(runErr, fleet.ErrSize) {
		grp.Close(runErr)
		return nil, usageErr("invalid --size %s: %s", input.Safe(f.size), strings.TrimPrefix(runErr.Error(), fleet.ErrSize.Error()+": "))
	}
	if runErr != nil { // this node could not be tested: it is reported, with what diag finds, and the others go on
		node := fleet.Node{Host: host, Status: fleet.Untestable, Why: runErr.Error()}
		if opt.Diag != nil {
			hw, other := opt.Diag()
			node.Diag = append(hw, other...)
		}
		mine = &fleet.Report{Nodes: []fleet.Node{node}, Suspects: []fleet.Suspect{{Kind: "node", Host: host, Status: fleet.Untestable, Why: node.Why}}}
	}
	rep, err := x.rounds(opt, mine)
	grp.Close(err)
	if err != nil {
		return nil, runtimeErr(err)
	}
	return rep, nil
}

// runOf is what the processes of a fleet must agree on, as fields separated by "; ", so that the
// rendezvous's refusal names those that differ: the fleet's options, and on the simulator what
// the ranks of a collective agree on (runOf: the machine and its faults, the data cap, --seed,
// --sim-jitter, the NCCL_* variables), for every process simulates the whole fleet's clocks.
func (f *fleetFlags) runOf(g *globals, x *crossing) (string, error) {
	fields := []string{"fleet", fmt.Sprintf("--floor %g", f.floor), fmt.Sprintf("--repeat %d", f.repeat), "--size " + f.size}
	if !x.simulated { // a run half simulated is not a fleet
		return strings.Join(append(fields, "real GPUs", "--topology "+g.topology), "; "), nil
	}
	t, err := x.load() // a fresh one: the simulator may change the topology it is given
	if err != nil {
		return "", err
	}
	b, err := sim.New(t, sim.Options{})
	if err != nil {
		return "", usageErr("%v", err)
	}
	defer b.Close()
	sims, err := runOf(b, g, &coll.Options{Coll: coll.AllReduce, Seed: g.seed})
	if err != nil {
		return "", err
	}
	fields = append(fields, fmt.Sprintf("--nodes %d", len(x.nodes)), fmt.Sprintf("--gpus-per-node %d", len(x.nodes[0])), sims)
	return strings.Join(fields, "; "), nil
}

// onePerHost refuses a launch of several processes on one host for real GPUs: each would test
// the same node's GPUs as its own.
func onePerHost(proc launch.Process) error {
	if proc.Multi() && proc.LocalSize > 1 {
		return usageErr("gpubench fleet runs one process per node, and %d run on this host: start one per node (srun --ntasks-per-node=1, mpirun --map-by ppr:1:node)", proc.LocalSize)
	}
	return nil
}

// joinGrace is how much longer than -T a test across nodes waits for its communicator to form.
const joinGrace = 30 * time.Second

// crossing is one process's part in the rounds across the processes. Rank 0 decides each test
// and sends it to all (a step of the rendezvous: the rail or -1 for whole nodes, the size, the
// communicator's id and which processes take part); the processes named join the communicator on
// their GPU of that rail, or on every GPU, and time an all-reduce; every process then sends its
// result (another step), and rank 0 turns them into the test's busbw. The steps run in lockstep
// on every process, so that no process waits on another that is not coming.
type crossing struct {
	f         *fleetFlags
	e         *env
	g         *globals
	proc      launch.Process
	grp       *launch.Group
	simulated bool
	topo      *gpu.Topology                 // the whole fleet's machine
	load      func() (*gpu.Topology, error) // makes a fresh copy of it
	nodes     [][]int                       // its GPUs by node
	real      gpu.Backend                   // on real GPUs: the backend the tests across nodes join communicators with
	hub       string                        // on the simulator: where rank 0's exchanges listen, as the others reach it
}

// A command is [op, rail, bytes, ranks per member, id length, id (idMax), member of each process
// (0: no; i+1: the test's i-th)]; a result is [status, seconds, message length, message (msgMax),
// count of ranks that hung, those ranks (hungMax)], status 0 for a process not in the test.
const (
	opTest, opDone = 1, 2
	head           = 5
	idMax, msgMax  = 512, 256
	hungMax        = 64

	resOK, resErr, resHang = 1, 2, 3
)

// rounds gathers every process's per-node report, runs the rails and groups across the processes
// from rank 0, and returns rank 0's report on every process.
func (x *crossing) rounds(opt fleet.Options, mine *fleet.Report) (*fleet.Report, error) {
	defer func() {
		if x.real != nil {
			x.real.Close()
		}
	}()
	all, err := gatherReports(x.grp, mine)
	if err != nil {
		return nil, err
	}
	var rep *fleet.Report
	if x.proc.Rank == 0 {
		gone := x.grp.Gone()
		for r := range all {
			if all[r] == nil {
				why := "its process left the run: " + gone[r]
				all[r] = &fleet.Report{Nodes: []fleet.Node{{Host: x.host(r), Status: fleet.Failed, Why: why}},
					Suspects: []fleet.Suspect{{Kind: "node", Host: x.host(r), Status: fleet.Failed, Why: why}}}
			}
		}
		// A test's result step takes its communicator's forming and two waits on the GPUs at most.
		t := time.Duration(x.f.timeout * float64(time.Second))
		x.grp.KeepGoing(max(x.f.launch.timeout, 3*t+joinGrace+10*time.Second))
		aopt := opt
		aopt.Only = nil
		aopt.Open = x.expected
		rep, err = fleet.Across(x.grp.Context(), aopt, all, x.test)
		if err != nil {
			return nil, err
		}
		if _, err := x.grp.AllGather(x.grp.Context(), x.command(opDone, 0, 0, nil, nil)); err != nil {
			return nil, err
		}
	} else {
		if err := x.follow(); err != nil {
			return nil, err
		}
		rep = &fleet.Report{}
	}
	final, err := gatherReports(x.grp, rep)
	if err != nil {
		return nil, err
	}
	if final[0] == nil {
		return nil, errors.New("rank 0 sent no report")
	}
	return final[0], nil
}

// host names node r for the report: the topology's name on the simulator, the process's host on
// real GPUs.
func (x *crossing) host(r int) string {
	if x.simulated {
		return x.topo.Nodes[r].Hostname
	}
	return x.grp.Members()[r].Host
}

// expected is the whole fleet's machine without faults, for rank 0's expected figures.
func (x *crossing) expected(env map[string]string, _ bool) (gpu.Backend, error) {
	all := ncclEnv()
	maps.Copy(all, env)
	t, err := x.load() // a fresh one: NCCL_IB_HCA changes the topology it is given
	if err != nil {
		return nil, err
	}
	return sim.New(t, sim.Options{Env: all})
}

// follow is a process other than rank 0: it runs the tests rank 0 sends until it says done.
func (x *crossing) follow() error {
	ctx := x.grp.Context()
	for {
		all, err := x.grp.AllGather(ctx, x.command(0, 0, 0, nil, nil))
		if err != nil {
			return err
		}
		c := all[0]
		if int(c[0]) != opTest {
			return nil
		}
		if _, err := x.grp.AllGather(ctx, x.part(c)); err != nil {
			return err
		}
	}
}

// test is rank 0's fleet.CrossTest: one command, every process's part, the results.
func (x *crossing) test(rail int, nodes []int, bytes int64) (float64, error) {
	ctx := x.grp.Context()
	gone := &fleet.GoneError{Why: map[int]string{}}
	why := x.grp.Gone()
	for _, n := range nodes { // set aside at another step: no test can include it
		if w, ok := why[n]; ok {
			gone.Why[n] = w
		}
	}
	if len(gone.Why) > 0 {
		return 0, gone
	}
	idb, err := x.backend(rail)
	if err != nil {
		return 0, err
	}
	if x.simulated { // its exchange must outlive the test
		defer idb.Close()
	}
	j, ok := idb.(gpu.Joiner)
	if !ok {
		return 0, fmt.Errorf("the %s backend cannot make a communicator across processes", idb.Name())
	}
	id, err := j.NewUniqueID()
	if err != nil {
		return 0, err
	}
	c := x.command(opTest, rail, bytes, id, nodes)
	if _, err := x.grp.AllGather(ctx, c); err != nil {
		return 0, err
	}
	res, err := x.grp.AllGather(ctx, x.part(c))
	if err != nil {
		return 0, err
	}
	why = x.grp.Gone()
	var secs float64
	var failed []string // each failing node's own words
	hung := false
	var hungRanks []int // the ranks that did not finish, as the processes saw them
	var cause string
	for _, n := range nodes {
		r := res[n]
		switch {
		case r == nil:
			gone.Why[n] = why[n]
		case int(r[0]) == resOK:
			secs = max(secs, r[1])
		default:
			hung = hung || int(r[0]) == resHang
			failed = append(failed, x.host(n)+": "+message(r))
			if k := int(r[3+msgMax]); k > 0 {
				for _, h := range r[4+msgMax : 4+msgMax+k] {
					if !slices.Contains(hungRanks, int(h)) {
						hungRanks = append(hungRanks, int(h))
					}
				}
				cause = cmp.Or(cause, message(r))
			}
		}
	}
	switch {
	case len(gone.Why) > 0:
		return 0, gone
	case hung && len(hungRanks) > 0: // as one process says it: the ranks, and why the wait ended
		slices.Sort(hungRanks)
		return 0, &gpu.HangError{Ranks: hungRanks, Err: errors.New(cause)}
	case hung:
		return 0, &gpu.HangError{Err: errors.New(strings.Join(failed, "; "))}
	case len(failed) > 0:
		return 0, errors.New(strings.Join(failed, "; "))
	case secs <= 0:
		return 0, fmt.Errorf("the all-reduce across %d nodes took no time", len(nodes))
	}
	ranks := len(nodes) * x.perMember(rail)
	return float64(bytes) / secs / 1e9 * coll.AllReduce.Factor(ranks), nil
}

func message(r []float64) string {
	b := make([]byte, min(int(r[2]), msgMax))
	for i := range b {
		b[i] = byte(r[3+i])
	}
	return string(b)
}

func (x *crossing) command(op, rail int, bytes int64, id []byte, nodes []int) []float64 {
	c := make([]float64, head+idMax+x.proc.Size)
	c[0], c[1], c[2], c[3], c[4] = float64(op), float64(rail), float64(bytes), float64(x.perMember(rail)), float64(len(id))
	for i, b := range id[:min(len(id), idMax)] {
		c[head+i] = float64(b)
	}
	for i, n := range nodes {
		c[head+idMax+n] = float64(i + 1)
	}
	return c
}

// perMember is how many ranks each process brings to a test on rail: one, or for whole nodes
// (rail -1) a rank per GPU of rank 0's node, which every process uses.
func (x *crossing) perMember(rail int) int {
	if rail >= 0 || len(x.nodes) == 0 {
		return 1
	}
	return len(x.nodes[0])
}

// part runs this process's ranks of the test c, if it has any, and returns its result: on a rail,
// one rank (GPU rail); across whole nodes (rail -1), a rank per GPU of the node.
func (x *crossing) part(c []float64) []float64 {
	res := make([]float64, 4+msgMax+hungMax)
	idx := int(c[head+idMax+x.proc.Rank]) - 1
	if idx < 0 {
		return res
	}
	members := 0
	for _, m := range c[head+idMax:] {
		if m > 0 {
			members++
		}
	}
	id := make([]byte, int(c[4]))
	for i := range id {
		id[i] = byte(c[head+i])
	}
	rail, per := int(c[1]), int(c[3])
	secs, err := x.allReduce(rail, int64(c[2]), id, members*per, idx*per, per)
	var hang *gpu.HangError
	msg := ""
	switch {
	case errors.As(err, &hang) && len(hang.Ranks) > 0: // the ranks, and why the wait ended
		res[0], msg = resHang, hang.Err.Error()
		ranks := hang.Ranks[:min(len(hang.Ranks), hungMax)]
		res[3+msgMax] = float64(len(ranks))
		for i, r := range ranks {
			res[4+msgMax+i] = float64(r)
		}
	case errors.As(err, &hang):
		res[0], msg = resHang, err.Error()
	case err != nil:
		res[0], msg = resErr, err.Error()
	default:
		res[0], res[1] = resOK, secs
		return res
	}
	msg = msg[:min(len(msg), msgMax)]
	res[2] = float64(len(msg))
	for i := range len(msg) {
		res[3+i] = float64(msg[i])
	}
	return res
}

// backend is what a test across nodes on rail runs on: on the simulator, the fleet with the run's
// faults and NCCL_IB_HCA pinned to the rail's NIC (the caller closes it); on real GPUs, this
// node's NCCL, opened once (NCCL reads NCCL_IB_HCA when it loads, so NCCL picks the NIC).
func (x *crossing) backend(rail int) (gpu.Backend, error) {
	if !x.simulated {
		if x.real == nil {
			b, _, err := x.g.openColl(x.e)
			if err != nil {
				return nil, err
			}
			x.real = b
		}
		return x.real, nil
	}
	env := ncclEnv()
	if hca := fleet.RailHCA(x.topo, x.nodes, rail); rail >= 0 && hca != "" {
		env["NCCL_IB_HCA"] = hca
	}
	capBytes, _ := parseCap(x.g.dataCap)
	var faults []sim.Fault
	for _, s := range x.g.faults {
		f, _ := sim.ParseFault(s) // checked as the run began
		faults = append(faults, f)
	}
	t, err := x.load() // a fresh one: the faults change the topology they are given
	if err != nil {
		return nil, err
	}
	return sim.New(t, sim.Options{DataCap: capBytes, Env: env, Faults: faults, Jitter: x.g.jitter, Seed: x.g.seed, HubHost: x.hub})
}

// allReduce runs this process's n ranks, first to first+n-1, of the communicator id of size ranks,
// each on its own goroutine (NCCL's one device per thread): on a rail (rail >= 0, n = 1) on this
// node's GPU of the rail, across whole nodes (rail -1) on each of its GPUs. It returns the slowest
// rank's seconds per call.
func (x *crossing) allReduce(rail int, bytes int64, id []byte, size, first, n int) (float64, error) {
	if !x.simulated { // open this node's NCCL once, before the ranks share it
		if _, err := x.backend(rail); err != nil {
			return 0, err
		}
	}
	secs := make([]float64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for l := range n {
		wg.Go(func() {
			local := l
			if rail >= 0 {
				local = rail
			}
			secs[l], errs[l] = x.rankAllReduce(rail, bytes, id, size, first+l, local)
		})
	}
	wg.Wait()
	var hang *gpu.HangError
	for _, err := range errs {
		if errors.As(err, &hang) {
			return 0, err
		}
	}
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return slices.Max(secs), nil
}

// rankAllReduce joins the communicator id as rank of size on this node's GPU local and times an
// all-reduce of bytes (after one to warm up), in seconds per call.
func (x *crossing) rankAllReduce(rail int, bytes int64, id []byte, size, rank, local int) (float64, error) {
	b, err := x.backend(rail)
	if err != nil {
		return 0, err
	}
	dev := local
	if x.simulated { // each rank its own simulator of the whole fleet, as each process is
		defer b.Close()
		dev = x.nodes[x.proc.Rank][local]
	}
	j, ok := b.(gpu.Joiner)
	if !ok {
		return 0, fmt.Errorf("the %s backend cannot join a communicator across processes", b.Name())
	}
	wait := time.Duration(x.f.timeout * float64(time.Second))
	jctx, cancel := context.WithTimeout(x.grp.Context(), wait+joinGrace)
	comm, err := j.JoinComm(jctx, id, size, rank, dev)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("the communicator of %d ranks did not form within %v: a member never joined", size, wait+joinGrace)
	}
	if err != nil {
		return 0, err
	}
	defer comm.Close()
	buf, err := b.Alloc(dev, bytes)
	if err != nil {
		return 0, err
	}
	defer b.Free(buf)
	bufs := make([]gpu.Buffer, size)
	bufs[rank] = buf
	finish := func() error {
		ctx, cancel := context.WithTimeout(x.grp.Context(), wait)
		defer cancel()
		return comm.Synchronize(ctx)
	}
	if err := comm.AllReduce(bufs, bufs, bytes/4, gpu.Float, gpu.Sum); err != nil {
		return 0, err
	}
	if err := finish(); err != nil {
		return 0, err
	}
	const iters = 2
	start := b.Now()
	for range iters {
		if err := comm.AllReduce(bufs, bufs, bytes/4, gpu.Float, gpu.Sum); err != nil {
			return 0, err
		}
	}
	if err := finish(); err != nil {
		return 0, err
	}
	return (b.Now() - start).Seconds() / iters, nil
}

// gatherReports gives every process every process's report (nil for a process set aside). The
// rendezvous carries numbers: a report travels as its JSON, a byte per number, padded to the
// longest.
func gatherReports(grp *launch.Group, mine *fleet.Report) ([]*fleet.Report, error) {
	data, err := json.Marshal(mine)
	if err != nil {
		return nil, err
	}
	lens, err := grp.AllGather(grp.Context(), []float64{float64(len(data))})
	if err != nil {
		return nil, err
	}
	longest := 0
	for _, l := range lens {
		if l != nil {
			longest = max(longest, int(l[0]))
		}
	}
	vals := make([]float64, longest)
	for i, c := range data {
		vals[i] = float64(c)
	}
	all, err := grp.AllGather(grp.Context(), vals)
	if err != nil {
		return nil, err
	}
	out := make([]*fleet.Report, len(all))
	for r, v := range all {
		if v == nil || lens[r] == nil {
			continue
		}
		b := make([]byte, int(lens[r][0]))
		for i := range b {
			b[i] = byte(v[i])
		}
		if err := json.Unmarshal(b, &out[r]); err != nil {
			return nil, fmt.Errorf("rank %d's report: %w", r, err)
		}
	}
	return out, nil
}
