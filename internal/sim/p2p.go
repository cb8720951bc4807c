package sim

import (
	"math"
	"math/bits"

	"github.com/gpubench/gpubench/internal/gpu"
)

// NCCL's point-to-point channels (send/recv, all-to-all), as NCCL 2.30 plans them: how many
// channels one operation to one peer is split over, each carrying at most p2pChannelGBs, and a
// rank's operations together on at most the communicator's point-to-point channels. NCCL's
// tuner has no model of point-to-point; these are its planning rules (src/graph/paths.cc,
// ncclTopoGetNchannels and ncclTopoComputeP2pChannels; src/enqueue.cc, addP2pToPlan) and its own
// figure of what one channel carries. docs/model.md, "Point to point", gives each step.

// p2pNetChannelGBs is what NCCL counts one point-to-point channel to a peer across the network
// to carry, GB/s: the default of NCCL_P2P_PER_CHANNEL_NET_BW (paths.cc), by which it sizes those
// channels.
const p2pNetChannelGBs = 14

// p2pChannelGBs is what one point-to-point channel carries, GB/s, by NCCL's own planning figures
// (paths.cc, ncclTopoGetNchannels): inside one NVLink domain over NVLink, half of NCCL's per-link
// NVLink figure, since NCCL plans two channels a link (10 on A100, 10.3 on H100, 20 on B200);
// otherwise the network's p2pNetChannelGBs.
func (m *model) p2pChannelGBs() float64 {
	if m.nodes == 1 && m.intraHW == hwNVLink {
		return nvlinkPerLinkGBs(m.cc) / 2
	}
	return p2pNetChannelGBs
}

// p2pChannelUS is the time a rank's operations of bytes to each of its peers take on their
// channels alone: each operation on its own channels, and all of them on at most the
// communicator's point-to-point channels together, at p2pChannelGBs a channel.
func (m *model) p2pChannelUS(bytes int64, peers int) float64 {
	op := m.p2pOpChannels(bytes)
	if op == 0 || peers < 1 {
		return 0
	}
	return float64(peers) * float64(bytes) / (1e3 * m.p2pChannelGBs() * float64(min(m.p2p.channels, peers*op)))
}

// p2pPostUS is what a rank's host takes to start its remoteOps operations (sends and receives)
// with peers in other domains, one after another as NCCL's proxy thread posts them: the first
// message of every part of an operation (one a channel), each at the network's per-message cost.
// An operation's later messages are posted while its earlier ones move, NCCL_STEPS of them in
// flight, so they add nothing here.
func (m *model) p2pPostUS(bytes int64, remoteOps int) float64 {
	if remoteOps == 0 || m.msgUS == 0 {
		return 0
	}
	return float64(remoteOps*m.p2pOpChannels(bytes)) * m.msgUS
}

// remoteOps is the most operations, sends and receives, any rank has with peers in other
// domains among the transfers pairs (ranks of the communicator).
func (m *model) remoteOps(pairs []pair) int {
	ops := map[int]int{}
	most := 0
	for _, p := range pairs {
		if m.topo.DomainOf(m.devs[p.from]) != m.topo.DomainOf(m.devs[p.to]) {
			ops[p.from]++
			ops[p.to]++
			most = max(most, ops[p.from], ops[p.to])
		}
	}
	return most
}

// allToAllRemoteOps is remoteOps for an all-to-all: a rank of the smallest domain sends to and
// receives from every rank outside it.
func (m *model) allToAllRemoteOps() int { return 2 * (m.n - m.minLocal) }

// p2pOpChannels is the channels one point-to-point operation of bytes is split over.
func (m *model) p2pOpChannels(bytes int64) int {
	if m.n < 2 {
		return 0
	}
	if m.p2p == nil {
		p := m.p2pPlan()
		m.p2p = &p
	}
	return m.p2p.opChannels(bytes)
}

// NCCL's chunk sizes for point-to-point (init.cc: NCCL_P2P_NVL_CHUNKSIZE, NCCL_P2P_PCI_CHUNKSIZE,
// NCCL_P2P_NET_CHUNKSIZE), and its channel limit (device.h MAXCHANNELS).
const (
	p2pNVLChunk = 512 << 10
	p2pPCIChunk = 128 << 10
	p2pNetChunk = 128 << 10
	maxChannels = 64
	p2pPerBatch = 8 // device.h NCCL_MAX_DEV_WORK_P2P_PER_BATCH
)

// p2pPlan is what NCCL's init fixes for a communicator's point-to-point operations.
type p2pPlan struct {
	channels int   // p2pnChannels: the channels point-to-point runs on
	perPeer  int   // p2pnChannelsPerPeer: the most one peer's operation is split over
	minCh    int   // nChannelsMin of a call over every rank (enqueue.cc)
	chunk    int64 // p2pChunkSize
	nodes    int
}

// pow2Up is the least power of two at or above n; 1 for n <= 1.
func pow2Up(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// p2pPlan works out NCCL's point-to-point plan for the model's ranks.
func (m *model) p2pPlan() p2pPlan {
	// p2pnChannels: the communicator's channels within NCCL_MIN_P2P_NCHANNELS and
	// NCCL_MAX_P2P_NCHANNELS, then a power of two (paths.cc, ncclTopoComputeP2pChannels).
	p := p2pPlan{channels: min(maxChannels, pow2Up(max(min(m.commChannels(), m.env.maxP2P), m.env.minP2P))), nodes: m.nodes}
	// Channels a peer: the least over every rank's peers (NCCL gathers each rank's). Inside a
	// domain every pair is looked at, up to maxPairRoutes in all (past it, each domain's first
	// rank's pairs stand for all); to another domain a rank's count is the same for every peer.
	perPeer, allNVL := math.MaxInt, true
	byDomain := m.domainRanks()
	pairs := 0
	for _, local := range byDomain {
		pairs += len(local) * len(local)
	}
	for _, local := range byDomain {
		from := local
		if pairs > maxPairRoutes {
			from = local[:1]
		}
		for _, a := range from {
			for _, b := range local {
				if a != b {
					ch, nvl := m.peerChannels(a, b)
					perPeer, allNVL = min(perPeer, ch), allNVL && nvl
				}
			}
			if len(byDomain) > 1 {
				perPeer = min(perPeer, m.netChannels(a))
			}
		}
	}
	if perPeer == math.MaxInt {
		perPeer = 1
	}
	p.perPeer = pow2Up(perPeer)
	if m.nodes > 1 && m.env.netPeerCh == 0 {
		// Several NVLink domains, and NCCL_NCHANNELS_PER_NET_PEER unset: the network bounds;
		// fewer channels per peer so that every peer fits in one round.
		for p.perPeer*((m.n+p2pPerBatch-1)/p2pPerBatch) > p.channels && p.perPeer > 1 {
			p.perPeer /= 2
		}
	} else {
		p.perPeer = min(p.perPeer, p.channels)
	}
	p.minCh = p.perPeer
	for p.minCh*m.n > p.channels && p.minCh > 1 {
		p.minCh /= 2
	}
	switch {
	case m.nodes > 1:
		p.chunk = p2pNetChunk
		if m.arm && m.cc >= 10 { // GB200/GB300 hosts have 4 GPUs: NCCL doubles the chunk
			p.chunk *= 2
		}
	case allNVL:
		p.chunk = p2pNVLChunk
	default:
		p.chunk = p2pPCIChunk
	}
	return p
}

// maxPairRoutes bounds the routes p2pPlan works out inside the NVLink domains.
const maxPairRoutes = 1 << 16

// commChannels is NCCL's comm->nChannels, which point-to-point runs on (ncclTopoPostset): the
// ring search's channels doubled, doubled again on Hopper and later across nodes while the ring's
// channels carry over 45 GB/s and are fewer than 16, then within NCCL_MAX_NCHANNELS and
// NCCL_MIN_NCHANNELS; at most 64. (CollNet's extra half applies when its chain is faster inside
// a node than between nodes, which the simulator's CollNet graph never is.)
func (m *model) commChannels() int {
	return min(maxChannels, m.env.clampChannels(m.searchCommChannels()))
}

// searchCommChannels is commChannels before NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS.
func (m *model) searchCommChannels() int {
	found, _ := m.channelCount()
	n := min(maxChannels, 2*found)
	if m.cc >= 9 && m.nodes > 1 && m.graphs[algoRing].bwIntra > 45 && n < 16 {
		n = min(maxChannels, 2*n)
	}
	return n
}

// peerChannels is ncclTopoGetNchannels for a pair inside a domain: over NVLink two per NVLink of
// the path's narrowest part (NCCL's per-link figure), over PCIe two. nvl says the pair is joined
// by NVLink.
func (m *model) peerChannels(a, b int) (channels int, nvl bool) {
	path := m.topo.RouteNVLink(a, b)
	if path.Type != gpu.PathNVL {
		return 2, false
	}
	narrow := math.Inf(1)
	for _, h := range path.Hops {
		narrow = math.Min(narrow, m.topo.LinkGBs(h.Edge))
	}
	perLink := nvlinkPerLinkGBs(m.cc)
	return 2 * max(1, int(narrow*nvlinkEfficiency(m.cc)/perLink+1e-9)), true
}

// opChannels is how many channels one operation of bytes to one peer is split over
// (addP2pToPlan): parts of at least chunk/8 (chunk/2 across nodes), at most nChannelsMin to
// start, doubled while a part is over 32 chunks (one chunk across nodes) and the peer's limit
// allows.
func (p p2pPlan) opChannels(bytes int64) int {
	if bytes <= 0 {
		return 1
	}
	minPart, maxPart := p.chunk/8, p.chunk*32
	if p.nodes > 1 {
		minPart, maxPart = p.chunk/2, p.chunk
	}
	n := int(min(int64(p.minCh), (bytes+minPart-1)/minPart))
	part := max(minPart, (bytes+int64(n)-1)/int64(n))
	for part > maxPart && n <= p.perPeer/2 {
		n *= 2
		part = (bytes + int64(n) - 1) / int64(n)
	}
	return n
}

// netChannels is ncclTopoGetNchannels for a peer in another domain: NCCL_NCHANNELS_PER_NET_PEER
// where set; else two when the GPU has no NIC, else one per NIC NCCL counts as the GPU's, or more
// to carry their bandwidth (whole GB/s) at p2pNetChannelGBs each.
func (m *model) netChannels(g int) int {
	if m.env.netPeerCh > 0 { // NCCL_NCHANNELS_PER_NET_PEER
		return m.env.netPeerCh
	}
	count, gbs := m.localNets(g)
	if count == 0 {
		return 2
	}
	return max(count, (int(gbs)+p2pNetChannelGBs-1)/p2pNetChannelGBs)
}

// localNets is ncclTopoGetLocalNetCountByBw: the GPU's NICs that NCCL_IB_HCA leaves, its own first,
// then the others near it, taken until together they carry what the GPU's PCIe link to its CPU
// does; their count and bandwidth (each NIC's as far as that link lets it), GB/s.
func (m *model) localNets(g int) (count int, gbs float64) {
	pcie := math.Inf(1)
	for _, h := range m.topo.HostPath(g, false).Hops {
		pcie = math.Min(pcie, m.topo.LinkGBs(h.Edge)*m.efficiency(m.topo.LinkKind(h.Edge)))
	}
	for _, c := range m.topo.LocalNICs(g) {
		if m.env.hca != nil && !m.env.hca(c.ID) {
			continue
		}
		count++
		gbs += math.Min(c.Gbps/8, pcie)
		if gbs >= pcie {
			break
		}
	}
	return count, gbs
}
