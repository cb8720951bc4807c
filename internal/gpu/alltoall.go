package gpu

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// MaxAllToAllRoutes bounds the routes AllToAllFlows works out one by one: the ordered pairs of
// GPUs inside each NVLink domain, plus every GPU times every rail between domains. 8,192 DGX H100
// GPUs take 8,192 × 7 + 8,192 × 8 = 122,880; past the limit (a domain of over 4,096 GPUs) gpubench
// refuses the question rather than spend minutes and gigabytes on it.
const MaxAllToAllRoutes = 1 << 24

var allToAllLimit = MaxAllToAllRoutes // lowered by tests

// AllToAllFlows returns the flows of an all-to-all among the given GPUs, distinct: one unit of
// data from every GPU to every other one along Route, summed by link. Every link carries exactly
// what the len(gpus)×(len(gpus)-1) routes put on it, computed in time and memory that grow with
// the GPUs (and the pairs inside each NVLink domain), not with the pairs: between NVLink domains a
// route is the sender's way to the rail of the receiver's NIC (PXN), that NIC's way through the
// fabric and the receiver's way down from its NIC, so each part's traffic is a count of GPUs.
//
// Each flow is one hop (a link in one direction) with Bytes 1 and Count the routes of one path
// type that cross it; its Path has that hop, that type (NET between domains), and the longest
// latency of the routes of that type, so that LinkLoad gives what the routes give and the largest
// LatencyUS is the longest route's. The flows come in a fixed order.
func (t *Topology) AllToAllFlows(gpus []int) ([]Flow, error) {
	a := &a2a{t: t, load: map[hopType]float64{}, lat: map[PathType]float64{}}
	if err := a.plan(gpus); err != nil {
		return nil, err
	}
	for _, m := range a.domains {
		a.inside(m)
	}
	if len(a.domains) > 1 { // each lane of the GPUs' local NICs carries an equal share (lanes.go)
		lanes := t.LaneCount(gpus)
		for i := range lanes {
			a.v, a.share, a.railGPU = nicView{t: t, lane: i}, 1/float64(lanes), nil
			a.between()
		}
	}
	keys := make([]hopType, 0, len(a.load))
	for k := range a.load {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y hopType) int {
		return cmp.Or(cmp.Compare(x.hop.Edge, y.hop.Edge), cmp.Compare(b2i(x.hop.Forward), b2i(y.hop.Forward)), cmp.Compare(x.typ, y.typ))
	})
	flows := make([]Flow, len(keys))
	for i, k := range keys {
		flows[i] = Flow{Path: Path{Hops: []Hop{k.hop}, Type: k.typ, LatencyUS: a.lat[k.typ]}, Bytes: 1, Count: a.load[k]}
	}
	return flows, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// hopType is a link in one direction, and the type of the routes that cross it.
type hopType struct {
	hop Hop
	typ PathType
}

// a2a is one AllToAllFlows question.
type a2a struct {
	t       *Topology
	domains [][]int // the GPUs of each NVLink domain, in domain order
	load    map[hopType]float64
	lat     map[PathType]float64 // the longest route of each type
	railGPU map[[2]int]int       // (node, rail) -> the node's first GPU on that rail, or -1
	v       nicView              // between domains: which NIC is each GPU's (one lane)
	share   float64              // the part of every route between domains this lane carries
}

// plan groups the GPUs by NVLink domain and checks the work against MaxAllToAllRoutes.
func (a *a2a) plan(gpus []int) error {
	t := a.t
	index := map[int]int{}
	seen := make(map[int]bool, len(gpus))
	for _, g := range gpus {
		if g < 0 || g >= len(t.gpus) || seen[g] {
			return fmt.Errorf("all-to-all: GPU %d is not one of topology %s's %d, or is given twice", g, t.Name, len(t.gpus))
		}
		seen[g] = true
		d := t.DomainOf(g)
		i, ok := index[d]
		if !ok {
			i = len(a.domains)
			index[d] = i
			a.domains = append(a.domains, nil)
		}
		a.domains[i] = append(a.domains[i], g)
	}
	work := 0
	for _, m := range a.domains {
		work += len(m) * (len(m) - 1)
	}
	if len(a.domains) > 1 {
		rails := 0
		for _, n := range t.Nodes {
			rails = max(rails, len(n.NICs))
		}
		work += len(gpus) * rails
	}
	if work > allToAllLimit {
		return fmt.Errorf("an all-to-all over %d GPUs of topology %s needs %d routes worked out one by one (the pairs inside each NVLink domain, and every GPU times every rail between domains); gpubench works out at most %d",
			len(gpus), t.Name, work, allToAllLimit)
	}
	return nil
}

// add puts count routes of type typ on every hop of each of hops.
func (a *a2a) add(typ PathType, count float64, hops ...[]Hop) {
	for _, hs := range hops {
		for _, h := range hs {
			a.load[hopType{h, typ}] += count
		}
	}
}

// longest records a route's latency: the sum of its hops' latencies in order, as Topology.path
// sums them, starting from start.
func (a *a2a) longest(typ PathType, start float64, hops ...[]Hop) {
	lat := start
	for _, hs := range hops {
		for _, h := range hs {
			lat += a.t.edges[h.Edge].latencyUS
		}
	}
	if old, ok := a.lat[typ]; !ok || lat > old {
		a.lat[typ] = lat
	}
}

// inside adds the routes between the GPUs of one NVLink domain, each as Route finds it, with one
// search from each GPU to all the others rather than one per pair.
func (a *a2a) inside(m []int) {
	t := a.t
	var buf []Hop
	for _, src := range m {
		va := t.gpus[src].vert
		targets := map[int]bool{}
		for _, dst := range m {
			if dst != src {
				targets[t.gpus[dst].vert] = true
			}
		}
		nvl := t.tree(va, targets, LinkNVLink)
		var pcie, down map[int]Hop
		var up []Hop
		cpu := -1
		if t.P2P == "all" {
			rest := map[int]bool{}
			for _, dst := range m {
				if dst != src && t.gpus[dst].node == t.gpus[src].node && !hasHop(nvl, t.gpus[dst].vert) {
					rest[t.gpus[dst].vert] = true
				}
			}
			pcie = t.tree(va, rest, LinkPCIe, LinkSMP)
		} else if cpu = t.nearest(va, "cpu", LinkPCIe); cpu >= 0 {
			if up = t.bfs(va, cpu, LinkPCIe); up != nil {
				same := map[int]bool{}
				for _, dst := range m {
					if dst != src && t.gpus[dst].node == t.gpus[src].node {
						same[t.gpus[dst].vert] = true
					}
				}
				down = t.tree(cpu, same, LinkPCIe, LinkSMP)
			}
		}
		for _, dst := range m {
			if dst == src {
				continue
			}
			vb := t.gpus[dst].vert
			if t.gpus[dst].node != t.gpus[src].node || t.P2P == "all" {
				if buf = t.pathTo(nvl, va, vb, buf[:0]); buf != nil {
					a.add(PathNVL, 1, buf)
					a.longest(PathNVL, 0, buf)
					continue
				}
				if t.gpus[dst].node != t.gpus[src].node || pcie == nil {
					continue // no route: Route gives an empty path
				}
				if buf = t.pathTo(pcie, va, vb, buf[:0]); buf != nil {
					typ := t.pcieType(buf)
					a.add(typ, 1, buf)
					a.longest(typ, 0, buf)
				}
				continue
			}
			if up == nil || down == nil {
				continue
			}
			if buf = t.pathTo(down, cpu, vb, buf[:0]); buf != nil {
				a.add(PathSHM, 1, up, buf)
				a.longest(PathSHM, 0, up, buf)
			}
		}
	}
}

// tree searches from a vertex over the given link kinds as bfs does, until it has seen every
// target; the routes bfs would find to them are in what it returns (nil without targets).
func (t *Topology) tree(from int, targets map[int]bool, via ...LinkKind) map[int]Hop {
	need := len(targets)
	if need == 0 {
		return nil
	}
	_, prev := t.search(from, via, func(w int) bool {
		if targets[w] {
			need--
		}
		return need == 0
	})
	return prev
}

func hasHop(prev map[int]Hop, v int) bool {
	_, ok := prev[v]
	return ok
}

// pathTo appends to buf the hops from the tree's root to v, first hop first, or returns nil when
// the tree does not reach v.
func (t *Topology) pathTo(prev map[int]Hop, from, v int, buf []Hop) []Hop {
	if _, ok := prev[v]; !ok || v == from {
		return nil
	}
	start := len(buf)
	for x := v; x != from; {
		h := prev[x]
		buf = append(buf, h)
		if h.Forward {
			x = t.edges[h.Edge].a
		} else {
			x = t.edges[h.Edge].b
		}
	}
	slices.Reverse(buf[start:])
	return buf
}

// member is a GPU that sends and receives between NVLink domains.
type member struct {
	g, dom, rail, leaf, nic int
}

// counter counts members by rail, domain and leaf; -1 stands for any.
type counter map[[3]int]int

func (c counter) add(rail, leaf, dom int) {
	c[[3]int{rail, -1, -1}]++
	c[[3]int{rail, -1, dom}]++
	c[[3]int{rail, leaf, -1}]++
	c[[3]int{rail, leaf, dom}]++
}

// outside is how many of the counted members on the rail are in another domain than dom, and how
// many of those are on the leaf.
func (c counter) outside(rail, leaf, dom int) (all, onLeaf int) {
	return c[[3]int{rail, -1, -1}] - c[[3]int{rail, -1, dom}], c[[3]int{rail, leaf, -1}] - c[[3]int{rail, leaf, dom}]
}

// between adds the routes between GPUs of different NVLink domains (nicView.netRoute) by parts,
// each a.share of a route, over the NICs of a.v:
// sender a's way out to the rail r of the receiver's NIC carries one route per GPU on rail r in
// another domain; receiver b's way in, one per GPU in another domain; a leaf's uplink, the routes
// between its NICs and the other leaves'.
func (a *a2a) between() {
	t := a.t
	if len(a.domains) < 2 || t.Network == nil {
		return
	}
	var ms []member
	perDom := map[int]int{}
	dst := counter{}
	var rails []int
	for _, m := range a.domains {
		for _, g := range m {
			nic := a.v.nic(g)
			if nic < 0 {
				continue // Route gives no path to or from it
			}
			x := member{g: g, dom: t.DomainOf(g), rail: t.fabric.railOf[nic], leaf: t.fabric.leafOf[nic], nic: nic}
			ms = append(ms, x)
			perDom[x.dom]++
			dst.add(x.rail, x.leaf, x.dom)
			if !slices.Contains(rails, x.rail) {
				rails = append(rails, x.rail)
			}
		}
	}
	slices.Sort(rails)
	spine := t.fabric.spine >= 0
	uplinkLat := func(leaf int) float64 { return t.edges[t.fabric.uplink[leaf]].latencyUS }
	src := counter{}
	// Per rail and leaf the senders whose way out reaches that leaf: the two largest latencies to
	// the leaf among them, from different domains (for the longest route).
	best := map[[2]int]*top2{}
	for _, x := range ms {
		for _, r := range rails {
			c, _ := dst.outside(r, 0, x.dom)
			if c == 0 {
				continue
			}
			from, pxn := a.sender(x.g, r)
			nic := a.v.nic(from)
			out := []Hop{{Edge: t.netEdge[nic], Forward: true}}
			a.add(PathNET, a.share*float64(c), pxn, a.v.up(from), out)
			leaf := t.fabric.leafOf[nic]
			if spine {
				_, same := dst.outside(r, leaf, x.dom)
				if n := c - same; n > 0 {
					a.add(PathNET, a.share*float64(n), []Hop{{Edge: t.fabric.uplink[leaf], Forward: true}})
				}
			}
			src.add(r, leaf, x.dom)
			lat := 0.0
			for _, hs := range [][]Hop{pxn, a.v.up(from), out} {
				for _, h := range hs {
					lat += t.edges[h.Edge].latencyUS
				}
			}
			k := [2]int{r, leaf}
			if best[k] == nil {
				best[k] = &top2{}
			}
			best[k].put(lat, x.dom)
		}
	}
	// Leaves by their senders' longest way to the spine, per rail.
	ranked := map[int][]int{}
	if spine {
		for k := range best {
			ranked[k[0]] = append(ranked[k[0]], k[1])
		}
		for r, leaves := range ranked {
			slices.SortFunc(leaves, func(x, y int) int {
				return cmp.Or(cmp.Compare(best[[2]int{r, y}].v[0]+uplinkLat(y), best[[2]int{r, x}].v[0]+uplinkLat(x)), cmp.Compare(x, y))
			})
		}
	}
	for _, x := range ms {
		n := len(ms) - perDom[x.dom]
		if n == 0 {
			continue
		}
		in := []Hop{{Edge: t.netEdge[x.nic], Forward: false}}
		a.add(PathNET, a.share*float64(n), in, a.v.down(x.g))
		if spine {
			all, same := src.outside(x.rail, x.leaf, x.dom)
			if up := all - same; up > 0 {
				a.add(PathNET, a.share*float64(up), []Hop{{Edge: t.fabric.uplink[x.leaf], Forward: false}})
			}
		}
		// The longest route into x: the largest latency to x's NIC's leaf from a sender in
		// another domain, on x's leaf or through the spine.
		lat := math.Inf(-1)
		if b := best[[2]int{x.rail, x.leaf}]; b != nil {
			lat = b.other(x.dom)
		}
		if spine {
			via := math.Inf(-1)
			for _, leaf := range ranked[x.rail] {
				if leaf == x.leaf {
					continue
				}
				b := best[[2]int{x.rail, leaf}]
				if b.dom[0] != x.dom {
					via = math.Max(via, b.v[0]+uplinkLat(leaf))
					break
				}
				if b.n > 1 {
					via = math.Max(via, b.v[1]+uplinkLat(leaf))
				}
			}
			if !math.IsInf(via, -1) {
				lat = math.Max(lat, via+uplinkLat(x.leaf))
			}
		}
		if !math.IsInf(lat, -1) {
			a.longest(PathNET, lat, in, a.v.down(x.g))
		}
	}
}

// sender is the GPU whose NIC a route from GPU g to a GPU on the given rail leaves by, and the
// NVLink hops to it: nicView.netRoute's choice, with each node's GPU on a rail looked up once.
func (a *a2a) sender(g, rail int) (int, []Hop) { return a.v.sender(g, rail, a.railPeer) }

// railPeer is nicView.railGPU, kept per (node, rail).
func (a *a2a) railPeer(g, rail int) int {
	key := [2]int{a.t.gpus[g].node, rail}
	peer, ok := a.railGPU[key]
	if !ok {
		if a.railGPU == nil {
			a.railGPU = map[[2]int]int{}
		}
		peer = a.v.railGPU(g, rail)
		a.railGPU[key] = peer
	}
	return peer
}

// top2 keeps the two largest values from different domains.
type top2 struct {
	v   [2]float64
	dom [2]int
	n   int
}

func (b *top2) put(v float64, dom int) {
	switch {
	case b.n > 0 && b.dom[0] == dom:
		b.v[0] = math.Max(b.v[0], v)
	case b.n > 1 && b.dom[1] == dom:
		if v > b.v[1] {
			b.v[1] = v
			if b.v[1] > b.v[0] {
				b.v[0], b.v[1], b.dom[0], b.dom[1] = b.v[1], b.v[0], b.dom[1], b.dom[0]
			}
		}
	case b.n == 0 || v > b.v[0]:
		b.v[1], b.dom[1] = b.v[0], b.dom[0]
		b.v[0], b.dom[0] = v, dom
		b.n = min(b.n+1, 2)
	case b.n == 1 || v > b.v[1]:
		b.v[1], b.dom[1] = v, dom
		b.n = 2
	}
}

// other is the largest value from another domain than dom, or -Inf.
func (b *top2) other(dom int) float64 {
	switch {
	case b.n > 0 && b.dom[0] != dom:
		return b.v[0]
	case b.n > 1:
		return b.v[1]
	}
	return math.Inf(-1)
}
