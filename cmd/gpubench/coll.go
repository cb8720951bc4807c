package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/cuda"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/launch"
	"github.com/gpubench/gpubench/internal/nccl"
	"github.com/gpubench/gpubench/internal/report"
	"github.com/gpubench/gpubench/internal/sim"
)

// collFlags are a collective command's flags: gpubench's own and nccl-tests' short ones.
type collFlags struct {
	sizes                string
	minBytes, maxBytes   string
	stepBytes            string
	stepFactor           int
	iters, warmup, check int
	average, ngpus, root int
	dtype, op            string
	timeout              int
	graph, blocking      int
	perIter              bool
	minBusBW             *float64 // NCCL_TESTS_MIN_BW
	out                  string
	launch               launchFlags
	expect               expectFlags
	// nccl-tests' flags beyond gpubench's own
	nthreads, cycles, cpuTime, perIterTiming, perIterSkip int
	unsupported                                           map[string]*string
}

// unsupportedFlags are nccl-tests flags that gpubench takes, so that a command line drops in,
// but can honour only at their default: any other value is refused with why and what to use.
var unsupportedFlags = []struct{ short, long, def, why string }{
	{"m", "agg_iters", "1", "gpubench times each collective on its own; aggregating several in one NCCL group is not supported: use -m 1"},
	{"p", "parallel_init", "0", "gpubench makes every communicator of a process from one thread (-p 0); the init method does not change the figures: drop -p"},
	{"R", "local_register", "0", "gpubench does not register its buffers with NCCL: drop -R"},
	{"y", "stream_null", "0", "gpubench runs each rank on its own non-blocking stream: drop -y"},
	{"S", "report_timestamps", "0", "rows carry no timestamp: --out FILE streams each row as it is measured, after the run's start_time"},
	{"J", "output_file", "", "gpubench writes its own JSON: use --output json, or --out FILE for JSON lines as the run goes"},
	{"x", "cta_policy", "-1", "gpubench does not set NCCL's CTA policy (-1, nccl-tests' default, leaves it unset): drop -x"},
	{"D", "device_implementation", "0", "gpubench calls NCCL's host API only: drop -D"},
	{"V", "device_cta_count", "16", "gpubench calls NCCL's host API only: drop -V"},
	{"M", "memory", "0", "gpubench prints no memory report: drop -M"},
	{"u", "unalign", "0", "gpubench's buffers are always aligned: drop -u"},
}

// newCollCmd builds the command for one collective (gpubench allreduce, allgather, ...).
func newCollCmd(e *env, g *globals, c *coll.Collective) *cobra.Command {
	return newCollCmdWith(e, g, c, func(cmd *cobra.Command, f *collFlags) error { return f.run(cmd, e, g, c) })
}

// newCollCmdWith is newCollCmd with what the command runs once its flags are parsed: a test gets
// the flags without running a benchmark, as cli/cli's NewCmdX(f, runF) does.
func newCollCmdWith(e *env, g *globals, c *coll.Collective, runF func(*cobra.Command, *collFlags) error) *cobra.Command {
	f := &collFlags{}
	cmd := &cobra.Command{
		Use:   c.Name,
		Short: fmt.Sprintf("Measure %s bandwidth over a size sweep, as nccl-tests' %s does", c.Name, c.Perf),
		Example: fmt.Sprintf("  gpubench %s --sizes 8B:8GB\n  gpubench %s -b 8 -e 128M -f 2 -g 8\n  gpubench %s --backend sim --topology pcie-4090x8 --output json",
			c.Name, c.Name, c.Name),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runF(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.SetNormalizeFunc(normalize)
	fl.StringVar(&f.sizes, "sizes", "8B:8GB", "size sweep MIN:MAX[:xFACTOR|:+STEP] (B, K, M, G, T are binary units)")
	fl.StringVarP(&f.minBytes, "minbytes", "b", "32M", "nccl-tests: smallest size (instead of --sizes)")
	fl.StringVarP(&f.maxBytes, "maxbytes", "e", "32M", "nccl-tests: largest size (instead of --sizes)")
	fl.StringVarP(&f.stepBytes, "stepbytes", "i", "1M", "nccl-tests: size increment when -f is 1")
	fl.IntVarP(&f.stepFactor, "stepfactor", "f", 1, "nccl-tests: size multiplier (1 = add -i instead)")
	fl.IntVarP(&f.iters, "iters", "n", 20, "timed iterations per size")
	fl.IntVarP(&f.warmup, "warmup", "w", 1, "warm-up iterations per size")
	fl.IntVarP(&f.check, "check", "c", 1, "check iterations per size (0 turns checking off)")
	fl.StringVarP(&f.dtype, "dtype", "d", "float", "data type: "+typeNames()+", or all")
	fl.IntVarP(&f.average, "average", "a", 1, "combine per-process times: 0 rank 0, 1 mean, 2 min, 3 max")
	fl.IntVarP(&f.ngpus, "ngpus", "g", 0, "number of GPUs to use (default all)")
	fl.IntVarP(&f.timeout, "timeout", "T", 0, "seconds to wait for the GPUs before reporting a hang (exit 5); 0, as in nccl-tests, waits for ever (one call at 8 GB over slow links can take minutes)")
	fl.IntVarP(&f.graph, "graph", "G", 0, "capture the timed loop as a graph and time this many launches of it (0: no graph)")
	fl.IntVarP(&f.blocking, "blocking", "z", 0, "0: queue the timed calls; 1, 2: wait after each call; 3: wait after each iteration")
	fl.BoolVar(&f.perIter, "per-iter", false, "time every iteration on the GPUs' streams: p50, p95, p99, max, cv and the slowest rank per size")
	fl.StringVar(&f.out, "out", "", "also stream the results to FILE as JSON lines, a line per size as it is measured")
	f.expect.register(cmd)
	fl.IntVarP(&f.nthreads, "nthreads", "t", 1, "nccl-tests: threads per process, each driving -g GPUs (-t T -g G uses T x G GPUs); the simulator launches from T threads, real GPUs are driven from one")
	fl.IntVarP(&f.cycles, "run_cycles", "N", 1, "nccl-tests: run the whole sweep this many times (0: until interrupted)")
	fl.IntVarP(&f.cpuTime, "report_cputime", "C", 0, "nccl-tests: 1 shows the host's launch time in the time column (bandwidths still from completion)")
	fl.IntVarP(&f.perIterTiming, "per_iter_timing", "I", 0, "nccl-tests: 1 is --per-iter")
	fl.IntVarP(&f.perIterSkip, "per_iter_skip", "K", 0, "nccl-tests: leave the first K iterations out of --per-iter's statistics")
	f.unsupported = map[string]*string{}
	for _, u := range unsupportedFlags {
		f.unsupported[u.long] = fl.StringP(u.long, u.short, u.def, "nccl-tests: "+u.why)
		_ = fl.MarkHidden(u.long)
	}
	f.launch.add(cmd)
	complete(cmd, "dtype", append(typeList(), "all"))
	opHelp := "reduction: sum, prod, max, min, avg, or all"
	switch {
	case !c.TakesOp:
		opHelp = "nccl-tests: the reduction of the reducing collectives; " + c.Name + " reduces nothing, so it is ignored"
	case !c.Reduces:
		opHelp = "nccl-tests: " + c.Name + " reduces nothing, but runs and names each op as sendrecv_perf does: sum, prod, max, min, avg, or all"
	}
	fl.StringVarP(&f.op, "op", "o", "sum", opHelp)
	complete(cmd, "op", []string{"sum", "prod", "max", "min", "avg", "all"})
	rootHelp := "root rank, or -1 for every rank in turn"
	if !c.Rooted {
		rootHelp = "nccl-tests: root of broadcast and reduce; " + c.Name + " has none, so it is ignored"
	}
	fl.IntVarP(&f.root, "root", "r", 0, rootHelp)
	return cmd
}

func typeList() []string {
	var s []string
	for _, d := range gpu.DTypes {
		s = append(s, d.String())
	}
	return s
}

func typeNames() string { return strings.Join(typeList(), ", ") }

// openColl returns the backend for collectives: NCCL on the real GPUs for cuda, the simulator for
// sim, and for auto the real GPUs when the CUDA runtime and NCCL load, else the simulator with a
// notice. The data cap is the simulator's (0 on real GPUs).
func (g *globals) openColl(e *env) (gpu.Backend, int64, error) {
	if err := g.noLibsForSim(); err != nil {
		return nil, 0, err
	}
	if g.backend != "sim" {
		cb, err := cuda.Open(g.cudaLib)
		failed := g.namedLibs(true, false) // the library that failed, where a flag named it
		var b *nccl.Backend
		if err == nil {
			b, err = nccl.Open(cb, g.ncclLib)
			failed = g.namedLibs(false, true)
		}
		if err == nil {
			return b, 0, nil
		}
		if asked := g.namedLibs(true, true); failed == "" && asked != "" {
			return nil, 0, &exitError{code: exitNoGPU, err: fmt.Errorf("%s asks for the real GPUs, which did not open: %w", asked, err)}
		}
		if err := g.noRealGPU(e, err, failed); err != nil {
			return nil, 0, err
		}
	}
	return g.openSim()
}

// options turns the flags into engine options; every error is a usage error.
func (f *collFlags) options(cmd *cobra.Command, c *coll.Collective, seed uint64) (coll.Options, error) {
	opt := coll.Options{Coll: c, Root: f.root, NGPUs: f.ngpus, Iters: f.iters, Warmup: f.warmup,
		Check: f.check, Average: coll.Average(f.average), Seed: seed, Timeout: time.Duration(f.timeout) * time.Second}
	changed := func(names ...string) bool {
		for _, n := range names {
			if cmd.Flags().Changed(n) {
				return true
			}
		}
		return false
	}
	var err error
	switch {
	case changed("sizes") && changed("minbytes", "maxbytes", "stepbytes", "stepfactor"):
		return opt, usageErr("use either --sizes or -b/-e/-f/-i, not both")
	case changed("minbytes", "maxbytes", "stepbytes", "stepfactor"):
		w := coll.Sweep{Factor: int64(f.stepFactor)}
		for _, s := range []struct {
			flag, value string
			dst         *int64
		}{{"-b", f.minBytes, &w.Min}, {"-e", f.maxBytes, &w.Max}, {"-i", f.stepBytes, &w.Step}} {
			if *s.dst, err = coll.ParseSize(s.value); err != nil {
				return opt, usageErr("invalid %s %q: %v", s.flag, s.value, err)
			}
		}
		if f.stepFactor < 1 {
			return opt, usageErr("invalid -f %d: use a whole number of at least 1 (1 steps by -i)", f.stepFactor)
		}
		if err := w.Validate(); err != nil {
			return opt, usageErr("invalid sizes -b %s -e %s: %v", f.minBytes, f.maxBytes, err)
		}
		opt.Sweep = w
	default:
		if opt.Sweep, err = coll.ParseSizes(f.sizes); err != nil {
			return opt, usageErr("invalid --sizes %q: %v; use MIN:MAX[:xFACTOR|:+STEP], e.g. 8B:8GB", f.sizes, err)
		}
	}
	switch {
	case f.iters < 1:
		return opt, usageErr("invalid -n %d: run at least 1 iteration", f.iters)
	case f.warmup < 0:
		return opt, usageErr("invalid -w %d: warm-up iterations cannot be negative", f.warmup)
	case f.check < 0:
		return opt, usageErr("invalid -c %d: use 0 (no check) or a number of check iterations", f.check)
	case f.average < 0 || f.average > 3:
		return opt, usageErr("invalid -a %d: use 0 (rank 0), 1 (mean), 2 (min) or 3 (max)", f.average)
	case changed("ngpus") && f.ngpus < 1:
		return opt, usageErr("invalid -g %d: use at least 1 GPU", f.ngpus)
	case c.Rooted && f.root < -1:
		return opt, usageErr("invalid -r %d: use a rank, or -1 for every rank", f.root)
	case f.nthreads < 1:
		return opt, usageErr("invalid -t %d: use at least 1 thread", f.nthreads)
	case f.cycles < 0:
		return opt, usageErr("invalid -N %d: use a number of cycles, or 0 to repeat until interrupted", f.cycles)
	case f.cpuTime != 0 && f.cpuTime != 1:
		return opt, usageErr("invalid -C %d: use 0 or 1", f.cpuTime)
	case f.perIterTiming != 0 && f.perIterTiming != 1:
		return opt, usageErr("invalid -I %d: use 0 or 1 (or --per-iter)", f.perIterTiming)
	case f.timeout < 0 || f.timeout > maxTimeoutSecs:
		return opt, usageErr("invalid -T %d: use 1 to %d seconds, or 0 for no timeout", f.timeout, maxTimeoutSecs)
	case f.graph < 0:
		return opt, usageErr("invalid -G %d: use a number of graph launches, or 0 for none", f.graph)
	case f.blocking < 0 || f.blocking > 3:
		return opt, usageErr("invalid -z %d: use 0, 1, 2 or 3", f.blocking)
	}
	for _, u := range unsupportedFlags {
		if v := *f.unsupported[u.long]; changed(u.long) && v != u.def {
			return opt, usageErr("-%s %s (--%s): %s", u.short, v, u.long, u.why)
		}
	}
	if !c.Rooted {
		opt.Root = 0 // nccl-tests takes -r for every test and ignores it where there is no root
	}
	if changed("nthreads") { // nccl-tests' GPUs per process: -t threads of -g GPUs each
		opt.NGPUs = f.nthreads * max(f.ngpus, 1)
	}
	opt.Graph, opt.Blocking, opt.PerIter = f.graph, coll.Blocking(f.blocking), f.perIter || f.perIterTiming == 1
	opt.CPUTime, opt.PerIterSkip = f.cpuTime == 1, f.perIterSkip
	opt.Cycles = f.cycles
	if f.cycles == 0 {
		opt.Cycles = -1
	}
	if f.perIterSkip != 0 && !opt.PerIter { // 0, the default, skips nothing, with or without -I
		return opt, usageErr("-K %d skips the first iterations of the per-iteration times: add -I 1 (--per-iter)", f.perIterSkip)
	}
	if changed("per_iter_skip") && (f.perIterSkip < 0 || f.perIterSkip >= f.iters) {
		return opt, usageErr("invalid -K %d: it skips the first iterations of --per-iter (-I 1): use 0 to %d", f.perIterSkip, f.iters-1)
	}
	if opt.Graph > 0 && opt.Blocking == 3 {
		opt.Blocking = 0 // as nccl-tests: -z 3 does not combine with -G
	}
	if opt.DTypes, err = oneOrAll(f.dtype, gpu.DTypes, gpu.ParseDType); err != nil {
		return opt, usageErr("invalid -d: %v", err)
	}
	ops, err := oneOrAll(f.op, gpu.RedOps, gpu.ParseRedOp) // read on every collective, as nccl-tests does
	if err != nil {
		return opt, usageErr("invalid -o: %v", err)
	}
	if c.TakesOp {
		opt.Ops = ops
	}
	return opt, nil
}

// oneOrAll reads nccl-tests' -d or -o: one name, or "all".
func oneOrAll[T any](s string, all []T, parse func(string) (T, error)) ([]T, error) {
	if s == "all" {
		return all, nil
	}
	v, err := parse(s)
	return []T{v}, err
}

func (f *collFlags) run(cmd *cobra.Command, e *env, g *globals, c *coll.Collective) error {
	opt, proc, addr, err := f.prepare(cmd, e, g, c)
	if err != nil {
		return err
	}
	if _, set := os.LookupEnv("NCCL_GRAPH_MIXING_SUPPORT"); opt.Graph > 0 && !set {
		// NCCL's advice for graphs over several GPUs launched from one thread: without it, they
		// can deadlock.
		os.Setenv("NCCL_GRAPH_MIXING_SUPPORT", "0")
	}
	b, dataCap, err := g.openColl(e)
	if err != nil {
		return err
	}
	defer b.Close()
	threads := 1
	if sb, ok := b.(*sim.Backend); ok { // the simulated hosts launch from -t threads, as nccl-tests'
		sb.SetLaunchThreads(f.nthreads)
		threads = f.nthreads
		if proc.Rank == 0 {
			unmodelledNotice(e, ncclEnv())
		}
	} else if f.nthreads > 1 {
		fmt.Fprintf(e.stderr, "gpubench: one thread drives every GPU of this process: -t %d runs %d GPUs, as -g %d does\n", f.nthreads, opt.NGPUs, opt.NGPUs)
	}
	if tc, ok := b.(gpu.TypeChecker); ok {
		if err := tc.CheckTypes(opt.DTypes, opt.Ops); err != nil {
			return usageErr("%v", err)
		}
	}
	if _, ok := b.(*sim.Backend); ok && proc.Multi() && opt.CPUTime {
		// Across processes the simulator queues each call and makes it at the ranks' next meeting,
		// so the simulated host spends no time launching it: -C would print 0.
		return usageErr("-C 1 across processes is not simulated (the host's launch time would read 0): drop -C, or run the ranks in one process (-g N)")
	}
	n := len(b.Devices())
	if proc.Multi() {
		n, opt.NGPUs = proc.Size, 0
	}
	if opt.NGPUs > n && f.nthreads > 1 { // the GPUs asked for are -t x -g: name both
		return usageErr("invalid -t %d -g %d: %d GPUs, and only %d were found", f.nthreads, max(f.ngpus, 1), opt.NGPUs, n)
	}
	if err := coll.CheckRanks(opt, n); err != nil {
		return usageErr("%v", err)
	}
	if sb, ok := b.(*sim.Backend); ok {
		ranks := n
		if opt.NGPUs > 0 {
			ranks = opt.NGPUs
		}
		if err := sb.CheckCollective(c.Name, ranks); err != nil {
			return usageErr("%v", err)
		}
		if cal := sb.Topology().Calibration; cal != nil {
			calibratedRange(e, cal, opt.Sweep, ranks)
		}
	}
	out := e.stdout
	if proc.Rank != 0 { // rank 0 prints the whole world's results
		out = io.Discard
	}
	w, err := report.NewCollWriter(g.output, named{out, "stdout"})
	if err != nil {
		return usageErr("%v", err)
	}
	if g.output == "csv" && proc.Rank == 0 { // CSV has no place for the header's notes
		w = report.Tee(w, report.NoticeWriter(e.stderr))
	}
	ctx := cmd.Context()
	var wd *world
	if proc.Multi() {
		if wd, err = joinWorld(cmd, e, g, b, proc, addr, &f.launch, &opt); err != nil {
			return err
		}
		ctx = wd.group.Context()
	}
	r := &report.CollRun{Version: e.version, Coll: c, Backend: b.Name(), Opt: opt, PID: e.pid, Start: e.now(), DataCap: dataCap, Threads: threads, MinBusBW: f.minBusBW}
	if t := b.Topology(); t != nil {
		r.Topology = t.Name
	}
	if wd != nil {
		r.PIDs, r.Launch = wd.pids, wd.line
	}
	if d, ok := b.(describer); ok {
		r.Runtime = d.Describe()
	}
	if proc.Rank == 0 {
		ranks := n
		if opt.NGPUs > 0 {
			ranks = opt.NGPUs
		}
		if proc.Multi() { // a process per rank: every rank launches at once
			threads = ranks
		}
		if err := setExpect(cmd, e, g, &f.expect, b, &opt, r, ranks, threads); err != nil {
			if wd != nil {
				wd.close(err)
			}
			return err
		}
		r.Opt = opt
	}
	if f.out != "" && proc.Rank == 0 { // the last thing that can fail before the run: nothing half-written
		err := checkOutFile("--out", f.out, g.topology)
		var file *os.File
		if err == nil {
			if file, err = os.Create(f.out); err != nil {
				err = usageErr("cannot write --out: %v", err)
			}
		}
		if err != nil {
			if wd != nil {
				wd.close(err)
			}
			return err
		}
		defer file.Close()
		w = report.Tee(w, report.NewCollStream(named{file, "--out " + f.out}))
	}
	return f.measure(ctx, e, g, b, opt, r, w, wd, proc.Rank == 0)
}

// prepare turns the flags into options and finds this process's place among the others; every
// error is a usage error, and nothing has been written yet.
func (f *collFlags) prepare(cmd *cobra.Command, e *env, g *globals, c *coll.Collective) (coll.Options, launch.Process, string, error) {
	var proc launch.Process
	if err := g.validate("auto", "cuda", "sim"); err != nil {
		return coll.Options{}, proc, "", err
	}
	opt, err := f.options(cmd, c, g.seed)
	if err != nil {
		return opt, proc, "", err
	}
	if err := f.expect.check(cmd); err != nil {
		return opt, proc, "", err
	}
	if f.minBusBW, err = coll.TestsEnv(os.LookupEnv); err != nil {
		return opt, proc, "", usageErr("%v", err)
	}
	if f.op == "all" && c.TakesOp {
		fmt.Fprintln(e.stderr, "gpubench: -o all runs sum, prod, max, min and avg; nccl-tests' -o all also runs mulsum (NCCL's premultiplied sum), which gpubench does not")
	}
	if f.dtype == "all" {
		fmt.Fprintf(e.stderr, "gpubench: -d all runs %s; nccl-tests' -d all also runs f8e4m3 and f8e5m2 on Hopper and later GPUs, which gpubench does not\n", strings.Join(typeList(), ", "))
	}
	if !c.Rooted && f.root != 0 {
		fmt.Fprintf(e.stderr, "gpubench: -r %d ignored: %s has no root (-r is for broadcast and reduce)\n", f.root, c.Name)
	}
	if !c.TakesOp && cmd.Flags().Changed("op") { // nccl-tests' binaries share one parser, -o included
		fmt.Fprintf(e.stderr, "gpubench: -o %s ignored: %s reduces nothing (-o is for allreduce, reducescatter, reduce and sendrecv)\n", f.op, c.Name)
	}
	if proc, err = f.launch.process(); err != nil {
		return opt, proc, "", err
	}
	if proc.Notice != "" {
		fmt.Fprintf(e.stderr, "gpubench: %s\n", proc.Notice)
	}
	var addr string
	if proc.Multi() {
		if addr, err = proc.Address(f.launch.rendezvous); err != nil {
			return opt, proc, "", usageErr("%s", launchMsg(err))
		}
		if opt.NGPUs > 1 {
			if f.nthreads > 1 { // -t threads of -g GPUs each
				return opt, proc, "", usageErr("invalid -t %d: across processes each process drives one GPU from one thread; drop -t", f.nthreads)
			}
			return opt, proc, "", usageErr("invalid -g %d: across processes each process drives one GPU; drop -g", opt.NGPUs)
		}
		g.hubHost = hubHost(addr)
	}
	return opt, proc, addr, nil
}

// measure runs the sweep, handing every row to w as it comes, and maps how it ended to an exit
// code. A write that fails ends the run at once (a full disk must not leave a sweep running with
// nowhere to go); the other writer still gets the rows so far and the end.
func (f *collFlags) measure(ctx context.Context, e *env, g *globals, b gpu.Backend, opt coll.Options, r *report.CollRun, w report.CollWriter, wd *world, rank0 bool) error {
	c := opt.Coll
	ctx, endRun := context.WithCancelCause(ctx)
	defer endRun(nil)
	var writeErr error
	keep := func(err error) {
		if writeErr == nil && err != nil {
			writeErr = err
			endRun(err)
		}
	}
	opt.OnStart = func(s *coll.Summary) {
		r.Summary = s
		keep(w.Start(r))
	}
	rows := 0
	progress := e.progress && rank0 && g.output != "table" // the table shows its own progress
	opt.OnResult = func(res coll.Result) {
		keep(w.Row(r, res))
		rows++
		if progress {
			fmt.Fprintf(e.stderr, "\rgpubench: %s: %d rows measured, last %d B ", c.Name, rows, res.Size)
		}
	}
	r.Opt = opt
	s, runErr := coll.Run(ctx, b, opt)
	if wd != nil {
		runErr = wd.close(runErr)
	}
	if progress && rows > 0 {
		fmt.Fprintln(e.stderr)
	}
	if s != nil && r.Summary != nil {
		r.Summary = s
		if runErr != nil && s.Err != nil {
			s.Err = runErr // across processes: why this rank's run stopped, naming the rank at fault
		}
		keep(w.End(r))
	}
	switch {
	case writeErr != nil:
		return runtimeErr(fmt.Errorf("writing results: %w", writeErr))
	case errors.Is(runErr, coll.ErrOption):
		return usageErr("%v", runErr)
	case runErr != nil:
		return runtimeErr(runErr)
	case s.OutOfBounds > 0:
		return &exitError{code: exitCheck, err: fmt.Errorf("%s: %d results had wrong data (see #wrong), in the output of %s", c.Name, s.OutOfBounds, report.WrongRanksText(s))}
	case r.AvgBusBWFailed():
		return &exitError{code: exitCheck, err: fmt.Errorf("%s: the average bus bandwidth, %.6g GB/s, is under 0.9 of NCCL_TESTS_MIN_BW=%g", c.Name, s.AvgBusBW, *r.MinBusBW)}
	}
	return nil
}

// named is a writer whose errors say where it writes.
type named struct {
	w    io.Writer
	name string
}

func (n named) Write(p []byte) (int, error) {
	k, err := n.w.Write(p)
	if err != nil {
		err = fmt.Errorf("%s: %w", n.name, err)
	}
	return k, err
}
