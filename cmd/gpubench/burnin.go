package main

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/burnin"
	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/input"
	"github.com/gpubench/gpubench/internal/metrics"
	"github.com/gpubench/gpubench/internal/metrics/telemetry"
	"github.com/gpubench/gpubench/internal/p2p"
	"github.com/gpubench/gpubench/internal/results"
	"github.com/gpubench/gpubench/internal/sim"
)

type burninFlags struct {
	refRanks           map[string]int // each --reference file's rank count
	duration, baseline time.Duration
	collectives        string
	sizes              string
	iters, warmup      int
	p2pSize            string
	floor, minBusBW    float64
	references         []string
	ignoreXID          string
	maxReplays         float64
	maxNVLink          float64
	metricsAddr        string
	interval           time.Duration
	out, results       string // results is --out's old name
	hold               time.Duration
	timeout            int
	nvmlLib            string
	expect             bool
}

func newBurninCmd(e *env, g *globals) *cobra.Command {
	f := &burninFlags{}
	cmd := &cobra.Command{
		Use:   "burnin",
		Short: "Keep every GPU and link busy for a set time, watch telemetry, and judge each GPU",
		Long: "burnin runs collectives and GPU-to-GPU copies at large sizes for --duration, checking every\n" +
			"result, while it samples each GPU's telemetry (and serves it to Prometheus with --metrics).\n" +
			"It ends with a verdict per GPU and check: wrong data; bandwidth below a floor (a fraction of\n" +
			"what the simulator expects of the machine, of the first minute's best, of a --reference file,\n" +
			"or --min-busbw); new XIDs; new uncorrectable\n" +
			"ECC errors or row-remap failures; PCIe replays and NVLink errors over their thresholds;\n" +
			"hardware thermal or power slowdown; clocks below base. Exit 3 when any check fails.\n" +
			"The clock is the backend's: on the simulator --duration is virtual time (2h costs about a minute of CPU).",
		Example: "  gpubench burnin --duration 2h --metrics :9400 --out burnin.jsonl\n" +
			"  gpubench burnin --backend sim --duration 10m --sim-fault xid=3@5m:48\n" +
			"  gpubench burnin --reference allreduce.json --output json",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd, e, g) },
	}
	fl := cmd.Flags()
	fl.DurationVar(&f.duration, "duration", time.Hour, "how long to run, on the backend's clock (virtual time on the simulator)")
	fl.DurationVar(&f.baseline, "baseline", time.Minute, "opening window whose best bandwidths set the floors")
	fl.StringVar(&f.collectives, "collectives", "allreduce,allgather,reducescatter,alltoall", "collectives to run each pass, comma-separated (or none)")
	fl.StringVar(&f.sizes, "sizes", "256K:1G:x16", "collective sizes MIN:MAX[:xFACTOR|:+STEP]")
	fl.IntVarP(&f.iters, "iters", "n", 5, "timed iterations per size")
	fl.IntVarP(&f.warmup, "warmup", "w", 1, "warm-up iterations per size, in the first pass")
	fl.StringVar(&f.p2pSize, "p2p-size", "256MiB", "bytes per GPU-to-GPU copy (0: no copies)")
	fl.Float64Var(&f.floor, "floor", 0.75, "fraction of the baseline or reference bandwidth a measurement must reach")
	fl.Float64Var(&f.minBusBW, "min-busbw", 0, "busbw in GB/s every collective row must reach (instead of the baseline)")
	fl.StringArrayVar(&f.references, "reference", nil, "a result file from gpubench <collective> --output json whose busbw sets the floor (repeatable)")
	fl.StringVar(&f.ignoreXID, "ignore-xid", "13,31,43,45,68", "XIDs that do not fail the burn-in (application errors), comma-separated, or none")
	fl.Float64Var(&f.maxReplays, "max-pcie-replays", 80, "new PCIe replays per GPU above which the burn-in fails")
	fl.Float64Var(&f.maxNVLink, "max-nvlink-errors", 100, "new NVLink errors per link above which the burn-in fails")
	fl.StringVar(&f.metricsAddr, "metrics", "", "serve Prometheus metrics on this address, e.g. :9400 (port 0 picks one)")
	fl.DurationVar(&f.interval, "sample-interval", metrics.DefaultInterval, "how often to sample GPU telemetry (100ms to 1m)")
	fl.StringVar(&f.out, "out", "", "stream every result to this file as JSON lines, as they come")
	fl.StringVar(&f.results, "results", "", "the old name of --out")
	_ = fl.MarkDeprecated("results", "use --out")
	fl.SetOutput(e.stderr) // the notice, which cobra would print on stdout among the results
	fl.DurationVar(&f.hold, "hold", 0, "with --metrics: keep serving this long after the end, so that the verdict is scraped")
	fl.IntVarP(&f.timeout, "timeout", "T", 300, "seconds to wait for the GPUs before reporting a hang (exit 5); an unattended run must end, so unlike the collectives' 0 there is a limit")
	fl.StringVar(&f.nvmlLib, "nvml-lib", "", "path of libnvidia-ml to load (default: libnvidia-ml.so.1)")
	fl.BoolVar(&f.expect, "expect", false, "hold each collective row to --floor of what the simulator expects of this machine, unless --reference, --min-busbw or --baseline is given (default on for real GPUs)")
	return cmd
}

func (f *burninFlags) options() (burnin.Options, error) {
	opt := burnin.Options{Duration: f.duration, Baseline: f.baseline, Iters: f.iters, Warmup: f.warmup, Floor: f.floor,
		MinBusBW: f.minBusBW, MaxPCIeReplays: f.maxReplays, MaxNVLinkErr: f.maxNVLink, Timeout: time.Duration(f.timeout) * time.Second}
	var err error
	switch {
	case f.duration <= 0:
		return opt, usageErr("invalid --duration %v: give a positive duration such as 2h", f.duration)
	case f.baseline <= 0:
		return opt, usageErr("invalid --baseline %v: give a positive duration such as 1m (or --min-busbw, --reference for floors that need none)", f.baseline)
	case f.iters < 1:
		return opt, usageErr("invalid -n %d: run at least 1 iteration", f.iters)
	case f.warmup < 0:
		return opt, usageErr("invalid -w %d: warm-up iterations cannot be negative", f.warmup)
	case !(f.floor > 0 && f.floor <= 1):
		return opt, usageErr("invalid --floor %v: use a fraction in (0, 1], e.g. 0.75", f.floor)
	case !(f.minBusBW >= 0) || math.IsInf(f.minBusBW, 0):
		return opt, usageErr("invalid --min-busbw %v: use GB/s, 0 or more", f.minBusBW)
	case !(f.maxReplays >= 0):
		return opt, usageErr("invalid --max-pcie-replays %v: use a count, 0 or more", f.maxReplays)
	case !(f.maxNVLink >= 0):
		return opt, usageErr("invalid --max-nvlink-errors %v: use a count, 0 or more", f.maxNVLink)
	case f.interval < metrics.MinInterval || f.interval > metrics.MaxInterval:
		return opt, usageErr("invalid --sample-interval %v: use %v to %v", f.interval, metrics.MinInterval, metrics.MaxInterval)
	case f.timeout < 1 || f.timeout > maxTimeoutSecs:
		return opt, usageErr("invalid --timeout %d: give 1 to %d seconds", f.timeout, maxTimeoutSecs)
	case f.hold < 0:
		return opt, usageErr("invalid --hold %v: give a duration, 0 or more", f.hold)
	case f.hold > 0 && f.metricsAddr == "":
		return opt, usageErr("--hold %v keeps the --metrics server up after the end; give --metrics too", f.hold)
	}
	if opt.Collectives, err = burnin.ParseCollectives(f.collectives); err != nil {
		return opt, usageErr("invalid --collectives: %v", err)
	}
	if opt.Sweep, err = coll.ParseSizes(f.sizes); err != nil {
		return opt, usageErr("invalid --sizes %q: %v; use MIN:MAX[:xFACTOR|:+STEP], e.g. 256K:1G:x16", f.sizes, err)
	}
	if f.p2pSize != "0" {
		if opt.P2PSize, err = coll.ParseSize(f.p2pSize); err != nil || opt.P2PSize < 16 {
			return opt, usageErr("invalid --p2p-size %q: give bytes (at least 16), e.g. 256MiB, or 0 for no copies", f.p2pSize)
		}
	}
	if len(opt.Collectives) == 0 && opt.P2PSize == 0 {
		return opt, usageErr("nothing to run: give --collectives or a --p2p-size above 0")
	}
	if opt.IgnoredXIDs, err = burnin.ParseIgnoredXIDs(f.ignoreXID); err != nil {
		return opt, usageErr("invalid --ignore-xid %q: %v", f.ignoreXID, err)
	}
	if f.results != "" {
		if f.out != "" && f.out != f.results {
			return opt, usageErr("--results is the old name of --out: give --out alone")
		}
		f.out = f.results
	}
	if len(f.references) > 0 {
		opt.Reference = burnin.Reference{}
		for _, path := range f.references {
			file, err := results.ReadFile(path)
			if err != nil {
				return opt, usageErr("invalid --reference %v", err)
			}
			if file.Coll == nil {
				return opt, usageErr("invalid --reference %s: a p2p result; give a collective's (gpubench allreduce --output json)", path)
			}
			if err := opt.Reference.Add(file.Coll); err != nil {
				return opt, usageErr("invalid --reference %s: %v", path, err)
			}
			if f.refRanks == nil {
				f.refRanks = map[string]int{}
			}
			f.refRanks[path] = cmp.Or(file.Coll.Config.Ranks, len(file.Coll.Devices))
		}
	}
	return opt, nil
}

// openTelemetry returns the telemetry of backend b: the simulator's model on the simulator, NVML
// on real GPUs (nil, with a notice, when NVML does not load).
// A library named with --nvml-lib must load (exit 4 otherwise), as a named --cuda-lib must.
func openTelemetry(e *env, b gpu.Backend, lib string) (src telemetry.Source, virtual bool, err error) {
	if sb, ok := b.(*sim.Backend); ok {
		return sim.NewTelemetry(sb), true, nil
	}
	src, err = metrics.OpenNVML(lib)
	switch {
	case err != nil && lib != "":
		return nil, false, &exitError{code: exitNoGPU, err: fmt.Errorf("--nvml-lib %s names a library that did not load: %w", lib, err)}
	case err != nil:
		fmt.Fprintf(e.stderr, "gpubench: %v; the telemetry checks are skipped\n", err)
		return nil, false, nil
	}
	return src, false, nil
}

func (f *burninFlags) run(cmd *cobra.Command, e *env, g *globals) error {
	if err := g.validate("auto", "cuda", "sim"); err != nil {
		return err
	}
	opt, err := f.options()
	if err != nil {
		return err
	}
	b, _, err := g.openColl(e)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := checkP2PSize(b, opt.P2PSize); err != nil {
		return err
	}
	if sb, ok := b.(*sim.Backend); ok { // NCCL_ALGO or NCCL_PROTO that leaves a collective nothing: refused now, as its command refuses it
		for _, c := range opt.Collectives {
			if err := sb.CheckCollective(c.Name, len(b.Devices())); err != nil {
				return usageErr("%v", err)
			}
		}
		unmodelledNotice(e, ncclEnv())
	}
	for path, ranks := range f.refRanks { // busbw depends on the ranks: another count is another machine
		if n := len(b.Devices()); ranks != n {
			return usageErr("invalid --reference %s: measured on %d ranks, and this burn-in runs on %d GPUs; give a run of all of this machine's GPUs", input.Safe(path), ranks, n)
		}
	}
	if len(opt.Reference) > 0 {
		for _, c := range opt.Collectives {
			if _, ok := opt.Reference[c.Name]; !ok {
				fmt.Fprintf(e.stderr, "gpubench: --reference holds no %s run: its rows are held to no floor\n", c.Name)
			}
		}
	}
	if err := f.expectFloors(cmd, e, g, b, &opt); err != nil {
		return err
	}
	ctx := cmd.Context()
	src, virtual, err := openTelemetry(e, b, f.nvmlLib)
	if err != nil {
		return err
	}
	var sampler *metrics.Sampler
	if src != nil {
		sampler = metrics.NewSampler(src, f.interval)
		opt.Sampler, opt.PollEachPass = sampler, virtual
		sampler.Refresh()
		stop := func() {}
		if !virtual {
			stop = sampler.Start(ctx)
		}
		defer func() {
			stop() // no sample is in flight once it returns
			src.Close()
		}()
	}
	reg, bench := metrics.NewRegistry(sampler)
	opt.Bench = bench
	var srv *metrics.Server
	if f.metricsAddr != "" {
		if srv, err = metrics.Listen(f.metricsAddr, reg); err != nil {
			return usageErr("invalid --metrics %q: %v", f.metricsAddr, err)
		}
		defer srv.Close()
	}
	// Every input is valid: only now is the results file created (or emptied).
	var stream *burnin.Stream
	if f.out != "" {
		file, err := os.OpenFile(f.out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return usageErr("invalid --out: %v; give a file gpubench can write", err)
		}
		defer file.Close()
		stream = burnin.NewStream(file)
		opt.Record = func(r burnin.Record) error {
			if err := stream.Write(r); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			return nil
		}
	}
	if srv != nil {
		fmt.Fprintf(e.stderr, "gpubench: metrics on http://%s%s\n", srv.Addr(), metrics.MetricsPath)
	}
	topology := ""
	if t := b.Topology(); t != nil {
		topology = t.Name
	}
	start := e.now()
	if opt.Record != nil {
		devs := []burnin.Device{}
		for _, d := range b.Devices() {
			devs = append(devs, burnin.Device{Index: d.Ordinal, Name: d.Name, PCIBusID: d.PCIBusID})
		}
		if err := opt.Record(burnin.Record{Record: "start", Version: e.version, Backend: b.Name(), Topology: topology,
			StartTime: &start, Planned: opt.Duration.Seconds(), Devices: devs}); err != nil {
			return runtimeErr(err)
		}
	}
	lastLine := time.Time{}
	opt.Progress = func(elapsed time.Duration, pass, failing int) {
		// Every 10 s of wall time at most: on a terminal a line that updates, else one per line.
		if time.Since(lastLine) < 10*time.Second && elapsed < opt.Duration {
			return
		}
		lastLine = time.Now()
		left := max(opt.Duration-elapsed, 0)
		msg := fmt.Sprintf("gpubench: burnin: %v of %v, %v left, pass %d, %d checks failing", elapsed.Round(time.Second), opt.Duration, left.Round(time.Second), pass, failing)
		if e.progress {
			fmt.Fprintf(e.stderr, "\r%s ", msg)
		} else {
			fmt.Fprintln(e.stderr, msg)
		}
	}
	opt.Notice = func(msg string) { fmt.Fprintf(e.stderr, "gpubench: burnin: %s\n", msg) }
	rep, runErr := burnin.Run(ctx, b, opt)
	if e.progress {
		fmt.Fprintln(e.stderr)
	}
	end := e.now()
	s := &burnin.Summary{Version: e.version, Backend: b.Name(), Topology: topology, StartTime: start,
		Planned: opt.Duration.Seconds(), Elapsed: rep.Elapsed.Seconds(), Passes: rep.Passes, Devices: rep.Devices,
		Verdict: rep.Verdict, Interrupted: rep.Interrupted, Checks: rep.Checks}
	if runErr != nil {
		msg := runErr.Error()
		s.Error = &msg
	}
	var writeErr error
	if opt.Record != nil {
		endRec := burnin.Record{Record: "end", T: rep.Elapsed.Seconds(), Elapsed: rep.Elapsed.Seconds(), Passes: rep.Passes, EndTime: &end, Interrupted: rep.Interrupted, Verdict: rep.Verdict}
		if s.Error != nil {
			endRec.Error = *s.Error
		}
		if writeErr = opt.Record(burnin.Record{Record: "verdict", T: rep.Elapsed.Seconds(), Checks: rep.Checks, Verdict: rep.Verdict}); writeErr == nil {
			writeErr = opt.Record(endRec)
		}
	}
	if err := burnin.Write(e.stdout, g.output, s); err != nil {
		return runtimeErr(fmt.Errorf("writing results: %w", err))
	}
	if srv != nil && f.hold > 0 && ctx.Err() == nil {
		fmt.Fprintf(e.stderr, "gpubench: serving the final metrics for %v more\n", f.hold)
		select {
		case <-ctx.Done():
		case <-time.After(f.hold):
		}
	}
	switch {
	case runErr != nil:
		return runtimeErr(runErr)
	case writeErr != nil:
		return runtimeErr(writeErr)
	case rep.Verdict == burnin.Fail:
		return &exitError{code: exitCheck, err: fmt.Errorf("burnin failed: %s", failedText(rep.Checks))}
	}
	return nil
}

// failedText names the failed checks, one entry per check with its subjects as the table names
// them, counted where there are many: "bandwidth, p2p_bandwidth on all and 56 pairs (among GPUs
// 0 to 7)". A burn-in of 72 GPUs that fails everywhere still says it in a line.
func failedText(checks []burnin.Check) string {
	var out []string
	for i := 0; i < len(checks); {
		name := checks[i].Check
		var all bool
		var gpus []int
		var pairs [][2]int
		for ; i < len(checks) && checks[i].Check == name; i++ { // the checks come grouped by check
			c := checks[i]
			if c.Verdict != burnin.Fail {
				continue
			}
			a, b, pair := strings.Cut(c.Subject, "-")
			x, _ := strconv.Atoi(a)
			y, _ := strconv.Atoi(b)
			switch {
			case c.Subject == "all": // the run's own check (the collectives, their calls, a hang)
				all = true
			case pair:
				pairs = append(pairs, [2]int{x, y})
			default:
				gpus = append(gpus, x)
			}
		}
		var subjects []string
		if all {
			subjects = append(subjects, "all")
		}
		if len(gpus) > 0 {
			subjects = append(subjects, gpuText(gpus))
		}
		switch n := len(pairs); {
		case n == 0:
		case n <= 4:
			var s []string
			for _, p := range pairs {
				s = append(s, fmt.Sprintf("%d-%d", p[0], p[1]))
			}
			subjects = append(subjects, "pair"+plural(n)+" "+strings.Join(s, ", "))
		default:
			count := map[int]int{}
			for _, p := range pairs {
				count[p[0]]++
				count[p[1]]++
			}
			involved := slices.Sorted(maps.Keys(count))
			what := "among " + gpuText(involved)
			for _, g := range involved {
				if count[g] == n {
					what = fmt.Sprintf("each involving GPU %d", g)
				}
			}
			subjects = append(subjects, fmt.Sprintf("%d pairs (%s)", n, what))
		}
		switch {
		case len(subjects) == 0:
		case len(subjects) == 1 && all:
			out = append(out, name)
		default:
			out = append(out, name+" on "+strings.Join(subjects, " and "))
		}
	}
	return strings.Join(out, ", ")
}

// gpuText names GPUs (in order): "GPU 3", "GPUs 0 to 3, 6", or "12 GPUs" when that is long.
func gpuText(gpus []int) string {
	if len(gpus) == 1 {
		return fmt.Sprintf("GPU %d", gpus[0])
	}
	var runs []string
	for i := 0; i < len(gpus); {
		j := i
		for j+1 < len(gpus) && gpus[j+1] == gpus[j]+1 {
			j++
		}
		switch {
		case j-i >= 2:
			runs = append(runs, fmt.Sprintf("%d to %d", gpus[i], gpus[j]))
		case j > i:
			runs = append(runs, strconv.Itoa(gpus[i]), strconv.Itoa(gpus[j]))
		default:
			runs = append(runs, strconv.Itoa(gpus[i]))
		}
		i = j + 1
	}
	if len(runs) > 6 {
		return fmt.Sprintf("%d GPUs", len(gpus))
	}
	return "GPUs " + strings.Join(runs, ", ")
}

// checkP2PSize refuses copies that cannot fit: each GPU holds two buffers of the copy size.
func checkP2PSize(b gpu.Backend, size int64) error {
	for _, d := range b.Devices() {
		if size > 0 && 2*size > d.MemoryBytes {
			return usageErr("invalid --p2p-size %s: the copies need two buffers of it on every GPU and GPU %d has %d MiB; give at most %dMiB, or 0 for no copies",
				coll.FormatSize(size), d.Ordinal, d.MemoryBytes>>20, d.MemoryBytes/2>>20)
		}
	}
	return nil
}

// expectFloors holds every collective row to --floor of what the simulator expects of the machine
// for it (gpubench <collective> --expect's figure) when expectations are on and neither
// --reference, --min-busbw nor --baseline gives the floors; without expected figures the baseline
// sets them, as the notice says.
func (f *burninFlags) expectFloors(cmd *cobra.Command, e *env, g *globals, b gpu.Backend, opt *burnin.Options) error {
	x := expectFlags{on: f.expect}
	if on, err := x.wanted(cmd, simulated(b)); !on || len(opt.Reference) > 0 || opt.MinBusBW > 0 || cmd.Flags().Changed("baseline") {
		return err
	}
	ranks := len(b.Devices())
	t, source, err := expectTopology(cmd, g, simulated(b), ranks)
	if err != nil {
		return err
	}
	if t == nil {
		fmt.Fprintf(e.stderr, "gpubench: bandwidth floors from the first %v's best: no expected figures: %s\n", opt.Baseline, source)
		return nil
	}
	ref := burnin.Reference{}
	for _, c := range opt.Collectives {
		o := coll.Options{Coll: c, Sweep: opt.Sweep, DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum}, Iters: opt.Iters, Average: 1}
		rows, err := expectedRows(cmd.Context(), t, o, ranks, 1)
		if err != nil {
			fmt.Fprintf(e.stderr, "gpubench: bandwidth floors from the first %v's best: the simulator cannot run %s on %s: %v\n", opt.Baseline, c.Name, t.Name, err)
			return nil
		}
		m := map[int64]float64{}
		for _, r := range rows {
			if r.Size > 0 && r.OutOfPlace.BusBW > 0 {
				m[r.Size] = r.OutOfPlace.BusBW
			}
		}
		if len(m) > 0 {
			ref[c.Name] = m
		}
	}
	if len(ref) > 0 {
		opt.Reference, opt.ReferenceFrom = ref, "expected: "+source
	}
	if opt.P2PSize > 0 { // the same copies on the simulated machine
		sb, err := sim.New(t, sim.Options{Env: ncclEnv()})
		if err != nil {
			return nil
		}
		defer sb.Close()
		res, err := p2p.Run(cmd.Context(), sb, p2p.Options{Size: opt.P2PSize, Repeat: 1, Samples: 1})
		if err != nil {
			fmt.Fprintf(e.stderr, "gpubench: p2p floors from the first %v's best: the simulator cannot run these copies on %s: %v\n", opt.Baseline, t.Name, err)
			return nil
		}
		if m := res.Matrix("uni_enabled"); m != nil {
			opt.P2PExpected = map[[2]int]float64{}
			for i, row := range m.Cells {
				for j, c := range row {
					if i != j && c.Value != nil && *c.Value > 0 {
						opt.P2PExpected[[2]int{res.Devices[i].Ordinal, res.Devices[j].Ordinal}] = *c.Value
					}
				}
			}
		}
	}
	return nil
}
