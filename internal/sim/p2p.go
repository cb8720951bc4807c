package sim

import (
	"math"
	"math/bits"

	"github.com/gpubench/gpubench/internal/gpu"
)

// NCCL's point-to-point channels (send/recv, all-to-all), as NCCL 2.30 plans them: how many
// channels one operation to one peer is split over, each carrying at most p2pChannelGBs. NCCL's
// tuner has no model of point-to-point; these are its planning rules (src/graph/paths.cc,
// ncclTopoGetNchannels and ncclTopoComputeP2pChannels; src/enqueue.cc, addP2pToPlan) and its own
// figure of what one channel carries. docs/model.md, "Point to point", gives each step.

// p2pChannelGBs is what NCCL counts one point-to-point channel to carry, GB/s: the default of
// NCCL_P2P_PER_CHANNEL_NET_BW (paths.cc), by which NCCL sizes the channels to a peer across the
// network. NCCL publishes no other figure for one channel's copy; the simulator takes it for
// every transport.
const p2pChannelGBs = 14

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

func pow2Up(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// p2pPlan works out NCCL's point-to-point plan for the model's ranks.
func (m *model) p2pPlan() p2pPlan {
	// comm->nChannels: the search's ring channels (within NCCL_MIN/MAX_NCHANNELS), doubled by
	// ncclTopoPostset up to NCCL_MAX_NCHANNELS and 64.
	p := p2pPlan{channels: pow2Up(min(2*m.graphs[algoRing].nChannels, m.env.maxCh, maxChannels)), nodes: m.nodes}
	// NCCL works the count out for each rank over its peers; the first rank's stands for all.
	allNVL := true
	perPeer := math.MaxInt
	for _, b := range m.devs[1:] {
		ch, nvl := m.peerChannels(m.devs[0], b)
		perPeer = min(perPeer, ch)
		allNVL = allNVL && nvl
	}
	if perPeer == math.MaxInt {
		perPeer = 1
	}
	p.perPeer = pow2Up(perPeer)
	if m.nodes > 1 {
		// Several NVLink domains: the network bounds; fewer channels per peer so that every
		// peer fits in one round.
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
	case allNVL:
		p.chunk = p2pNVLChunk
	default:
		p.chunk = p2pPCIChunk
	}
	return p
}

// peerChannels is ncclTopoGetNchannels for the pair: over NVLink two per NVLink of the path's
// narrowest part (NCCL's per-link figure), over PCIe two; to another domain one per NIC NCCL
// counts as the GPU's, or more to carry them at p2pChannelGBs each. nvl says the pair is joined
// by NVLink.
func (m *model) peerChannels(a, b int) (channels int, nvl bool) {
	if m.topo.DomainOf(a) != m.topo.DomainOf(b) {
		count, gbs := m.localNets(a)
		return max(1, count, int(math.Ceil(gbs/p2pChannelGBs))), false
	}
	path := m.topo.Route(a, b)
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

// localNets is ncclTopoGetLocalNetCountByBw: the GPU's NICs, its own first, then the others near
// it, taken until together they carry what the GPU's PCIe link to its CPU does; their count and
// bandwidth (each NIC's as far as that link lets it), GB/s.
func (m *model) localNets(g int) (count int, gbs float64) {
	pcie := math.Inf(1)
	for _, h := range m.topo.HostPath(g, false).Hops {
		pcie = math.Min(pcie, m.topo.LinkGBs(h.Edge)*m.efficiency(m.topo.LinkKind(h.Edge)))
	}
	for _, c := range m.topo.LocalNICs(g) {
		count++
		gbs += math.Min(c.Gbps/8, pcie)
		if gbs >= pcie {
			break
		}
	}
	return count, gbs
}
