package topo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/golden"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/input"
	"github.com/gpubench/gpubench/internal/sim"
)

func loadPreset(t *testing.T, name string) *gpu.Topology {
	t.Helper()
	topo, err := sim.LoadTopology(name)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// Every preset, as `gpubench topo --backend sim` prints it.
func TestGoldenPresets(t *testing.T) {
	t.Parallel()
	for _, p := range sim.Presets() {
		t.Run(p, func(t *testing.T) {
			golden.Check(t, "sim-"+p+".txt", render(t, FromTopology(loadPreset(t, p), ""), "table"))
		})
	}
	t.Run("p2p read without P2P", func(t *testing.T) {
		golden.Check(t, "sim-pcie-4090x8-p2p-read.txt", render(t, FromTopology(loadPreset(t, "pcie-4090x8"), "read"), "table"))
	})
	t.Run("dot", func(t *testing.T) {
		golden.Check(t, "sim-dgx-h100x2.dot", render(t, FromTopology(loadPreset(t, "dgx-h100x2"), ""), "dot"))
	})
}

// The JSON of a simulated machine is its topology file.
func TestPresetJSON(t *testing.T) {
	t.Parallel()
	for _, p := range sim.Presets() {
		topo := loadPreset(t, p)
		out := render(t, FromTopology(topo, ""), "json")
		again, err := gpu.ParseTopology([]byte(out))
		if err != nil {
			t.Fatalf("%s: the JSON does not read back: %v", p, err)
		}
		a, _ := json.Marshal(topo)
		b, _ := json.Marshal(again)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: the JSON reads back as another topology:\n%s\nwant:\n%s", p, b, a)
		}
	}
}

// A node with every kind of PCIe path: the matrix names each as nvidia-smi does.
func TestPCIeClasses(t *testing.T) {
	t.Parallel()
	g := func(id string) gpu.GPU { return gpu.GPU{ID: id} }
	n := &gpu.Node{
		Hostname: "h",
		CPUs:     []gpu.CPU{{ID: "cpu0"}, {ID: "cpu1", NUMANode: 1}},
		GPUs:     []gpu.GPU{g("a"), g("b"), g("c"), g("d"), g("e"), g("f"), g("lone")},
		Switches: []gpu.Switch{{ID: "top", Kind: "pcie"}, {ID: "sw1", Kind: "pcie"}, {ID: "sw2", Kind: "pcie"}},
		NICs:     []gpu.NIC{{ID: "nic", Kind: "infiniband", Gbps: 400}},
		Links: []gpu.Link{
			{A: "a", B: "sw1", Kind: "pcie"}, {A: "b", B: "sw1", Kind: "pcie"}, {A: "c", B: "sw2", Kind: "pcie"},
			{A: "sw1", B: "top", Kind: "pcie"}, {A: "sw2", B: "top", Kind: "pcie"},
			{A: "top", B: "cpu0", Kind: "pcie", HostBridge: "pci0000:00"},
			{A: "d", B: "cpu0", Kind: "pcie", HostBridge: "pci0000:00"},
			{A: "e", B: "cpu0", Kind: "pcie", HostBridge: "pci0000:40"},
			{A: "f", B: "cpu1", Kind: "pcie"},
			{A: "nic", B: "cpu0", Kind: "pcie"},
			{A: "cpu0", B: "cpu1", Kind: "smp"},
		},
	}
	m := newGraph(n).matrix()
	for _, tc := range []struct {
		a, b int
		want string
	}{
		{0, 0, "X"},
		{0, 1, "PIX"},  // one switch
		{0, 2, "PXB"},  // three switches, no host bridge
		{0, 3, "PHB"},  // the same host bridge
		{0, 4, "NODE"}, // another host bridge of the same CPU
		{3, 4, "NODE"},
		{0, 5, "SYS"}, // across the CPUs
		{0, 6, "N/A"}, // no PCIe path
		{4, 7, "PHB"}, // the NIC's link names no host bridge
		{7, 5, "SYS"},
	} {
		if got := m[tc.a][tc.b]; got != tc.want || m[tc.b][tc.a] != tc.want {
			t.Errorf("cell %d,%d = %s (and %s back); want %s", tc.a, tc.b, got, m[tc.b][tc.a], tc.want)
		}
	}
}

// NV# counts the links joining two GPUs and, through each NVSwitch, the fewer of theirs.
func TestNVLinkCount(t *testing.T) {
	t.Parallel()
	g := func(id string) gpu.GPU { return gpu.GPU{ID: id} }
	n := &gpu.Node{
		Hostname: "h",
		GPUs:     []gpu.GPU{g("a"), g("b"), g("c"), g("d")},
		Switches: []gpu.Switch{{ID: "nvs0", Kind: "nvswitch"}, {ID: "nvs1", Kind: "nvswitch"}},
		Links: []gpu.Link{
			{A: "a", B: "b", Kind: "nvlink", Lanes: 2, GBs: 50},
			{A: "b", B: "a", Kind: "nvlink", Lanes: 1, GBs: 25},
			{A: "a", B: "nvs0", Kind: "nvlink", Lanes: 6, GBs: 150},
			{A: "c", B: "nvs0", Kind: "nvlink", Lanes: 4, GBs: 100},
			{A: "a", B: "nvs1", Kind: "nvlink", Lanes: 3, GBs: 75},
			{A: "c", B: "nvs1", Kind: "nvlink", Lanes: 5, GBs: 125},
			{A: "d", B: "nvs1", Kind: "nvlink", GBs: 100},
		},
	}
	m := newGraph(n).matrix()
	for _, tc := range []struct {
		a, b int
		want string
	}{
		{0, 1, "NV3"}, // two links, then one more
		{0, 2, "NV7"}, // min(6, 4) + min(3, 5)
		{1, 2, "N/A"}, // b reaches no switch, and there is no PCIe
		{0, 3, "NV"},  // d's link gives no lanes
	} {
		if got := m[tc.a][tc.b]; got != tc.want {
			t.Errorf("cell %d,%d = %s; want %s", tc.a, tc.b, got, tc.want)
		}
	}
	rows := newGraph(n).nvlinkRows(0)
	if len(rows) != 4 || rows[2].Remote != "nvs0" || rows[2].Links != 6 || rows[2].PerLinkGBs != 25 || rows[2].TotalGBs != 150 {
		t.Errorf("GPU a's NVLink rows %+v; want four, the third to nvs0 with 6 links of 25 GB/s", rows)
	}
	if p := newGraph(n).p2pMatrix(true, "nvlink"); p[0][1] != "OK" || p[1][2] != "NS" || p[0][3] != "OK" {
		t.Errorf("nvlink P2P %v; want OK over NVLink and NS without", p)
	}
}

// A node without NICs prints no NIC legend, and a GPU row's unknown facts read N/A.
func TestTableUnknowns(t *testing.T) {
	t.Parallel()
	topo := &gpu.Topology{Format: gpu.TopologyFormat, Name: "bare", Nodes: []gpu.Node{{
		Hostname: "bare", GPUs: []gpu.GPU{{ID: "g", Name: "GPU", MemoryBytes: 1 << 30, MemoryGBs: 1, ComputeCapability: "8.0", NUMANode: -1}},
		CPUs: []gpu.CPU{{ID: "c", NUMANode: -1}}, Links: []gpu.Link{{A: "g", B: "c", Kind: gpu.LinkPCIe, GBs: 32}},
	}}}
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	out := render(t, FromTopology(topo, ""), "table")
	for _, want := range []string{"0    0     GPU   N/A   N/A         1024 MiB  8.0  N/A   N/A           N/A          N/A  N/A   N/A\n", "NVLink: none\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "NIC Legend") || strings.Contains(out, "Warnings") {
		t.Errorf("table has a NIC legend or warnings:\n%s", out)
	}
}

// One node of 256 GPUs (the most a topology may give a node), each behind its own PCIe switch
// under one of two CPUs, with a connection matrix and a P2P matrix: each row is one search, not
// one a pair (`go test -bench Matrix ./internal/topo`).
func BenchmarkMatrix256(b *testing.B) {
	n := &gpu.Node{Hostname: "wide", CPUs: []gpu.CPU{{ID: "cpu0"}, {ID: "cpu1"}},
		Links: []gpu.Link{{A: "cpu0", B: "cpu1", Kind: gpu.LinkSMP, GBs: 64}}}
	for i := range gpu.MaxNodeGPUs {
		g, sw := fmt.Sprintf("gpu%d", i), fmt.Sprintf("sw%d", i)
		n.GPUs = append(n.GPUs, gpu.GPU{ID: g})
		n.Switches = append(n.Switches, gpu.Switch{ID: sw, Kind: "pcie"})
		n.Links = append(n.Links, gpu.Link{A: g, B: sw, Kind: gpu.LinkPCIe, GBs: 32},
			gpu.Link{A: sw, B: fmt.Sprintf("cpu%d", i%2), Kind: gpu.LinkPCIe, GBs: 32})
	}
	for b.Loop() {
		g := newGraph(n)
		if m := g.matrix(); m[0][1] != "SYS" || m[0][2] != "PHB" {
			b.Fatalf("gpu0 to gpu1 %s, to gpu2 %s; want SYS and PHB", m[0][1], m[0][2])
		}
		g.p2pMatrix(true, "read")
	}
}

// A topology whose file would be larger than --topology reads back is refused with
// input.ErrTooLarge, and nothing is written: 4,096 nodes of GPUs with names of 5,000 characters
// (a template repeated, which the file writes node by node).
func TestWriteJSONTooLarge(t *testing.T) {
	name := strings.Repeat("G", 5000)
	topo := &gpu.Topology{Format: gpu.TopologyFormat, Name: "long"}
	for i := range 4096 {
		topo.Nodes = append(topo.Nodes, gpu.Node{Hostname: fmt.Sprint("h", i),
			GPUs: []gpu.GPU{{ID: "g0", Name: name}, {ID: "g1", Name: name}, {ID: "g2", Name: name}, {ID: "g3", Name: name}}})
	}
	var out bytes.Buffer
	err := WriteJSON(&out, &Report{Topology: topo})
	if !errors.Is(err, input.ErrTooLarge) || !strings.Contains(err.Error(), "gpubench reads back at most 64 MiB") || out.Len() != 0 {
		t.Errorf("error %v, %d bytes written; want it refused, nothing written", err, out.Len())
	}
}
