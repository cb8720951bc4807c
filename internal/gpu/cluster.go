package gpu

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Version 2 of the topology format: a cluster is node templates times counts plus a fabric
// (docs/topology.md). Loading expands it into the same nodes a version 1 file lists, sharing each
// template's parts (nothing is copied per node but its name), and builds the fabric's leaves and
// spine as parts of the routing graph.

// expand turns templated entries of Nodes into nodes, and checks what version 2 adds (checkVersion
// has refused it in a version 1 file).
func (t *Topology) expand() error {
	total := 0
	for i, n := range t.Nodes {
		switch {
		case n.Hostname == "":
			return fmt.Errorf("node %d: hostname is missing: give every node one (letters, digits and _.:-; with {i} for a template's count)", i)
		case n.Template == "" && n.Count != 0:
			return fmt.Errorf("node %d: count %d without a template: name the template (template) whose parts the count repeats, or leave count out", i, n.Count)
		case n.Template == "":
			total++
			continue
		case n.Count < 0:
			return fmt.Errorf("node %d: count %d is negative: give 1 or more, or leave it out (1)", i, n.Count)
		case len(n.CPUs)+len(n.GPUs)+len(n.Switches)+len(n.NICs)+len(n.Links) > 0:
			return fmt.Errorf("node %d: a node from template %q lists no parts of its own", i, n.Template)
		}
		tpl, ok := t.Templates[n.Template]
		if !ok {
			return fmt.Errorf("node %d: no template %q: use one of templates' names (%s)", i, n.Template, strings.Join(slices.Sorted(maps.Keys(t.Templates)), ", "))
		}
		if tpl.Template != "" || tpl.Count != 0 || tpl.Hostname != "" {
			return fmt.Errorf("template %q: a template is a node's parts, without hostname, template or count", n.Template)
		}
		count := max(n.Count, 1)
		if len(tpl.GPUs) > 0 && count > MaxGPUs/len(tpl.GPUs) {
			return fmt.Errorf("node %d: %d nodes of %d GPUs; gpubench takes at most %d GPUs", i, count, len(tpl.GPUs), MaxGPUs)
		}
		total += count
	}
	if total > MaxGPUs {
		return fmt.Errorf("topology %s has %d nodes; gpubench takes at most %d", t.Name, total, MaxGPUs)
	}
	// A template no node names is checked by nothing, and is most likely a node's misspelt one.
	for _, name := range slices.Sorted(maps.Keys(t.Templates)) {
		if !slices.ContainsFunc(t.Nodes, func(n Node) bool { return n.Template == name }) {
			return fmt.Errorf("template %q is used by no node: name it in a node's template, or drop it", name)
		}
	}
	nodes := make([]Node, 0, total)
	t.entry = make([]int, 0, total)
	for e, n := range t.Nodes {
		if n.Template == "" {
			nodes = append(nodes, n)
			t.entry = append(t.entry, e)
			continue
		}
		tpl := t.Templates[n.Template]
		count := max(n.Count, 1)
		for i := range count {
			host := n.Hostname
			switch {
			case strings.Contains(host, "{i}"):
				host = strings.ReplaceAll(host, "{i}", strconv.Itoa(i))
			case count > 1:
				host += "-" + strconv.Itoa(i)
			}
			nodes = append(nodes, Node{Hostname: host, CPUs: tpl.CPUs, GPUs: tpl.GPUs, Switches: tpl.Switches, NICs: tpl.NICs, Links: tpl.Links})
			t.entry = append(t.entry, e)
		}
	}
	t.Nodes, t.Templates = nodes, nil
	if t.NVLinkDomainNodes < 0 || t.NVLinkDomainNodes > len(t.Nodes) {
		return fmt.Errorf("nvlink_domain_nodes %d: use a count of nodes from 1 to %d, or leave it out", t.NVLinkDomainNodes, len(t.Nodes))
	}
	if t.NVLinkDomainNodes > 1 {
		gpus := map[int]int{}
		first := map[int]*Node{} // each domain's first node
		for i := range t.Nodes {
			n, d := &t.Nodes[i], t.domainOf(i)
			if gpus[d] += len(n.GPUs); gpus[d] > MaxDomainGPUs {
				return fmt.Errorf("nvlink_domain_nodes %d makes an NVLink domain of more than %d GPUs, the most NVLink switches join; use fewer nodes a domain", t.NVLinkDomainNodes, MaxDomainGPUs)
			}
			// A domain is nodes whose NVSwitches are one fabric: each node's switch of an id
			// is the same switch (Topology.addParts), so they must share one.
			if first[d] == nil {
				first[d] = n
			}
			if !slices.ContainsFunc(n.Switches, func(s Switch) bool { return s.Kind == "nvswitch" }) {
				return fmt.Errorf("nvlink_domain_nodes %d: node %s has no nvswitch, so its GPUs reach the rest of its domain over no NVLink: give each node of a domain the same nvswitch (its id), or leave nvlink_domain_nodes out", t.NVLinkDomainNodes, n.Hostname)
			}
			if !slices.ContainsFunc(n.Switches, func(s Switch) bool {
				return s.Kind == "nvswitch" && slices.ContainsFunc(first[d].Switches, func(f Switch) bool { return f.ID == s.ID && f.Kind == s.Kind })
			}) {
				return fmt.Errorf("nvlink_domain_nodes %d: node %s shares no nvswitch with node %s of its domain, so its GPUs reach the others over no NVLink: give each node of a domain the same nvswitch (its id), or leave nvlink_domain_nodes out", t.NVLinkDomainNodes, n.Hostname, first[d].Hostname)
			}
		}
	}
	return nil
}

// checkVersion refuses a version 1 file that uses a field version 2 added, naming each such field
// it uses (a node's or GPU's with the first entry that has it): a version 1 reader would not know
// it, so the file must say it is version 2.
func (t *Topology) checkVersion() error {
	if t.Format == TopologyFormat2 {
		return nil
	}
	var used []string
	add := func(field string, set bool) {
		if set {
			used = append(used, field)
		}
	}
	add("templates", t.Templates != nil)
	add("nvlink_domain_nodes", t.NVLinkDomainNodes != 0)
	add("calibration", t.Calibration != nil)
	if n := t.Network; n != nil {
		add("network layout", n.Layout != "")
		add("network nodes_per_leaf", n.NodesPerLeaf != 0)
		add("network tiers", n.Tiers != 0)
		add("network oversubscription", n.Oversubscription != 0)
		add("network switch_latency_us", n.SwitchLatencyUS != 0)
		add("network sharp", n.SHARP)
		add("network plugin_latency_us", n.PluginLatencyUS != nil)
		add("network message_us", n.MessageUS != nil)
	}
	template, count, nic := -1, -1, ""
	for i, n := range t.Nodes {
		if n.Template != "" && template < 0 {
			template = i
		}
		if n.Count != 0 && count < 0 {
			count = i
		}
		for _, g := range n.GPUs {
			if g.NIC != "" && nic == "" {
				nic = fmt.Sprintf("node %s gpu %s", n.Hostname, g.ID)
			}
		}
	}
	add(fmt.Sprintf("node template (node %d)", template), template >= 0)
	add(fmt.Sprintf("node count (node %d)", count), count >= 0)
	add(fmt.Sprintf("GPU nic (%s)", nic), nic != "")
	switch len(used) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s is a version 2 field, and the file's format is %q: set \"format\": %q, or drop it",
			used[0], t.Format, TopologyFormat2)
	}
	return fmt.Errorf("%s and %s are version 2 fields, and the file's format is %q: set \"format\": %q, or drop them",
		strings.Join(used[:len(used)-1], ", "), used[len(used)-1], t.Format, TopologyFormat2)
}

// WithNodes returns the topology's first node repeated count times, named HOST-0, HOST-1, ..., on
// the topology's network (or, without one, a non-blocking InfiniBand fabric): what --nodes asks
// of a preset or file. The result is validated.
func (t *Topology) WithNodes(count int) (*Topology, error) {
	if count < 1 || len(t.Nodes) == 0 || count > MaxGPUs/max(len(t.Nodes[0].GPUs), 1) {
		return nil, fmt.Errorf("use 1 to %d nodes of %d GPUs", MaxGPUs/max(len(t.Nodes[0].GPUs), 1), len(t.Nodes[0].GPUs))
	}
	first := t.Nodes[0]
	if count > 1 && len(first.NICs) == 0 {
		return nil, fmt.Errorf("%s's node has no NIC, so %d nodes of it cannot reach each other: use a topology with a NIC a node (a preset with NICs, such as dgx-h100 or pcie-l40s-8, or a topology file that gives its node one)", t.Name, count)
	}
	host := first.Hostname
	if len(t.Nodes) > 1 { // a cluster's first node is HOST-0: its template's name is HOST
		host = strings.TrimSuffix(host, "-0")
	}
	c := &Topology{Format: TopologyFormat2, Name: fmt.Sprintf("%s x%d", t.Name, count), Description: t.Description,
		P2P: t.P2P, Network: t.Network, NVLinkDomainNodes: t.NVLinkDomainNodes, Calibration: t.Calibration,
		Templates: map[string]Node{"node": {CPUs: first.CPUs, GPUs: first.GPUs, Switches: first.Switches, NICs: first.NICs, Links: first.Links}},
		Nodes:     []Node{{Hostname: host + "-{i}", Template: "node", Count: count}}}
	if count == 1 {
		c.Nodes[0].Hostname = host
	}
	if c.Network == nil && count > 1 { // a non-blocking fabric of the NICs' kind
		kind := first.NICs[0].Kind
		for _, n := range first.NICs {
			if n.Kind != kind {
				kind = "infiniband"
			}
		}
		c.Network = &Network{Kind: kind}
	}
	if c.NVLinkDomainNodes > count {
		c.NVLinkDomainNodes = count
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// WithGPUsPerNode returns the topology with only the first k GPUs of each node, and the links
// that touch them: the machine a job of k GPUs a node sees (Slurm's --gpus-per-node,
// CUDA_VISIBLE_DEVICES on each node). Every NIC, switch and CPU stays, as NCCL sees every NIC of
// a node but only its own ranks' GPUs. The result is validated.
func (t *Topology) WithGPUsPerNode(k int) (*Topology, error) {
	least := MaxGPUs
	for _, n := range t.Nodes {
		least = min(least, len(n.GPUs))
	}
	if k < 1 || k > least {
		return nil, fmt.Errorf("use 1 to %d GPUs a node, the most its smallest node has", least)
	}
	gpus, first := fmt.Sprintf("%d GPUs", k), fmt.Sprintf("first %d GPUs", k)
	if k == 1 {
		gpus, first = "1 GPU", "first GPU"
	}
	c := &Topology{Format: t.Format, Name: fmt.Sprintf("%s, %s a node", t.Name, gpus),
		Description: strings.TrimSpace(fmt.Sprintf("%s Kept: each node's %s (--gpus-per-node) and every NIC.", t.Description, first)),
		P2P:         t.P2P, Network: t.Network, NVLinkDomainNodes: t.NVLinkDomainNodes, Calibration: t.Calibration,
		NoPXN: t.NoPXN, NICOK: t.NICOK, Nodes: make([]Node, 0, len(t.Nodes))}
	trimmed := map[*GPU]Node{} // the nodes of one template share its parts: trim them once
	for _, n := range t.Nodes {
		body, ok := trimmed[&n.GPUs[0]]
		if !ok {
			gone := map[string]bool{}
			for _, g := range n.GPUs[k:] {
				gone[g.ID] = true
			}
			var links []Link
			for _, l := range n.Links {
				if !gone[l.A] && !gone[l.B] {
					links = append(links, l)
				}
			}
			body = Node{CPUs: n.CPUs, GPUs: n.GPUs[:k:k], Switches: n.Switches, NICs: n.NICs, Links: links}
			trimmed[&n.GPUs[0]] = body
		}
		body.Hostname = n.Hostname
		c.Nodes = append(c.Nodes, body)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// fabric is the network between the nodes: leaves that NICs plug into and, with more than one
// leaf, a spine they all reach through an uplink.
type fabric struct {
	layout  string
	perLeaf int
	leaves  map[[2]int]int // (rail or -1, group) -> leaf vertex
	leafOf  map[int]int    // NIC vertex -> its leaf vertex
	uplink  map[int]int    // leaf vertex -> the edge to the spine
	spine   int            // -1 with one leaf
	railOf  map[int]int    // NIC vertex -> its index in its node: its rail
}

// domainOf is node n's NVLink domain: nodes in one domain share their NVSwitches.
func (t *Topology) domainOf(n int) int {
	if t.NVLinkDomainNodes > 1 {
		return n / t.NVLinkDomainNodes
	}
	return n
}

// DomainOf is the NVLink domain of GPU i: its node's index, or with nvlink_domain_nodes the
// index of its run of nodes. GPUs of one domain reach each other over NVLink.
func (t *Topology) DomainOf(i int) int { return t.domainOf(t.gpus[i].node) }

// OneDomain reports whether every node is in one NVLink domain: nothing crosses a NIC.
func (t *Topology) OneDomain() bool { return t.domainOf(len(t.Nodes)-1) == t.domainOf(0) }

// check checks the version 2 fabric fields.
func (n *Network) check() error {
	switch n.Layout {
	case "", "single", "rail", "fat-tree":
	default:
		return fmt.Errorf("network layout %q; want single, rail or fat-tree", n.Layout)
	}
	if n.Layout == "" || n.Layout == "single" {
		for _, f := range []struct {
			name string
			set  bool
		}{{"nodes_per_leaf", n.NodesPerLeaf != 0}, {"tiers", n.Tiers != 0}, {"oversubscription", n.Oversubscription != 0}, {"switch_latency_us", n.SwitchLatencyUS != 0}} {
			if f.set {
				return fmt.Errorf("network %s describes leaves and spines, and layout single is one non-blocking switch: set layout rail or fat-tree, or drop %s", f.name, f.name)
			}
		}
	}
	switch {
	case n.NodesPerLeaf < 0 || n.NodesPerLeaf > MaxGPUs:
		return fmt.Errorf("network nodes_per_leaf %d is out of range: give 1 to %d nodes a leaf, or leave it out (32)", n.NodesPerLeaf, MaxGPUs)
	case n.Tiers != 0 && n.Tiers != 2 && n.Tiers != 3:
		return fmt.Errorf("network tiers %d; want 2 or 3", n.Tiers)
	case n.Oversubscription != 0 && !(n.Oversubscription >= 1 && n.Oversubscription <= 64):
		return fmt.Errorf("network oversubscription %v; want a ratio from 1 (none) to 64", n.Oversubscription)
	case n.SwitchLatencyUS < 0 || n.SwitchLatencyUS > 1e3:
		return fmt.Errorf("network switch_latency_us %v is out of range: give 0 to 1000 µs", n.SwitchLatencyUS)
	case n.PluginLatencyUS != nil && !(*n.PluginLatencyUS >= 0 && *n.PluginLatencyUS <= 1e3):
		return fmt.Errorf("network plugin_latency_us %v; give the µs NCCL's net plugin reports, 0 to 1000", *n.PluginLatencyUS)
	case n.MessageUS != nil && !(*n.MessageUS >= 0 && *n.MessageUS <= 1e3):
		return fmt.Errorf("network message_us %v; give the µs a host spends on each message it posts to the fabric, 0 to 1000", *n.MessageUS)
	}
	return nil
}

// settings are the fabric's layout, nodes per leaf, tiers and oversubscription with their
// defaults: one non-blocking switch; 32 nodes a leaf (a DGX SuperPOD scalable unit) for rail and
// fat-tree layouts; two tiers; no oversubscription.
func (n *Network) settings() (layout string, perLeaf, tiers int, over float64) {
	layout, perLeaf, tiers, over = n.Layout, n.NodesPerLeaf, n.Tiers, n.Oversubscription
	if layout == "" {
		layout = "single"
	}
	if perLeaf == 0 {
		perLeaf = 32
	}
	if tiers == 0 {
		tiers = 2
	}
	if over == 0 {
		over = 1
	}
	return layout, perLeaf, tiers, over
}

// buildFabric joins every NIC to its leaf, and the leaves to a spine.
func (t *Topology) buildFabric() {
	f := fabric{leaves: map[[2]int]int{}, leafOf: map[int]int{}, uplink: map[int]int{}, spine: -1, railOf: map[int]int{}}
	defer func() { t.fabric = f }()
	if t.Network == nil {
		for _, n := range t.Nodes {
			for r, c := range n.NICs {
				f.railOf[t.verts[n.Hostname+"/"+c.ID]] = r
			}
		}
		return
	}
	net := t.Network
	layout, perLeaf, tiers, over := net.settings()
	f.layout, f.perLeaf = layout, perLeaf
	lat := net.LinkLatencyUS()
	nicsOnLeaf := map[int]float64{} // leaf -> the NICs' bandwidth into it
	for ni, n := range t.Nodes {
		for r, c := range n.NICs {
			v := t.verts[n.Hostname+"/"+c.ID]
			f.railOf[v] = r
			key := [2]int{-1, 0}
			switch f.layout {
			case "rail":
				key = [2]int{r, ni / f.perLeaf}
			case "fat-tree":
				key = [2]int{-1, ni / f.perLeaf}
			}
			leaf, ok := f.leaves[key]
			if !ok {
				leaf = t.addVertex("fabric")
				f.leaves[key] = leaf
			}
			f.leafOf[v] = leaf
			t.netEdge[v] = len(t.edges)
			t.addEdge(v, leaf, LinkNet, c.Gbps/8, lat) // NIC first: a NIC leaves Forward
			nicsOnLeaf[leaf] += c.Gbps / 8
		}
	}
	if len(f.leaves) > 1 {
		f.spine = t.addVertex("fabric")
		hop := net.SwitchLatencyUS * float64(tiers-1) // the tiers above a leaf; a way between leaves takes two uplinks
		for _, leaf := range f.leaves {
			f.uplink[leaf] = len(t.edges)
			t.addEdge(leaf, f.spine, LinkNet, nicsOnLeaf[leaf]/over, hop)
		}
	}
}

// LeafSpan is the number of leaf switches the GPUs' traffic between nodes enters, on the rail of
// the first GPU that has a NIC (the nodes' groups under a leaf, as a ring on one rail meets them),
// and crossUS, what a message between two of those leaves takes over one under a single leaf: the
// 2(tiers - 1) switches more that it crosses (up to the top tier and down to the other leaf).
func (t *Topology) LeafSpan(gpus []int) (leaves int, crossUS float64) {
	f := &t.fabric
	if f.spine < 0 {
		return 1, 0
	}
	rail, seen := -1, map[int]bool{}
	for _, g := range gpus {
		v := t.nic[g]
		if v < 0 {
			continue
		}
		if rail < 0 {
			rail = f.railOf[v]
		}
		if f.railOf[v] == rail {
			seen[f.leafOf[v]] = true
		}
	}
	_, _, tiers, _ := t.Network.settings()
	return len(seen), t.Network.SwitchLatencyUS * float64(2*(tiers-1))
}

// kindLatencyUS is each fabric kind's default latency_us: the latency of one NIC's link through
// the fabric, so that NIC to NIC through one switch is twice it (docs/topology.md gives the
// sources). InfiniBand's is the reference: NCCL's latency tables were measured on it.
var kindLatencyUS = map[string]float64{"infiniband": 2.0, "roce": 2.5, "efa": 10.0, "ethernet": 4.0}

// LinkLatencyUS is the latency of one NIC's link through the fabric: latency_us when set, else
// the default for the fabric's kind.
func (n *Network) LinkLatencyUS() float64 {
	if n.LatencyUS > 0 {
		return n.LatencyUS
	}
	if lat, ok := kindLatencyUS[n.Kind]; ok {
		return lat
	}
	return defaultLatencyUS[LinkNet]
}

// kindPluginLatencyUS is each fabric kind's default plugin_latency_us: the latency its NCCL net
// plugin reports. NCCL's own InfiniBand (RoCE too) and socket transports report 0 ("Not set":
// src/transport/net_ib/init.cc, net_socket.cc); AWS's plugin for EFA reports 75 µs on p4d, p4de,
// p5 and p5e and on platforms its table does not name, 35 on p5en, p6 and later
// (aws-ofi-nccl, src/platform-aws.cpp, since v1.10).
var kindPluginLatencyUS = map[string]float64{"efa": 75}

// PluginLatency is plugin_latency_us when set, else the default for the fabric's kind.
func (n *Network) PluginLatency() float64 {
	if n.PluginLatencyUS != nil {
		return *n.PluginLatencyUS
	}
	return kindPluginLatencyUS[n.Kind]
}

// MessageCost is message_us when set, else NCCL's own overhead for posting a message to the
// network, postUS (src/graph/tuning.cc, getNetOverhead: 1 µs, 2 on AMD x86 hosts), whatever the
// fabric: no public figure gives a fabric's own.
func (n *Network) MessageCost(postUS float64) float64 {
	if n.MessageUS != nil {
		return *n.MessageUS
	}
	return postUS
}

// ExtraLatencyUS is how much longer than on InfiniBand a message takes from NIC to NIC on this
// fabric: what NCCL's latency tables, which assume InfiniBand, leave out. A fabric faster than
// InfiniBand adds nothing: the tables' figures are NCCL's own costs as much as the wire's.
func (n *Network) ExtraLatencyUS() float64 {
	return max(0, 2*(n.LinkLatencyUS()-kindLatencyUS["infiniband"]))
}

// netHops is the way from NIC vertex x to NIC vertex y through the fabric.
func (t *Topology) netHops(x, y int) []Hop {
	f := &t.fabric
	hops := []Hop{{Edge: t.netEdge[x], Forward: true}}
	if lx, ly := f.leafOf[x], f.leafOf[y]; lx != ly {
		hops = append(hops, Hop{Edge: f.uplink[lx], Forward: true}, Hop{Edge: f.uplink[ly], Forward: false})
	}
	return append(hops, Hop{Edge: t.netEdge[y], Forward: false})
}

// assignNICs gives every GPU the NIC its traffic between nodes leaves by: the one its "nic"
// names, else the nearest, and among NICs equally near the one fewest GPUs have taken so far, as
// NCCL spreads GPUs over NICs; only NICs that NICOK takes, when it is set. Each NIC's ways to the
// GPUs of its node come from one search from the NIC, not one from every GPU (a node of 256 GPUs
// on their own PCIe switches took 768 searches of the node per NIC); the way up from a GPU is its
// way down, reversed.
func (t *Topology) assignNICs() error {
	t.nic, t.up, t.down = make([]int, len(t.gpus)), make([][]Hop, len(t.gpus)), make([][]Hop, len(t.gpus))
	taken := map[int]int{}
	trees, treesOf := map[int]map[int]Hop{}, -1 // the NICs' search trees, of node treesOf's NICs
	down := func(nic, gpu int) []Hop {
		tree, ok := trees[nic]
		if !ok {
			_, tree = t.search(nic, []LinkKind{LinkPCIe, LinkSMP}, func(int) bool { return false })
			trees[nic] = tree
		}
		return t.pathTo(tree, nic, gpu, nil)
	}
	for g, ref := range t.gpus {
		if ref.node != treesOf {
			clear(trees)
			treesOf = ref.node
		}
		gp, n := t.GPU(g)
		t.nic[g] = -1
		switch {
		case gp.NIC != "" && (t.NICOK == nil || t.NICOK(gp.NIC)):
			v, ok := t.verts[n.Hostname+"/"+gp.NIC]
			if !ok || t.kinds[v] != "nic" {
				return fmt.Errorf("node %s gpu %s: nic %q is not a NIC of the node", n.Hostname, gp.ID, gp.NIC)
			}
			t.nic[g] = v
		case len(n.NICs) > 0:
			best, bestHops := -1, 0
			for _, c := range n.NICs {
				if t.NICOK != nil && !t.NICOK(c.ID) {
					continue
				}
				v := t.verts[n.Hostname+"/"+c.ID]
				h := down(v, ref.vert)
				if h == nil {
					continue
				}
				if best < 0 || len(h) < bestHops || len(h) == bestHops && taken[v] < taken[best] {
					best, bestHops = v, len(h)
				}
			}
			t.nic[g] = best
		}
		if v := t.nic[g]; v >= 0 {
			taken[v]++
			t.down[g] = down(v, ref.vert)
			if t.down[g] == nil {
				return fmt.Errorf("node %s gpu %s: no PCIe path to its nic", n.Hostname, gp.ID)
			}
			t.up[g] = reversed(t.down[g])
		}
	}
	return nil
}

// reversed is the way back along hops.
func reversed(hops []Hop) []Hop {
	back := make([]Hop, len(hops))
	for i, h := range hops {
		back[len(hops)-1-i] = Hop{Edge: h.Edge, Forward: !h.Forward}
	}
	return back
}

// netRoute is the route from GPU a to GPU b in another NVLink domain: out through the NIC on b's
// rail and into b through its own. With PXN (NCCL's default since 2.12) the data first crosses
// NVLink to the GPU of a's node that owns that rail's NIC, so that it stays on one rail of the
// fabric; without it (NoPXN, P2P off, or no NVLink to that GPU), it leaves through a's own NIC.
// A way to the NIC that crosses a CPU goes over NVLink to the GPU beside it instead (nicOwner).
// The view says which NIC is each GPU's: its own, or one lane of its local NICs (lanes.go).
func (v nicView) netRoute(a, b int) Path {
	t := v.t
	if v.nic(a) < 0 || v.nic(b) < 0 {
		return Path{}
	}
	from, pxn := v.sender(a, t.fabric.railOf[v.nic(b)], v.railGPU)
	hops := append(append([]Hop(nil), pxn...), v.up(from)...)
	hops = append(hops, t.netHops(v.nic(from), v.nic(b))...)
	return t.path(append(hops, v.down(b)...), PathNET)
}

// sender is the GPU whose NIC a route from GPU g to a NIC on the given rail leaves by, and the
// NVLink hops to it (none when it is g; they may be shared, so not to be appended to): with PXN,
// the GPU of g's node on that rail (peerOn: railGPU, or a cache of it) when NVLink reaches it;
// then, when that GPU's way to its NIC crosses a CPU, the GPU beside the NIC (nicOwner).
func (v nicView) sender(g, rail int, peerOn func(g, rail int) int) (int, []Hop) {
	t := v.t
	from, hops := g, []Hop(nil)
	if t.pxn() && t.fabric.railOf[v.nic(g)] != rail {
		if peer := peerOn(g, rail); peer >= 0 {
			if h := t.nvlPath(g, peer); h != nil {
				from, hops = peer, h
			}
		}
	}
	if peer, nvl := v.nicOwner(from, v.nic(from), v.up(from)); peer != from {
		return peer, append(append([]Hop(nil), hops...), nvl...)
	}
	return from, hops
}

// railGPU is a GPU of a's node whose NIC is on the given rail, or -1.
func (v nicView) railGPU(a, rail int) int {
	t := v.t
	first := a - t.gpus[a].index
	for g := first; g < first+len(t.Nodes[t.gpus[a].node].GPUs); g++ {
		if nic := v.nic(g); nic >= 0 && t.fabric.railOf[nic] == rail {
			return g
		}
	}
	return -1
}

// hasNVLink says whether GPU g has an NVLink of its own.
func (t *Topology) hasNVLink(g int) bool {
	return slices.ContainsFunc(t.adj[t.gpus[g].vert], func(e int) bool { return t.edges[e].kind == LinkNVLink })
}

// nvlPath is the NVLink path between two GPUs, remembered once found.
func (t *Topology) nvlPath(a, b int) []Hop {
	if !t.hasNVLink(a) || !t.hasNVLink(b) {
		return nil // not kept: a PCIe box's pairs would fill the cache with nothing
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if h, ok := t.nvlPaths[[2]int{a, b}]; ok {
		return h
	}
	if t.nvlPaths == nil {
		t.nvlPaths = map[[2]int][]Hop{}
	}
	h := t.bfs(t.gpus[a].vert, t.gpus[b].vert, LinkNVLink)
	t.nvlPaths[[2]int{a, b}] = h
	return h
}
