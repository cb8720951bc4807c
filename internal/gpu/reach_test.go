package gpu

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// checkReach must accept exactly the topologies in which every pair of GPUs has a route and every
// GPU reaches a CPU over PCIe: on random small nodes, its verdict is compared with a route search
// for every pair, and a search of the PCIe links from each GPU.
func TestCheckReachAgreesWithRoutes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := []LinkKind{LinkNVLink, LinkPCIe, LinkSMP}
	accepted, refused := 0, 0
	for trial := 0; trial < 6000; trial++ {
		n := Node{Hostname: "h"}
		var parts []string
		kindOf := map[string]string{}
		for i := range 2 + rng.IntN(4) {
			id := fmt.Sprintf("g%d", i)
			n.GPUs = append(n.GPUs, GPU{ID: id, Name: "x", MemoryBytes: 1, MemoryGBs: 1, ComputeCapability: "9.0"})
			parts = append(parts, id)
			kindOf[id] = "gpu"
		}
		for i := range 1 + rng.IntN(2) {
			id := fmt.Sprintf("c%d", i)
			n.CPUs = append(n.CPUs, CPU{ID: id})
			parts = append(parts, id)
			kindOf[id] = "cpu"
		}
		for i := range rng.IntN(4) {
			id := fmt.Sprintf("s%d", i)
			kind := "pcie"
			if rng.IntN(2) == 0 {
				kind = "nvswitch"
			}
			n.Switches = append(n.Switches, Switch{ID: id, Kind: kind})
			parts = append(parts, id)
			kindOf[id] = kind
		}
		for range rng.IntN(20) {
			a, b := parts[rng.IntN(len(parts))], parts[rng.IntN(len(parts))]
			if k := kinds[rng.IntN(len(kinds))]; a != b && linkFits(k, kindOf[a], kindOf[b]) {
				n.Links = append(n.Links, Link{A: a, B: b, Kind: k, GBs: 10})
			}
		}
		topo := &Topology{Format: TopologyFormat, Name: "r", Nodes: []Node{n}}
		if rng.IntN(3) == 0 {
			topo.P2P = "none"
		}
		err := topo.Validate()
		if err != nil && !strings.Contains(err.Error(), "no path") && !strings.Contains(err.Error(), "reaches no CPU") {
			t.Fatalf("trial %d: unexpected error %v", trial, err)
		}
		allRoutes := true
		for i := range topo.NumGPUs() {
			for j := range topo.NumGPUs() {
				if i != j && topo.Route(i, j).Hops == nil {
					allRoutes = false
				}
			}
		}
		if allRoutes {
			for _, g := range n.GPUs {
				allRoutes = allRoutes && pcieReachesCPU(n, kindOf, g.ID)
			}
		}
		if (err == nil) != allRoutes {
			t.Fatalf("trial %d (p2p %s, links %+v): checkReach says %v, routes for every pair and to a CPU: %v", trial, topo.P2P, n.Links, err, allRoutes)
		}
		if err == nil {
			accepted++
		} else {
			refused++
		}
	}
	t.Logf("%d accepted, %d refused", accepted, refused)
	if accepted < 100 || refused < 100 {
		t.Errorf("the random topologies were too one-sided to test anything: %d accepted, %d refused", accepted, refused)
	}
}

// pcieReachesCPU searches n's pcie links from the GPU with this id for a CPU, passing through
// switches and CPUs only.
func pcieReachesCPU(n Node, kindOf map[string]string, id string) bool {
	seen, todo := map[string]bool{id: true}, []string{id}
	for len(todo) > 0 {
		at := todo[0]
		todo = todo[1:]
		if kindOf[at] == "cpu" {
			return true
		}
		if at != id && kindOf[at] == "gpu" {
			continue
		}
		for _, l := range n.Links {
			next := ""
			switch {
			case l.Kind != LinkPCIe:
			case l.A == at:
				next = l.B
			case l.B == at:
				next = l.A
			}
			if next != "" && !seen[next] {
				seen[next] = true
				todo = append(todo, next)
			}
		}
	}
	return false
}

// linkFits is what Validate accepts of a link's kind and its ends' kinds (Topology.checkEnds).
func linkFits(k LinkKind, a, b string) bool {
	switch k {
	case LinkNVLink:
		return (a == "gpu" || a == "nvswitch") && (b == "gpu" || b == "nvswitch")
	case LinkSMP:
		return a == "cpu" && b == "cpu"
	}
	return a != "gpu" || b != "gpu"
}

// Topologies past the limits are refused with the limit named, and a deep PCIe chain too.
func TestTopologyLimits(t *testing.T) {
	gpus := func(host string, k int) Node {
		n := Node{Hostname: host, Switches: []Switch{{ID: "nvs", Kind: "nvswitch"}}}
		for i := range k {
			id := fmt.Sprintf("g%d", i)
			n.GPUs = append(n.GPUs, GPU{ID: id, Name: "x", MemoryBytes: 1, MemoryGBs: 1, ComputeCapability: "9.0"})
			n.Links = append(n.Links, Link{A: id, B: "nvs", Kind: "nvlink", GBs: 100})
		}
		return n
	}
	big := &Topology{Format: TopologyFormat, Name: "big", Nodes: []Node{gpus("h", MaxNodeGPUs+1)}}
	if err := big.Validate(); err == nil || !strings.Contains(err.Error(), "gpubench takes at most 256 per node") {
		t.Errorf("%d GPUs on one node: %v", MaxNodeGPUs+1, err)
	}
	many := &Topology{Format: TopologyFormat, Name: "many", Network: &Network{Kind: "infiniband"}}
	for i := range MaxGPUs/MaxNodeGPUs + 1 {
		many.Nodes = append(many.Nodes, gpus(fmt.Sprintf("h%d", i), MaxNodeGPUs))
	}
	if err := many.Validate(); err == nil || !strings.Contains(err.Error(), "gpubench takes at most 16384") {
		t.Errorf("%d GPUs: %v", len(many.Nodes)*MaxNodeGPUs, err)
	}
	chain := Node{Hostname: "h", CPUs: []CPU{{ID: "cpu"}}}
	prev := "cpu"
	for i := range 40 {
		sw, g := fmt.Sprintf("s%d", i), fmt.Sprintf("g%d", i)
		chain.Switches = append(chain.Switches, Switch{ID: sw, Kind: "pcie"})
		chain.GPUs = append(chain.GPUs, GPU{ID: g, Name: "x", MemoryBytes: 1, MemoryGBs: 1, ComputeCapability: "8.9"})
		chain.Links = append(chain.Links, Link{A: prev, B: sw, Kind: "pcie", GBs: 32}, Link{A: sw, B: g, Kind: "pcie", GBs: 32})
		prev = sw
	}
	nics := gpus("h", 2)
	for i := range MaxNodeNICs + 1 {
		nics.NICs = append(nics.NICs, NIC{ID: fmt.Sprintf("n%d", i), Kind: "infiniband", Gbps: 400})
	}
	if err := (&Topology{Format: TopologyFormat, Name: "nics", Nodes: []Node{nics}}).Validate(); err == nil || !strings.Contains(err.Error(), "65 NICs; gpubench takes at most 64 per node") {
		t.Errorf("%d NICs on one node: %v", MaxNodeNICs+1, err)
	}
	parts := &Topology{Format: TopologyFormat, Name: "parts", Network: &Network{Kind: "infiniband"}}
	star := gpus("h", 1)
	for i := range MaxNodeParts - 10 {
		star.Switches = append(star.Switches, Switch{ID: fmt.Sprintf("p%d", i), Kind: "pcie"})
	}
	for i := range MaxParts/len(star.Switches) + 1 {
		n := star
		n.Hostname = fmt.Sprintf("h%d", i)
		parts.Nodes = append(parts.Nodes, n)
	}
	if err := parts.Validate(); err == nil || !strings.Contains(err.Error(), "parts in all; gpubench takes at most 262144") {
		t.Errorf("%d nodes of %d parts: %v", len(parts.Nodes), len(star.Switches)+1, err)
	}
	domain := &Topology{Format: TopologyFormat2, Name: "domain", Network: &Network{Kind: "infiniband"}, NVLinkDomainNodes: 2,
		Nodes: []Node{gpus("a", MaxDomainGPUs/2+1), gpus("b", MaxDomainGPUs/2)}}
	if err := domain.Validate(); err == nil || !strings.Contains(err.Error(), "an NVLink domain of more than 576 GPUs") {
		t.Errorf("a domain of %d GPUs: %v", MaxDomainGPUs+1, err)
	}
	deep := &Topology{Format: TopologyFormat, Name: "deep", Nodes: []Node{chain}}
	if err := deep.Validate(); err == nil || !strings.Contains(err.Error(), "links apart") {
		t.Errorf("a 40-switch PCIe chain: %v", err)
	}
}
