package topo

import (
	"fmt"
	"slices"

	"github.com/gpubench/gpubench/internal/gpu"
)

// graph is one node's parts and links, for the connection matrix. It works on a node that has not
// been validated, so that parts the topology file leaves out (a NIC whose speed is unknown) still
// get their place in the matrix.
type graph struct {
	n    *gpu.Node
	kind map[string]string // part id: gpu, cpu, nvswitch, pcie or nic
	adj  map[string][]int  // part id: indices of its links
	// Worked out once and kept, so that a matrix over N GPUs costs N searches, not N²: each
	// part's NVLinks by the part at their other end, and the last PCIe search's tree.
	nv       map[string]map[string]laneSum
	treeFrom string
	tree     map[string]step
}

// laneSum is the NVLinks between two parts; ok is false when a link between them gives no lanes.
type laneSum struct {
	n  int
	ok bool
}

// step is how a PCIe search reached a part: from which part, over which link.
type step struct {
	from string
	link int
}

func newGraph(n *gpu.Node) *graph {
	g := &graph{n: n, kind: map[string]string{}, adj: map[string][]int{}, nv: map[string]map[string]laneSum{}}
	for _, c := range n.CPUs {
		g.kind[c.ID] = "cpu"
	}
	for _, x := range n.GPUs {
		g.kind[x.ID] = "gpu"
	}
	for _, s := range n.Switches {
		g.kind[s.ID] = s.Kind
	}
	for _, c := range n.NICs {
		g.kind[c.ID] = "nic"
	}
	for i, l := range n.Links {
		g.adj[l.A] = append(g.adj[l.A], i)
		if l.B != l.A {
			g.adj[l.B] = append(g.adj[l.B], i)
		}
	}
	return g
}

// far is the end of link li that is not part id.
func (g *graph) far(li int, id string) string {
	l := g.n.Links[li]
	if l.A == id {
		return l.B
	}
	return l.A
}

// matrix is the connection matrix over the node's GPUs, then its NICs, as nvidia-smi topo -m
// prints it: X, NV#, PIX, PXB, PHB, NODE or SYS.
func (g *graph) matrix() [][]string {
	var ids []string
	for _, x := range g.n.GPUs {
		ids = append(ids, x.ID)
	}
	for _, c := range g.n.NICs {
		ids = append(ids, c.ID)
	}
	m := make([][]string, len(ids))
	for i, a := range ids {
		m[i] = make([]string, len(ids))
		for j, b := range ids {
			m[i][j] = g.cell(a, b)
		}
	}
	return m
}

func (g *graph) cell(a, b string) string {
	if a == b {
		return "X"
	}
	if g.kind[a] == "gpu" && g.kind[b] == "gpu" {
		if n, known := g.nvlinks(a, b); n > 0 || !known {
			return nvText(n, known)
		}
	}
	return g.pcieClass(a, b)
}

// nvText is NV# for n NVLinks; "NV" alone when the topology does not say how many.
func nvText(n int, known bool) string {
	if !known {
		return "NV"
	}
	return fmt.Sprintf("NV%d", n)
}

// nvlinks counts the NVLinks between GPUs a and b: the links joining them, plus, through each
// NVSwitch both reach, the fewer of their links to it. known is false when a link that counts
// gives no lanes.
func (g *graph) nvlinks(a, b string) (n int, known bool) {
	known = true
	add := func(l laneSum) {
		n += l.n
		known = known && l.ok
	}
	add(g.lanes(a, b))
	for s, la := range g.nvOf(a) {
		if g.kind[s] != "nvswitch" {
			continue
		}
		if lb := g.lanes(b, s); (la.n > 0 || !la.ok) && (lb.n > 0 || !lb.ok) {
			add(laneSum{min(la.n, lb.n), la.ok && lb.ok})
		}
	}
	return n, known
}

// lanes counts the NVLinks between parts a and b.
func (g *graph) lanes(a, b string) laneSum {
	if l, ok := g.nvOf(a)[b]; ok {
		return l
	}
	return laneSum{ok: true}
}

// nvOf is part id's NVLinks, summed by the part at their other end.
func (g *graph) nvOf(id string) map[string]laneSum {
	if m, ok := g.nv[id]; ok {
		return m
	}
	m := map[string]laneSum{}
	for _, li := range g.adj[id] {
		if l := g.n.Links[li]; l.Kind == gpu.LinkNVLink {
			far := g.far(li, id)
			s, seen := m[far]
			if !seen {
				s.ok = true
			}
			m[far] = laneSum{s.n + l.Lanes, s.ok && l.Lanes > 0}
		}
	}
	g.nv[id] = m
	return m
}

// pcieClass names the PCIe path between two parts as nvidia-smi does: SYS if it crosses the link
// between CPUs, NODE if it passes a CPU between two of its host bridges, PHB if it passes a CPU
// through one host bridge (or the topology does not name them), PIX if it crosses at most one
// PCIe switch, else PXB. "N/A" when there is no PCIe path.
func (g *graph) pcieClass(a, b string) string {
	path, links := g.pciePath(a, b)
	if path == nil {
		return "N/A"
	}
	class := "PIX"
	if len(path) > 3 {
		class = "PXB"
	}
	for i, li := range links {
		if g.n.Links[li].Kind == gpu.LinkSMP {
			return "SYS"
		}
		if i > 0 && g.kind[path[i]] == "cpu" {
			in, out := g.n.Links[links[i-1]].HostBridge, g.n.Links[li].HostBridge
			if in != "" && out != "" && in != out {
				class = "NODE"
			} else if class != "NODE" {
				class = "PHB"
			}
		}
	}
	return class
}

// pciePath is a fewest-hop path from a to b over pcie and smp links that passes through switches
// and CPUs only: its parts, and the links between them.
func (g *graph) pciePath(a, b string) ([]string, []int) {
	prev := g.pcieTree(a)
	if _, ok := prev[b]; !ok {
		return nil, nil
	}
	path, links := []string{b}, []int{}
	for x := b; x != a; x = prev[x].from {
		path = append(path, prev[x].from)
		links = append(links, prev[x].link)
	}
	slices.Reverse(path)
	slices.Reverse(links)
	return path, links
}

// pcieTree is a breadth-first search from a over pcie and smp links, passing through CPUs and
// switches only: how it first reached each part. The last one is kept, as a matrix asks for one
// row's parts in turn.
func (g *graph) pcieTree(a string) map[string]step {
	if g.tree != nil && g.treeFrom == a {
		return g.tree
	}
	prev := map[string]step{a: {link: -1}}
	for frontier := []string{a}; len(frontier) > 0; {
		var next []string
		for _, u := range frontier {
			for _, li := range g.adj[u] {
				k := g.n.Links[li].Kind
				w := g.far(li, u)
				if _, seen := prev[w]; seen || k != "pcie" && k != "smp" {
					continue
				}
				prev[w] = step{from: u, link: li}
				if g.kind[w] == "cpu" || g.kind[w] == "pcie" || g.kind[w] == "nvswitch" {
					next = append(next, w)
				}
			}
		}
		frontier = next
	}
	g.treeFrom, g.tree = a, prev
	return prev
}

// pcieFigures is the generation and width of a part's first PCIe link, when the topology gives
// them.
func (g *graph) pcieFigures(id string) (gen, width int) {
	for _, li := range g.adj[id] {
		if l := g.n.Links[li]; l.Kind == gpu.LinkPCIe {
			return l.Gen, l.Width
		}
	}
	return 0, 0
}

// nvlinkRows lists GPU i's NVLinks by the part at their other end. A topology records only links
// that are up, and no NVLink version.
func (g *graph) nvlinkRows(i int) []NVLinkRow {
	id := g.n.GPUs[i].ID
	var rows []NVLinkRow
	for _, li := range g.adj[id] {
		l := g.n.Links[li]
		if l.Kind != gpu.LinkNVLink {
			continue
		}
		r := NVLinkRow{GPU: i, Remote: g.far(li, id), Links: l.Lanes, Up: l.Lanes, Version: "-", TotalGBs: l.GBs}
		if l.Lanes > 0 {
			r.PerLinkGBs = l.GBs / float64(l.Lanes)
		}
		rows = append(rows, r)
	}
	return rows
}

// p2pMatrix is what a topology says of P2P between its GPUs: with p2p, reads and writes work
// between every pair, over NVLink where the GPUs share one; without it, nothing does. Atomics
// over PCIe depend on the platform, which a topology does not record (U).
func (g *graph) p2pMatrix(p2p bool, cap string) [][]string {
	m := make([][]string, len(g.n.GPUs))
	for i, a := range g.n.GPUs {
		m[i] = make([]string, len(g.n.GPUs))
		for j, b := range g.n.GPUs {
			nv, known := g.nvlinks(a.ID, b.ID)
			nvlink := nv > 0 || !known
			switch {
			case i == j:
				m[i][j] = "X"
			case !p2p:
				m[i][j] = "NS"
			case cap == "read" || cap == "write" || nvlink:
				m[i][j] = "OK"
			case cap == "nvlink":
				m[i][j] = "NS"
			default:
				m[i][j] = "U"
			}
		}
	}
	return m
}
