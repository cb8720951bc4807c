package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/input"
	"github.com/gpubench/gpubench/internal/sim"
	"github.com/gpubench/gpubench/internal/topo"
)

// topoFlags are topo's own flags.
type topoFlags struct {
	p2p       string
	nvmlLib   string
	sysfsRoot string
	list      bool
}

// newTopoCmd builds `gpubench topo`, which reads the machine through NVML and sysfs.
func newTopoCmd(e *env, g *globals) *cobra.Command {
	return newTopoCmdWith(e, g, topo.Discover)
}

// newTopoCmdWith is newTopoCmd with the discovery it runs on real GPUs (a mock NVML in tests).
func newTopoCmdWith(e *env, g *globals, discover func(topo.Options) (*topo.Report, error)) *cobra.Command {
	f := &topoFlags{}
	cmd := &cobra.Command{
		Use:   "topo",
		Short: "Show the GPUs, how they are wired and what CUDA calls them (nvidia-smi topo -m and more)",
		Long: "topo lists the GPUs with their CUDA ordinals, PCI bus ids, NUMA nodes and PCIe links, prints\n" +
			"nvidia-smi topo -m's connection matrix (NICs included), each GPU's NVLinks, and with --p2p the\n" +
			"P2P status matrix, then warns of anything that looks wrong. --output json writes the machine as\n" +
			"a topology file that --backend sim --topology FILE runs; --output dot draws it for Graphviz.",
		Example: "  gpubench topo\n  gpubench topo --p2p read\n  gpubench topo --list\n" +
			"  gpubench topo --output json > machine.json && gpubench allreduce --backend sim --topology machine.json\n" +
			"  gpubench topo --backend sim --topology dgx-a100 --output dot | dot -Tsvg > dgx-a100.svg",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, e, g, discover)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.p2p, "p2p", "", "also print the P2P status matrix for read, write, nvlink or atomics (as nvidia-smi topo -p2p r|w|n|a)")
	fl.StringVar(&f.nvmlLib, "nvml-lib", "", "path of the NVML library to load (default libnvidia-ml.so.1 where the system loader finds it)")
	fl.StringVar(&f.sysfsRoot, "sysfs-root", "/", "directory whose sys/ and proc/ to read instead of the machine's own")
	fl.BoolVar(&f.list, "list", false, "list the simulator's built-in topologies (--topology PRESET): GPUs, nodes and what each is")
	_ = fl.MarkHidden("sysfs-root")
	complete(cmd, "p2p", topo.P2PCaps)
	hideShared(cmd, runFlags)
	return cmd
}

// p2pAliases are nvidia-smi topo -p2p's letters.
var p2pAliases = map[string]string{"r": "read", "w": "write", "n": "nvlink", "a": "atomics"}

func (f *topoFlags) run(cmd *cobra.Command, e *env, g *globals, discover func(topo.Options) (*topo.Report, error)) error {
	backends := []string{"auto", "cuda", "sim"}
	if !slices.Contains(backends, g.backend) {
		return usageErr("unknown --backend %q for topo: use %s", g.backend, strings.Join(backends, " or "))
	}
	if !slices.Contains(topo.Formats, g.output) {
		return usageErr("unknown --output %q for topo: use %s", g.output, strings.Join(topo.Formats, ", "))
	}
	p2pCap := f.p2p
	if long, ok := p2pAliases[p2pCap]; ok {
		p2pCap = long
	}
	if p2pCap != "" && !slices.Contains(topo.P2PCaps, p2pCap) {
		return usageErr("unknown --p2p %q: use %s", f.p2p, strings.Join(topo.P2PCaps, ", "))
	}
	for _, flag := range runFlags {
		if cmd.Flags().Changed(flag) {
			return usageErr("--%s does not apply to topo: drop it", flag)
		}
	}
	if f.list {
		return listPresets(cmd, e, g)
	}
	if p2pCap != "" && g.output != "table" && g.output != "markdown" {
		return usageErr("--p2p adds a matrix to the table: drop it, or use --output table or markdown")
	}
	machineFlags := cmd.Flags().Changed("nvml-lib") || cmd.Flags().Changed("sysfs-root")
	if g.backend == "sim" && machineFlags {
		return usageErr("--nvml-lib and --sysfs-root read a real machine: drop them, or drop --backend sim")
	}
	// --topology, --nodes and --gpus-per-node name a simulated machine: asked for, it is the one shown.
	simFlags := cmd.Flags().Changed("topology") || cmd.Flags().Changed("nodes") || cmd.Flags().Changed("gpus-per-node")
	if simFlags && (g.backend == "cuda" || machineFlags) {
		return usageErr("--topology, --nodes and --gpus-per-node describe a simulated machine, and --backend cuda, --nvml-lib and --sysfs-root read this one: drop one or the other")
	}

	var r *topo.Report
	if g.backend == "cuda" || g.backend == "auto" && !simFlags {
		visible, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
		var err error
		r, err = discover(topo.Options{Root: f.sysfsRoot, NVMLLib: f.nvmlLib, P2P: p2pCap,
			VisibleDevices: topo.ParseVisibleDevices(visible, set), DeviceOrder: os.Getenv("CUDA_DEVICE_ORDER")})
		switch {
		case errors.Is(err, topo.ErrUnavailable) && g.backend == "auto" && !machineFlags:
			fmt.Fprintf(e.stderr, "gpubench: %v; using the simulator (--topology %s)\n", err, g.topology)
		case errors.Is(err, topo.ErrUnavailable):
			return &exitError{code: exitNoGPU, err: err}
		case err != nil:
			return runtimeErr(err)
		}
	}
	if r == nil {
		t, err := g.loadTopology()
		if err != nil {
			return err
		}
		r = topo.FromTopology(t, p2pCap)
	}
	if g.output != "table" && g.output != "markdown" { // those two end the report with them
		for _, w := range r.Warnings {
			if r.TopologyErr != nil && w == r.TopologyErr.Error() {
				continue // said once, as the error below
			}
			fmt.Fprintf(e.stderr, "gpubench: warning: %s\n", w)
		}
	}
	if g.output == "json" {
		if r.Topology == nil {
			return runtimeErr(r.TopologyErr)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(e.stderr, "gpubench: note: %s\n", n)
		}
	}
	if err := topo.Write(e.stdout, g.output, r); errors.Is(err, input.ErrTooLarge) {
		return usageErr("%v", err)
	} else if err != nil {
		return runtimeErr(fmt.Errorf("writing the topology: %w", err))
	}
	return nil
}

// listPresets writes the built-in topologies: name, GPUs, nodes, and the first sentence of each
// one's description (the rest, with its sources, is in the file: gpubench topo --backend sim
// --topology PRESET --output json).
func listPresets(cmd *cobra.Command, e *env, g *globals) error {
	for _, flag := range []string{"p2p", "nvml-lib", "sysfs-root", "topology", "nodes", "gpus-per-node", "backend"} {
		if cmd.Flags().Changed(flag) {
			return usageErr("--%s does not apply to --list: drop it", flag)
		}
	}
	if g.output != "table" && g.output != "json" {
		return usageErr("unknown --output %q for topo --list: use table or json", g.output)
	}
	type preset struct {
		Name  string `json:"name"`
		GPUs  int    `json:"gpus"`
		GPU   string `json:"gpu"`
		Nodes int    `json:"nodes"`
		What  string `json:"what"`
	}
	var list []preset
	for _, name := range sim.Presets() {
		t, err := sim.LoadTopology(name)
		if err != nil {
			return err
		}
		what, _, _ := strings.Cut(t.Description, ". ")
		gpu0, _ := t.GPU(0)
		list = append(list, preset{Name: name, GPUs: t.NumGPUs(), GPU: gpu0.Name, Nodes: len(t.NodeGPUs()), What: strings.TrimSuffix(what, ".")})
	}
	if g.output == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	fmt.Fprintf(e.stdout, "%-20s  %4s  %5s  %s\n", "preset", "GPUs", "nodes", "what")
	for _, p := range list {
		what := p.What
		if r := []rune(what); len(r) > 100 { // the whole sentence is in --output json
			what = string(r[:97]) + "..."
		}
		fmt.Fprintf(e.stdout, "%-20s  %4d  %5d  %s\n", p.Name, p.GPUs, p.Nodes, what)
	}
	return nil
}
