package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/sim"
)

// explainFlags are explain's own flags.
type explainFlags struct {
	size  string
	ngpus int
}

// newExplainCmd builds `gpubench explain`, which prints the cost model's reasoning for one
// collective, machine and size.
func newExplainCmd(e *env, g *globals) *cobra.Command {
	f := &explainFlags{}
	cmd := &cobra.Command{
		Use:   "explain COLLECTIVE --size SIZE",
		Short: "Say why the simulator's NCCL tuner runs a collective of a size as it does on a machine",
		Long: "explain prints the simulator's cost model (NCCL's tuner) for one collective, machine and size:\n" +
			"the algorithm and protocol it picks and the runner-up, the bottleneck link and the bus\n" +
			"bandwidth, the latency and bandwidth terms and which dominates, and the sizes where the pick\n" +
			"changes. NCCL_ALGO, NCCL_PROTO and the other NCCL_* variables steer it as they steer the\n" +
			"collectives. The size is the one the collective's command takes (--sizes), and explain\n" +
			"explains what that command runs: cut to the GPUs' memory (at its default -c 1) and rounded\n" +
			"to whole floats, or for allgather, reducescatter and alltoall each rank's share to 16 B,\n" +
			"saying so on stderr when that changes the size.",
		Example: "  gpubench explain allreduce --topology dgx-h100 --size 1G\n" +
			"  gpubench explain allgather --topology dgx-h100 --nodes 4 --size 64K --output json\n" +
			"  NCCL_ALGO=Ring gpubench explain allreduce --topology dgx-a100 -g 4 --size 8",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("explain takes one collective (%s), e.g. gpubench explain allreduce --size 1G", strings.Join(sim.ExplainCollectives, ", "))
			}
			if args[0] == "gather" || args[0] == "scatter" {
				return usageErr("explain follows NCCL's tuner, which has no %s (a group of sends and receives that nccl-tests times): gpubench %s --backend sim gives the simulated times", args[0], args[0])
			}
			return nil
		},
		ValidArgs: sim.ExplainCollectives,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd, e, g, args[0])
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.size, "size", "", "the collective's size, as --sizes takes it (B, K, M, G, T are binary units), e.g. 8, 64K, 1G")
	fl.IntVarP(&f.ngpus, "ngpus", "g", 0, "number of GPUs: the topology's first ones (default all)")
	hideShared(cmd, runFlags)
	return cmd
}

// modelOnly refuses what does not apply to a command that reads the simulator's model without
// running it (explain, plan): a real backend (reads says what the command reads instead), an
// output other than table or json, and the flags of a simulated or real run.
func modelOnly(cmd *cobra.Command, g *globals, name, reads string) error {
	if g.backend != "auto" && g.backend != "sim" {
		return usageErr("%s: drop --backend %s", reads, g.backend)
	}
	if g.output != "table" && g.output != "json" {
		return usageErr("unknown --output %q for %s: use table or json", g.output, name)
	}
	for _, flag := range runFlags {
		if cmd.Flags().Changed(flag) {
			return usageErr("--%s does not apply to %s: drop it", flag, name)
		}
	}
	return nil
}

func (f *explainFlags) run(cmd *cobra.Command, e *env, g *globals, name string) error {
	if !slices.Contains(sim.ExplainCollectives, name) {
		return usageErr("unknown collective %q: use %s", name, strings.Join(sim.ExplainCollectives, ", "))
	}
	if err := modelOnly(cmd, g, "explain", "explain reads the simulator's model of --topology"); err != nil {
		return err
	}
	if !cmd.Flags().Changed("size") {
		return usageErr("explain needs --size, e.g. --size 1G")
	}
	bytes, err := coll.ParseSize(f.size)
	if err != nil {
		return usageErr("invalid --size: %v", err)
	}
	if bytes == 0 {
		return usageErr("invalid --size %s: give at least 1 byte, e.g. --size 8", f.size)
	}
	env := ncclEnv()
	if err := sim.CheckEnv(env); err != nil {
		return usageErr("%v", err)
	}
	t, err := g.loadTopology()
	if err != nil {
		return err
	}
	n := t.NumGPUs()
	if cmd.Flags().Changed("ngpus") {
		if f.ngpus < 1 || f.ngpus > n {
			return usageErr("invalid -g %d: %s has %d GPUs; use 1 to %d", f.ngpus, t.Name, n, n)
		}
		n = f.ngpus
	}
	devs := make([]int, n)
	for i := range devs {
		devs[i] = i
	}
	// The size the collective's command runs: cut to what the GPUs' memory holds, as nccl-tests
	// cuts its largest size (at the command's default -c 1), then rounded as its counts round it
	// (sim.Explain).
	var why []string
	run := bytes
	if limit, limit0 := memoryLimit(t, devs); limit < 1 {
		return usageErr("%s's GPUs have too little memory for any size: nccl-tests keeps 1 GiB and more of a GPU's memory free; give them memory_bytes of 3 GiB or more", t.Name)
	} else if run > limit {
		run = limit
		why = append(why, fmt.Sprintf("the GPUs' memory cuts it to %d B as nccl-tests cuts its largest size, %d B with -c 0", limit, limit0))
	}
	x, err := sim.Explain(t, devs, env, name, run)
	if err != nil {
		return usageErr("%s", strings.TrimPrefix(err.Error(), sim.ErrExplain.Error()+": "))
	}
	if x.Bytes != run {
		rounding := "it runs whole 4-byte floats, its default type"
		if name == "allgather" || name == "reducescatter" || name == "alltoall" {
			rounding = "it rounds each rank's share down to 16 B"
		}
		why = append(why, rounding)
	}
	if why != nil {
		fmt.Fprintf(e.stderr, "gpubench: explain: %s --sizes %s runs %s here: %s; explaining that size\n", name, f.size, sizeText(x.Bytes), strings.Join(why, ", and "))
	}
	unmodelledNotice(e, env)
	if g.output == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(x)
	} else {
		err = writeExplanation(e.stdout, x)
	}
	if err != nil {
		return runtimeErr(fmt.Errorf("writing the explanation: stdout: %w", err))
	}
	return nil
}

// memoryLimit is the largest size the collectives' commands run on the GPUs devs of t, as
// nccl-tests cuts its largest size to the smallest GPU's memory (coll.MemoryLimit): at the
// commands' default -c 1, and at -c 0.
func memoryLimit(t *gpu.Topology, devs []int) (limit, noCheck int64) {
	least := int64(math.MaxInt64)
	for _, d := range devs {
		g, _ := t.GPU(d)
		least = min(least, g.MemoryBytes)
	}
	return coll.MemoryLimit(least, true), coll.MemoryLimit(least, false)
}

// writeExplanation prints an explanation as a few labelled lines.
func writeExplanation(w io.Writer, x sim.Explanation) error {
	var b strings.Builder
	line := func(label, format string, a ...any) {
		fmt.Fprintf(&b, "%-12s%s\n", label+":", fmt.Sprintf(format, a...))
	}
	gpus := countText(x.Ranks, "GPU")
	fmt.Fprintf(&b, "%s of %s on %s: %s, %s\n", x.Collective, sizeText(x.Bytes), x.Topology, gpus, countText(x.Nodes, "node"))
	c := x.Chosen
	pair := c.Algo + "/" + c.Proto
	// From the bottleneck on, the lines describe the simulated call, what a run shows; NCCL's
	// estimate, which it picks by, is named as such where it differs.
	differs := math.Abs(c.SimTimeUS-c.TimeUS) > 0.005*c.TimeUS
	switch {
	case x.PointToPoint:
		fmt.Fprintf(&b, "NCCL runs %s as point-to-point sends and receives, which its tuner does not choose; the simulator's point-to-point model:\n", x.Collective)
		if c.Channels > 0 {
			line("time", "%s, each operation to a peer on %s", usText(c.TimeUS), countText(c.Channels, "channel"))
		} else {
			line("time", "%s", usText(c.TimeUS)) // one rank: a local copy, no channel
		}
	case c.Algo == "copy":
		line("chosen", "a local copy at memory speed (one rank), %s", usText(c.TimeUS))
	default:
		run := ""
		if differs {
			run = fmt.Sprintf(" by NCCL's figures; the simulated call takes %s", usText(c.SimTimeUS))
			if len(c.SimWhy) > 0 {
				run += " (" + simWhyText(c.SimWhy) + ")"
			}
		}
		line("chosen", "%s, %s, %s%s", pair, countText(c.Channels, "channel"), usText(c.TimeUS), run)
		if r := x.RunnerUp; r != nil {
			line("runner-up", "%s/%s, %s, %s (%.1f%% slower)", r.Algo, r.Proto, countText(r.Channels, "channel"), usText(r.TimeUS), *x.RunnerUpSlowerPercent)
		} else {
			line("runner-up", "none: the NCCL_* variables leave only %s", pair)
		}
	}
	bottleneck := linkText(x.SimBottleneck)
	if x.LinksBusGBs > 0 {
		bottleneck += fmt.Sprintf("; rings over the links carry %s busbw", gbsText(x.LinksBusGBs))
		if x.LinksLimit != x.SimBottleneck {
			bottleneck += ", bounded by " + linkText(x.LinksLimit)
		}
		if x.Staged {
			bottleneck += ", every hop staged through host memory (no P2P)"
		}
	}
	if differs && x.Bottleneck != x.SimBottleneck {
		bottleneck += "; NCCL's estimate: " + linkText(x.Bottleneck)
	}
	line("bottleneck", "%s", bottleneck)
	bw := fmt.Sprintf("busbw %s, algbw %s", gbsText(c.SimBusGBs), gbsText(c.SimAlgGBs))
	if x.SimCapped {
		bw += "; NCCL's per-channel or protocol limit sets it, not the links"
	}
	if math.Abs(c.BusGBs-c.SimBusGBs) > 0.005*c.SimBusGBs {
		bw += "; NCCL's estimate: busbw " + gbsText(c.BusGBs)
	}
	if c.SimLatencyUS > 0.01*c.SimTimeUS {
		// What the benchmark reports: the size over the whole call's time.
		bw += "; the whole call, latency included: busbw " + gbsText(c.SimBusGBs*c.SimBandwidthUS/c.SimTimeUS)
	}
	line("bandwidth", "%s", bw)
	share := 100 * max(c.SimLatencyUS, c.SimBandwidthUS) / c.SimTimeUS
	line("terms", "latency %s + bandwidth %s (size / algbw): %s dominates (%.0f%% of the time)",
		usText(c.SimLatencyUS), usText(c.SimBandwidthUS), x.SimDominant, share)
	if c.FillUS > 0 {
		line("pipeline", "%s of the bandwidth term is NVLS's scatter, reduce and gather stages draining, which NCCL's estimate leaves out", usText(c.FillUS))
	}
	launch := usText(x.LaunchUS) + " a call from the host"
	if x.LaunchGPUs > 1 {
		launch = fmt.Sprintf("%s a GPU from the host; one thread launching it on %d GPUs of a node (nccl-tests -g %d) takes %s",
			usText(x.LaunchUS), x.LaunchGPUs, x.LaunchGPUs, usText(x.OneThreadLaunchUS))
	}
	if x.OneThreadLaunchUS > c.SimTimeUS {
		launch += ", longer than the call: a timed loop runs at the launches' pace"
	}
	line("launch", "%s", launch)
	line("balance", "the two terms are equal at %s: latency dominates below, bandwidth above", sizeText(x.SimBalanceBytes))
	if !x.PointToPoint && c.Algo != "copy" {
		switch d := x.ChangeBelow; {
		case d != nil:
			line("below", "%s/%s under %s, %s from there", d.Algo, d.Proto, sizeText(d.Bytes), pair)
		case x.Bytes <= x.ScanMinBytes:
			line("below", "not scanned: the scan starts at %s", sizeText(x.ScanMinBytes))
		default:
			line("below", "%s down to %s, the smallest size scanned", pair, sizeText(x.ScanMinBytes))
		}
		switch d := x.ChangeAbove; {
		case d != nil:
			line("above", "%s/%s from %s", d.Algo, d.Proto, sizeText(d.Bytes))
		case x.Bytes >= x.ScanMaxBytes:
			line("above", "not scanned: the scan ends at %s", sizeText(x.ScanMaxBytes))
		default:
			line("above", "%s up to %s, the largest size scanned", pair, sizeText(x.ScanMaxBytes))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func countText(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func usText(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + " us" }

// gbsText writes a bandwidth to 0.1 GB/s, or to three figures under 1 GB/s (a latency-bound
// call's, a slow fabric's), which 0.1 GB/s would show as 0.
func gbsText(v float64) string {
	if v > 0 && v < 1 {
		return strconv.FormatFloat(v, 'g', 3, 64) + " GB/s"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " GB/s"
}

// sizeText writes a byte count in a binary unit, to three figures unless exact, with the count.
func sizeText(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	return fmt.Sprintf("%s (%d B)", approxSize(n), n)
}

// approxSize writes a byte count in a binary unit, to three figures unless exact.
func approxSize(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	for k := range units {
		unit := float64(int64(1) << (10 * (k + 1)))
		v := float64(n) / unit
		digits := 2 // three figures, once rounded: 1048575 B is 1.00 MiB, not 1024 KiB
		switch {
		case n%int64(unit) == 0:
			digits = 0
		case v >= 99.95:
			digits = 0
		case v >= 9.995:
			digits = 1
		}
		text := strconv.FormatFloat(v, 'f', digits, 64)
		if r, _ := strconv.ParseFloat(text, 64); r < 1024 || k == len(units)-1 {
			return text + " " + units[k]
		}
	}
	return ""
}

// linkText names a kind of link for a reader.
func linkText(kind string) string {
	switch kind {
	case "nvlink":
		return "NVLink"
	case "pcie":
		return "PCIe"
	case "smp":
		return "the link between the CPU sockets (smp)"
	case "memory":
		return "GPU memory (one rank copies locally)"
	case "channels":
		return "NCCL's point-to-point channels (each at what NCCL plans one to carry: half an NVLink inside a domain, 14 GB/s across)"
	case "messages":
		return "the host posting each message to and from other nodes, one after another (the network's per-message cost, message_us)"
	}
	return "the NICs and the network (" + kind + ")"
}

// simWhyText says in words why a simulated call's time is not NCCL's estimate.
func simWhyText(why []string) string {
	words := map[string]string{
		"fabric latency": "the fabric's own latency, which NCCL's tables leave out (its kind beyond their InfiniBand, switches between leaves, its per-message cost)",
		"plugin latency": "NCCL's figures add the latency its net plugin reports, which steers its pick, not the wire",
		"nvls links":     "NVLS on one node, held to its links rather than NCCL's channel figure",
		"search speed":   "its channels carry what the links do, above the speed NCCL's search gave them",
		"block copy":     "each of its channels, one thread block, carries at most one NVLink's worth, less than the links",
		"channels":       "it runs on the fewer channels NCCL_MAX_NCHANNELS leaves, where NCCL's figures count its search's",
		"network":        "the network's links carry less than the NICs NCCL counts (fewer fabric uplinks than NICs, a slow NIC, or a node whose few GPUs leave by fewer NICs than it has)",
		"nvlstree nics":  "NVLSTree across nodes carries what the NICs do, where NCCL's figure gives n/(n-1) of it",
		"calibration":    "the topology's calibration",
	}
	var out []string
	for _, w := range why {
		out = append(out, words[w])
	}
	return strings.Join(out, "; ")
}
