package gpu

import "slices"

// Point-to-point traffic between NVLink domains over several NICs of a GPU. NCCL gives each of a
// peer's channels one of the GPU's NICs in turn (src/graph/topo.cc, ncclTopoGetLocalNetType:
// channel c takes the (c mod k)-th), k being the GPU's share of its local NICs: the NICs nearest
// it over the GPUs nearest the first of them, rounded up (netsPerGpu, the default "AUTO" policy).
// A GPU with two NICs of its own on its PCIe switch (a ConnectX-8 run as 2 x 400GbE) sends half of
// every peer's data through each; two GPUs sharing two NICs (DGX H100) take one each. The
// simulator spreads a communicator's traffic between domains evenly over lanes: lane i of a GPU is
// its i-th NIC of those, and the communicator runs as many lanes as the fewest any of its GPUs has
// (LaneCount). Rings between domains already take every NIC near their GPUs (RingFlows).

// nicView says which NIC each GPU's traffic between NVLink domains leaves by, and its PCIe ways to
// and from it: lane 0 is every GPU's own NIC (assignNICs), lane i its i-th local NIC (laneNICs),
// or its own NIC when it has fewer.
type nicView struct {
	t    *Topology
	lane int
}

func (t *Topology) own() nicView { return nicView{t: t} }

func (v nicView) nic(g int) int {
	if v.lane > 0 {
		if l := v.t.laneNICs(g); v.lane < len(l) {
			return l[v.lane]
		}
	}
	return v.t.nic[g]
}

func (v nicView) up(g int) []Hop {
	if nic := v.nic(g); v.lane > 0 && nic != v.t.nic[g] {
		return v.t.laneWay(g, nic, true)
	}
	return v.t.up[g]
}

func (v nicView) down(g int) []Hop {
	if nic := v.nic(g); v.lane > 0 && nic != v.t.nic[g] {
		return v.t.laneWay(g, nic, false)
	}
	return v.t.down[g]
}

// laneNICs is the NICs GPU g's point-to-point traffic between domains is spread over: its own
// first, then the others of its node that it reaches over PCIe without crossing a CPU and that
// NICOK takes, in file order, as many as its share of them (the local NICs over the GPUs near its
// own, rounded up); none when it has no NIC.
func (t *Topology) laneNICs(g int) []int {
	if t.nic[g] < 0 {
		return nil
	}
	t.mu.Lock()
	l, ok := t.lanes[g]
	t.mu.Unlock()
	if ok {
		return l
	}
	for i, v := range t.localNICs(g) {
		if i == 0 || t.NICOK == nil || t.NICOK(t.nicOf(g, v).ID) { // its own NIC is one NICOK takes
			l = append(l, v)
		}
	}
	sharing, first := 1, g-t.gpus[g].index // g and the other GPUs near g's own NIC
	for p := first; p < first+len(t.Nodes[t.gpus[g].node].GPUs); p++ {
		if p != g && slices.Contains(t.nearNICs(p), t.nic[g]) {
			sharing++
		}
	}
	l = l[:(len(l)+sharing-1)/sharing] // NCCL's netsPerGpu: DIVUP(local NICs, GPUs sharing them)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lanes == nil {
		t.lanes = map[int][]int{}
	}
	t.lanes[g] = l
	return l
}

// laneWay is GPU g's PCIe way to its local NIC nic (up) or from it.
func (t *Topology) laneWay(g, nic int, up bool) []Hop {
	key := [3]int{g, nic, 0}
	if up {
		key[2] = 1
	}
	t.mu.Lock()
	h, ok := t.laneWays[key]
	t.mu.Unlock()
	if ok {
		return h
	}
	if up {
		h = t.bfs(t.gpus[g].vert, nic, LinkPCIe, LinkSMP)
	} else {
		h = t.bfs(nic, t.gpus[g].vert, LinkPCIe, LinkSMP)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.laneWays == nil {
		t.laneWays = map[[3]int][]Hop{}
	}
	t.laneWays[key] = h
	return h
}

// LaneCount is how many NICs each GPU's point-to-point traffic between NVLink domains is spread
// over when the given GPUs communicate: the fewest local NICs any of them has (1 when a GPU has
// none, or they are all in one domain).
func (t *Topology) LaneCount(gpus []int) int {
	k := 0
	for i, g := range gpus {
		n := max(1, len(t.laneNICs(g)))
		if i == 0 || n < k {
			k = n
		}
	}
	return max(k, 1)
}

// RouteFlows is a transfer of bytes from GPU a to GPU b as flows: one along Route inside an NVLink
// domain; between domains, bytes / lanes along each of the first lanes of the GPUs' local NICs.
func (t *Topology) RouteFlows(a, b int, bytes float64, lanes int) []Flow {
	if lanes <= 1 || t.DomainOf(a) == t.DomainOf(b) {
		return []Flow{{Path: t.Route(a, b), Bytes: bytes}}
	}
	flows := make([]Flow, lanes)
	for i := range flows {
		flows[i] = Flow{Path: nicView{t: t, lane: i}.netRoute(a, b), Bytes: bytes / float64(lanes)}
	}
	return flows
}
