package gpu

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
)

// pairFlows is the all-to-all one route per ordered pair: what AllToAllFlows must sum to.
func pairFlows(t *Topology, gpus []int) []Flow {
	var flows []Flow
	lanes := t.LaneCount(gpus)
	for _, a := range gpus {
		for _, b := range gpus {
			if a != b {
				flows = append(flows, t.RouteFlows(a, b, 1, lanes)...)
			}
		}
	}
	return flows
}

// hopLoads is what the flows put on each link in each direction, and their longest latency.
func hopLoads(flows []Flow) (map[Hop]float64, float64) {
	loads, lat := map[Hop]float64{}, 0.0
	for _, f := range flows {
		for _, h := range f.Path.Hops {
			loads[h] += f.Total()
		}
		lat = math.Max(lat, f.Path.LatencyUS)
	}
	return loads, lat
}

// box4 is a node of four GPUs on one NVSwitch, two PCIe switches holding two GPUs and two NICs
// each, and two CPU sockets; pcieOnly leaves the NVSwitch out.
func box4(pcieOnly bool) string {
	nvl := `{"a": "g0", "b": "nvs", "kind": "nvlink", "gbs": 450}, {"a": "g1", "b": "nvs", "kind": "nvlink", "gbs": 450},
	        {"a": "g2", "b": "nvs", "kind": "nvlink", "gbs": 450}, {"a": "g3", "b": "nvs", "kind": "nvlink", "gbs": 450},`
	if pcieOnly {
		nvl = ""
	}
	gpu := func(id string) string {
		return `{"id": "` + id + `", "name": "G", "memory_bytes": 1073741824, "memory_bandwidth_gbs": 1000, "compute_capability": "9.0"}`
	}
	return `{"cpus": [{"id": "c0"}, {"id": "c1"}],
	 "gpus": [` + gpu("g0") + `, ` + gpu("g1") + `, ` + gpu("g2") + `, ` + gpu("g3") + `],
	 "switches": [{"id": "nvs", "kind": "nvswitch", "nvls": true}, {"id": "p0", "kind": "pcie"}, {"id": "p1", "kind": "pcie"}],
	 "nics": [{"id": "n0", "kind": "infiniband", "gbps": 400}, {"id": "n1", "kind": "infiniband", "gbps": 200},
	          {"id": "n2", "kind": "infiniband", "gbps": 400}, {"id": "n3", "kind": "infiniband", "gbps": 400}],
	 "links": [` + nvl + `
	           {"a": "g0", "b": "p0", "kind": "pcie", "gen": 5, "width": 16}, {"a": "g1", "b": "p0", "kind": "pcie", "gen": 4, "width": 16},
	           {"a": "n0", "b": "p0", "kind": "pcie", "gen": 5, "width": 16}, {"a": "n1", "b": "p0", "kind": "pcie", "gen": 5, "width": 16},
	           {"a": "g2", "b": "p1", "kind": "pcie", "gen": 5, "width": 16}, {"a": "g3", "b": "p1", "kind": "pcie", "gen": 5, "width": 16},
	           {"a": "n2", "b": "p1", "kind": "pcie", "gen": 5, "width": 16}, {"a": "n3", "b": "p1", "kind": "pcie", "gen": 5, "width": 8},
	           {"a": "p0", "b": "c0", "kind": "pcie", "gen": 5, "width": 16}, {"a": "p1", "b": "c1", "kind": "pcie", "gen": 5, "width": 16},
	           {"a": "c0", "b": "c1", "kind": "smp", "gbs": 60}]}`
}

func parse(t *testing.T, doc string) *Topology {
	t.Helper()
	topo, err := ParseTopology([]byte(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return topo
}

// boxes is a version 2 cluster of count box4 nodes with the given network and top-level fields.
func boxes(t *testing.T, count int, network, extra string, pcieOnly bool) *Topology {
	t.Helper()
	return parse(t, fmt.Sprintf(`{"format": "gpubench-topology/2", "name": "boxes", "network": %s %s,
	 "templates": {"box": %s}, "nodes": [{"hostname": "b{i}", "template": "box", "count": %d}]}`, network, extra, box4(pcieOnly), count))
}

func dgxH100(t *testing.T, nodes int) *Topology {
	t.Helper()
	data, err := os.ReadFile("../sim/presets/dgx-h100.json")
	if err != nil {
		t.Fatal(err)
	}
	one := parse(t, string(data))
	topo, err := one.WithNodes(nodes)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func every(t *Topology) []int {
	g := make([]int, t.NumGPUs())
	for i := range g {
		g[i] = i
	}
	return g
}

// The summed all-to-all puts on every link, in each direction, what one route per pair of GPUs
// puts there, and its longest latency is the longest route's: on DGX H100 clusters (a rail
// layout), fat trees and rails with oversubscription and a partial last leaf, NVLink domains that
// span hosts and leaves, PCIe-only nodes, P2P off, PXN off, and some of the GPUs only.
func TestAllToAllFlowsAreTheRoutesSummed(t *testing.T) {
	rail := `{"kind": "infiniband", "layout": "rail", "nodes_per_leaf": 2, "oversubscription": 2, "tiers": 3, "switch_latency_us": 0.7}`
	fat := `{"kind": "roce", "layout": "fat-tree", "nodes_per_leaf": 3, "oversubscription": 4, "latency_us": 1.5}`
	cases := []struct {
		name string
		topo func(t *testing.T) *Topology
		gpus func(t *Topology) []int
	}{
		{"dgx-h100 x1", func(t *testing.T) *Topology { return dgxH100(t, 1) }, every},
		{"dgx-h100 x2", func(t *testing.T) *Topology { return dgxH100(t, 2) }, every},
		{"dgx-h100 x4", func(t *testing.T) *Topology { return dgxH100(t, 4) }, every},
		{"dgx-h100 x8", func(t *testing.T) *Topology { return dgxH100(t, 8) }, every},
		{"dgx-h100 x8, some GPUs", func(t *testing.T) *Topology { return dgxH100(t, 8) },
			func(*Topology) []int { return []int{0, 1, 5, 9, 17, 18, 19, 20, 21, 22, 23, 40, 63, 62} }},
		{"dgx-h100 x4 without PXN", func(t *testing.T) *Topology { topo := dgxH100(t, 4); topo.NoPXN = true; return topo }, every},
		{"rail, oversubscribed, 5 nodes on 3 leaves", func(t *testing.T) *Topology { return boxes(t, 5, rail, "", false) }, every},
		{"rail without PXN", func(t *testing.T) *Topology { topo := boxes(t, 5, rail, "", false); topo.NoPXN = true; return topo }, every},
		{"fat-tree, oversubscribed, 7 nodes", func(t *testing.T) *Topology { return boxes(t, 7, fat, "", false) }, every},
		{"fat-tree, PCIe only", func(t *testing.T) *Topology { return boxes(t, 4, fat, "", true) }, every},
		{"P2P off", func(t *testing.T) *Topology { return boxes(t, 3, rail, `, "p2p": "none"`, false) }, every},
		{"P2P off, PCIe only, one node", func(t *testing.T) *Topology { return boxes(t, 1, rail, `, "p2p": "none"`, true) }, every},
		{"NVLink domains of 3 hosts across leaves", func(t *testing.T) *Topology { return boxes(t, 7, rail, `, "nvlink_domain_nodes": 3`, false) }, every},
		{"NVLink domains, some GPUs", func(t *testing.T) *Topology { return boxes(t, 7, rail, `, "nvlink_domain_nodes": 3`, false) },
			func(*Topology) []int { return []int{3, 2, 4, 13, 14, 20, 27} }},
		{"one leaf", func(t *testing.T) *Topology { return boxes(t, 3, `{"kind": "infiniband"}`, "", false) }, every},
		{"two NICs a GPU, 2 nodes", func(t *testing.T) *Topology { return fileTopo(t, "../../accuracy/topologies/oci-b300.json") }, every},
		{"two NICs a GPU, some GPUs", func(t *testing.T) *Topology { return fileTopo(t, "../../accuracy/topologies/oci-b300.json") },
			func(*Topology) []int { return []int{0, 3, 5, 9, 10, 15} }},
		{"dgx-h100 x4, one NIC a node", func(t *testing.T) *Topology { return withNICs(t, dgxH100(t, 4), "mlx5_0") }, every},
		{"dgx-h100 x4, NICs of one socket", func(t *testing.T) *Topology {
			return withNICs(t, dgxH100(t, 4), "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
		}, every},
		{"dgx-h100 x4, one NIC a node, without PXN", func(t *testing.T) *Topology {
			topo := withNICs(t, dgxH100(t, 4), "mlx5_5")
			topo.NoPXN = true
			return topo
		}, every},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topo := tc.topo(t)
			gpus := tc.gpus(topo)
			want, wantLat := hopLoads(pairFlows(topo, gpus))
			flows, err := topo.AllToAllFlows(gpus)
			if err != nil {
				t.Fatal(err)
			}
			got, gotLat := hopLoads(flows)
			if len(got) != len(want) {
				t.Errorf("%d links loaded; want %d", len(got), len(want))
			}
			for h, w := range want {
				if got[h] != w {
					t.Errorf("link %d (%s %s-%s, forward %v): %v routes; want %v", h.Edge, topo.edges[h.Edge].kind,
						topo.kinds[topo.edges[h.Edge].a], topo.kinds[topo.edges[h.Edge].b], h.Forward, got[h], w)
				}
			}
			if gotLat != wantLat {
				t.Errorf("longest latency %v µs; want %v", gotLat, wantLat)
			}
			eff := func(k LinkKind) float64 { return map[LinkKind]float64{LinkNVLink: 0.8, LinkPCIe: 0.7}[k] + 0.2 }
			gotUS, gotKind := topo.LinkLoadKind(scale(flows, 1<<20), eff)
			wantUS, wantKind := topo.LinkLoadKind(scale(pairFlows(topo, gpus), 1<<20), eff)
			if gotUS != wantUS || gotKind != wantKind {
				t.Errorf("LinkLoadKind %v µs (%s); want %v (%s)", gotUS, gotKind, wantUS, wantKind)
			}
		})
	}
}

func scale(flows []Flow, factor float64) []Flow {
	out := make([]Flow, len(flows))
	for i, f := range flows {
		f.Bytes *= factor
		out[i] = f
	}
	return out
}

// On 128 DGX H100 (4 groups of 32 under the rails' leaves) the flows are a few per link, and the
// uplinks of every leaf carry what the routes between leaves put there, counted by hand.
func TestAllToAllFlowsAtScale(t *testing.T) {
	topo := dgxH100(t, 128)
	flows, err := topo.AllToAllFlows(every(topo))
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) > 200*128 {
		t.Errorf("%d flows for 128 nodes", len(flows))
	}
	up := map[bool]float64{}
	for _, f := range flows {
		for _, h := range f.Path.Hops {
			e := topo.edges[h.Edge]
			if topo.kinds[e.a] == "fabric" && topo.kinds[e.b] == "fabric" {
				up[h.Forward] = math.Max(up[h.Forward], f.Total())
			}
		}
	}
	// A leaf holds rail r's NICs of 32 nodes. Up: each of those nodes' 8 GPUs sends to the GPU on
	// rail r of each of the 96 nodes under other leaves, over PXN through rail r's NIC. Down: each
	// of the leaf's 32 GPUs receives from the 96 × 8 GPUs of those nodes.
	if want := 32.0 * 8 * 96; up[true] != want || up[false] != want {
		t.Errorf("an uplink carries %v routes up and %v down; want %v", up[true], up[false], want)
	}
}

// A question past MaxAllToAllRoutes is refused with why, rather than worked out for minutes.
func TestAllToAllFlowsRefuseTooManyRoutes(t *testing.T) {
	topo := boxes(t, 2, `{"kind": "infiniband"}`, "", false)
	_, err := topo.AllToAllFlows([]int{0, 1, 1})
	if err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a GPU twice: %v", err)
	}
	// 6 nodes of 4 GPUs in NVLink domains of 3 hosts: 2 × 12 × 11 pairs inside them, and 24 GPUs
	// × 4 rails between, against a limit of 300.
	defer func(old int) { allToAllLimit = old }(allToAllLimit)
	allToAllLimit = 300
	big := boxes(t, 6, `{"kind": "infiniband"}`, `, "nvlink_domain_nodes": 3`, false)
	_, err = big.AllToAllFlows(every(big))
	if err == nil || !strings.Contains(err.Error(), "needs 360 routes worked out one by one") || !strings.Contains(err.Error(), "at most 300") {
		t.Errorf("got %v", err)
	}
	if _, err := big.AllToAllFlows([]int{0, 1, 2, 3, 4, 5, 6, 7, 12, 13}); err != nil {
		t.Errorf("10 of the GPUs: %v", err)
	}
}

// withNICs leaves the topology's GPUs only the named NICs (as NCCL_IB_HCA does).
func withNICs(t *testing.T, topo *Topology, ids ...string) *Topology {
	t.Helper()
	topo.NICOK = func(id string) bool { return slices.Contains(ids, id) }
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	return topo
}

// With one NIC a node left (NCCL_IB_HCA=mlx5_0 on DGX H100, whose mlx5_0 sits beside GPU 0),
// every GPU leaves by it; GPU 7, whose PCIe way to it crosses both CPUs, first crosses NVLink to
// GPU 0 (NCCL's PXN), and through the CPUs only without PXN. A ring's way to the NIC does the same.
func TestNICsLeftOut(t *testing.T) {
	topo := withNICs(t, dgxH100(t, 2), "mlx5_0")
	for g := range 16 {
		if nic := topo.NICOf(g); nic != "mlx5_0" {
			t.Fatalf("GPU %d leaves by %q; want mlx5_0", g, nic)
		}
	}
	nic0, nic8 := topo.nic[0], topo.nic[8]
	for name, p := range map[string]Path{"route": topo.Route(7, 8), "ring": topo.RouteVia(7, 8, nic0, nic8)} {
		if topo.edges[p.Hops[0].Edge].kind != LinkNVLink || topo.crossesCPU(p.Hops) {
			t.Errorf("%s from GPU 7: first hop %s, crosses a CPU %v; want NVLink to GPU 0, no CPU", name, topo.edges[p.Hops[0].Edge].kind, topo.crossesCPU(p.Hops))
		}
	}
	topo.NoPXN = true
	if p := topo.Route(7, 8); !topo.crossesCPU(p.Hops) {
		t.Errorf("without PXN the route from GPU 7 crosses no CPU")
	}
}

// fileTopo loads a topology file.
func fileTopo(t *testing.T, path string) *Topology {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, string(data))
}

// A GPU with two NICs on its own PCIe switch (OCI's B300: each ConnectX-8 as 2 x 400GbE) spreads
// its traffic to another node over both, as NCCL gives a peer's channels its NICs in turn: the
// all-to-all puts half of every GPU's routes on each of its NICs, and a send's two flows leave by
// one NIC each. Two GPUs sharing two NICs (DGX H100) take one each (NCCL's netsPerGpu).
func TestTrafficSpreadsOverLocalNICs(t *testing.T) {
	if dgx := dgxH100(t, 2); dgx.LaneCount(every(dgx)) != 1 || len(dgx.laneNICs(2)) != 1 {
		t.Errorf("two DGX H100: %d lanes, GPU 2 on %d NICs; want 1 and 1", dgx.LaneCount(every(dgx)), len(dgx.laneNICs(2)))
	}
	topo := fileTopo(t, "../../accuracy/topologies/oci-b300.json")
	if n := topo.LaneCount(every(topo)); n != 2 {
		t.Fatalf("%d lanes; want 2", n)
	}
	flows := topo.RouteFlows(1, 9, 1<<20, 2)
	if len(flows) != 2 || flows[0].Bytes != 1<<19 || flows[1].Bytes != 1<<19 {
		t.Fatalf("flows %+v; want two of 512 KiB", flows)
	}
	nicOf := map[int]int{} // the NIC's link to the fabric -> the NIC
	for v, e := range topo.netEdge {
		nicOf[e] = v
	}
	nics := map[int]bool{}
	for _, f := range flows {
		for _, h := range f.Path.Hops {
			if v, ok := nicOf[h.Edge]; ok && h.Forward {
				nics[v] = true
			}
		}
	}
	if len(nics) != 2 {
		t.Errorf("a send from GPU 1 to node 1 leaves by %d NICs; want 2", len(nics))
	}
	all, err := topo.AllToAllFlows(every(topo))
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]float64{} // NIC vertex -> routes leaving by it
	for _, f := range all {
		if h := f.Path.Hops[0]; h.Forward {
			if v, ok := nicOf[h.Edge]; ok {
				out[v] += f.Count
			}
		}
	}
	if len(out) != 32 {
		t.Fatalf("routes leave by %d NICs; want all 32", len(out))
	}
	for v, n := range out {
		if n != 4 { // 8 receivers on the other node, half of each route
			t.Errorf("NIC vertex %d carries %v routes out; want 4", v, n)
		}
	}
}
