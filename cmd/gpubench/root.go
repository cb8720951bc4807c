package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/cuda"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/input"
	"github.com/gpubench/gpubench/internal/nccl"
	"github.com/gpubench/gpubench/internal/report"
	"github.com/gpubench/gpubench/internal/sim"
)

// globals are the flags every command shares.
type globals struct {
	backend  string
	topology string
	nodes    int // --nodes: the topology's first node this many times (not given: as the file says)
	nodesSet func() bool
	perNode  int // --gpus-per-node: keep each node's first this many GPUs (not given: all)
	perSet   func() bool
	output   string
	seed     uint64
	dataCap  string
	jitter   float64
	faults   []string
	cudaLib  string
	ncclLib  string
	hubHost  string // a simulated run across processes: rank 0's host (sim.Options.HubHost)
}

func run(ctx context.Context, e *env, args []string) int {
	out := &watchedWriter{w: e.stdout}
	e.stdout = out
	root := newRootCmd(e)
	root.SetArgs(args)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	err := root.ExecuteContext(ctx)
	var coded *exitError
	if out.err != nil && !errors.As(err, &coded) {
		// Results that could not be written fail the run (exit 1), whether the command saw the
		// error or not: a full disk is not bad input, and not a success.
		err = runtimeErr(fmt.Errorf("writing the results to stdout: %w", out.err))
	}
	return exitCode(e.stderr, err)
}

// watchedWriter keeps the first error of its writes.
type watchedWriter struct {
	w   io.Writer
	err error
}

func (o *watchedWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil && o.err == nil {
		o.err = err
	}
	return n, err
}

func newRootCmd(e *env) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "gpubench",
		Short: "Benchmark and diagnose multi-GPU machines",
		Long: "gpubench measures what a multi-GPU machine delivers: every NCCL collective as nccl-tests\n" +
			"measures it, on the real GPUs or on a simulated machine (--backend sim --topology NAME|FILE).",
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       e.version,
	}
	root.SetVersionTemplate(versionLine(e.version) + "\n")
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, _, err := c.Root().Find(args)
			if cmd == nil || err != nil { // cobra's own help says so on stdout and exits 0
				return usageErr("no help topic %q: gpubench --help lists the commands", strings.Join(args, " "))
			}
			cmd.InitDefaultHelpFlag() // as cobra's own help does, so that -h is listed
			return cmd.Help()
		},
	})
	root.SetFlagErrorFunc(flagErr)
	pf := root.PersistentFlags()
	pf.StringVar(&g.backend, "backend", "auto", "GPU backend: auto (real GPUs when available, else the simulator), cuda or sim")
	pf.StringVar(&g.cudaLib, "cuda-lib", "", "path of libcudart to load (default: $GPUBENCH_CUDART, then the usual sonames and folders)")
	pf.StringVar(&g.ncclLib, "nccl-lib", "", "path of libnccl to load (default: $GPUBENCH_NCCL, then libnccl.so.2 and the usual folders)")
	pf.StringVar(&g.topology, "topology", "dgx-h100", "simulated machine: a preset ("+strings.Join(sim.Presets(), ", ")+") or a topology file")
	pf.IntVar(&g.nodes, "nodes", 0, "simulated machine: this many of the topology's first node, on its network (a cluster of 1,024 DGX H100: --topology dgx-h100 --nodes 1024)")
	g.nodesSet = func() bool { return pf.Changed("nodes") }
	pf.IntVar(&g.perNode, "gpus-per-node", 0, "simulated machine: only the first this many GPUs of each node, as a job of that many GPUs a node sees them (Slurm --gpus-per-node); the nodes' NICs stay")
	g.perSet = func() bool { return pf.Changed("gpus-per-node") }
	pf.StringVar(&g.output, "output", "table", "output format: "+strings.Join(report.Formats, ", ")+" (topo: table, markdown, json, dot)")
	pf.Uint64Var(&g.seed, "seed", 0, "seed for the input data and the simulator's jitter")
	pf.StringVar(&g.dataCap, "sim-data-cap", coll.FormatSize(sim.DefaultDataCap), "simulator: device memory backed by host memory; larger runs are timing-only")
	pf.Float64Var(&g.jitter, "sim-jitter", 0, "simulator: random slow-down of each operation, as a fraction (0 = deterministic)")
	pf.StringArrayVar(&g.faults, "sim-fault", nil, "simulator: inject a fault: hang=DEVICE[@N], corrupt=DEVICE[@N], slow-link=PART,PART,FACTOR[@TIME], slow-nic=HOST/NIC,FACTOR, slow-node=HOST,FACTOR, flaky-link=PART,PART,N or xid=DEVICE[@TIME][:CODE] (repeatable)")
	complete(root, "backend", []string{"auto", "cuda", "sim"})
	complete(root, "topology", sim.Presets())
	complete(root, "output", report.Formats)

	root.AddCommand(newVersionCmd(e, g), newP2PCmd(e, g), newTopoCmd(e, g), newCompareCmd(e, g), newPlotCmd(e, g), newDiagCmd(e, g), newBurninCmd(e, g), newServeCmd(e, g), newExplainCmd(e, g), newCalibrateCmd(e, g), newFleetCmd(e, g))
	root.AddCommand(newPlanCmd(e, g))
	for _, c := range coll.Collectives {
		root.AddCommand(newCollCmd(e, g, c))
	}
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			// Runnable, so that cobra refuses an unknown shell as an unknown command (exit 2)
			// rather than printing the help and exiting 0.
			c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		}
	}
	return root
}

func complete(cmd *cobra.Command, flag string, values []string) {
	_ = cmd.RegisterFlagCompletionFunc(flag, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	})
}

// machineFlags are the shared flags that choose or shape a machine to run on, which a command
// that reads result files refuses (readsFiles); runFlags, those of a run, which topo, explain
// and plan refuse as well.
var (
	machineFlags = []string{"backend", "cuda-lib", "nccl-lib", "topology", "nodes", "gpus-per-node", "seed", "sim-data-cap", "sim-jitter", "sim-fault"}
	runFlags     = []string{"seed", "sim-data-cap", "sim-jitter", "sim-fault", "cuda-lib", "nccl-lib"}
)

// readsFiles refuses the machineFlags, which a command that reads result files (compare, plot;
// calibrate keeps --topology and --nodes) would ignore.
func readsFiles(cmd *cobra.Command, name string, keep ...string) error {
	for _, flag := range machineFlags {
		if cmd.Flags().Changed(flag) && !slices.Contains(keep, flag) {
			return usageErr("--%s does not apply to %s, which reads result files: drop it", flag, name)
		}
	}
	return nil
}

// hideShared keeps the shared flags a command refuses out of its help, except those in keep.
func hideShared(cmd *cobra.Command, flags []string, keep ...string) {
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		var hidden []*pflag.Flag
		for _, name := range flags {
			if f := c.InheritedFlags().Lookup(name); f != nil && !f.Hidden && !slices.Contains(keep, name) {
				f.Hidden = true
				hidden = append(hidden, f)
			}
		}
		c.Root().HelpFunc()(c, args)
		for _, f := range hidden { // they are the root's, which other commands show
			f.Hidden = false
		}
	})
}

// validate checks the shared flags before anything runs; backends are the --backend values the
// command offers.
func (g *globals) validate(backends ...string) error {
	if !slices.Contains(backends, g.backend) {
		return usageErr("unknown --backend %q for this command: use %s", g.backend, strings.Join(backends, " or "))
	}
	if !slices.Contains(report.Formats, g.output) {
		return usageErr("unknown --output %q: use %s", g.output, strings.Join(report.Formats, ", "))
	}
	return nil
}

// noRealGPU handles a real backend that would not open: with --backend cuda, or when a library
// was named (named is the flag or variable that named it), it is exit 4 with the whole reason,
// which names the path and the loader's complaint; with auto, a one-line notice and nil, so that
// the caller falls back to the simulator.
func (g *globals) noRealGPU(e *env, err error, named string) error {
	switch {
	case named != "":
		return &exitError{code: exitNoGPU, err: fmt.Errorf("%s names a library that did not load: %w", named, err)}
	case g.backend == "cuda":
		return &exitError{code: exitNoGPU, err: fmt.Errorf("no usable GPU: %w", err)}
	}
	why := err.Error()
	switch { // the list of paths tried is for --backend cuda
	case errors.Is(err, cuda.ErrNotFound):
		why = cuda.ErrNotFound.Error()
	case errors.Is(err, nccl.ErrNotFound):
		why = nccl.ErrNotFound.Error()
	}
	fmt.Fprintf(e.stderr, "gpubench: %s; using the simulator (--topology %s)\n", why, g.topology)
	return nil
}

// loadTopology loads --topology, repeated --nodes times and cut to --gpus-per-node when asked.
func (g *globals) loadTopology() (*gpu.Topology, error) {
	t, err := sim.LoadTopology(g.topology)
	if err != nil {
		return nil, usageErr("invalid --topology: %v", err)
	}
	if g.nodes != 0 || (g.nodesSet != nil && g.nodesSet()) {
		if t, err = t.WithNodes(g.nodes); err != nil {
			return nil, usageErr("invalid --nodes %d: %v", g.nodes, err)
		}
	}
	if g.perNode != 0 || (g.perSet != nil && g.perSet()) {
		if t, err = t.WithGPUsPerNode(g.perNode); err != nil {
			return nil, usageErr("invalid --gpus-per-node %d: %v", g.perNode, err)
		}
	}
	return t, nil
}

// ncclEnv is the environment's NCCL_* variables, which steer the simulated NCCL as they steer
// NCCL.
func ncclEnv() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "NCCL_") {
			env[k] = v
		}
	}
	return env
}

// unmodelledNotice says on stderr which set NCCL_* variables steer NCCL but not the simulator,
// whose figures are then NCCL's without them.
func unmodelledNotice(e *env, vars map[string]string) {
	u := sim.Unmodelled(vars)
	if len(u) == 0 {
		return
	}
	for i := range u {
		u[i] = input.Safe(u[i])
	}
	them := "them"
	if len(u) == 1 {
		them = "it"
	}
	fmt.Fprintf(e.stderr, "gpubench: the simulator does not model %s: its figures are NCCL's without %s (docs/model.md, \"Environment\")\n", strings.Join(u, ", "), them)
}

// noLibsForSim refuses a library flag with --backend sim, which loads none: it would do nothing.
func (g *globals) noLibsForSim() error {
	for _, f := range []struct{ name, value string }{{"cuda-lib", g.cudaLib}, {"nccl-lib", g.ncclLib}} {
		if f.value != "" && g.backend == "sim" {
			return usageErr("--%s does not apply to --backend sim, which loads no library: drop it, or use --backend cuda", f.name)
		}
	}
	return nil
}

// namedLibs says which of --cuda-lib and $GPUBENCH_CUDART (cudart), --nccl-lib and $GPUBENCH_NCCL
// (nccl) name a library ("" when none does): naming one asks for the real GPUs.
func (g *globals) namedLibs(cudart, nccl bool) string {
	var named []string
	for _, v := range []struct {
		name, value string
		nccl        bool
	}{{"--cuda-lib", g.cudaLib, false}, {"$GPUBENCH_CUDART", os.Getenv("GPUBENCH_CUDART"), false},
		{"--nccl-lib", g.ncclLib, true}, {"$GPUBENCH_NCCL", os.Getenv("GPUBENCH_NCCL"), true}} {
		if v.value != "" && ((v.nccl && nccl) || (!v.nccl && cudart)) {
			named = append(named, v.name+" "+v.value)
		}
	}
	return strings.Join(named, " and ")
}

// openSim returns the simulated backend the flags describe, and its data cap; the environment's
// NCCL_* variables steer its NCCL.
func (g *globals) openSim() (*sim.Backend, int64, error) { return g.openSimEnv(ncclEnv()) }

// openSimEnv is openSim with the given NCCL_* variables (nil: none).
func (g *globals) openSimEnv(env map[string]string) (*sim.Backend, int64, error) {
	capBytes, err := parseCap(g.dataCap)
	if err != nil {
		return nil, 0, usageErr("invalid --sim-data-cap %q: %v", g.dataCap, err)
	}
	if err := boundMemory(capBytes, availableMemory()); err != nil {
		return nil, 0, err
	}
	if !(g.jitter >= 0 && g.jitter <= 1) {
		return nil, 0, usageErr("invalid --sim-jitter %v: use a fraction from 0 to 1", g.jitter)
	}
	opt := sim.Options{DataCap: capBytes, Jitter: g.jitter, Seed: g.seed, HubHost: g.hubHost, Env: env}
	if err := sim.CheckEnv(opt.Env); err != nil {
		return nil, 0, usageErr("%v", err)
	}
	for _, f := range g.faults {
		fault, err := sim.ParseFault(f)
		if err != nil {
			return nil, 0, usageErr("invalid --sim-fault: %v", err)
		}
		opt.Faults = append(opt.Faults, fault)
	}
	topo, err := g.loadTopology()
	if err != nil {
		return nil, 0, err
	}
	b, err := sim.New(topo, opt)
	if fe := (*sim.FaultError)(nil); errors.As(err, &fe) {
		given := fe.Fault.String()
		if i := slices.Index(opt.Faults, fe.Fault); i >= 0 {
			given = g.faults[i] // as the user wrote it
		}
		return nil, 0, usageErr("invalid --sim-fault %s: %v", input.Safe(given), fe.Err)
	} else if err != nil {
		return nil, 0, usageErr("%v", err)
	}
	return b, capBytes, nil
}

// maxTimeoutSecs is the longest -T or --timeout a time.Duration holds: past it the limit would
// wrap round to a negative one, which waits for ever.
const maxTimeoutSecs = int(math.MaxInt64 / time.Second)

// refuseBlindFaults refuses the --sim-fault kinds a command cannot see, saying why (blind, by
// kind) and which it takes: a fault that changes nothing would otherwise pass silently.
func refuseBlindFaults(faults []string, blind map[string]string, takes string) error {
	for _, s := range faults {
		if x, err := sim.ParseFault(s); err == nil && blind[x.Kind] != "" {
			return usageErr("--sim-fault %s: %s: give %s", input.Safe(s), blind[x.Kind], takes)
		}
	}
	return nil
}

// dataMemory is how many times its data cap a simulated run's host memory may reach: the devices'
// data (within the cap), the checker's copies of the inputs and expected outputs (about as much
// again), and the garbage collector's headroom.
const dataMemory = 3

// boundMemory refuses a data cap the machine cannot hold, and otherwise, for a cap large enough that
// data dominates the process's memory (256 MiB and more), asks the garbage collector to keep the
// process within dataMemory times the cap plus 1 GiB for everything else, unless GOMEMLIMIT says
// otherwise.
func boundMemory(capBytes, available int64) error {
	if capBytes <= 0 {
		return nil
	}
	if available > 0 && capBytes > available/dataMemory {
		return usageErr("invalid --sim-data-cap %s: checking that much data takes up to %d times as much host memory, and this machine has %.1f GiB available; use at most %dM",
			coll.FormatSize(capBytes), dataMemory, float64(available)/(1<<30), available/dataMemory>>20)
	}
	if limit := dataMemory*capBytes + 1<<30; capBytes >= 256<<20 && os.Getenv("GOMEMLIMIT") == "" && limit < debug.SetMemoryLimit(-1) {
		debug.SetMemoryLimit(limit)
	}
	return nil
}

// availableMemory is the host memory this process may still use, in bytes: Linux's MemAvailable,
// or the cgroup's limit when that is lower; 0 when neither can be read.
func availableMemory() int64 {
	var avail int64
	if data, err := input.ReadFile("/proc/meminfo", input.SysfsLimit); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					avail = kb << 10
				}
			}
		}
	}
	if data, err := input.ReadFile("/sys/fs/cgroup/memory.max", input.SysfsLimit); err == nil {
		if limit, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && (avail == 0 || limit < avail) {
			avail = limit
		}
	}
	return avail
}

func parseCap(s string) (int64, error) {
	if s == "0" {
		return 0, nil
	}
	return coll.ParseSize(s)
}

// normalize accepts nccl-tests' long flag names beside gpubench's.
func normalize(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	switch name {
	case "warmup_iters":
		name = "warmup"
	case "datatype":
		name = "dtype"
	case "cudagraph":
		name = "graph"
	}
	return pflag.NormalizedName(name)
}

// summary reports what a command whose product is not on stdout did (plot's image, serve's
// endpoint): a notice on stderr for the table form; for json and markdown, a record on stdout
// that scripts can read (fields) or a line to paste (text).
func summary(e *env, format, command, text string, fields map[string]any) error {
	switch format {
	case "json":
		enc := json.NewEncoder(e.stdout)
		return enc.Encode(fields)
	case "markdown":
		_, err := fmt.Fprintf(e.stdout, "**gpubench %s**: %s\n", command, text)
		return err
	}
	_, err := fmt.Fprintf(e.stderr, "gpubench: %s: %s\n", command, text)
	return err
}

// noArgs refuses a positional argument to a command that takes none, which cobra would call an
// unknown command: most often a flag's value given without its flag, or after a stray space.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErr("%s takes no arguments, and was given %q: give its options as flags (gpubench %s --help lists them)", cmd.Name(), args[0], cmd.Name())
	}
	return nil
}
