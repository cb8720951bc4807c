package gpu_test

import (
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/gpu"
)

// A version 1 file that uses a field version 2 added is refused, naming that field and only the
// fields it uses, with what to do; each field of version 2 is refused so, and loads in version 2.
func TestVersion1RefusesVersion2Fields(t *testing.T) {
	const nicBox = `{"cpus": [{"id": "cpu0"}], "gpus": [{"id": "gpu0", "name": "G", "memory_bytes": 1, "memory_bandwidth_gbs": 1, "compute_capability": "9.0"NIC}],
	  "nics": [{"id": "mlx5_0", "kind": "infiniband", "gbps": 400}],
	  "links": [{"a": "gpu0", "b": "cpu0", "kind": "pcie", "gbs": 32}, {"a": "mlx5_0", "b": "cpu0", "kind": "pcie", "gbs": 32}]}`
	node := func(host, gpuField string) string {
		return `{"hostname": "` + host + `", ` + strings.TrimPrefix(strings.Replace(nicBox, "NIC", gpuField, 1), "{")
	}
	two := func(gpuField string) string {
		return `"nodes": [` + node("a", gpuField) + `, ` + node("b", gpuField) + `]`
	}
	plain := `"network": {"kind": "infiniband"}, ` + two("")
	for _, c := range []struct{ field, body string }{
		{"GPU nic (node a gpu gpu0)", `"network": {"kind": "infiniband"}, ` + two(`, "nic": "mlx5_0"`)},
		{"network layout", `"network": {"kind": "infiniband", "layout": "rail"}, ` + two("")},
		{"network nodes_per_leaf", `"network": {"kind": "infiniband", LAYOUT"nodes_per_leaf": 2}, ` + two("")},
		{"network tiers", `"network": {"kind": "infiniband", LAYOUT"tiers": 2}, ` + two("")},
		{"network oversubscription", `"network": {"kind": "infiniband", LAYOUT"oversubscription": 1}, ` + two("")},
		{"network switch_latency_us", `"network": {"kind": "infiniband", LAYOUT"switch_latency_us": 1}, ` + two("")},
		{"network sharp", `"network": {"kind": "infiniband", "sharp": true}, ` + two("")},
		{"network plugin_latency_us", `"network": {"kind": "infiniband", "plugin_latency_us": 0}, ` + two("")},
		{"network message_us", `"network": {"kind": "infiniband", "message_us": 1}, ` + two("")},
		{"nvlink_domain_nodes", `"nvlink_domain_nodes": 2, ` + strings.ReplaceAll(plain, `"links": [`, `"switches": [{"id": "nvs", "kind": "nvswitch"}], "links": [{"a": "gpu0", "b": "nvs", "kind": "nvlink", "gbs": 450}, `)},
		{"calibration", `"calibration": {"launch_us": 5}, ` + plain},
		{"node count (node 1)", `"network": {"kind": "infiniband"}, "nodes": [` + node("a", "") + `, ` + strings.Replace(node("b", ""), `"hostname": "b",`, `"hostname": "b", "count": 1,`, 1) + `]`},
	} {
		// The leaves' and spines' fields need a layout with leaves in version 2.
		v2 := `{"format": "gpubench-topology/2", "name": "c", ` + strings.Replace(c.body, "LAYOUT", `"layout": "fat-tree", `, 1) + `}`
		if _, err := gpu.ParseTopology([]byte(v2)); err != nil && c.field != "node count (node 1)" { // a count needs a template
			t.Errorf("%s in version 2: %v", c.field, err)
		}
		v1 := `{"format": "gpubench-topology/1", "name": "c", ` + strings.Replace(c.body, "LAYOUT", "", 1) + `}`
		_, err := gpu.ParseTopology([]byte(v1))
		want := c.field + ` is a version 2 field, and the file's format is "gpubench-topology/1": set "format": "gpubench-topology/2", or drop it`
		if err == nil || err.Error() != want {
			t.Errorf("%s in version 1: %v; want %q", c.field, err, want)
		}
	}
	// Several are named together, each once.
	v1 := `{"format": "gpubench-topology/1", "name": "c", "network": {"kind": "infiniband", "layout": "rail", "sharp": true}, ` + two(`, "nic": "mlx5_0"`) + `}`
	want := `network layout, network sharp and GPU nic (node a gpu gpu0) are version 2 fields, and the file's format is "gpubench-topology/1": set "format": "gpubench-topology/2", or drop them`
	if _, err := gpu.ParseTopology([]byte(v1)); err == nil || err.Error() != want {
		t.Errorf("three version 2 fields in version 1: %v; want %q", err, want)
	}
}

// Hostname and memory errors say which problem it is and name the file's entry, not a node the
// entry's template and count made.
func TestNodeEntryErrors(t *testing.T) {
	doc := func(nodes, gpuFields string) string {
		return `{"format": "gpubench-topology/2", "name": "c", "network": {"kind": "infiniband"}, "templates": {"box":
		  {"cpus": [{"id": "cpu0"}], "gpus": [{"id": "gpu0", "name": "G", "memory_bandwidth_gbs": 1, "compute_capability": "9.0", ` + gpuFields + `}],
		   "nics": [{"id": "mlx5_0", "kind": "infiniband", "gbps": 400}],
		   "links": [{"a": "gpu0", "b": "cpu0", "kind": "pcie", "gbs": 32}, {"a": "mlx5_0", "b": "cpu0", "kind": "pcie", "gbs": 32}]}},
		  "nodes": [` + nodes + `]}`
	}
	const mem = `"memory_bytes": 1`
	for _, c := range []struct{ doc, want string }{
		{doc(`{"hostname": "dgx-{i}", "template": "box", "count": 8}, {"hostname": "dgx-3", "template": "box"}`, mem),
			`node 1: hostname "dgx-3" is used twice, by node 0 too: give every node its own`},
		{doc(`{"hostname": "", "template": "box", "count": 8}`, mem),
			`node 0: hostname is missing: give every node one (letters, digits and _.:-; with {i} for a template's count)`},
		{doc(`{"hostname": "dgx-{i}", "template": "box", "count": 3}, {"hostname": "a b", "template": "box"}`, mem),
			`node 1: hostname "a b" is malformed: use letters, digits and _.:- only`},
		{doc(`{"hostname": "dgx", "template": "box"}`, `"memory_bytes": -1`),
			`node dgx gpu gpu0: memory_bytes -1 must be positive: give the GPU's memory in bytes, e.g. 85520809984`},
	} {
		if _, err := gpu.ParseTopology([]byte(c.doc)); err == nil || err.Error() != c.want {
			t.Errorf("%v; want %q", err, c.want)
		}
	}
}
