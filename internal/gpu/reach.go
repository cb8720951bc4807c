package gpu

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/gpubench/gpubench/internal/input"
)

// Limits on what a topology may describe. Real machines are far inside them: a node has at most
// a few dozen GPUs (72 in an NVL72 rack taken as one node) and its parts are a few links apart
// (GPU, one or two PCIe switches, CPU, the other socket); the largest clusters NCCL runs are
// tens of thousands of GPUs. Past them gpubench refuses a topology rather than spend minutes or
// unbounded memory on it.
const (
	MaxGPUs        = 16384 // in all nodes together
	MaxNodeGPUs    = 256   // in one node: its connection and P2P matrices grow with the square
	MaxNodeParts   = 8192  // CPUs, GPUs, switches and NICs of one node
	MaxNodeNICs    = 64    // NICs of one node (a DGX B300 has 16 ports); each GPU looks for its own
	MaxNodeLinks   = 32768 // links of one node
	MaxNodeLinkHop = 16    // links between any part of a node and its first part, at most
	// GPUs of one NVLink domain spanning nodes: NVIDIA's NVLink Switch System joins at most 576
	// (NVIDIA Blackwell architecture technical brief, "fifth-generation NVLink").
	MaxDomainGPUs = 576
	// In all nodes together: 1,024 DGX H100 have about 40,000 parts and 60,000 links, 4,096
	// GB200 trays about 60,000 and 80,000; past these a topology would take gigabytes to build.
	MaxParts = 1 << 18
	MaxLinks = 1 << 19
)

// checkLimits refuses a topology past the limits above, naming the limit.
func (t *Topology) checkLimits() error {
	gpus, allParts, allLinks := 0, 0, 0
	for _, n := range t.Nodes {
		gpus += len(n.GPUs)
		parts := len(n.CPUs) + len(n.GPUs) + len(n.Switches) + len(n.NICs)
		allParts += parts
		allLinks += len(n.Links)
		switch {
		case len(n.GPUs) > MaxNodeGPUs:
			return fmt.Errorf("node %s has %d GPUs; gpubench takes at most %d per node (describe a cluster as several nodes)", n.Hostname, len(n.GPUs), MaxNodeGPUs)
		case len(n.NICs) > MaxNodeNICs:
			return fmt.Errorf("node %s has %d NICs; gpubench takes at most %d per node (give each port that NCCL uses, not every function)", n.Hostname, len(n.NICs), MaxNodeNICs)
		case parts > MaxNodeParts:
			return fmt.Errorf("node %s has %d parts; gpubench takes at most %d per node", n.Hostname, parts, MaxNodeParts)
		case len(n.Links) > MaxNodeLinks:
			return fmt.Errorf("node %s has %d links; gpubench takes at most %d per node", n.Hostname, len(n.Links), MaxNodeLinks)
		}
	}
	switch {
	case gpus > MaxGPUs:
		return fmt.Errorf("topology %s has %d GPUs; gpubench takes at most %d", t.Name, gpus, MaxGPUs)
	case allParts > MaxParts:
		return fmt.Errorf("topology %s has %d parts in all; gpubench takes at most %d (fewer nodes, or fewer switches and NICs a node)", t.Name, allParts, MaxParts)
	case allLinks > MaxLinks:
		return fmt.Errorf("topology %s has %d links in all; gpubench takes at most %d (fewer nodes, or fewer links a node)", t.Name, allLinks, MaxLinks)
	}
	return nil
}

// checkReach makes sure that every route the simulator will ask for exists, in time linear in
// the topology's size rather than one search per pair of GPUs: within a node every GPU must reach
// every other one (over NVLink or PCIe, or through a CPU's memory when P2P is off), no part may be
// more than MaxNodeLinkHop links from the node's first part (routes stay short), and between
// nodes every GPU must reach a NIC.
//
// A route's search never passes through a GPU or a NIC (Topology.search), so two GPUs reach each
// other over some link kinds exactly when they share a link, or both touch one component of the
// other parts joined by links of those kinds.
func (t *Topology) checkReach() error {
	nodeGPUs := 0
	for ni := range t.Nodes {
		n := &t.Nodes[ni]
		gpus := t.gpus[nodeGPUs : nodeGPUs+len(n.GPUs)]
		nodeGPUs += len(n.GPUs)
		if far := t.farthest(n); far > MaxNodeLinkHop {
			return fmt.Errorf("node %s: some of its parts are %d links apart; gpubench takes nodes whose parts are at most %d links from the first (a real PCIe tree is a few switches deep)", n.Hostname, far, MaxNodeLinkHop)
		}
		nv := t.touches(gpus, LinkNVLink)
		pc := t.touches(gpus, LinkPCIe, LinkSMP)
		var cpus []int // without P2P: the CPU each GPU stages its copies through
		if t.P2P != "all" {
			for _, g := range gpus {
				cpus = append(cpus, t.nearest(g.vert, "cpu", LinkPCIe))
			}
		}
		for i := range gpus {
			if len(t.Nodes) > 1 && t.nic[nodeGPUs-len(n.GPUs)+i] < 0 {
				if len(n.NICs) == 0 {
					return fmt.Errorf("topology %s: node %s has no NIC, so its GPUs cannot reach the other nodes: give it one (nics, and a pcie link from it to a PCIe switch or CPU its GPUs reach)", t.Name, n.Hostname)
				}
				return fmt.Errorf("topology %s: %s reaches none of its node's NICs over PCIe, so it cannot reach the other nodes: join a NIC to a PCIe switch or CPU it reaches with a pcie link", t.Name, t.GPUName(nodeGPUs-len(n.GPUs)+i))
			}
		}
		usual := t.P2P == "all" && (nv.common() || pc.common()) // one switch or CPU that every GPU reaches
		for i := range gpus {
			for j := i + 1; !usual && j < len(gpus); j++ {
				ok := false
				if t.P2P == "all" {
					ok = nv.meet(i, j) || pc.meet(i, j)
				} else {
					ok = pc.staged(cpus, i, j) && pc.staged(cpus, j, i)
				}
				if !ok {
					base := nodeGPUs - len(n.GPUs)
					how := "join both, by nvlink or pcie, to a switch or CPU they share"
					if t.P2P != "all" {
						how = "with p2p none a copy goes through host memory: join both, by pcie, to CPUs joined to each other"
					}
					return fmt.Errorf("topology %s: no path from %s to %s: %s", t.Name, t.GPUName(base+i), t.GPUName(base+j), how)
				}
			}
		}
		// Every GPU hangs off a CPU's PCIe root port (a Grace's NVLink-C2C is a pcie link here):
		// without one it has no host memory, and the copies through the host that gpubench p2p
		// and NCCL without P2P make have no route.
		for i, g := range gpus {
			if t.nearest(g.vert, "cpu", LinkPCIe) < 0 {
				return fmt.Errorf("topology %s: %s reaches no CPU over PCIe, so it has no host memory: join it, or the PCIe switch above it, to a CPU with a pcie link", t.Name, t.GPUName(nodeGPUs-len(n.GPUs)+i))
			}
		}
	}
	return nil
}

func firstID(n *Node) string {
	if len(n.CPUs) > 0 {
		return n.CPUs[0].ID
	}
	return n.GPUs[0].ID
}

// farthest is the most links any part of node n is from its first part, over every link kind
// but the network's, never leaving the node: an NVLink domain's shared switches lead to the
// other nodes of the domain, and walking them from every node would cost the domain's size
// squared.
func (t *Topology) farthest(n *Node) int {
	mine := map[int]bool{}
	add := func(id string) { mine[t.verts[n.Hostname+"/"+id]] = true }
	for _, c := range n.CPUs {
		add(c.ID)
	}
	for _, g := range n.GPUs {
		add(g.ID)
	}
	for _, s := range n.Switches {
		add(s.ID)
	}
	for _, c := range n.NICs {
		add(c.ID)
	}
	v := t.verts[n.Hostname+"/"+firstID(n)]
	dist := map[int]int{v: 0}
	frontier, d := []int{v}, 0
	for len(frontier) > 0 && d <= MaxNodeLinkHop {
		var next []int
		for _, u := range frontier {
			for _, ei := range t.adj[u] {
				e := t.edges[ei]
				w := e.a + e.b - u
				if _, seen := dist[w]; seen || e.kind == LinkNet || !mine[w] {
					continue
				}
				dist[w] = d + 1
				next = append(next, w)
			}
		}
		if len(next) > 0 {
			d++
		}
		frontier = next
	}
	return d
}

// touchSets says, for each GPU of a node, which components of the node's other parts it touches
// over some link kinds, and which GPUs it shares a link with.
type touchSets struct {
	comp   map[int]int // vertex -> component id, for parts that are neither GPUs nor NICs
	touch  []map[int]bool
	direct []map[int]bool // GPU index -> GPU indexes it shares a link with
}

// touches finds the components of a node's parts other than GPUs and NICs joined by links of the
// given kinds, and the components each GPU reaches in one link.
func (t *Topology) touches(gpus []gpuRef, kinds ...LinkKind) touchSets {
	s := touchSets{comp: map[int]int{}, touch: make([]map[int]bool, len(gpus)), direct: make([]map[int]bool, len(gpus))}
	index := map[int]int{} // GPU vertex -> index in gpus
	for i, g := range gpus {
		index[g.vert] = i
		s.touch[i], s.direct[i] = map[int]bool{}, map[int]bool{}
	}
	interior := func(v int) bool { k := t.kinds[v]; return k != "gpu" && k != "nic" }
	for i, g := range gpus {
		for _, ei := range t.adj[g.vert] {
			e := t.edges[ei]
			if !slices.Contains(kinds, e.kind) {
				continue
			}
			w := e.a + e.b - g.vert
			if j, ok := index[w]; ok {
				s.direct[i][j] = true
				continue
			}
			if !interior(w) {
				continue
			}
			if _, ok := s.comp[w]; !ok { // a new component: walk it
				id := len(s.comp)
				s.comp[w] = id
				stack := []int{w}
				for len(stack) > 0 {
					u := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					for _, ej := range t.adj[u] {
						f := t.edges[ej]
						x := f.a + f.b - u
						if _, seen := s.comp[x]; seen || !interior(x) || !slices.Contains(kinds, f.kind) {
							continue
						}
						s.comp[x] = id
						stack = append(stack, x)
					}
				}
			}
			s.touch[i][s.comp[w]] = true
		}
	}
	return s
}

// common says whether one component is touched by every GPU.
func (s touchSets) common() bool {
	if len(s.touch) == 0 {
		return true
	}
	for c := range s.touch[0] {
		all := true
		for _, m := range s.touch[1:] {
			all = all && m[c]
		}
		if all {
			return true
		}
	}
	return false
}

// meet says whether GPUs i and j reach each other: a shared link, or a shared component.
func (s touchSets) meet(i, j int) bool {
	if s.direct[i][j] {
		return true
	}
	for c := range s.touch[i] {
		if s.touch[j][c] {
			return true
		}
	}
	return false
}

// staged says, of the components over PCIe and CPU links, whether GPU i can copy to GPU j
// through host memory: i has a CPU to stage through (cpus[i]), and j touches that CPU's component.
func (s touchSets) staged(cpus []int, i, j int) bool {
	c, ok := s.comp[cpus[i]]
	return cpus[i] >= 0 && ok && s.touch[j][c]
}

// checkText refuses free text that is not plain text (input.Unsafe): names are printed in tables,
// and an escape sequence, a newline or a right-to-left override in one could rewrite the
// terminal, forge a table line or show other text than it holds.
func (t *Topology) checkText() error {
	check := func(where, field, s string) error {
		if r, bad := input.Unsafe(s); bad {
			return fmt.Errorf("%s: %s holds %s, which is not plain text (a control or format character, or bytes that are not UTF-8); names are printed in tables, so use plain text", where, field, strconv.QuoteRuneToASCII(r))
		}
		return nil
	}
	if err := check("topology", "name", t.Name); err != nil {
		return err
	}
	if err := check("topology "+t.Name, "description", t.Description); err != nil {
		return err
	}
	for i, n := range t.Nodes {
		if err := check(fmt.Sprintf("node %d", i), "hostname", n.Hostname); err != nil {
			return err
		}
		for _, c := range n.CPUs {
			if err := check("node "+input.Safe(n.Hostname)+" cpu "+input.Safe(c.ID), "name", c.Name); err != nil {
				return err
			}
		}
		for _, g := range n.GPUs {
			where := "node " + input.Safe(n.Hostname) + " gpu " + input.Safe(g.ID)
			for _, f := range []struct{ field, s string }{{"name", g.Name}, {"uuid", g.UUID}, {"pci_bus_id", g.PCIBusID}} {
				if err := check(where, f.field, f.s); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
