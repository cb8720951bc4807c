package sim

import (
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/gpubench/gpubench/internal/gpu"
)

// The collective cost model: NCCL 2.30's tuner (src/graph/tuning.cc, ncclTopoTuneModel and
// ncclTopoGetAlgoTime) over every algorithm and protocol NCCL has, fed with what NCCL's topology
// search would find (channels, bandwidth per channel inside a node and between nodes) computed
// from the topology's links. docs/model.md gives every formula and constant with its source;
// keep the two in step. tuner.go holds NCCL's tables and the choice; this file the machine.

// NVLink bandwidth per link and direction as NCCL models it (topo.h SMxx_NVLINK_BW), and the
// nominal figure per link of that generation; their ratio derates NVLink links.
func nvlinkEfficiency(cc float64) float64 {
	switch {
	case cc >= 10:
		return nvlinkPerLinkGBs(cc) / 50
	case cc >= 9:
		return nvlinkPerLinkGBs(cc) / 25
	case cc >= 8.6:
		return nvlinkPerLinkGBs(cc) / 14.0625
	case cc >= 7:
		return nvlinkPerLinkGBs(cc) / 25
	default:
		return nvlinkPerLinkGBs(cc) / 20
	}
}

// nvlinkPerLinkGBs is NCCL's figure for one NVLink of the architecture (ncclTopoNVLinkBw).
func nvlinkPerLinkGBs(cc float64) float64 {
	switch {
	case cc >= 10:
		return 40.1
	case cc >= 9:
		return 20.6
	case cc >= 8.6:
		return 12.0
	case cc >= 7:
		return 20.0
	default:
		return 18.0
	}
}

// pcieEfficiency is NCCL's PCIe figure over the nominal one (gpu.PCIeEfficiency).
const pcieEfficiency = gpu.PCIeEfficiency

// launchUS is the host time to enqueue one collective on one GPU: measured on an H200 with
// NCCL 2.27 (docs/validation.md: an 8-byte call takes 6.3 µs launched, 1.44 µs replayed from a
// CUDA graph). A host thread launches its GPUs one after another; threads, processes and nodes
// launch in parallel (docs/model.md).
const launchUS = 4.9

// noopUS is the host time of a call that queues no work (one rank in place): 0.8-0.89 µs on the
// same H200 (docs/validation.md, "In place").
const noopUS = 0.85

// model is the cost model for one communicator.
type model struct {
	topo    *gpu.Topology
	devs    []int
	n       int // ranks
	nodes   int // NVLink domains the ranks span: NCCL's nodes
	ppn     float64
	arch    int // 0 Volta, 1 Ampere, 2 Hopper, 3 Blackwell
	cc      float64
	amd     bool
	arm     bool // an Arm CPU (NVIDIA Grace) on the ranks' hosts: NCCL's cpuArch is not x86
	intraHW int  // hwNVLink or hwPCI: how ring neighbours inside a node are joined
	ll128   bool
	nvls    bool // every rank on an NVSwitch with NVLink SHARP, Hopper or later
	nvs     bool // every rank on an NVSwitch (NCCL's nvsCount > 0): CollNetDirect needs one
	collnet bool // the fabric reduces (SHARP) and NCCL_COLLNET_ENABLE=1
	heads   int  // NICs per NVLink domain, the fewest (CollNet's heads)
	sameCh  bool // ring channels all take the same path (one NVLink node)
	rings   int
	flows   []gpu.Flow // the rings' flows, over the NICs NCCL_IB_HCA leaves: the links a call crosses
	ringBus float64    // ring Simple bus bandwidth, GB/s
	// netGBs is the NICs of an NVLink domain together, GB/s, the least of any domain, of those
	// NCCL_IB_HCA leaves; netBus what the network's links carry the rings, as bus bandwidth, GB/s
	// (several domains only, both).
	netGBs float64
	netBus float64
	memGBs float64
	graphs [numAlgos]searchGraph
	p2p    *p2pPlan // worked out at the first point-to-point call
	env    tunerEnv
	limit  string // the kind of link that bounds the ring, for explain
	staged bool   // the ring's hops go through host memory (P2P off)
	// netExtraUS is how much longer a message between nodes takes than on the InfiniBand that
	// NCCL's latency tables assume (gpu.Network.ExtraLatencyUS).
	netExtraUS float64
	// pluginLatUS is the latency the net plugin reports, which NCCL's estimate adds to every
	// step between nodes and the simulated call does not pay (gpu.Network.PluginLatency).
	pluginLatUS float64
	// leaves is how many leaf switches the communicator's traffic between nodes enters, and
	// crossUS what a message between two of them takes over one under a single leaf
	// (gpu.Topology.LeafSpan); NCCL's tables know neither (fabricUS).
	leaves  int
	crossUS float64
	// msgUS is what each message to or from the network costs the host that posts it: the
	// fabric's (gpu.Network.MessageCost), in the simulated call where NCCL's estimate takes its
	// own post overhead (netOverhead).
	msgUS float64
	// maxLocal and minLocal are the most and fewest ranks of any NVLink domain (NCCL's
	// maxLocalRanks, minLocalRanks: its node is the domain). maxLocal bounds where NVLS and
	// CollNet serve; a domain of one rank makes NCCL's tree search take its simple TREE pattern.
	maxLocal, minLocal int
}

// searchGraph is what NCCL's topology search finds for one algorithm: its channels and each channel's
// bandwidth inside a node (bwIntra) and between nodes (bwInter), in GB/s. NCCL's search takes a
// speed from its table, so bwIntra can be less than the links carry: linksIntra is what they carry
// a channel, where it differs (0: bwIntra). NCCL's tuner sees bwIntra, the simulated call linksIntra.
// Likewise linksInter, for NVLS and CollNet across domains, whose bwInter is the NICs' rate as NCCL
// counts it: what the network carries a channel where that is less (0: bwInter).
type searchGraph struct {
	nChannels              int
	bwIntra, bwInter       float64
	linksIntra, linksInter float64
}

func newModel(t *gpu.Topology, devs []int, env map[string]string) *model {
	m := &model{topo: t, devs: devs, n: len(devs), cc: math.Inf(1), nvls: true, nvs: true, memGBs: math.Inf(1), env: parseTunerEnv(env)}
	domains, hosts := map[int]bool{}, map[int]int{} // hosts: host -> its domain
	for _, d := range devs {
		g, node := t.GPU(d)
		domains[t.DomainOf(d)] = true
		hosts[t.NodeOf(d)] = t.DomainOf(d)
		cc, _ := strconv.ParseFloat(g.ComputeCapability, 64)
		m.cc = math.Min(m.cc, cc)
		m.memGBs = math.Min(m.memGBs, g.MemoryGBs)
		m.nvls = m.nvls && t.NVLS(d)
		m.nvs = m.nvs && t.NVSwitch(d)
		for _, c := range node.CPUs {
			m.amd = m.amd || strings.Contains(c.Name, "AMD")
			m.arm = m.arm || strings.Contains(c.Name, "Grace") || strings.Contains(c.Name, "Neoverse")
		}
	}
	m.nodes = len(domains)
	// NCCL's node is the NVLink domain: its NICs are those of its hosts that hold ranks (a GB200
	// NVL72 rack's 18 trays) that NCCL_IB_HCA leaves, CollNet's heads the fewest any domain has.
	domHosts := map[int][]int{}
	for h, d := range hosts {
		domHosts[d] = append(domHosts[d], h)
	}
	m.netGBs = math.Inf(1)
	for _, hs := range domHosts {
		nics, gbs := 0, 0.0
		for _, h := range hs {
			for _, c := range t.Nodes[h].NICs {
				if m.env.hca == nil || m.env.hca(c.ID) {
					nics, gbs = nics+1, gbs+c.Gbps/8
				}
			}
		}
		if m.heads == 0 || nics < m.heads {
			m.heads = nics
		}
		m.netGBs = math.Min(m.netGBs, gbs)
	}
	if len(domains) < 2 {
		m.netGBs = 0
	}
	m.ppn = float64(m.n) / float64(m.nodes)
	m.minLocal = m.n
	for _, local := range m.domainRanks() {
		m.maxLocal, m.minLocal = max(m.maxLocal, len(local)), min(m.minLocal, len(local))
	}
	switch {
	case m.cc >= 10:
		m.arch = 3
	case m.cc >= 9:
		m.arch = 2
	case m.cc >= 8:
		m.arch = 1
	}
	m.intraHW = hwNVLink
	for i, d := range devs {
		next := devs[(i+1)%len(devs)]
		if d != next && t.DomainOf(d) == t.DomainOf(next) && t.Route(d, next).Type != gpu.PathNVL {
			m.intraHW = hwPCI
		}
	}
	m.ll128 = m.intraHW == hwNVLink && m.cc >= 7
	// NCCL's search tries channels that all take the first one's path first, and keeps them
	// unless channels of different paths do strictly better (search.cc, ncclTopoCompute), which
	// inside one domain they do not: its links are what any order crosses.
	m.sameCh = m.nodes == 1
	m.nvls = m.nvls && m.arch >= 2 && m.n >= 2 && m.env.nvls
	m.collnet = t.Network != nil && t.Network.SHARP && m.env.collnet && m.nodes > 1 && m.heads > 0
	if t.Network != nil && m.nodes > 1 {
		m.netExtraUS, m.pluginLatUS = t.Network.ExtraLatencyUS(), t.Network.PluginLatency()
		m.leaves, m.crossUS = t.LeafSpan(devs)
		m.msgUS = t.Network.MessageCost(m.netOverhead())
	}
	if m.n > 1 {
		flows, rings := t.BestRingFlows(devs, m.env.hca, func(f []gpu.Flow) float64 { us, _ := m.linkLoad(f); return us })
		m.rings, m.flows = rings, flows
		m.staged = slices.ContainsFunc(flows, throughHost)
		us, limit := m.linkLoad(flows)
		m.ringBus, m.limit = float64(rings)/(us*1e3), limit
		if m.nodes > 1 {
			// The network's links alone, as the rings cross them: the NICs NCCL_IB_HCA leaves, the
			// smallest domain's, the fabric's uplinks.
			us, _ := t.LinkLoadKind(flows, func(k gpu.LinkKind) float64 {
				if k == gpu.LinkNet {
					return 1
				}
				return math.Inf(1)
			})
			m.netBus = math.Inf(1)
			if us > 0 {
				m.netBus = float64(rings) / (us * 1e3)
			}
		}
	}
	m.graphs = m.searchGraphs()
	return m
}

// searchGraphs stands in for NCCL's topology search (src/graph/search.cc): for each algorithm
// the channels and bandwidth per channel it would find on these links.
func (m *model) searchGraphs() [numAlgos]searchGraph {
	var g [numAlgos]searchGraph
	if m.n < 2 {
		return g
	}
	// Ring and Tree: the ring's bandwidth over its channels (NCCL's tree graph has the ring's
	// channels). NCCL_MIN/MAX_NCHANNELS do not touch the graphs NCCL's tuner prices with, only
	// the channels a call runs on (connect.cc, comm->nChannels): bandwidthOf scales the simulated
	// call by them.
	nch, speed := m.channelCount()
	per := m.ringBus / float64(nch)
	ring := searchGraph{nChannels: nch, bwIntra: per, bwInter: per}
	if speed > 0 {
		// The search's channels run at a speed of its table, which can fall short of the links
		// (8 B200: 16 channels of 45 GB/s, 720 of 721.8): NCCL's tuner compares algorithms with
		// it, and the links still carry what they carry.
		ring.linksIntra, ring.bwIntra = ring.bwIntra, speed
	}
	g[algoRing], g[algoTree] = ring, ring
	if m.nodes > 1 {
		// A tree need not come back to the NIC it left by, so NCCL's search raises its bwIntra
		// towards twice its bwInter where the chain inside every domain carries it (search.cc:
		// "increase bwIntra for trees (2 nodes or collnet)"), never below where it started; the
		// tuner prices two nodes by bwIntra.
		g[algoTree].bwIntra = math.Max(ring.bwIntra, math.Min(2*ring.bwInter, m.domainBus()/float64(nch)))
	}
	g[algoPAT] = g[algoTree] // NCCL runs PAT on the tree's graph (init.cc)
	if m.nvls {
		// NVLS: one channel (head) per GPU of a domain, at most 32 (NCCL_MAX_NVLS_ARITY). On one
		// domain NCCL's search takes them all, each carrying the NVLink bandwidth shared by the
		// heads + 1 streams of its condition (ncclTopoSearchTryNvls: every GPU's link carries each
		// other head's channel once and its own twice). Across domains NCCL searches NIC:GPU heads
		// instead, which the simulator does not follow: it shares the NVLink among the domain's
		// GPUs + 1 (docs/model.md, "Search graphs"), and each channel gets its share of the node's
		// NICs.
		nvl := math.Inf(1)
		for i, d := range m.devs {
			next := m.devs[(i+1)%len(m.devs)]
			if m.topo.DomainOf(d) != m.topo.DomainOf(next) {
				continue
			}
			flow := gpu.Flow{Path: m.topo.NVLinkRoute(d, next), Bytes: 1}
			if us, _ := m.linkLoad([]gpu.Flow{flow}); us > 0 {
				nvl = math.Min(nvl, 1/(us*1e3))
			}
		}
		ppn := math.Round(m.ppn)
		n := int(math.Min(maxNVLSArity, ppn))
		g[algoNVLS] = searchGraph{nChannels: n, bwIntra: nvl / float64(n+1)}
		if m.nodes == 1 {
			// On one domain NCCL's search gives the heads the fastest speed of its table that
			// the GPU's NVLink holds heads + 1 times (search.cc, ncclTopoSearchTryNvls): its tuner
			// prices NVLS with that, and the links carry what they carry (8 H100: 40 of 41.2;
			// HGX H800: 15 of 18.3).
			speeds := searchSpeedsIntra[m.arch]
			speed := speeds[speedAtOrBelow(speeds, nvl*(1+1e-9)/float64(n+1))]
			g[algoNVLS].linksIntra, g[algoNVLS].bwIntra = g[algoNVLS].bwIntra, speed
		}
		if m.nodes > 1 {
			g[algoNVLS].bwIntra, g[algoNVLS].bwInter = nvl/(ppn+1), m.netGBs/float64(n)
			g[algoNVLS].linksInter = m.netLinks(n)
		}
		g[algoNVLSTree] = g[algoNVLS]
	}
	if m.collnet {
		// CollNet: one channel per NIC (head), each carrying its NIC; Direct's search takes at
		// most 8 heads (search.cc: NCCL_MAX_DIRECT_ARITY + 1).
		per := m.netGBs / float64(m.heads)
		links := m.netLinks(m.heads)
		g[algoCollNetChain] = searchGraph{nChannels: m.heads, bwIntra: per, bwInter: per, linksIntra: links, linksInter: links}
		g[algoCollNetDirect] = g[algoCollNetChain]
		g[algoCollNetDirect].nChannels = min(m.heads, maxDirectArity+1)
	}
	return g
}

// NCCL's bounds on its ring search's channels (init.cc: MAXCHANNELS / 2), NVLS's heads and
// CollNet Direct's peers (src/include/device.h).
const (
	maxRingChannels = 32
	maxNVLSArity    = 32 // NCCL_MAX_NVLS_ARITY
	maxDirectArity  = 7  // NCCL_MAX_DIRECT_ARITY
)

// netLinks is what the network carries each of n channels between NVLink domains where that is
// less than the NICs' rate NCCL counts (netGBs), as on a fabric with fewer uplinks than NICs,
// which NCCL does not see. 0 where the NICs' rate holds.
func (m *model) netLinks(n int) float64 {
	if m.netBus >= m.netGBs {
		return 0
	}
	return m.netBus / float64(n)
}

// domainBus is the bus bandwidth, GB/s, a chain inside each NVLink domain carries across all
// channels: one ring over the domain's ranks alone, the least of any domain with two or more
// (NCCL keeps the least any rank found); +Inf when every domain has one rank.
func (m *model) domainBus() float64 {
	bus := math.Inf(1)
	for _, local := range m.domainRanks() {
		if len(local) < 2 {
			continue
		}
		flows, rings := m.topo.RingFlowsOn(local, nil)
		if us, _ := m.linkLoad(flows); us > 0 {
			bus = math.Min(bus, float64(rings)/(us*1e3))
		}
	}
	return bus
}

// domainRanks is the model's devices by the NVLink domain they are in.
func (m *model) domainRanks() map[int][]int {
	by := map[int][]int{}
	for _, d := range m.devs {
		by[m.topo.DomainOf(d)] = append(by[m.topo.DomainOf(d)], d)
	}
	return by
}

// channelCount estimates the channels NCCL's ring search finds, which the per-channel caps
// multiply, and each one's speed where gpubench follows the search (0 elsewhere): one per ring
// across nodes, duplicated as below; on one NVLink node, the search's own result
// (nvlinkRingSearch); one channel over PCIe.
func (m *model) channelCount() (int, float64) {
	switch {
	case m.nodes > 1:
		// NCCL duplicates every graph its search finds (ncclTopoDupChannels, search.cc) whose
		// channels run at 25 GB/s or more, unless past compute capability 8.0 they are more than
		// four under 50 GB/s; each ring's speed is the fastest of the search's table for
		// channels between nodes at or below what it carries.
		nch := min(m.rings, maxRingChannels)
		speeds := searchSpeedsInter[m.arch]
		speed := speeds[speedAtOrBelow(speeds, m.ringBus/float64(nch))]
		if d := min(2*nch, maxRingChannels); d > nch && speed >= 25 && !(m.cc > 8 && speed < 50 && nch > 4) {
			nch = d
		}
		return nch, 0
	case m.intraHW == hwNVLink:
		return nvlinkRingSearch(m.ringBus, m.arch, m.cc)
	}
	return 1, 0
}

// searchSpeedsIntra are the speeds NCCL's search tries for a channel inside a node, fastest first,
// per architecture (src/graph/search.cc: speedArrayIntra up to Ampere and Ada, sm90SpeedArrayIntra,
// sm100SpeedArrayIntra).
var searchSpeedsIntra = [4][]float64{
	{40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3},
	{40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3},
	{60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3},
	{90, 80, 70, 60, 50, 45, 40, 30, 24, 20, 19, 18},
}

// speedAtOrBelow is the index of the fastest speed of a search table (fastest first) at or below
// bw, or of its slowest.
func speedAtOrBelow(speeds []float64, bw float64) int {
	i := 0
	for i < len(speeds)-1 && speeds[i] > bw {
		i++
	}
	return i
}

// searchSpeedsInter are the speeds NCCL's search tries for a channel between nodes, fastest
// first, per architecture (search.cc: speedArrayInter, sm90SpeedArrayInter, sm100SpeedArrayInter).
var searchSpeedsInter = [4][]float64{
	{48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12},
	{48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12},
	{48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12},
	{96, 86, 80, 48, 45.1, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12},
}

// nvlinkRingSearch is NCCL's ring search (search.cc, ncclTopoCompute) where every GPU reaches
// the others through one NVLink switch at bw GB/s: a channel at speed s takes s of each GPU's
// bw, so a speed holds floor(bw/s) channels, at most 32 (MAXCHANNELS/2). From the fastest speed
// that fits, slower speeds are tried while they are above .49 of the best found, a speed
// replacing it only with more channels × speed, until one fills bw or the channel limit; the
// channels are then duplicated when each carries 25 GB/s or more, unless (past compute
// capability 8.0) they are more than four under 50 GB/s (ncclTopoDupChannels), each then
// carrying half the speed. It returns the channels and each one's speed: 8x H100, 6 channels at
// 60, duplicated to 12 of 30; 8x H800, whose 8 NVLinks carry 165 GB/s: 4 at 40, then 8 of 20.
func nvlinkRingSearch(bw float64, arch int, cc float64) (int, float64) {
	const most = maxRingChannels
	speeds := searchSpeedsIntra[arch]
	nch, speed := 0, 0.0
	for i := speedAtOrBelow(speeds, bw); i < len(speeds); i++ {
		if nch > 0 && speeds[i]/speed <= .49 {
			break
		}
		if c := min(most, int(bw/speeds[i]+1e-9)); float64(c)*speeds[i] > float64(nch)*speed {
			nch, speed = c, speeds[i]
		}
		if nch == most || float64(nch)*speed >= bw-1e-9 {
			break
		}
	}
	if nch == 0 {
		return 1, bw
	}
	if d := min(2*nch, most); d > nch && speed >= 25 && !(cc > 8 && speed < 50 && nch > 4) {
		nch, speed = d, speed/2
	}
	return nch, speed
}

// linkLoad is the flows' time in µs on the links, each derated by efficiency, and the kind of
// link that sets it. A flow staged through host memory (type SHM: P2P off) moves at
// stagedEfficiency of a direct one over the same links: NCCL's SHM transport writes every byte
// to host memory and reads it back, as a copy staged through host memory does (copy.go).
func (m *model) linkLoad(flows []gpu.Flow) (float64, string) {
	if slices.ContainsFunc(flows, throughHost) {
		flows = slices.Clone(flows) // the caller's flows stay as they are
		for i := range flows {
			if throughHost(flows[i]) {
				flows[i].Bytes /= stagedEfficiency
			}
		}
	}
	return m.topo.LinkLoadKind(flows, m.efficiency)
}

// throughHost reports whether f is staged through host memory (P2P off).
func throughHost(f gpu.Flow) bool { return f.Path.Type == gpu.PathSHM }

// efficiency derates a link of the given kind to what NCCL's own model assumes it delivers.
func (m *model) efficiency(kind gpu.LinkKind) float64 {
	switch kind {
	case gpu.LinkNVLink:
		return nvlinkEfficiency(m.cc)
	case gpu.LinkPCIe:
		return pcieEfficiency
	}
	return 1
}

// p2pTime predicts point-to-point transfers (send/recv, all-to-all) of bytes to each of a rank's
// peers (the most any rank sends to) running together: NCCL's Ring/Simple base latency plus the
// longest path's link latencies, then the flows sharing the links, or the operations' channels
// (p2p.go) when they carry less, or the host's posting of the messages of the remoteOps
// operations (sends and receives) a rank has with other domains when it takes longer. One rank
// copies locally at memory speed.
func (m *model) p2pTime(flows []gpu.Flow, bytes int64, peers, remoteOps int) float64 {
	if bytes == 0 {
		return 0
	}
	if m.n == 1 {
		return m.collTime(collBroadcast, bytes).us
	}
	lat := 0.0
	for _, f := range flows {
		lat = math.Max(lat, f.Path.LatencyUS)
	}
	us, _ := m.linkLoad(flows)
	return baseLat[algoRing][protoSimple] + lat + max(us, m.p2pChannelUS(bytes, peers), m.p2pPostUS(bytes, remoteOps))
}

// log2i is floor(log2(n)), 0 for n < 2.
func log2i(n int) int { return max(bits.Len(uint(max(n, 1)))-1, 0) }
