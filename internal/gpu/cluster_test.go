package gpu_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/gpu"
)

// box is a node template with four GPUs on one NVSwitch, two PCIe switches each holding two GPUs
// and two NICs, and one CPU: the shape of a DGX, halved.
const box = `{"cpus": [{"id": "cpu0"}],
 "gpus": [{"id": "g0", "name": "G", "memory_bytes": 1073741824, "memory_bandwidth_gbs": 1000, "compute_capability": "9.0"},
          {"id": "g1", "name": "G", "memory_bytes": 1073741824, "memory_bandwidth_gbs": 1000, "compute_capability": "9.0"},
          {"id": "g2", "name": "G", "memory_bytes": 1073741824, "memory_bandwidth_gbs": 1000, "compute_capability": "9.0"},
          {"id": "g3", "name": "G", "memory_bytes": 1073741824, "memory_bandwidth_gbs": 1000, "compute_capability": "9.0"}],
 "switches": [{"id": "nvs", "kind": "nvswitch", "nvls": true}, {"id": "p0", "kind": "pcie"}, {"id": "p1", "kind": "pcie"}],
 "nics": [{"id": "n0", "kind": "infiniband", "gbps": 400}, {"id": "n1", "kind": "infiniband", "gbps": 400},
          {"id": "n2", "kind": "infiniband", "gbps": 400}, {"id": "n3", "kind": "infiniband", "gbps": 400}],
 "links": [{"a": "g0", "b": "nvs", "kind": "nvlink", "gbs": 450}, {"a": "g1", "b": "nvs", "kind": "nvlink", "gbs": 450},
           {"a": "g2", "b": "nvs", "kind": "nvlink", "gbs": 450}, {"a": "g3", "b": "nvs", "kind": "nvlink", "gbs": 450},
           {"a": "g0", "b": "p0", "kind": "pcie", "gen": 5, "width": 16}, {"a": "g1", "b": "p0", "kind": "pcie", "gen": 5, "width": 16},
           {"a": "n0", "b": "p0", "kind": "pcie", "gen": 5, "width": 16}, {"a": "n1", "b": "p0", "kind": "pcie", "gen": 5, "width": 16},
           {"a": "g2", "b": "p1", "kind": "pcie", "gen": 5, "width": 16}, {"a": "g3", "b": "p1", "kind": "pcie", "gen": 5, "width": 16},
           {"a": "n2", "b": "p1", "kind": "pcie", "gen": 5, "width": 16}, {"a": "n3", "b": "p1", "kind": "pcie", "gen": 5, "width": 16},
           {"a": "p0", "b": "cpu0", "kind": "pcie", "gen": 5, "width": 16}, {"a": "p1", "b": "cpu0", "kind": "pcie", "gen": 5, "width": 16}]}`

func cluster(t *testing.T, extra string) *gpu.Topology {
	t.Helper()
	doc := `{"format": "gpubench-topology/2", "name": "c", "templates": {"box": ` + box + `}` + extra + `}`
	topo, err := gpu.ParseTopology([]byte(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return topo
}

// A template with a count is that many nodes, named from the pattern, sharing the template's parts.
func TestTemplatesExpand(t *testing.T) {
	topo := cluster(t, `, "network": {"kind": "infiniband"}, "nodes": [{"hostname": "rack{i}", "template": "box", "count": 3}, {"hostname": "solo", "template": "box"}]`)
	if topo.NumGPUs() != 16 || len(topo.Nodes) != 4 {
		t.Fatalf("%d GPUs on %d nodes; want 16 on 4", topo.NumGPUs(), len(topo.Nodes))
	}
	if got := topo.GPUName(9); got != "rack2/g1" {
		t.Errorf("GPU 9 is %s; want rack2/g1", got)
	}
	if got := topo.GPUName(12); got != "solo/g0" {
		t.Errorf("GPU 12 is %s; want solo/g0", got)
	}
	// The expanded topology is a file the simulator reads again.
	data, err := json.Marshal(topo)
	if err != nil {
		t.Fatal(err)
	}
	again, err := gpu.ParseTopology(data)
	if err != nil || again.NumGPUs() != 16 {
		t.Fatalf("round trip: %v", err)
	}
}

// Two GPUs under one PCIe switch with two NICs each leave by their own NIC, not both by the first,
// and a GPU's "nic" overrides the choice.
func TestNICsAreSpreadOverGPUs(t *testing.T) {
	topo := cluster(t, `, "network": {"kind": "infiniband"}, "nodes": [{"hostname": "a", "template": "box"}, {"hostname": "b", "template": "box"}]`)
	// g1 (GPU 1) to b/g1 (GPU 5): both on rail 1, so no NVLink hop: up, NIC, NIC, down, and its
	// NIC is not g0's.
	p0, p1 := topo.Route(0, 4), topo.Route(1, 5)
	if len(p1.Hops) != 6 || p1.Type != gpu.PathNET || p0.Hops[2].Edge == p1.Hops[2].Edge {
		t.Errorf("a/g1 -> b/g1: %d hops, %s, NIC link %d (g0's: %d); want 6 hops through n1, not n0", len(p1.Hops), p1.Type, p1.Hops[2].Edge, p0.Hops[2].Edge)
	}
	var doc map[string]any
	json.Unmarshal([]byte(box), &doc)
	doc["gpus"].([]any)[1].(map[string]any)["nic"] = "n0"
	pinned, _ := json.Marshal(doc)
	topo2, err := gpu.ParseTopology([]byte(`{"format": "gpubench-topology/2", "name": "c", "network": {"kind": "infiniband"}, "templates": {"box": ` + string(pinned) + `},
		"nodes": [{"hostname": "a", "template": "box"}, {"hostname": "b", "template": "box"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	// a/g1 now leaves by n0, as g0 does.
	if p0, p1 := topo2.Route(0, 4), topo2.Route(1, 5); len(p1.Hops) != 6 || p0.Hops[2].Edge != p1.Hops[2].Edge {
		t.Errorf("pinned a/g1 -> b/g1: %d hops; want 6 through n0", len(p1.Hops))
	}
	bad := strings.Replace(string(pinned), `"nic":"n0"`, `"nic":"n9"`, 1)
	if _, err := gpu.ParseTopology([]byte(`{"format": "gpubench-topology/2", "name": "c", "templates": {"box": ` + bad + `}, "nodes": [{"hostname": "a", "template": "box"}]}`)); err == nil || !strings.Contains(err.Error(), `nic "n9" is not a NIC of the node`) {
		t.Errorf("a nic that does not exist: %v", err)
	}
}

// Between nodes, data for another rail crosses NVLink to the GPU on that rail first (PXN), so
// that it stays on one rail of the fabric; with NoPXN it leaves by the sender's own NIC.
func TestPXN(t *testing.T) {
	topo := cluster(t, `, "network": {"kind": "infiniband", "layout": "rail", "nodes_per_leaf": 2}, "nodes": [{"hostname": "a", "template": "box"}, {"hostname": "b", "template": "box"}]`)
	p := topo.Route(0, 7) // a/g0 (rail 0) -> b/g3 (rail 3)
	if len(p.Hops) != 8 || topo.LinkKind(p.Hops[0].Edge) != gpu.LinkNVLink {
		t.Errorf("PXN: %d hops starting with %s; want 8 starting over NVLink", len(p.Hops), topo.LinkKind(p.Hops[0].Edge))
	}
	topo.NoPXN = true
	p = topo.Route(0, 7)
	// Out by n0 on rail 0's leaf, through the spine to rail 3's leaf, in by n3.
	if len(p.Hops) != 8 || topo.LinkKind(p.Hops[0].Edge) != gpu.LinkPCIe {
		t.Errorf("without PXN: %d hops starting with %s; want 8 starting over PCIe", len(p.Hops), topo.LinkKind(p.Hops[0].Edge))
	}
	// Without P2P (NCCL_P2P_DISABLE) NCCL has no NVLink path between the GPUs, so no PXN either.
	topo = cluster(t, `, "network": {"kind": "infiniband", "layout": "rail", "nodes_per_leaf": 2}, "nodes": [{"hostname": "a", "template": "box"}, {"hostname": "b", "template": "box"}]`)
	topo.P2P = "none"
	if err := topo.Validate(); err != nil { // as NCCL_P2P_DISABLE does (sim.routeEnv)
		t.Fatal(err)
	}
	if p = topo.Route(0, 7); len(p.Hops) != 8 || topo.LinkKind(p.Hops[0].Edge) != gpu.LinkPCIe {
		t.Errorf("P2P off: %d hops starting with %s; want 8 starting over PCIe", len(p.Hops), topo.LinkKind(p.Hops[0].Edge))
	}
}

// A rail-optimized fabric: nodes of one leaf group meet on their rail's leaf, others through the
// spine, whose uplinks carry a leaf's NICs divided by the oversubscription.
func TestRailFabric(t *testing.T) {
	topo := cluster(t, `, "network": {"kind": "infiniband", "layout": "rail", "nodes_per_leaf": 2, "oversubscription": 2},
		"nodes": [{"hostname": "n{i}", "template": "box", "count": 4}]`)
	same, other := topo.Route(0, 4), topo.Route(0, 8) // n0/g0 -> n1/g0 (same leaf) and -> n2/g0 (another)
	if len(same.Hops) != 6 || len(other.Hops) != 8 {
		t.Fatalf("hops %d within a leaf, %d across; want 6 and 8", len(same.Hops), len(other.Hops))
	}
	up := other.Hops[3].Edge // n0's NIC, its leaf, then the uplink
	if got := topo.LinkGBs(up); got != 2*50/2.0 {
		t.Errorf("uplink %v GB/s; want two 400G NICs over an oversubscription of 2 = 50", got)
	}
}

// A message between leaves crosses 2(tiers - 1) switches more than one under a leaf, each
// switch_latency_us, once: a three-tier fabric's two uplinks carry two switches each. LeafSpan
// counts the leaves the GPUs' traffic enters on one rail, and gives that crossing.
func TestSwitchLatency(t *testing.T) {
	topo := cluster(t, `, "network": {"kind": "infiniband", "layout": "rail", "nodes_per_leaf": 2, "tiers": 3, "switch_latency_us": 0.5},
		"nodes": [{"hostname": "n{i}", "template": "box", "count": 6}]`)
	same, other := topo.Route(0, 4), topo.Route(0, 8) // n0/g0 -> n1/g0 (one leaf) and -> n2/g0
	if d := other.LatencyUS - same.LatencyUS; math.Abs(d-2) > 1e-9 {
		t.Errorf("between leaves %v µs, under one %v: %v more; want 4 switches of 0.5 = 2", other.LatencyUS, same.LatencyUS, d)
	}
	for _, c := range []struct {
		gpus   []int
		leaves int
	}{
		{[]int{0, 4}, 1}, {[]int{0, 1, 2, 3, 4, 5, 6, 7}, 1}, {[]int{0, 8}, 2}, {[]int{0, 4, 8, 12, 16, 20}, 3},
		{[]int{1, 8, 17}, 2}, // the first GPU's rail (n1's NIC) alone: n0 and n4, under two leaves
	} {
		leaves, cross := topo.LeafSpan(c.gpus)
		if leaves != c.leaves || cross != 2 {
			t.Errorf("GPUs %v: %d leaves, %v µs between them; want %d and 2", c.gpus, leaves, cross, c.leaves)
		}
	}
	one := cluster(t, `, "network": {"kind": "infiniband"}, "nodes": [{"hostname": "n{i}", "template": "box", "count": 3}]`)
	if leaves, cross := one.LeafSpan([]int{0, 4, 8}); leaves != 1 || cross != 0 {
		t.Errorf("one switch: %d leaves, %v µs; want 1 and 0", leaves, cross)
	}
}

// Nodes of one NVLink domain reach each other over NVLink through one shared NVSwitch.
func TestNVLinkDomainAcrossHosts(t *testing.T) {
	topo := cluster(t, `, "nvlink_domain_nodes": 2, "network": {"kind": "infiniband"}, "nodes": [{"hostname": "t{i}", "template": "box", "count": 4}]`)
	if p := topo.Route(0, 7); p.Type != gpu.PathNVL || len(p.Hops) != 2 {
		t.Errorf("t0/g0 -> t1/g3, one domain: %s, %d hops; want NVL through the shared switch", p.Type, len(p.Hops))
	}
	if p := topo.Route(0, 8); p.Type != gpu.PathNET {
		t.Errorf("t0/g0 -> t2/g0, another domain: %s; want NET", p.Type)
	}
	if topo.DomainOf(7) != 0 || topo.DomainOf(8) != 1 {
		t.Errorf("domains %d and %d; want 0 and 1", topo.DomainOf(7), topo.DomainOf(8))
	}
}

// A template no node uses is refused, naming it; a node naming no template lists the names.
func TestTemplateNames(t *testing.T) {
	for nodes, want := range map[string]string{
		`{"hostname": "a", "template": "box"}`: `template "spare" is used by no node: name it in a node's template, or drop it`,
		`{"hostname": "a", "template": "bx"}`:  `node 0: no template "bx": use one of templates' names (box, spare)`,
	} {
		doc := `{"format": "gpubench-topology/2", "name": "c", "templates": {"box": ` + box + `, "spare": ` + box + `}, "nodes": [` + nodes + `]}`
		if _, err := gpu.ParseTopology([]byte(doc)); err == nil || err.Error() != want {
			t.Errorf("%s: %v; want %q", nodes, err, want)
		}
	}
	bom := "\xef\xbb\xbf" + `{"format": "gpubench-topology/2", "name": "c", "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a", "template": "box"}]}`
	if _, err := gpu.ParseTopology([]byte(bom)); err != nil {
		t.Errorf("a file that starts with a byte order mark: %v", err)
	}
}

// A domain is nodes whose NVSwitches are one fabric: a node without an nvswitch, or whose
// nvswitch has another id than the domain's first node's, is refused, naming the node.
func TestNVLinkDomainNeedsOneSwitch(t *testing.T) {
	pcieOnly := strings.Replace(strings.Replace(box, `{"id": "nvs", "kind": "nvswitch", "nvls": true}, `, "", 1), `{"a": "g0", "b": "nvs", "kind": "nvlink", "gbs": 450}, {"a": "g1", "b": "nvs", "kind": "nvlink", "gbs": 450},
           {"a": "g2", "b": "nvs", "kind": "nvlink", "gbs": 450}, {"a": "g3", "b": "nvs", "kind": "nvlink", "gbs": 450},
           `, "", 1)
	other := strings.ReplaceAll(box, `"nvs"`, `"nvs2"`)
	for _, c := range []struct{ templates, nodes, want string }{
		{`"box": ` + pcieOnly, `{"hostname": "t{i}", "template": "box", "count": 4}`,
			"nvlink_domain_nodes 2: node t0 has no nvswitch, so its GPUs reach the rest of its domain over no NVLink: give each node of a domain the same nvswitch (its id), or leave nvlink_domain_nodes out"},
		{`"box": ` + box + `, "other": ` + other, `{"hostname": "a", "template": "box"}, {"hostname": "b", "template": "other"}`,
			"nvlink_domain_nodes 2: node b shares no nvswitch with node a of its domain"},
	} {
		doc := `{"format": "gpubench-topology/2", "name": "c", "nvlink_domain_nodes": 2, "network": {"kind": "infiniband"}, "templates": {` + c.templates + `}, "nodes": [` + c.nodes + `]}`
		if _, err := gpu.ParseTopology([]byte(doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v; want %q", err, c.want)
		}
	}
}

// WithNodes repeats a one-node preset into a cluster, as --nodes does, in time and memory that
// grow with the nodes (1,024 DGX H100 load in well under a second).
func TestWithNodes(t *testing.T) {
	one := loadPreset(t, "dgx-h100")
	c, err := one.WithNodes(1024)
	if err != nil {
		t.Fatal(err)
	}
	if c.NumGPUs() != 8192 || c.GPUName(8191) != "dgx-h100-1023/gpu7" {
		t.Errorf("%d GPUs, last %s", c.NumGPUs(), c.GPUName(8191))
	}
	if _, err := one.WithNodes(0); err == nil {
		t.Error("0 nodes accepted")
	}
	if _, err := one.WithNodes(4096); err == nil || !strings.Contains(err.Error(), "use 1 to 2048 nodes of 8 GPUs") {
		t.Errorf("4,096 nodes of 8 GPUs: %v", err)
	}
	// A node with no network joins the others on a fabric of its NICs' kind: Ethernet NICs do
	// not make an InfiniBand cluster.
	for preset, kind := range map[string]string{"pcie-l40s-8": "ethernet", "pcie-a100-8": "infiniband"} {
		if c, err := loadPreset(t, preset).WithNodes(2); err != nil || c.Network.Kind != kind {
			t.Errorf("%s x2: network %+v, %v; want %s", preset, c.Network, err, kind)
		}
	}
}

// WithGPUsPerNode keeps each node's first GPUs and every NIC, as a job of that many GPUs a node
// sees the machine, and its cluster shares the trimmed node's parts as the template's nodes did.
func TestWithGPUsPerNode(t *testing.T) {
	c, err := loadPreset(t, "dgx-h100").WithNodes(3)
	if err != nil {
		t.Fatal(err)
	}
	two, err := c.WithGPUsPerNode(2)
	if err != nil {
		t.Fatal(err)
	}
	if two.NumGPUs() != 6 || two.GPUName(2) != "dgx-h100-1/gpu0" || two.NodeOf(5) != 2 {
		t.Errorf("%d GPUs, GPU 2 %s on node %d; want 6, dgx-h100-1/gpu0, GPU 5 on node 2", two.NumGPUs(), two.GPUName(2), two.NodeOf(5))
	}
	for _, n := range two.Nodes {
		if len(n.NICs) != 8 || len(n.Switches) != len(c.Nodes[0].Switches) {
			t.Errorf("%s: %d NICs, %d switches; want every NIC and switch kept", n.Hostname, len(n.NICs), len(n.Switches))
		}
		for _, l := range n.Links {
			if l.A == "gpu2" || l.B == "gpu2" {
				t.Errorf("%s keeps link %s-%s of a GPU it drops", n.Hostname, l.A, l.B)
			}
		}
	}
	if &two.Nodes[0].Links[0] != &two.Nodes[2].Links[0] {
		t.Error("each node has its own copy of the trimmed links; want them shared")
	}
	if p := two.Route(0, 2); p.Type != gpu.PathNET {
		t.Errorf("gpu0 of node 0 to gpu0 of node 1: %s; want NET", p.Type)
	}
	if c.NumGPUs() != 24 {
		t.Errorf("the cluster it was cut from has %d GPUs; want 24, untouched", c.NumGPUs())
	}
	for _, k := range []int{0, 9} {
		if _, err := c.WithGPUsPerNode(k); err == nil || !strings.Contains(err.Error(), "use 1 to 8 GPUs a node, the most its smallest node has") {
			t.Errorf("%d GPUs a node: %v", k, err)
		}
	}
}

// Across nodes the rings leave by each GPU's own NIC alone where the NICs near a GPU would share
// its PCIe link (BestRingFlows), as NCCL's search keeps one channel a GPU at full speed over two at
// half: GPUs 1, 2, 6 and 7 of two DGX H100 leave by four 400 Gb/s NICs (200 GB/s nominal), one
// GPU a node by its own (50), a whole node by its eight (400).
func TestRingsByOwnNICs(t *testing.T) {
	one := loadPreset(t, "dgx-h100")
	n := one.Nodes[0]
	keep := map[string]bool{"gpu1": true, "gpu2": true, "gpu6": true, "gpu7": true}
	var gpus []gpu.GPU
	for _, g := range n.GPUs {
		if keep[g.ID] {
			gpus = append(gpus, g)
		}
	}
	var links []gpu.Link
	for _, l := range n.Links {
		if !strings.HasPrefix(l.A, "gpu") || keep[l.A] {
			links = append(links, l)
		}
	}
	part := &gpu.Topology{Format: one.Format, Name: "part", Network: one.Network,
		Nodes: []gpu.Node{{Hostname: "h", CPUs: n.CPUs, GPUs: gpus, Switches: n.Switches, NICs: n.NICs, Links: links}}}
	if err := part.Validate(); err != nil {
		t.Fatal(err)
	}
	two, err := part.WithNodes(2)
	if err != nil {
		t.Fatal(err)
	}
	single, err := one.WithNodes(2)
	if err != nil {
		t.Fatal(err)
	}
	lone, err := single.WithGPUsPerNode(1)
	if err != nil {
		t.Fatal(err)
	}
	oneNIC, err := one.WithNodes(2)
	if err != nil {
		t.Fatal(err)
	}
	oneNIC.NICOK = func(id string) bool { return id == "mlx5_0" }
	if err := oneNIC.Validate(); err != nil {
		t.Fatal(err)
	}
	all := func(n int) []int {
		var g []int
		for i := range n {
			g = append(g, i)
		}
		return g
	}
	for _, c := range []struct {
		name  string
		topo  *gpu.Topology
		gpus  int
		want  float64
		limit string
	}{{"GPUs 1, 2, 6, 7", two, 8, 200, "infiniband"}, {"one GPU a node", lone, 2, 50, "infiniband"}, {"whole nodes", single, 16, 400, "infiniband"},
		{"whole nodes, one NIC each (NCCL_IB_HCA)", oneNIC, 16, 50, "infiniband"}} {
		if peak, limit := c.topo.BusPeak(all(c.gpus)); math.Abs(peak-c.want) > 1e-6 || limit != c.limit {
			t.Errorf("%s of two DGX H100: bus peak %.2f GB/s (%s); want %.0f (%s)", c.name, peak, limit, c.want, c.limit)
		}
	}
}

// What version 2 adds is refused in a version 1 file, and bad version 2 fields are named.
func TestVersion2Errors(t *testing.T) {
	v1 := strings.Replace(`{"format": "gpubench-topology/2", "name": "c", "templates": {"box": `+box+`}, "nodes": [{"hostname": "a", "template": "box"}]}`, "/2", "/1", 1)
	for _, c := range []struct{ doc, want string }{
		{v1, `templates and node template (node 0) are version 2 fields, and the file's format is "gpubench-topology/1": set "format": "gpubench-topology/2", or drop them`},
		{`{"format": "gpubench-topology/2", "name": "c", "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a", "template": "tub"}]}`, `node 0: no template "tub"`},
		{`{"format": "gpubench-topology/2", "name": "c", "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a", "template": "box", "count": -2}]}`, "count -2 is negative"},
		{`{"format": "gpubench-topology/2", "name": "c", "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a", "count": 2}]}`, "count 2 without a template"},
		{`{"format": "gpubench-topology/2", "name": "c", "network": {"kind": "infiniband", "layout": "torus"}, "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a{i}", "template": "box", "count": 2}]}`, `network layout "torus"`},
		{`{"format": "gpubench-topology/2", "name": "c", "network": {"kind": "infiniband", "layout": "fat-tree", "oversubscription": 0.5}, "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a{i}", "template": "box", "count": 2}]}`, "oversubscription 0.5"},
		{`{"format": "gpubench-topology/2", "name": "c", "network": {"kind": "infiniband", "layout": "fat-tree", "oversubscription": 0}, "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a{i}", "template": "box", "count": 2}]}`, "network oversubscription 0: want a ratio from 1 (none) to 64, or leave it out (1)"},
		{`{"format": "gpubench-topology/2", "name": "c", "network": {"kind": "infiniband", "layout": "rail", "Tiers": 0}, "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a{i}", "template": "box", "count": 2}]}`, "network tiers 0: want 2 or 3, or leave it out (2)"},
		{`{"format": "gpubench-topology/2", "name": "c", "network": {"kind": "infiniband", "layout": "rail", "nodes_per_leaf": 0}, "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a{i}", "template": "box", "count": 2}]}`, "network nodes_per_leaf 0: give 1 to 16384 nodes a leaf, or leave it out (32)"},
		{`{"format": "gpubench-topology/2", "name": "c", "name": "d", "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a", "template": "box"}]}`, `"name" is given twice in one object (the names may differ in case), at line 1, column 53: give each once`},
		{`{"format": "gpubench-topology/2", "name": "c", "templates": {"box": ` + box + `, "Box": ` + box + `}, "nodes": [{"hostname": "a", "template": "box"}]}`, `"Box" is given twice in one object`},
		{`{"format": "gpubench-topology/2", "name": "c", "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a", "template": "box", "Count": 2, "count": 1}]}`, `"count" is given twice in one object`},
		{`{"format": "gpubench-topology/2", "name": "c", "network": {"kind": "infiniband", "tiers": 3}, "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a{i}", "template": "box", "count": 2}]}`, "network tiers describes leaves and spines, and layout single is one non-blocking switch: set layout rail or fat-tree, or drop tiers"},
		{`{"format": "gpubench-topology/2", "name": "c", "network": {"kind": "infiniband", "layout": "single", "switch_latency_us": 1}, "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a{i}", "template": "box", "count": 2}]}`, "network switch_latency_us describes leaves and spines"},
		{`{"format": "gpubench-topology/2", "name": "c", "network": {"kind": "efa", "plugin_latency_us": -1}, "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a{i}", "template": "box", "count": 2}]}`, "network plugin_latency_us -1; give the µs NCCL's net plugin reports, 0 to 1000"},
		{`{"format": "gpubench-topology/1", "name": "c", "network": {"kind": "infiniband", "plugin_latency_us": 5}, "nodes": []}`, "network plugin_latency_us is a version 2 field"},
		{`{"format": "gpubench-topology/1", "name": "c", "network": {"kind": "infiniband", "message_us": 5}, "nodes": []}`, "network message_us is a version 2 field"},
		{`{"format": "gpubench-topology/2", "name": "c", "network": {"kind": "roce", "message_us": 1001}, "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a{i}", "template": "box", "count": 2}]}`, "network message_us 1001; give the µs a host spends on each message it posts to the fabric, 0 to 1000"},
		{`{"format": "gpubench-topology/2", "name": "c", "templates": {"box": ` + box + `}, "nodes": [{"hostname": "a", "template": "box", "count": 100000}]}`, "gpubench takes at most 16384 GPUs"},
	} {
		if _, err := gpu.ParseTopology([]byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v; want %q", err, c.want)
		}
	}
}

// What a message to the fabric costs its host: NCCL's own post overhead (1 µs, 2 on AMD hosts)
// on every fabric, and the file's figure, 0 included, where it gives one.
func TestMessageCost(t *testing.T) {
	zero, seven := 0.0, 7.0
	for _, c := range []struct {
		net        gpu.Network
		post, want float64
	}{
		{gpu.Network{Kind: "infiniband"}, 1, 1},
		{gpu.Network{Kind: "roce"}, 2, 2},
		{gpu.Network{Kind: "efa"}, 1, 1},
		{gpu.Network{Kind: "efa", MessageUS: &zero}, 1, 0},
		{gpu.Network{Kind: "ethernet", MessageUS: &seven}, 2, 7},
	} {
		if got := c.net.MessageCost(c.post); got != c.want {
			t.Errorf("%s, message_us %v, post overhead %v: %v µs; want %v", c.net.Kind, c.net.MessageUS, c.post, got, c.want)
		}
	}
}

// The latency a fabric's NCCL net plugin reports: none for NCCL's own transports, AWS's
// plugin's 75 µs for EFA, and the file's figure, 0 included, where it gives one.
func TestPluginLatency(t *testing.T) {
	zero, five := 0.0, 5.0
	for _, c := range []struct {
		net  gpu.Network
		want float64
	}{
		{gpu.Network{Kind: "infiniband"}, 0},
		{gpu.Network{Kind: "roce"}, 0},
		{gpu.Network{Kind: "ethernet"}, 0},
		{gpu.Network{Kind: "efa"}, 75},
		{gpu.Network{Kind: "efa", PluginLatencyUS: &zero}, 0},
		{gpu.Network{Kind: "roce", PluginLatencyUS: &five}, 5},
	} {
		if got := c.net.PluginLatency(); got != c.want {
			t.Errorf("%s, plugin_latency_us %v: %v µs; want %v", c.net.Kind, c.net.PluginLatencyUS, got, c.want)
		}
	}
}

// Each fabric kind has its own latency a NIC link, and adds to NCCL's InfiniBand tables twice
// what its link takes beyond InfiniBand's: EFA's is AWS's p5 figure (20 µs NIC to NIC), and a
// latency_us given in the file takes its place.
func TestFabricLatency(t *testing.T) {
	for _, c := range []struct {
		net        gpu.Network
		link, more float64
	}{
		{gpu.Network{Kind: "infiniband"}, 2, 0},
		{gpu.Network{Kind: "roce"}, 2.5, 1},
		{gpu.Network{Kind: "efa"}, 10, 16},
		{gpu.Network{Kind: "ethernet"}, 4, 4},
		{gpu.Network{Kind: "efa", LatencyUS: 9}, 9, 14},
		{gpu.Network{Kind: "infiniband", LatencyUS: 1}, 1, 0},
	} {
		if link, more := c.net.LinkLatencyUS(), c.net.ExtraLatencyUS(); link != c.link || more != c.more {
			t.Errorf("%s, latency_us %v: link %v µs, %v over InfiniBand; want %v and %v", c.net.Kind, c.net.LatencyUS, link, more, c.link, c.more)
		}
	}
}
