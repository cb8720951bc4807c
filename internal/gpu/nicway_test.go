package gpu

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Each GPU's ways to and from its NIC come from one search from the NIC (assignNICs); the way up
// must be the one a search from the GPU finds, on every preset and accuracy topology, so that no
// route changed when the search moved to the NIC.
func TestNICWaysMatchSearchFromGPU(t *testing.T) {
	for f, topo := range topologies(t, "../sim/presets/*.json", "../../accuracy/topologies/*.json") {
		for g, ref := range topo.gpus {
			v := topo.nic[g]
			if v < 0 {
				continue
			}
			if up := topo.bfs(ref.vert, v, LinkPCIe, LinkSMP); !slices.Equal(up, topo.up[g]) {
				t.Errorf("%s: %s's way up to its NIC is %v; a search from the GPU finds %v", f, topo.GPUName(g), topo.up[g], up)
			}
			if down := topo.bfs(v, ref.vert, LinkPCIe, LinkSMP); !slices.Equal(down, topo.down[g]) {
				t.Errorf("%s: %s's way down from its NIC is %v; a search from the NIC finds %v", f, topo.GPUName(g), topo.down[g], down)
			}
		}
	}
}

// A pair of GPUs without NVLink has no NVLink path, and asking for one keeps nothing: a node of
// PCIe GPUs would otherwise hold an empty entry for every pair asked about (400 MB for 64 nodes
// of 256 GPUs under gpubench fleet).
func TestNVLinkPathKeepsNothingWithoutNVLink(t *testing.T) {
	topo := boxes(t, 1, `{"kind": "infiniband"}`, "", true)
	for a := range topo.NumGPUs() {
		for b := range topo.NumGPUs() {
			if a != b && topo.NVLinkRoute(a, b).Hops != nil {
				t.Fatalf("%s to %s: an NVLink path in a box without NVLink", topo.GPUName(a), topo.GPUName(b))
			}
		}
	}
	if len(topo.nvlPaths) != 0 {
		t.Errorf("%d NVLink paths kept for pairs without NVLink", len(topo.nvlPaths))
	}
}

// The same box with its NVSwitch: every pair has an NVLink path, and it is kept.
func TestNVLinkPathKept(t *testing.T) {
	topo := boxes(t, 1, `{"kind": "infiniband"}`, "", false)
	if p := topo.NVLinkRoute(0, 3); len(p.Hops) != 2 || p.Type != PathNVL {
		t.Fatalf("gpu 0 to 3: %+v; want two NVLink hops through the switch", p)
	}
	if len(topo.nvlPaths) != 1 {
		t.Errorf("%d NVLink paths kept; want the one asked for", len(topo.nvlPaths))
	}
}

// bfs keeps its marks in the topology's scratch, and makes its own when another goroutine holds
// it: both must find the route the map search gpubench had before (mapRoute) for every pair of a
// node's GPUs, over every kind of link a route takes, on every preset.
func TestBFSMatchesMapSearch(t *testing.T) {
	for f, topo := range topologies(t, "../sim/presets/*.json") {
		for _, via := range [][]LinkKind{{LinkNVLink}, {LinkPCIe}, {LinkPCIe, LinkSMP}} {
			for a, ra := range topo.gpus {
				for b, rb := range topo.gpus {
					if ra.node != rb.node || a == b {
						continue
					}
					want := mapRoute(topo, ra.vert, rb.vert, via)
					got := topo.bfs(ra.vert, rb.vert, via...)
					topo.scratchMu.Lock() // as another goroutine's search would
					held := topo.bfs(ra.vert, rb.vert, via...)
					topo.scratchMu.Unlock()
					if !slices.Equal(got, want) || !slices.Equal(held, want) {
						t.Fatalf("%s: %s to %s over %v: bfs %v (scratch held: %v), map search %v", f, topo.GPUName(a), topo.GPUName(b), via, got, held, want)
					}
				}
			}
		}
	}
}

// mapRoute is the breadth-first search with a map made for each that route searches were before
// their marks moved to the topology's scratch, kept here as the reference.
func mapRoute(t *Topology, from, to int, via []LinkKind) []Hop {
	prev := map[int]Hop{from: {Edge: -1}}
	for frontier := []int{from}; len(frontier) > 0; {
		var next []int
		for _, u := range frontier {
			for _, ei := range t.adj[u] {
				e := t.edges[ei]
				w := e.a + e.b - u
				if _, seen := prev[w]; seen || !slices.Contains(via, e.kind) {
					continue
				}
				prev[w] = Hop{Edge: ei, Forward: e.a == u}
				if w == to {
					return t.pathTo(prev, from, to, nil)
				}
				if k := t.kinds[w]; k != "gpu" && k != "nic" {
					next = append(next, w)
				}
			}
		}
		frontier = next
	}
	return nil
}

// topologies loads every topology file the patterns match, by file name; each pattern must match.
func topologies(t *testing.T, patterns ...string) map[string]*Topology {
	t.Helper()
	out := map[string]*Topology{}
	for _, g := range patterns {
		files, err := filepath.Glob(g)
		if err != nil || len(files) == 0 {
			t.Fatalf("no files match %s", g)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if out[f], err = ParseTopology(data); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
	}
	return out
}
