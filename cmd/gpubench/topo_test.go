package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/golden"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/sim"
	"github.com/gpubench/gpubench/internal/topo"
)

// topoRun runs `gpubench topo ARGS` in-process, under a root with the shared flags topo reads;
// discover stands in for NVML.
func topoRun(t *testing.T, discover func(topo.Options) (*topo.Report, error), args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env{stdout: &out, stderr: &errOut, pid: 4242, version: "test",
		now: func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) }}
	g := &globals{}
	root := &cobra.Command{Use: "gpubench", SilenceErrors: true, SilenceUsage: true}
	root.SetFlagErrorFunc(flagErr)
	pf := root.PersistentFlags()
	pf.StringVar(&g.backend, "backend", "auto", "")
	pf.StringVar(&g.topology, "topology", "dgx-h100", "")
	pf.StringVar(&g.output, "output", "table", "")
	root.AddCommand(newTopoCmdWith(e, g, discover))
	root.SetArgs(append([]string{"topo"}, args...))
	root.SetOut(&out)
	root.SetErr(&errOut)
	code = exitCode(&errOut, root.ExecuteContext(context.Background()))
	return out.String(), errOut.String(), code
}

// noNVML is discovery on a machine without NVML.
func noNVML(topo.Options) (*topo.Report, error) {
	return nil, fmt.Errorf("%w: libnvidia-ml.so.1 could not be loaded; install the NVIDIA driver, or give the library's path with --nvml-lib", topo.ErrUnavailable)
}

// mustNotDiscover fails a test that reaches NVML.
func mustNotDiscover(t *testing.T) func(topo.Options) (*topo.Report, error) {
	return func(topo.Options) (*topo.Report, error) {
		t.Error("topo read the machine with --backend sim")
		return nil, errors.New("called")
	}
}

func TestTopoSim(t *testing.T) {
	t.Parallel()
	out, errOut, code := topoRun(t, mustNotDiscover(t), "--backend", "sim", "--topology", "pcie-l40sx4", "--p2p", "r")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden.Check(t, "topo-pcie-l40sx4.golden", out)
}

// Markdown carries what the table does, for pasting into an issue.
func TestTopoMarkdown(t *testing.T) {
	t.Parallel()
	out, errOut, code := topoRun(t, mustNotDiscover(t), "--backend", "sim", "--topology", "pcie-l40sx4", "--output", "markdown")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden.Check(t, "topo-pcie-l40sx4.md", out)
}

// The JSON of a simulated machine is its topology; dot is a Graphviz graph of it.
func TestTopoSimJSONAndDot(t *testing.T) {
	t.Parallel()
	out, errOut, code := topoRun(t, mustNotDiscover(t), "--backend", "sim", "--topology", "dgx-h100x2", "--output", "json")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	got, err := gpu.ParseTopology([]byte(out))
	if err != nil {
		t.Fatalf("the JSON is not a topology: %v", err)
	}
	want, _ := sim.LoadTopology("dgx-h100x2")
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(want)
	if !bytes.Equal(a, b) {
		t.Errorf("JSON differs from the preset:\n%s", out)
	}
	out, _, code = topoRun(t, mustNotDiscover(t), "--backend", "sim", "--topology", "dgx-a100", "--output", "dot")
	if code != 0 || !strings.HasPrefix(out, `graph "dgx-a100" {`) || !strings.HasSuffix(out, "}\n") ||
		!strings.Contains(out, `"dgx-a100/gpu0" -- "dgx-a100/nvswitch" [color=green4, penwidth=2, label="NVLink x12\n300 GB/s"];`) {
		t.Errorf("exit %d, dot:\n%s", code, out)
	}
}

// --backend auto without NVML: a notice on stderr, and the simulator's machine.
func TestTopoAutoFallsBack(t *testing.T) {
	t.Parallel()
	out, errOut, code := topoRun(t, noNVML, "--p2p", "read")
	want := "gpubench: NVML is not available: libnvidia-ml.so.1 could not be loaded; install the NVIDIA driver, or give the library's path with --nvml-lib; using the simulator (--topology dgx-h100)\n"
	if code != 0 || errOut != want {
		t.Fatalf("exit %d, stderr %q; want 0 and %q", code, errOut, want)
	}
	simOut, _, _ := topoRun(t, mustNotDiscover(t), "--backend", "sim", "--p2p", "read")
	if out != simOut {
		t.Errorf("stdout differs from --backend sim's:\n%s", out)
	}
}

// Asking for the real machine (--backend cuda, or an NVML library by path) without NVML is exit
// 4, with the reason and the fix.
func TestTopoNoNVML(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--backend", "cuda"}, {"--nvml-lib", "/opt/nowhere/libnvidia-ml.so.1"}, {"--sysfs-root", "/tmp"}} {
		out, errOut, code := topoRun(t, noNVML, args...)
		if code != exitNoGPU || out != "" || !strings.HasPrefix(errOut, "gpubench: NVML is not available: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 4 and one line", args, code, out, errOut)
		}
	}
	// The real discovery, pointed at a library that does not exist.
	out, errOut, code := topoRun(t, topo.Discover, "--nvml-lib", "/opt/nowhere/libnvidia-ml.so.1")
	if code != exitNoGPU || out != "" || !strings.HasPrefix(errOut, "gpubench: NVML is not available: ") {
		t.Errorf("real NVML from /opt/nowhere: exit %d, stdout %q, stderr %q; want exit 4", code, out, errOut)
	}
}

// Any other failure of discovery is exit 1.
func TestTopoDiscoveryFails(t *testing.T) {
	t.Parallel()
	_, errOut, code := topoRun(t, func(topo.Options) (*topo.Report, error) {
		return nil, errors.New("NVML cannot count the GPUs: ERROR_UNKNOWN")
	})
	if code != exitFailure || errOut != "gpubench: NVML cannot count the GPUs: ERROR_UNKNOWN\n" {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// Bad input: one line on stderr, exit 2, nothing on stdout, and no NVML.
func TestTopoBadInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--output", "csv"}, `unknown --output "csv" for topo: use table, json, markdown, dot`},
		{[]string{"--backend", "rocm"}, `unknown --backend "rocm" for topo: use auto or cuda or sim`},
		{[]string{"--p2p", "pci"}, `unknown --p2p "pci": use read, write, nvlink, atomics`},
		{[]string{"--backend", "sim", "--nvml-lib", "/x.so"}, "--nvml-lib and --sysfs-root read a real machine"},
		{[]string{"--backend", "sim", "--topology", "nosuch"}, `invalid --topology: unknown topology "nosuch"`},
		{[]string{"extra"}, `topo takes no arguments, and was given "extra"`},
		{[]string{"--p2p"}, "flag needs an argument"},
	} {
		out, errOut, code := topoRun(t, mustNotDiscover(t), c.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line containing %q", c.args, code, out, errOut, c.want)
		}
	}
}

// With --output json or dot, warnings and notes go to stderr (the table and Markdown end with
// them); a machine that cannot be written as
// a topology file fails json (exit 1) but not the table.
func TestTopoWarningsAndUnwritable(t *testing.T) {
	t.Parallel()
	preset, _ := sim.LoadTopology("pcie-l40sx4")
	report := func(topo.Options) (*topo.Report, error) {
		r := topo.FromTopology(preset, "")
		r.Warnings = []string{"GPU 3 (0000:ca:00.0): its PCIe link is x8, below the x16 it allows: check the card's seating and slot"}
		r.Notes = []string{"the topology file's smp links carry an assumed 64 GB/s"}
		return r, nil
	}
	out, errOut, code := topoRun(t, report, "--output", "json")
	if code != 0 || !strings.HasPrefix(out, "{\n") || errOut != "gpubench: warning: GPU 3 (0000:ca:00.0): its PCIe link is x8, below the x16 it allows: check the card's seating and slot\ngpubench: note: the topology file's smp links carry an assumed 64 GB/s\n" {
		t.Errorf("json: exit %d, stderr %q", code, errOut)
	}
	out, errOut, code = topoRun(t, report)
	if code != 0 || errOut != "" || !strings.HasSuffix(out, "\nWarnings:\n  GPU 3 (0000:ca:00.0): its PCIe link is x8, below the x16 it allows: check the card's seating and slot\n") {
		t.Errorf("table: exit %d, stderr %q, stdout ends %q", code, errOut, out[max(0, len(out)-200):])
	}
	out, errOut, code = topoRun(t, report, "--output", "markdown") // the report says them, once
	if code != 0 || errOut != "" || !strings.HasSuffix(out, "\n**Warnings**\n\n- GPU 3 (0000:ca:00.0): its PCIe link is x8, below the x16 it allows: check the card's seating and slot\n") {
		t.Errorf("markdown: exit %d, stderr %q, stdout ends %q", code, errOut, out[max(0, len(out)-200):])
	}
	unwritable := func(topo.Options) (*topo.Report, error) {
		r := topo.FromTopology(preset, "")
		r.Topology, r.TopologyErr = nil, errors.New("this machine cannot be written as a topology file: node h gpu gpu0: name, memory_bytes and memory_bandwidth_gbs must be set")
		return r, nil
	}
	out, errOut, code = topoRun(t, unwritable, "--output", "json")
	if code != exitFailure || out != "" || errOut != "gpubench: this machine cannot be written as a topology file: node h gpu gpu0: name, memory_bytes and memory_bandwidth_gbs must be set\n" {
		t.Errorf("unwritable json: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, _, code = topoRun(t, unwritable); code != 0 {
		t.Errorf("unwritable table: exit %d; want 0", code)
	}
}

// Flags that mean nothing to topo are refused rather than ignored.
func TestTopoRefusesFlagsItIgnores(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--sim-jitter", "0.5"}, {"--seed", "3"}, {"--cuda-lib", "/x"}, {"--p2p", "read", "--output", "json"}} {
		out, errOut, code := gpubench(t, append([]string{"topo", "--backend", "sim"}, args...)...)
		if code != 2 || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("topo %v: exit %d, stdout %q, stderr %q; want a one-line usage error", args, code, out, errOut)
		}
	}
}

// docs/topology.md's minimal file runs as the text after it says: its 1 MiB all-reduce's busbw,
// to the tenth the text gives, and no wrong element.
func TestTopologyDocExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/topology.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	at := strings.Index(s, "`gpubench allreduce --backend sim --topology example.json --sizes 1M -c 1` runs it")
	start := strings.LastIndex(s[:max(at, 0)], "```json\n")
	m := regexp.MustCompile(`report ([0-9.]+) GB/s busbw`).FindStringSubmatch(s[max(at, 0):])
	if at < 0 || start < 0 || m == nil {
		t.Fatal("docs/topology.md: the minimal example, its command or its figure is gone")
	}
	end := strings.Index(s[start+8:], "```")
	if end < 0 {
		t.Fatal("docs/topology.md: the minimal example's block does not end")
	}
	file := filepath.Join(t.TempDir(), "example.json")
	if err := os.WriteFile(file, []byte(s[start+8:start+8+end]), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--topology", file, "--sizes", "1M", "-c", "1", "--output", "json")
	var run struct {
		Results []struct {
			OutOfPlace struct {
				BusBW float64 `json:"busbw_gbs"`
				Wrong *int    `json:"wrong"`
			} `json:"out_of_place"`
		} `json:"results"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &run) != nil || len(run.Results) != 1 {
		t.Fatalf("exit %d, %s\n%s", code, errOut, out)
	}
	r := run.Results[0].OutOfPlace
	if got := fmt.Sprintf("%.1f", r.BusBW); got != m[1] || r.Wrong == nil || *r.Wrong != 0 {
		checked := "not checked"
		if r.Wrong != nil {
			checked = fmt.Sprint(*r.Wrong)
		}
		t.Errorf("the example reports %s GB/s busbw, wrong elements: %s; docs/topology.md says %s and none", got, checked, m[1])
	}
}

// The README names every preset.
func TestREADMEPresets(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sim.Presets() {
		if !strings.Contains(string(readme), "`"+p+"`") {
			t.Errorf("README.md does not name the preset %s", p)
		}
	}
}

// docs/topology.md lists every preset under "Built-in presets", as the README promises, and its
// field table and validation list name every format the reader takes.
func TestTopologyDocPresetsAndFormats(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/topology.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	_, presets, ok := strings.Cut(s, "## Built-in presets\n")
	if !ok {
		t.Fatal("docs/topology.md has no Built-in presets section")
	}
	for _, p := range sim.Presets() {
		if !strings.Contains(presets, "\n- `"+p+"`: ") {
			t.Errorf("docs/topology.md's Built-in presets does not describe %s", p)
		}
	}
	for _, c := range []struct{ start, end string }{{"| `format` | string, required |", "\n"}, {"- `format` is ", "; `name` is set"}} {
		at := strings.Index(s, c.start)
		end := strings.Index(s[max(at, 0):], c.end)
		if at < 0 || end < 0 {
			t.Errorf("docs/topology.md: no text from %q to %q", c.start, c.end)
			continue
		}
		for _, f := range []string{gpu.TopologyFormat, gpu.TopologyFormat2} {
			if !strings.Contains(s[at:at+end], f) {
				t.Errorf("docs/topology.md: %q... does not name %s", c.start, f)
			}
		}
	}
}

// --topology names a simulated machine: given, it is the machine shown, even where NVML would see
// GPUs (it was silently ignored there); with --backend cuda it is refused.
func TestTopoTopologyMeansTheSimulator(t *testing.T) {
	t.Parallel()
	read := func(topo.Options) (*topo.Report, error) {
		t.Error("the real machine was read")
		return nil, topo.ErrUnavailable
	}
	out, errOut, code := topoRun(t, read, "--topology", "dgx-a100")
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "gpubench topo: dgx-a100 (simulator)\n") {
		t.Errorf("--topology dgx-a100: exit %d, stderr %q, stdout %.60q", code, errOut, out)
	}
	out, errOut, code = topoRun(t, read, "--backend", "cuda", "--topology", "dgx-a100")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "describe a simulated machine") {
		t.Errorf("--backend cuda --topology: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// A version 1 file that `gpubench topo --output json` wrote, given a field of version 2 (a GPU's
// nic, the network's layout), is refused with that field named and what to do, not run with it.
func TestTopoVersion1WithVersion2Field(t *testing.T) {
	out, errOut, code := topoRun(t, mustNotDiscover(t), "--backend", "sim", "--topology", "dgx-h100x2", "--output", "json")
	if code != 0 {
		t.Fatalf("topo: exit %d, %s", code, errOut)
	}
	for _, c := range []struct {
		name string
		edit func(doc map[string]any)
		want string
	}{
		{"nic", func(doc map[string]any) {
			for _, n := range doc["nodes"].([]any) {
				for _, g := range n.(map[string]any)["gpus"].([]any) {
					g.(map[string]any)["nic"] = "mlx5_0"
				}
			}
		}, `GPU nic (node dgx-h100-0 gpu gpu0) is a version 2 field, and the file's format is "gpubench-topology/1": set "format": "gpubench-topology/2", or drop it`},
		{"layout", func(doc map[string]any) {
			doc["network"].(map[string]any)["layout"] = "rail"
		}, `network layout is a version 2 field, and the file's format is "gpubench-topology/1": set "format": "gpubench-topology/2", or drop it`},
	} {
		var doc map[string]any
		if err := json.Unmarshal([]byte(out), &doc); err != nil || doc["format"] != gpu.TopologyFormat {
			t.Fatalf("topo --output json: %v, format %v", err, doc["format"])
		}
		c.edit(doc)
		data, _ := json.Marshal(doc)
		file := filepath.Join(t.TempDir(), c.name+".json")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"explain", "alltoall", "--topology", file, "--size", "1G"}, {"topo", "--backend", "sim", "--topology", file, "--output", "json"}} {
			stdout, stderr, code := gpubench(t, args...)
			if code != exitUsage || stdout != "" || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("%s: %v: exit %d, stdout %.80q, stderr %q; want exit 2 and %q", c.name, args, code, stdout, stderr, c.want)
			}
		}
	}
}

// --nodes makes a cluster of every preset that has NICs, as the README says, and refuses the
// others with what to do; the README names exactly those.
func TestTopoNodesOfEveryPreset(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	sentence := regexp.MustCompile("(?s)`--nodes N` makes a cluster of any of them[^.]*\\.").Find(readme)
	if sentence == nil {
		t.Fatalf("README.md has no sentence on --nodes N")
	}
	for _, name := range sim.Presets() {
		one, err := sim.LoadTopology(name)
		if err != nil {
			t.Fatal(err)
		}
		_, err = one.WithNodes(2)
		named := strings.Contains(string(sentence), "`"+name+"`")
		if hasNICs := len(one.Nodes[0].NICs) > 0; hasNICs != (err == nil) || named == hasNICs {
			t.Errorf("%s: NICs %v, --nodes 2: %v, named by the README's %q", name, hasNICs, err, sentence)
		}
		if err != nil {
			want := "invalid --nodes 2: " + name + "'s node has no NIC, so 2 nodes of it cannot reach each other: use a topology with a NIC a node (a preset with NICs, such as dgx-h100 or pcie-l40s-8, or a topology file that gives its node one)\n"
			if out, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--topology", name, "--nodes", "2", "--sizes", "8"); code != exitUsage || out != "" || errOut != "gpubench: "+want {
				t.Errorf("%s --nodes 2: exit %d, stdout %q, stderr %q; want exit 2 and %q", name, code, out, errOut, want)
			}
		}
	}
}

// topo --list names every built-in topology with its GPUs, nodes and what it is, as a table and
// as JSON; flags that choose a machine do not apply to it.
func TestTopoList(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "topo", "--list")
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "preset                GPUs  nodes  what\n") ||
		!strings.Contains(out, "\ngb200-nvl72             72     18  NVIDIA GB200 NVL72: one rack of 18 compute trays") {
		t.Errorf("exit %d, stderr %q, stdout\n%s", code, errOut, out)
	}
	out, _, code = gpubench(t, "topo", "--list", "--output", "json")
	var list []struct {
		Name, GPU, What string
		GPUs, Nodes     int
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != len(sim.Presets()) || list[0].Name != "dgx-a100" || list[0].GPU != "NVIDIA A100-SXM4-80GB" || list[0].GPUs != 8 {
		t.Errorf("--output json: exit %d, %v, %+v", code, err, list)
	}
	if _, errOut, code := gpubench(t, "topo", "--list", "--topology", "dgx-h100"); code != exitUsage || errOut != "gpubench: --topology does not apply to --list: drop it\n" {
		t.Errorf("--list --topology: exit %d, %q", code, errOut)
	}
}
