package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/cuda"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/input"
	"github.com/gpubench/gpubench/internal/p2p"
	"github.com/gpubench/gpubench/internal/report"
	"github.com/gpubench/gpubench/internal/sim"
)

type p2pFlags struct {
	size            string
	samples, repeat int
	devices, pairs  string
	sweep           string
	noVerify        bool
	timeout         int
	expect          expectFlags
}

func newP2PCmd(e *env, g *globals) *cobra.Command {
	f := &p2pFlags{}
	cmd := &cobra.Command{
		Use:   "p2p",
		Short: "Measure GPU-to-GPU and host copies: access, bandwidth both ways and latency, P2P on and off",
		Long: "p2p answers whether GPU i reaches GPU j directly, how fast, both ways, and with what latency, as\n" +
			"p2pBandwidthLatencyTest and nvbandwidth do: the peer-access matrix, unidirectional and\n" +
			"bidirectional bandwidth and latency with P2P disabled and enabled, host-to-device,\n" +
			"device-to-host and device-local copy bandwidth. Copies that run together start together,\n" +
			"every copy's data is checked afterwards, and GB means 1e9 bytes.",
		Example: "  gpubench p2p\n  gpubench p2p --devices 0-3 --size 256MiB\n  gpubench p2p --pairs 0-1 --sweep 4K:1G\n  gpubench p2p --backend sim --topology pcie-4090x8",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, e, g)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.size, "size", "512MiB", "bytes per copy (B, K, M, G are binary units)")
	fl.IntVar(&f.samples, "samples", 3, "timed samples per measurement; the median is reported")
	fl.IntVar(&f.repeat, "repeat", 16, "copies per sample, back to back")
	fl.StringVar(&f.devices, "devices", "", "devices to measure, e.g. 0,2 or 0-3 (default all)")
	fl.StringVar(&f.pairs, "pairs", "", "only these pairs in the matrices, e.g. 0-1,2-3")
	fl.StringVar(&f.sweep, "sweep", "", "with one --pairs pair: also measure it over a size sweep MIN:MAX[:xFACTOR|:+STEP]")
	fl.BoolVar(&f.noVerify, "no-verify", false, "skip checking the copied data")
	f.expect.register(cmd)
	fl.IntVarP(&f.timeout, "timeout", "T", 60, "seconds to wait for one measurement before reporting a hang (exit 5); a sample of copies takes well under a second on a healthy machine")
	return cmd
}

func (f *p2pFlags) run(cmd *cobra.Command, e *env, g *globals) error {
	if err := g.validate("auto", "cuda", "sim"); err != nil {
		return err
	}
	if err := f.expect.check(cmd); err != nil {
		return err
	}
	opt := p2p.Options{Samples: f.samples, Repeat: f.repeat, Verify: !f.noVerify, Timeout: time.Duration(f.timeout) * time.Second}
	var err error
	if opt.Size, err = coll.ParseSize(f.size); err != nil {
		return usageErr("invalid --size %q: %v", f.size, err)
	}
	switch {
	case opt.Size < p2p.LatencyBytes:
		return usageErr("invalid --size %d: use at least %d bytes", opt.Size, p2p.LatencyBytes)
	case f.samples < 1:
		return usageErr("invalid --samples %d: take at least 1 sample", f.samples)
	case f.repeat < 1:
		return usageErr("invalid --repeat %d: copy at least once per sample", f.repeat)
	case f.timeout < 1 || f.timeout > maxTimeoutSecs:
		return usageErr("invalid --timeout %d: give 1 to %d seconds", f.timeout, maxTimeoutSecs)
	}
	if err := refuseBlindFaults(g.faults, p2pBlind, "hang, corrupt, slow-link or slow-node"); err != nil {
		return err
	}
	if f.sweep != "" {
		w, err := coll.ParseSizes(f.sweep)
		if err != nil {
			return usageErr("invalid --sweep %q: %v; use MIN:MAX[:xFACTOR|:+STEP], e.g. 4K:64M:x4", f.sweep, err)
		}
		opt.Sweep = w.Sizes()
		if opt.Sweep[0] < p2p.LatencyBytes {
			return usageErr("invalid --sweep %q: sizes start at %d bytes", f.sweep, p2p.LatencyBytes)
		}
	}
	b, topology, err := g.openP2P(e)
	if err != nil {
		return err
	}
	defer b.Close()
	n := len(b.Devices())
	if f.devices != "" {
		if opt.Devices, err = p2p.ParseDevices(f.devices, n); err != nil {
			return usageErr("invalid --devices %q: %v", f.devices, err)
		}
	}
	if f.pairs != "" {
		if opt.Pairs, err = p2p.ParsePairs(f.pairs, n); err != nil {
			return usageErr("invalid --pairs %q: %v", f.pairs, err)
		}
		for _, p := range opt.Pairs {
			if opt.Devices != nil && (!slices.Contains(opt.Devices, p.A) || !slices.Contains(opt.Devices, p.B)) {
				return usageErr("invalid --pairs %q: pair %s is not among --devices %s", f.pairs, p, f.devices)
			}
		}
		if opt.Devices == nil { // the matrices hold the GPUs of the pairs, not every GPU
			for _, p := range opt.Pairs {
				opt.Devices = append(opt.Devices, p.A, p.B)
			}
			slices.Sort(opt.Devices)
			opt.Devices = slices.Compact(opt.Devices)
		}
	}
	k := len(opt.Devices)
	if opt.Devices == nil {
		k = n
	}
	if k > p2p.MaxDevices {
		return usageErr("p2p measures every pair of %d GPUs, and takes at most %d: choose some with --devices or --pairs", k, p2p.MaxDevices)
	}
	if opt.Sweep != nil && len(opt.Pairs) != 1 {
		return usageErr("--sweep measures one pair: give exactly one with --pairs, e.g. --pairs 0-1")
	}
	if !slices.Contains(report.Formats, g.output) {
		return usageErr("unknown --output %q: use table, json, csv or markdown", g.output)
	}
	if e.progress {
		opt.Progress = func(what string) { fmt.Fprintf(e.stderr, "gpubench: p2p: %s\n", what) }
	}
	start := e.now()
	res, err := p2p.Run(cmd.Context(), b, opt)
	var stopped error // interrupted or hung: what was measured is reported, then the exit says so
	var hang *gpu.HangError
	switch {
	case (errors.Is(err, context.Canceled) || errors.As(err, &hang)) && res != nil && res.Access != nil:
		stopped = err
	case errors.Is(err, p2p.ErrTooBig) && slices.ContainsFunc(opt.Sweep, func(s int64) bool { return s > opt.Size }):
		return usageErr("invalid --sweep %s: %v; end the sweep lower", input.Safe(f.sweep), err)
	case errors.Is(err, p2p.ErrTooBig):
		return usageErr("invalid --size: %v; use a smaller --size", err)
	case err != nil:
		return runtimeErr(err)
	}
	r := &report.P2PRun{Version: e.version, Backend: b.Name(), Topology: topology, Opt: opt, Start: start, Result: res}
	if stopped == nil {
		if r.Expect, err = f.expected(cmd, e, g, b, opt, n); err != nil {
			return err
		}
	}
	if d, ok := b.(describer); ok {
		r.Runtime = d.Describe()
	}
	if err := report.WriteP2P(e.stdout, g.output, r); err != nil {
		return runtimeErr(fmt.Errorf("writing results: %w", err))
	}
	if stopped != nil {
		if errors.Is(stopped, context.Canceled) { // a hang's own message says which devices did not finish
			fmt.Fprintln(e.stderr, "gpubench: p2p: stopped early: the matrices and rows above are those measured before the signal")
		}
		return runtimeErr(stopped)
	}
	if res.Mismatched > 0 {
		return &exitError{code: exitCheck, err: fmt.Errorf("p2p: %d copies delivered wrong data (cells marked !)", res.Mismatched)}
	}
	return nil
}

// p2pBlind says why p2p's copies cannot show a fault of each of these kinds.
var p2pBlind = map[string]string{
	"xid":        "p2p reads no XID events (burnin does)",
	"flaky-link": "the simulator fails NCCL's calls across a flaky link, not copies",
	"slow-nic":   "p2p's copies cross no NIC",
}

// describer is a real backend that can say which driver and libraries it runs on.
type describer interface{ Describe() string }

// openP2P returns the backend for p2p: the CUDA runtime for cuda, the simulator for sim, and for
// auto the CUDA runtime when it loads and has devices, else the simulator with a notice.
func (g *globals) openP2P(e *env) (p2p.Backend, string, error) {
	if err := g.noLibsForSim(); err != nil {
		return nil, "", err
	}
	if g.backend != "sim" {
		b, err := cuda.Open(g.cudaLib)
		if err == nil {
			return b, "", nil
		}
		if err := g.noRealGPU(e, err, g.namedLibs(true, false)); err != nil {
			return nil, "", err
		}
	}
	// Copies are the CUDA runtime's: NCCL's variables (NCCL_P2P_DISABLE) do not touch them.
	b, _, err := g.openSimEnv(nil)
	if err != nil {
		return nil, "", err
	}
	return b, b.Topology().Name, nil
}

// expected runs the same copies on the simulated machine (--expect): the run's own topology
// without faults on the simulator, --topology or the discovered machine on real GPUs. Nil, with a
// notice on stderr when the machine cannot be simulated, where there are no expectations.
func (f *p2pFlags) expected(cmd *cobra.Command, e *env, g *globals, b p2p.Backend, opt p2p.Options, n int) (*report.P2PExpectation, error) {
	if on, err := f.expect.wanted(cmd, simulated(b)); !on {
		return nil, err
	}
	t, source, err := expectTopology(cmd, g, simulated(b), n)
	if err != nil || t == nil {
		if t == nil && err == nil {
			fmt.Fprintf(e.stderr, "gpubench: no expected figures: %s\n", source)
		}
		return nil, err
	}
	sb, err := sim.New(t, sim.Options{})
	if err != nil {
		fmt.Fprintf(e.stderr, "gpubench: no expected figures: %v\n", err)
		return nil, nil
	}
	defer sb.Close()
	opt.Verify, opt.Progress = false, nil
	res, err := p2p.Run(cmd.Context(), sb, opt)
	if err != nil {
		fmt.Fprintf(e.stderr, "gpubench: no expected figures: the simulator cannot run these copies on %s: %v\n", t.Name, err)
		return nil, nil
	}
	return &report.P2PExpectation{Source: source, Floor: f.expect.floor, Result: res}, nil
}
