package gpu_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/gpu"
)

// presetDir holds the simulator's built-in topologies. The gpu package cannot import sim (sim
// imports gpu), so the tests read the files directly.
const presetDir = "../sim/presets"

func readPreset(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(presetDir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func loadPreset(t *testing.T, name string) *gpu.Topology {
	t.Helper()
	topo, err := gpu.ParseTopology(readPreset(t, name))
	if err != nil {
		t.Fatalf("preset %s: %v", name, err)
	}
	return topo
}

func allGPUs(topo *gpu.Topology) []int {
	gpus := make([]int, topo.NumGPUs())
	for i := range gpus {
		gpus[i] = i
	}
	return gpus
}

func TestPresetsParse(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(presetDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Fatalf("found %d preset files in %s; want at least 6", len(files), presetDir)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			topo, err := gpu.ParseTopology(data)
			if err != nil {
				t.Fatalf("ParseTopology: %v", err)
			}
			if topo.Format != gpu.TopologyFormat && topo.Format != gpu.TopologyFormat2 {
				t.Errorf("Format = %q; want %q or %q", topo.Format, gpu.TopologyFormat, gpu.TopologyFormat2)
			}
			if topo.Name != name {
				t.Errorf("Name = %q; want the file's name %q", topo.Name, name)
			}
			if topo.P2P != "all" && topo.P2P != "none" {
				t.Errorf("P2P = %q after parsing; want all or none", topo.P2P)
			}
			n := topo.NumGPUs()
			if n < 2 {
				t.Fatalf("NumGPUs = %d", n)
			}
			for i := 0; i < n; i++ {
				g, node := topo.GPU(i)
				if g.MemoryBytes <= 0 || g.Name == "" {
					t.Errorf("GPU %d: %+v", i, g)
				}
				if want := node.Hostname + "/" + g.ID; topo.GPUName(i) != want {
					t.Errorf("GPUName(%d) = %q; want %q", i, topo.GPUName(i), want)
				}
				if &topo.Nodes[topo.NodeOf(i)] != node {
					t.Errorf("NodeOf(%d) = %d disagrees with GPU(%d)", i, topo.NodeOf(i), i)
				}
				for j := 0; j < n; j++ {
					p := topo.Route(i, j)
					if p.Hops == nil {
						t.Errorf("Route(%d, %d) has no hops", i, j)
					}
					if i != j && (len(p.Hops) == 0 || p.LatencyUS <= 0) {
						t.Errorf("Route(%d, %d) = %+v; want a path with latency", i, j, p)
					}
				}
			}
			// Validate is idempotent on a parsed topology.
			if err := topo.Validate(); err != nil {
				t.Errorf("Validate after ParseTopology: %v", err)
			}
			if topo.NumGPUs() != n {
				t.Errorf("NumGPUs after re-Validate = %d; want %d", topo.NumGPUs(), n)
			}
			// A topology survives a JSON round trip.
			out, err := json.Marshal(topo)
			if err != nil {
				t.Fatal(err)
			}
			again, err := gpu.ParseTopology(out)
			if err != nil {
				t.Fatalf("ParseTopology(json.Marshal(preset)): %v", err)
			}
			if again.NumGPUs() != n {
				t.Errorf("round trip: NumGPUs = %d; want %d", again.NumGPUs(), n)
			}
		})
	}
}

func TestPresetFacts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		preset  string
		gpus    int
		nodes   int
		p2p     string
		nvls    bool
		busPeak float64
		limit   string
	}{
		{"dgx-a100", 8, 1, "all", false, 300, "nvlink"},
		{"dgx-h100", 8, 1, "all", true, 450, "nvlink"},
		{"dgx-h100x2", 16, 2, "all", true, 400, "infiniband"},
		{"hgx-h200", 8, 1, "all", true, 450, "nvlink"},
		{"pcie-4090x8", 8, 1, "none", false, 15.752, "pcie"}, // SHM: two GPUs' traffic on each switch uplink, Gen4 x16
		{"pcie-l40sx4", 4, 1, "all", false, 31.504, "pcie"},  // Gen4 x16: 16 * 1.969 GB/s
	}
	for _, tc := range tests {
		t.Run(tc.preset, func(t *testing.T) {
			t.Parallel()
			topo := loadPreset(t, tc.preset)
			if got := topo.NumGPUs(); got != tc.gpus {
				t.Errorf("NumGPUs = %d; want %d", got, tc.gpus)
			}
			if got := len(topo.Nodes); got != tc.nodes {
				t.Errorf("nodes = %d; want %d", got, tc.nodes)
			}
			if topo.P2P != tc.p2p {
				t.Errorf("P2P = %q; want %q", topo.P2P, tc.p2p)
			}
			for i := 0; i < topo.NumGPUs(); i++ {
				if got := topo.NVLS(i); got != tc.nvls {
					t.Errorf("NVLS(%d) = %v; want %v", i, got, tc.nvls)
				}
			}
			gbs, limit := topo.BusPeak(allGPUs(topo))
			if math.Abs(gbs-tc.busPeak) > 1e-9*tc.busPeak {
				t.Errorf("BusPeak(all) = %v; want %v", gbs, tc.busPeak)
			}
			if limit != tc.limit {
				t.Errorf("BusPeak(all) limit = %q; want %q", limit, tc.limit)
			}
		})
	}
}

func TestRoute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		preset  string
		a, b    int
		typ     string
		hops    int
		latency float64
	}{
		{"dgx-h100", 0, 5, "NVL", 2, 1}, // gpu0 -> nvswitch -> gpu5, 0.5 µs a hop
		{"dgx-h100", 5, 0, "NVL", 2, 1},
		{"dgx-h100", 0, 1, "NVL", 2, 1},
		{"dgx-a100", 3, 4, "NVL", 2, 1},
		{"hgx-h200", 7, 0, "NVL", 2, 1},
		{"pcie-l40sx4", 0, 1, "PIX", 2, 0.5}, // through their shared PCIe switch, 0.25 µs a hop
		{"pcie-l40sx4", 2, 3, "PIX", 2, 0.5},
		{"pcie-l40sx4", 0, 2, "PHB", 4, 1}, // through the CPU's root complex
		{"pcie-l40sx4", 3, 1, "PHB", 4, 1},
		{"pcie-4090x8", 0, 1, "SHM", 4, 1}, // P2P off: up to cpu0 and back down
		{"pcie-4090x8", 0, 2, "SHM", 4, 1},
		{"pcie-4090x8", 0, 5, "SHM", 5, 1.5}, // across the SMP link (0.5 µs)
		{"pcie-4090x8", 7, 0, "SHM", 5, 1.5},
		{"dgx-h100x2", 0, 8, "NET", 6, 5},  // gpu -> pcie -> nic -> fabric -> nic -> pcie -> gpu: 4 x 0.25 + 2 x 2
		{"dgx-h100x2", 15, 3, "NET", 8, 6}, // PXN: over NVLink to the GPU on rail 3 (gpu11), then out through its NIC
		{"dgx-h100x2", 8, 9, "NVL", 2, 1},  // within the second node
		{"dgx-h100x2", 0, 7, "NVL", 2, 1},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/gpu%d-gpu%d", tc.preset, tc.a, tc.b), func(t *testing.T) {
			t.Parallel()
			topo := loadPreset(t, tc.preset)
			p := topo.Route(tc.a, tc.b)
			if p.Type != gpu.PathType(tc.typ) {
				t.Errorf("Route(%d, %d).Type = %q; want %q", tc.a, tc.b, p.Type, tc.typ)
			}
			if len(p.Hops) != tc.hops {
				t.Errorf("Route(%d, %d) has %d hops; want %d", tc.a, tc.b, len(p.Hops), tc.hops)
			}
			if math.Abs(p.LatencyUS-tc.latency) > 1e-9 {
				t.Errorf("Route(%d, %d).LatencyUS = %v; want %v", tc.a, tc.b, p.LatencyUS, tc.latency)
			}
		})
	}
}

func TestRouteToSelf(t *testing.T) {
	t.Parallel()
	for _, preset := range []string{"dgx-h100", "pcie-l40sx4", "pcie-4090x8", "dgx-h100x2"} {
		t.Run(preset, func(t *testing.T) {
			t.Parallel()
			topo := loadPreset(t, preset)
			for i := 0; i < topo.NumGPUs(); i++ {
				if p := topo.Route(i, i); p.Hops == nil {
					t.Errorf("Route(%d, %d).Hops is nil", i, i)
				}
			}
		})
	}
}

func TestBusPeakSubsets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		preset string
		gpus   []int
		want   float64
		limit  string
	}{
		{"no GPUs", "dgx-h100", nil, 0, ""},
		{"one GPU", "dgx-h100", []int{3}, 0, ""},
		{"pair on nvswitch", "dgx-h100", []int{0, 5}, 450, "nvlink"},
		{"pair on one PCIe switch", "pcie-l40sx4", []int{0, 1}, 31.504, "pcie"},
		{"one node of two", "dgx-h100x2", []int{0, 1, 2, 3, 4, 5, 6, 7}, 450, "nvlink"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topo := loadPreset(t, tc.preset)
			gbs, limit := topo.BusPeak(tc.gpus)
			if math.Abs(gbs-tc.want) > 1e-9*math.Max(1, tc.want) || limit != tc.limit {
				t.Errorf("BusPeak(%v) = %v, %q; want %v, %q", tc.gpus, gbs, limit, tc.want, tc.limit)
			}
		})
	}
}

// On a rail layout (DGX B200: one GPU and one NIC under each PCIe switch), every ring enters a node
// at the GPU beside its NIC, the odd rings too, so the rings reach the NIC's line rate: eight
// 400 Gb/s NICs carry 400 GB/s of busbw on two nodes. A ring that entered through the CPU would
// share the CPU's PCIe links with two others (170 GB/s).
func TestRingsEnterBesideTheirNIC(t *testing.T) {
	t.Parallel()
	topo, err := loadPreset(t, "dgx-b200").WithNodes(2)
	if err != nil {
		t.Fatal(err)
	}
	if gbs, limit := topo.BusPeak(allGPUs(topo)); math.Abs(gbs-400) > 1e-9 || limit != "infiniband" {
		t.Errorf("BusPeak on two DGX B200 = %v, %q; want 400, \"infiniband\"", gbs, limit)
	}
	if _, rings := topo.RingFlows(allGPUs(topo)); rings != 8 {
		t.Errorf("%d rings; want one per NIC, 8", rings)
	}
}

// LocalNICs lists a GPU's own NIC first, then the others under its PCIe switch: on DGX A100 GPU 1
// leaves by mlx5_1 and also reaches mlx5_0; a GPU without a NIC has none.
func TestLocalNICs(t *testing.T) {
	t.Parallel()
	var ids []string
	for _, c := range loadPreset(t, "dgx-a100").LocalNICs(1) {
		ids = append(ids, c.ID)
	}
	if strings.Join(ids, ",") != "mlx5_1,mlx5_0" {
		t.Errorf("DGX A100 GPU 1: %v; want mlx5_1,mlx5_0", ids)
	}
	if got := loadPreset(t, "pcie-4090x8").LocalNICs(0); len(got) != 0 {
		t.Errorf("RTX 4090 box GPU 0: %v; want none", got)
	}
}

// ringRate is the bus bandwidth of a ring over every GPU on the links as they now run (slow links
// included), in GB/s.
func ringRate(topo *gpu.Topology) float64 {
	flows, rings := topo.RingFlows(allGPUs(topo))
	return float64(rings) / (topo.LinkLoad(flows, func(gpu.LinkKind) float64 { return 1 }) * 1e3)
}

func TestSlowLink(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		preset string
		a, b   string
		f      float64
		want   float64 // ring rate over all GPUs afterwards
		peak   float64 // BusPeak, which keeps the nominal figures
	}{
		{"halve gpu0 nvlink", "dgx-h100", "gpu0", "nvswitch", 0.5, 225, 450},
		{"either order", "dgx-h100", "nvswitch", "gpu0", 0.5, 225, 450},
		{"host/id on one node", "dgx-h100", "dgx-h100/gpu3", "dgx-h100/nvswitch", 0.1, 45, 450},
		{"factor 1 changes nothing", "dgx-h100", "gpu0", "nvswitch", 1, 450, 450},
		{"a100 quarter", "dgx-a100", "gpu7", "nvswitch", 0.25, 75, 300},
		{"pcie uplink", "pcie-l40sx4", "pcie0", "cpu0", 0.5, 15.752, 31.504},
		// Eight rings, one per NIC; gpu2 is the exit of one of them, so it sends over its NVLink
		// in seven: 8 rings / (7 units / 45 GB/s).
		{"slow nvlink on a second node", "dgx-h100x2", "dgx-h100-1/gpu2", "dgx-h100-1/nvswitch", 0.1, 8 * 45.0 / 7, 400},
		{"slow NIC link", "dgx-h100x2", "dgx-h100-0/mlx5_0", "dgx-h100-0/pcie0", 0.5, 8 * 31.504, 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topo := loadPreset(t, tc.preset)
			if err := topo.SlowLink(tc.a, tc.b, tc.f); err != nil {
				t.Fatalf("SlowLink(%q, %q, %v): %v", tc.a, tc.b, tc.f, err)
			}
			if got := ringRate(topo); math.Abs(got-tc.want) > 1e-9*tc.want {
				t.Errorf("ring rate after SlowLink = %v; want %v", got, tc.want)
			}
			if peak, _ := topo.BusPeak(allGPUs(topo)); math.Abs(peak-tc.peak) > 1e-9*tc.peak {
				t.Errorf("BusPeak after SlowLink = %v; want the nominal %v", peak, tc.peak)
			}
		})
	}
	t.Run("slowdowns compound", func(t *testing.T) {
		t.Parallel()
		topo := loadPreset(t, "dgx-h100")
		for range 2 {
			if err := topo.SlowLink("gpu0", "nvswitch", 0.5); err != nil {
				t.Fatal(err)
			}
		}
		if got := ringRate(topo); math.Abs(got-112.5) > 1e-9 {
			t.Errorf("ring rate after halving twice = %v; want 112.5", got)
		}
	})
	t.Run("other topologies are untouched", func(t *testing.T) {
		t.Parallel()
		a, b := loadPreset(t, "dgx-h100"), loadPreset(t, "dgx-h100")
		if err := a.SlowLink("gpu0", "nvswitch", 0.5); err != nil {
			t.Fatal(err)
		}
		if got := ringRate(b); got != 450 {
			t.Errorf("ring rate of a second parse = %v; want 450", got)
		}
	})
}

func TestSlowLinkErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		preset string
		a, b   string
		f      float64
		want   string
	}{
		{"factor zero", "dgx-h100", "gpu0", "nvswitch", 0, "out of range [0.001, 1]"},
		{"negative factor", "dgx-h100", "gpu0", "nvswitch", -0.5, "out of range"},
		{"factor above 1", "dgx-h100", "gpu0", "nvswitch", 1.5, "out of range"},
		{"factor NaN", "dgx-h100", "gpu0", "nvswitch", math.NaN(), "out of range"},
		{"factor inf", "dgx-h100", "gpu0", "nvswitch", math.Inf(1), "out of range"},
		{"unknown part", "dgx-h100", "gpu9", "nvswitch", 0.5, "no link gpu9-nvswitch in topology dgx-h100: name parts by their id"},
		{"unknown second part", "dgx-h100", "gpu0", "nvswitch2", 0.5, "no link gpu0-nvswitch2"},
		{"unknown host", "dgx-h100", "other/gpu0", "nvswitch", 0.5, "name parts by their id"},
		{"parts without a link", "dgx-h100", "gpu0", "gpu1", 0.5, "no link gpu0-gpu1 in topology dgx-h100"},
		{"same part", "dgx-h100", "gpu0", "gpu0", 0.5, "no link gpu0-gpu0"},
		{"bare id on two nodes", "dgx-h100x2", "gpu0", "nvswitch", 0.5, "host/id on several nodes"},
		{"parts on different nodes", "dgx-h100x2", "dgx-h100-0/gpu0", "dgx-h100-1/nvswitch", 0.5, "no link dgx-h100-0/gpu0-dgx-h100-1/nvswitch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topo := loadPreset(t, tc.preset)
			before := ringRate(topo)
			err := topo.SlowLink(tc.a, tc.b, tc.f)
			if err == nil {
				t.Fatalf("SlowLink(%q, %q, %v) succeeded; want an error", tc.a, tc.b, tc.f)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("SlowLink error %q; want it to contain %q", err, tc.want)
			}
			if after := ringRate(topo); after != before {
				t.Errorf("failed SlowLink changed the ring rate from %v to %v", before, after)
			}
		})
	}
}

// linkGBs is the bandwidth the link between parts a and b now delivers.
func linkGBs(t *testing.T, topo *gpu.Topology, a, b string) float64 {
	t.Helper()
	edges, err := topo.LinkEdges(a, b)
	if err != nil {
		t.Fatal(err)
	}
	return topo.LinkGBs(edges[0])
}

// TestSlowNode checks that slow-node slows the named host's links and no other host's, even
// where hosts share a part: the trays of a GB200 NVL72 all name the rack's NVSwitch.
func TestSlowNode(t *testing.T) {
	t.Parallel()
	t.Run("shared NVSwitch", func(t *testing.T) {
		t.Parallel()
		topo := loadPreset(t, "gb200-nvl72")
		if err := topo.SlowNode("nvl72-tray-3", 0.5); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			a, b string
			want float64
		}{
			{"nvl72-tray-3/gpu0", "nvl72-tray-3/nvswitch", 450}, // the tray's own NVLink to the shared switch
			{"nvl72-tray-3/gpu3", "nvl72-tray-3/cpu1", 225},
			{"nvl72-tray-3/mlx5_0", "nvl72-tray-3/cpu0", 31.504},
			{"nvl72-tray-3/cpu0", "nvl72-tray-3/cpu1", 225},
			{"nvl72-tray-0/gpu0", "nvl72-tray-0/nvswitch", 900}, // another tray's, to the same switch
			{"nvl72-tray-4/gpu2", "nvl72-tray-4/nvswitch", 900},
			{"nvl72-tray-0/gpu0", "nvl72-tray-0/cpu0", 450},
		} {
			if got := linkGBs(t, topo, tc.a, tc.b); math.Abs(got-tc.want) > 1e-9*tc.want {
				t.Errorf("link %s-%s delivers %v GB/s; want %v", tc.a, tc.b, got, tc.want)
			}
		}
		tray0, tray3 := []int{0, 1, 2, 3}, []int{12, 13, 14, 15}
		for _, tc := range []struct {
			gpus []int
			want float64
		}{{tray0, 900}, {tray3, 450}} {
			flows, rings := topo.RingFlows(tc.gpus)
			got := float64(rings) / (topo.LinkLoad(flows, func(gpu.LinkKind) float64 { return 1 }) * 1e3)
			if math.Abs(got-tc.want) > 1e-9*tc.want {
				t.Errorf("ring rate over GPUs %v = %v; want %v", tc.gpus, got, tc.want)
			}
		}
	})
	t.Run("separate nodes", func(t *testing.T) {
		t.Parallel()
		topo := loadPreset(t, "dgx-h100x2")
		if err := topo.SlowNode("dgx-h100-1", 0.5); err != nil {
			t.Fatal(err)
		}
		if got := linkGBs(t, topo, "dgx-h100-1/gpu5", "dgx-h100-1/nvswitch"); got != 225 {
			t.Errorf("the slow node's NVLink delivers %v GB/s; want 225", got)
		}
		if got := linkGBs(t, topo, "dgx-h100-0/gpu5", "dgx-h100-0/nvswitch"); got != 450 {
			t.Errorf("the other node's NVLink delivers %v GB/s; want 450", got)
		}
		// From the slow node to the other one, the first link to the network is the slow node's
		// NIC's, the last the other's.
		var net []float64
		for _, h := range topo.Route(8, 0).Hops {
			if topo.LinkKind(h.Edge) == gpu.LinkNet {
				net = append(net, topo.LinkGBs(h.Edge))
			}
		}
		if len(net) < 2 || net[0] != 25 || net[len(net)-1] != 50 {
			t.Errorf("network links from dgx-h100-1 to dgx-h100-0 deliver %v GB/s; want 25 first and 50 last", net)
		}
	})
	t.Run("unknown host", func(t *testing.T) {
		t.Parallel()
		topo := loadPreset(t, "gb200-nvl72")
		if err := topo.SlowNode("nvswitch", 0.5); err == nil || !strings.Contains(err.Error(), "no node nvswitch") {
			t.Errorf("SlowNode(nvswitch) = %v; want no node", err)
		}
		if err := topo.SlowNode("nvl72-tray-3", 0); err == nil {
			t.Error("SlowNode with factor 0 succeeded")
		}
	})
}

// minimalTopology is a valid two-GPU, one-node topology for Validate's tests to break.
func minimalTopology() *gpu.Topology {
	gpuN := func(id string) gpu.GPU {
		return gpu.GPU{ID: id, Name: "Test GPU", PCIBusID: "0000:01:00.0", MemoryBytes: 1 << 30, MemoryGBs: 100, ComputeCapability: "9.0"}
	}
	return &gpu.Topology{
		Format: gpu.TopologyFormat,
		Name:   "mini",
		Nodes: []gpu.Node{{
			Hostname: "host0",
			CPUs:     []gpu.CPU{{ID: "cpu0"}},
			GPUs:     []gpu.GPU{gpuN("gpu0"), gpuN("gpu1")},
			Switches: []gpu.Switch{{ID: "sw", Kind: "pcie"}},
			NICs:     []gpu.NIC{{ID: "nic0", Kind: "infiniband", Gbps: 400}},
			Links: []gpu.Link{
				{A: "gpu0", B: "sw", Kind: "pcie", Gen: 4, Width: 16},
				{A: "gpu1", B: "sw", Kind: "pcie", GBs: 32},
				{A: "sw", B: "cpu0", Kind: "pcie", Gen: 4, Width: 16},
				{A: "nic0", B: "sw", Kind: "pcie", Gen: 4, Width: 16},
			},
		}},
	}
}

// secondNode copies the minimal topology's node under another hostname.
func secondNode(t *gpu.Topology) {
	n := t.Nodes[0]
	n.Hostname = "host1"
	n.GPUs = append([]gpu.GPU(nil), n.GPUs...)
	t.Nodes = append(t.Nodes, n)
}

func TestValidateAcceptsMinimal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*gpu.Topology)
		gpus   int
		route  string  // Route(0, 1).Type
		netLat float64 // Route(1, 2).LatencyUS, on two nodes
	}{
		{"as is", func(*gpu.Topology) {}, 2, "PIX", 0},
		{"p2p none", func(t *gpu.Topology) { t.P2P = "none" }, 2, "SHM", 0},
		{"two nodes with a network", func(t *gpu.Topology) {
			secondNode(t)
			t.Network = &gpu.Network{Kind: "ethernet", LatencyUS: 3}
		}, 4, "PIX", 0.25 + 0.25 + 3 + 3 + 0.25 + 0.25}, // 0.25 µs a PCIe hop
		{"nvlink pair", func(t *gpu.Topology) {
			t.Nodes[0].Links = append(t.Nodes[0].Links, gpu.Link{A: "gpu0", B: "gpu1", Kind: "nvlink", GBs: 100})
		}, 2, "NVL", 0},
		{"compute capability 10.0", func(t *gpu.Topology) { t.Nodes[0].GPUs[0].ComputeCapability = "10.0" }, 2, "PIX", 0},
		{"network without latency", func(t *gpu.Topology) {
			secondNode(t)
			t.Network = &gpu.Network{Kind: "infiniband"}
		}, 4, "PIX", 0.25 + 0.25 + 2 + 2 + 0.25 + 0.25}, // the default 2 µs a network hop
		{"facts recorded by gpubench topo", func(t *gpu.Topology) {
			on, off := true, false
			g := &t.Nodes[0].GPUs[0]
			g.CPUAffinity, g.PCIeGen, g.PCIeWidth, g.PCIeGenMax, g.PCIeWidthMax = "0-55,112-167", 1, 16, 4, 16
			g.Persistence, g.MIG = &on, &off
			t.Nodes[0].Links[2].HostBridge = "pci0000:17"
		}, 2, "PIX", 0},
		{"one GPU, one link to its CPU", func(t *gpu.Topology) {
			t.Nodes[0].GPUs = t.Nodes[0].GPUs[:1]
			t.Nodes[0].Links = []gpu.Link{{A: "gpu0", B: "cpu0", Kind: "pcie", GBs: 32}}
		}, 1, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topo := minimalTopology()
			tc.mutate(topo)
			if err := topo.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if topo.NumGPUs() != tc.gpus {
				t.Errorf("NumGPUs = %d; want %d", topo.NumGPUs(), tc.gpus)
			}
			if tc.gpus > 1 {
				if got := topo.Route(0, 1).Type; got != gpu.PathType(tc.route) {
					t.Errorf("Route(0, 1).Type = %q; want %q", got, tc.route)
				}
			}
			if tc.gpus == 4 {
				p := topo.Route(1, 2)
				if p.Type != "NET" || len(p.Hops) != 6 || math.Abs(p.LatencyUS-tc.netLat) > 1e-9 {
					t.Errorf("Route(1, 2) = %s, %d hops, %v µs; want NET, 6 hops, %v µs", p.Type, len(p.Hops), p.LatencyUS, tc.netLat)
				}
			}
			data, err := json.Marshal(topo)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := gpu.ParseTopology(data); err != nil {
				t.Errorf("ParseTopology of the marshalled topology: %v", err)
			}
		})
	}
}

func TestValidateRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*gpu.Topology)
		want   string
	}{
		{"wrong format", func(t *gpu.Topology) { t.Format = "gpubench-topology/3" }, `topology format is "gpubench-topology/3"; want "gpubench-topology/1" or "gpubench-topology/2"`},
		{"no format", func(t *gpu.Topology) { t.Format = "" }, `topology format is ""`},
		{"no name", func(t *gpu.Topology) { t.Name = "" }, "topology has no name"},
		{"bad p2p", func(t *gpu.Topology) { t.P2P = "some" }, `topology p2p is "some"`},
		{"no nodes", func(t *gpu.Topology) { t.Nodes = nil }, "topology mini has no nodes"},
		{"two nodes without network", secondNode, "topology mini has 2 nodes but no network"},
		{"duplicate hostname", func(t *gpu.Topology) {
			secondNode(t)
			t.Nodes[1].Hostname = "host0"
			t.Network = &gpu.Network{Kind: "infiniband"}
		}, `node 1: hostname "host0" is used twice, by node 0 too: give every node its own`},
		{"missing hostname", func(t *gpu.Topology) { t.Nodes[0].Hostname = "" }, `node 0: hostname is missing: give every node one`},
		{"malformed hostname", func(t *gpu.Topology) { t.Nodes[0].Hostname = "a b" }, `node 0: hostname "a b" is malformed: use letters, digits and _.:- only`},
		{"network latency out of range", func(t *gpu.Topology) { t.Network = &gpu.Network{Kind: "infiniband", LatencyUS: -1} }, "network latency_us -1 is out of range"},
		{"unknown network kind", func(t *gpu.Topology) { t.Network = &gpu.Network{Kind: "slingshot"} }, `network kind "slingshot"; want infiniband, roce, efa or ethernet`},
		{"node without GPUs", func(t *gpu.Topology) { t.Nodes[0].GPUs = nil }, "node host0 has no GPUs"},
		{"duplicate id", func(t *gpu.Topology) { t.Nodes[0].GPUs[1].ID = "gpu0" }, `node host0: id "gpu0" used twice`},
		{"duplicate id across kinds", func(t *gpu.Topology) { t.Nodes[0].Switches[0].ID = "cpu0" }, `node host0: id "cpu0" used twice`},
		{"bad id", func(t *gpu.Topology) { t.Nodes[0].CPUs[0].ID = "cpu 0" }, `node host0: bad id "cpu 0"`},
		{"id with a slash", func(t *gpu.Topology) { t.Nodes[0].GPUs[0].ID = "a/b" }, `bad id "a/b"`},
		{"GPU with zero memory", func(t *gpu.Topology) { t.Nodes[0].GPUs[1].MemoryBytes = 0 }, "node host0 gpu gpu1: name, memory_bytes and memory_bandwidth_gbs must be set"},
		{"GPU with no memory bandwidth", func(t *gpu.Topology) { t.Nodes[0].GPUs[0].MemoryGBs = 0 }, "gpu gpu0: name, memory_bytes and memory_bandwidth_gbs must be set"},
		{"GPU without a name", func(t *gpu.Topology) { t.Nodes[0].GPUs[0].Name = "" }, "gpu gpu0: name, memory_bytes"},
		{"GPU name with an escape", func(t *gpu.Topology) { t.Nodes[0].GPUs[0].Name = "H100\x1b[2J" },
			`node host0 gpu gpu0: name holds '\x1b', which is not plain text (a control or format character, or bytes that are not UTF-8); names are printed in tables, so use plain text`},
		{"GPU name reversed", func(t *gpu.Topology) { t.Nodes[0].GPUs[1].Name = "H100 \u202eMBH" }, `node host0 gpu gpu1: name holds '\u202e', which is not plain text`},
		{"topology name with a line separator", func(t *gpu.Topology) { t.Name = "a\u2028b" }, `topology: name holds '\u2028'`},
		{"GPU without compute capability", func(t *gpu.Topology) { t.Nodes[0].GPUs[1].ComputeCapability = "" }, `node host0 gpu gpu1: compute_capability ""; want MAJOR.MINOR`},
		{"compute capability without minor", func(t *gpu.Topology) { t.Nodes[0].GPUs[0].ComputeCapability = "9" }, `gpu gpu0: compute_capability "9"; want MAJOR.MINOR`},
		{"compute capability 0.x", func(t *gpu.Topology) { t.Nodes[0].GPUs[0].ComputeCapability = "0.9" }, `compute_capability "0.9"`},
		{"compute capability with two-digit minor", func(t *gpu.Topology) { t.Nodes[0].GPUs[0].ComputeCapability = "9.10" }, `compute_capability "9.10"`},
		{"unknown switch kind", func(t *gpu.Topology) { t.Nodes[0].Switches[0].Kind = "ethernet" }, `switch sw: kind "ethernet"; want nvswitch or pcie`},
		{"NIC without speed", func(t *gpu.Topology) { t.Nodes[0].NICs[0].Gbps = 0 }, "nic nic0: gbps 0 is out of range"},
		{"unknown link endpoint", func(t *gpu.Topology) { t.Nodes[0].Links[0].B = "sw9" }, `node host0 link 0: "gpu0"-"sw9" does not join two known parts`},
		{"link to itself", func(t *gpu.Topology) { t.Nodes[0].Links[2].B = "sw" }, `link 2: "sw"-"sw" does not join two known parts`},
		{"link across nodes", func(t *gpu.Topology) { t.Nodes[0].Links[0].B = "host0/sw" }, `"gpu0"-"host0/sw" does not join`},
		{"unknown link kind", func(t *gpu.Topology) { t.Nodes[0].Links[1].Kind = "infinityfabric" }, `node host0 link gpu1-sw: kind "infinityfabric"; want nvlink, pcie or smp`},
		{"smp off a CPU", func(t *gpu.Topology) { t.Nodes[0].Links[1].Kind = "smp" }, "node host0 link gpu1-sw: smp joins CPU sockets, not a gpu and a pcie: use pcie"},
		{"smp between GPUs", func(t *gpu.Topology) {
			t.Nodes[0].Links = append(t.Nodes[0].Links, gpu.Link{A: "gpu0", B: "gpu1", Kind: "smp", GBs: 64})
		}, "node host0 link gpu0-gpu1: smp joins CPU sockets, not a gpu and a gpu: use nvlink"},
		{"smp from a GPU to a CPU", func(t *gpu.Topology) {
			t.Nodes[0].Links = append(t.Nodes[0].Links, gpu.Link{A: "gpu0", B: "cpu0", Kind: "smp", GBs: 64})
		}, "node host0 link gpu0-cpu0: smp joins CPU sockets, not a gpu and a cpu: use pcie"},
		{"nvlink to a CPU", func(t *gpu.Topology) {
			t.Nodes[0].Links = append(t.Nodes[0].Links, gpu.Link{A: "gpu0", B: "cpu0", Kind: "nvlink", GBs: 450})
		}, "node host0 link gpu0-cpu0: nvlink joins GPUs and NVSwitches, not a gpu and a cpu (a Grace CPU's NVLink-C2C"},
		{"nvlink to a NIC", func(t *gpu.Topology) {
			t.Nodes[0].Links = append(t.Nodes[0].Links, gpu.Link{A: "nic0", B: "gpu1", Kind: "nvlink", GBs: 50})
		}, "link nic0-gpu1: nvlink joins GPUs and NVSwitches, not a nic and a gpu"},
		{"pcie between two GPUs", func(t *gpu.Topology) {
			t.Nodes[0].Links = append(t.Nodes[0].Links, gpu.Link{A: "gpu0", B: "gpu1", Kind: "pcie", GBs: 32})
		}, "link gpu0-gpu1: pcie joins a gpu to a PCIe switch or CPU, not to a gpu"},
		{"nvls on a PCIe switch", func(t *gpu.Topology) { t.Nodes[0].Switches[0].NVLS = true }, "node host0 switch sw: nvls is NVLink SHARP, which only an nvswitch has"},
		{"cpu_affinity range backwards", func(t *gpu.Topology) { t.Nodes[0].GPUs[1].CPUAffinity = "0,5-2" }, `node host0 gpu gpu1: cpu_affinity "0,5-2": range "5-2"; want CPU numbers, each range from low to high`},
		{"pcie without gbs or gen", func(t *gpu.Topology) { t.Nodes[0].Links[0].Gen = 0 }, "node host0 link gpu0-sw: pcie needs gbs, or gen 1-6 and width 1-32"},
		{"pcie gen 7", func(t *gpu.Topology) { t.Nodes[0].Links[0].Gen = 7 }, "pcie needs gbs, or gen 1-6 and width 1-32"},
		{"pcie without width", func(t *gpu.Topology) { t.Nodes[0].Links[0].Width = 0 }, "pcie needs gbs, or gen 1-6 and width 1-32"},
		{"pcie width 64", func(t *gpu.Topology) { t.Nodes[0].Links[0].Width = 64 }, "pcie needs gbs, or gen 1-6 and width 1-32"},
		{"nvlink without gbs", func(t *gpu.Topology) {
			t.Nodes[0].Links = append(t.Nodes[0].Links, gpu.Link{A: "gpu0", B: "gpu1", Kind: "nvlink"})
		}, "node host0 link gpu0-gpu1: gbs 0 is out of range"},
		{"negative gbs", func(t *gpu.Topology) { t.Nodes[0].Links[1].GBs = -5 }, "link gpu1-sw: gbs -5 is out of range"},
		{"huge gbs", func(t *gpu.Topology) { t.Nodes[0].Links[1].GBs = 1e7 }, "gbs 1e+07 is out of range"},
		{"link slower than 1 MB/s", func(t *gpu.Topology) { t.Nodes[0].Links[1].GBs = 1e-9 }, "gbs 1e-09 is out of range [0.001, 1e6)"},
		{"negative lanes", func(t *gpu.Topology) { t.Nodes[0].Links[1].Lanes = -3 }, "lanes -3; want 0 (not recorded) to 1024"},
		{"memory slower than 1 MB/s", func(t *gpu.Topology) { t.Nodes[0].GPUs[0].MemoryGBs = 1e-9 }, "memory_bandwidth_gbs 1e-09 is out of range"},
		{"negative latency", func(t *gpu.Topology) { t.Nodes[0].Links[1].LatencyUS = -1 }, "link gpu1-sw: latency_us -1 is out of range"},
		{"malformed cpu_affinity", func(t *gpu.Topology) { t.Nodes[0].GPUs[0].CPUAffinity = "0-3;8" }, `node host0 gpu gpu0: cpu_affinity "0-3;8"; want a CPU list`},
		{"pcie_gen 7", func(t *gpu.Topology) { t.Nodes[0].GPUs[1].PCIeGen = 7 }, "node host0 gpu gpu1: pcie_gen 7 is out of range 1-6"},
		{"negative pcie_gen_max", func(t *gpu.Topology) { t.Nodes[0].GPUs[0].PCIeGenMax = -1 }, "pcie_gen_max -1 is out of range"},
		{"pcie_width 64", func(t *gpu.Topology) { t.Nodes[0].GPUs[0].PCIeWidth = 64 }, "pcie_width 64 is out of range 1-32"},
		{"pcie_width_max 33", func(t *gpu.Topology) { t.Nodes[0].GPUs[0].PCIeWidthMax = 33 }, "pcie_width_max 33 is out of range"},
		{"host_bridge off a CPU link", func(t *gpu.Topology) { t.Nodes[0].Links[0].HostBridge = "pci0000:17" }, `node host0 link gpu0-sw: host_bridge "pci0000:17" needs a pcie link to a CPU`},
		{"malformed host_bridge", func(t *gpu.Topology) { t.Nodes[0].Links[2].HostBridge = "pci 17" }, `link sw-cpu0: host_bridge "pci 17" needs`},
		{"host_bridge on an smp link", func(t *gpu.Topology) {
			t.Nodes[0].CPUs = append(t.Nodes[0].CPUs, gpu.CPU{ID: "cpu1"})
			t.Nodes[0].Links = append(t.Nodes[0].Links, gpu.Link{A: "cpu0", B: "cpu1", Kind: "smp", GBs: 64, HostBridge: "pci0000:00"})
		}, `link cpu0-cpu1: host_bridge "pci0000:00" needs a pcie link`},
		{"GPU with no path to another", func(t *gpu.Topology) { t.Nodes[0].Links = t.Nodes[0].Links[1:] }, "topology mini: no path from host0/gpu0 to host0/gpu1"},
		{"GPUs without links", func(t *gpu.Topology) { t.Nodes[0].Links = nil }, "no path from host0/gpu0 to host0/gpu1"},
		{"p2p none without a CPU", func(t *gpu.Topology) {
			t.P2P = "none"
			t.Nodes[0].Links = t.Nodes[0].Links[:2]
		}, "no path from host0/gpu0 to host0/gpu1"},
		{"GPUs that reach no CPU", func(t *gpu.Topology) { t.Nodes[0].Links = slices.Delete(t.Nodes[0].Links, 2, 3) },
			"topology mini: host0/gpu0 reaches no CPU over PCIe, so it has no host memory: join it, or the PCIe switch above it, to a CPU with a pcie link"},
		{"second node without NIC", func(t *gpu.Topology) {
			secondNode(t)
			t.Nodes[1].NICs = nil
			t.Nodes[1].Links = t.Nodes[1].Links[:3]
			t.Network = &gpu.Network{Kind: "infiniband"}
		}, "topology mini: node host1 has no NIC, so its GPUs cannot reach the other nodes: give it one (nics, and a pcie link from it to a PCIe switch or CPU its GPUs reach)"},
		{"second node's NIC out of reach", func(t *gpu.Topology) {
			secondNode(t)
			t.Nodes[1].Links = t.Nodes[1].Links[:3]
			t.Network = &gpu.Network{Kind: "infiniband"}
		}, "topology mini: host1/gpu0 reaches none of its node's NICs over PCIe, so it cannot reach the other nodes: join a NIC to a PCIe switch or CPU it reaches with a pcie link"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topo := minimalTopology()
			tc.mutate(topo)
			err := topo.Validate()
			if err == nil {
				t.Fatalf("Validate succeeded; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate error %q; want it to contain %q", err, tc.want)
			}
			// ParseTopology reports the same problem for the same topology as JSON.
			data, jerr := json.Marshal(topo)
			if jerr != nil {
				t.Fatal(jerr)
			}
			if _, perr := gpu.ParseTopology(data); perr == nil || perr.Error() != err.Error() {
				t.Errorf("ParseTopology error %v; want %v", perr, err)
			}
		})
	}
}

func TestParseTopologyRejectsMalformedJSON(t *testing.T) {
	t.Parallel()
	valid, err := json.Marshal(minimalTopology())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gpu.ParseTopology(valid); err != nil {
		t.Fatalf("minimal topology: %v", err)
	}
	preset := readPreset(t, "dgx-h100")
	withField := func(data []byte, field string) []byte {
		return []byte(strings.Replace(string(data), "{", "{"+field+",", 1))
	}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "not a gpubench topology file: it is empty (gpubench topo --output json writes one)"},
		{"white space", []byte(" \n\t"), "not a gpubench topology file: it is empty"},
		{"not JSON", []byte("format: gpubench-topology/1"), "not a gpubench topology file: invalid character 'o' in literal false (expecting 'a'), at line 1, column 2"},
		{"array", []byte("[]"), "not a gpubench topology file"},
		{"truncated", valid[:len(valid)/2], "not a gpubench topology file: it ends inside the topology (the file was cut short?)"},
		{"bad character on line 2", []byte("{\"format\": \"gpubench-topology/1\",\n  \"name\" \"x\"}"), "after object key, at line 2, column 10"},
		{"unknown top-level field", withField(valid, `"gpus":8`), `unknown field "gpus"`},
		{"unknown field in a preset", withField(preset, `"nvlink":true`), `unknown field "nvlink"`},
		{"unknown GPU field", []byte(strings.Replace(string(valid), `"pci_bus_id"`, `"pci_busid":"x","pci_bus_id"`, 1)), `unknown field "pci_busid"`},
		{"wrong field type", []byte(strings.Replace(string(valid), `"memory_bytes":1073741824`, `"memory_bytes":"1G"`, 1)), "not a gpubench topology file: nodes.gpus.memory_bytes is a string, where a whole number belongs, at line 1, column"},
		{"an array where the topology belongs", []byte(`[{"name": "x"}]`), "not a gpubench topology file: the topology is an array, where an object {...} belongs, at line 1, column 1"},
		{"unknown field, placed", []byte("{\"format\": \"gpubench-topology/1\",\n  \"gpus\" : 8}"), `not a gpubench topology file: unknown field "gpus": check its spelling and place against docs/topology.md, at line 2, column 8`},
		{"not UTF-8", []byte("{\"format\": \"gpubench-topology/1\",\n \"name\": \"caf\xe9\"}"), "not a gpubench topology file: a byte that is not UTF-8 at line 2, column 14: save the file as UTF-8"},
		{"trailing object", append(append([]byte(nil), valid...), []byte("\n{}")...), "data after the topology object"},
		{"trailing text", append(append([]byte(nil), valid...), []byte(" x")...), "data after the topology object"},
		{"trailing second preset", append(append([]byte(nil), preset...), preset...), "data after the topology object"},
		{"trailing number", append(append([]byte(nil), valid...), []byte(" 1")...), "data after the topology object"},
		{"trailing close brace", append(append([]byte(nil), valid...), '}'), "data after the topology object"},
		{"trailing close bracket", append(append([]byte(nil), valid...), ']'), "data after the topology object"},
		{"wrong format string", []byte(strings.Replace(string(valid), gpu.TopologyFormat, "gpubench-topology/0", 1)), `topology format is "gpubench-topology/0"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topo, err := gpu.ParseTopology(tc.data)
			if err == nil {
				t.Fatalf("ParseTopology succeeded (%d GPUs); want an error containing %q", topo.NumGPUs(), tc.want)
			}
			if topo != nil {
				t.Errorf("ParseTopology returned a topology with its error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseTopology error %q; want it to contain %q", err, tc.want)
			}
		})
	}
	t.Run("trailing space is fine", func(t *testing.T) {
		t.Parallel()
		if _, err := gpu.ParseTopology(append(append([]byte(nil), valid...), " \n\t\n"...)); err != nil {
			t.Errorf("ParseTopology with trailing white space: %v", err)
		}
	})
}
