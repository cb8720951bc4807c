package sim

import (
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/gpubench/gpubench/internal/gpu"
)

// The collective cost model: NCCL 2.30's tuner (src/graph/tuning.cc), fed with link bandwidths
// from the topology instead of NCCL's topology search. docs/model.md gives every formula and
// constant with its source; keep the two in step.

type collKind int

const (
	collAllReduce collKind = iota
	collAllGather
	collReduceScatter
	collBroadcast
	collReduce
)

const (
	algoTree = iota
	algoRing
	algoNVLS
	numAlgos
)

const (
	protoLL = iota
	protoLL128
	protoSimple
	numProtos
)

const (
	hwNVLink = iota
	hwPCI
	hwNet
)

var algoNames = [numAlgos]string{"Tree", "Ring", "NVLS"}
var protoNames = [numProtos]string{"LL", "LL128", "Simple"}

// baseLat and hwLat are NCCL's latency tables in µs (ncclTunerConstantsDefaults).
var baseLat = [numAlgos][numProtos]float64{
	algoTree: {6.8, 14.0, 8.4},
	algoRing: {6.6, 14.0, 8.4},
	algoNVLS: {0, 0, 0},
}

var hwLat = [3][numAlgos][numProtos]float64{
	hwNVLink: {algoTree: {.6, 1.25, 4.0}, algoRing: {.6, 1.9, 3.4}, algoNVLS: {0, 0, 25}},
	hwPCI:    {algoTree: {1.0, 1.9, 4.0}, algoRing: {1.0, 2.5, 5.7}, algoNVLS: {0, 0, 0}},
	hwNet:    {algoTree: {5.0, 8.5, 14}, algoRing: {2.7, 4.0, 14.0}, algoNVLS: {0, 0, 18}},
}

// llMaxBws[arch][nodes bucket]: the LL protocol's bandwidth cap in GB/s. Rows are Volta, Ampere,
// Hopper, Blackwell on one node; on several nodes NCCL picks row 0 for Intel CPUs, 1 for AMD.
var llMaxBws = [4][3]float64{{39, 39, 20.4}, {87.7, 22.5, 19.0}, {141, 45, 35}, {282, 90, 70}}

// treeCorrectionFactor[proto][log2(bytes/64)].
var treeCorrectionFactor = [numProtos][24]float64{
	{1, 1, 1, 1, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1, 1, 1, 1, 1},
	{1, 1, 1, 1, 1, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1, 1, 1},
	{.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9},
}

// Per-channel bandwidth caps in GB/s, [arch][nodes bucket] (ncclTunerConstantsDefaults).
var perChMaxRingLL128Bws = [4][3]float64{{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {40, 40, 40}}
var perChMaxTreeLL128Bws = [4][3]float64{{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}}
var perChMaxTreeBws = [4][3]float64{{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}}

// nvlsEfficiency by architecture index (Volta, Ampere, Hopper, Blackwell).
var nvlsEfficiency = [4]float64{0, 0, 0.85, 0.74}

// nvlsMaxChannelGBs is the largest entry of NCCL's search speed table per architecture (the
// ceiling of an NVLS channel's bwInter).
var nvlsMaxChannelGBs = [4]float64{40, 40, 60, 90}

// NVLink bandwidth per link and direction as NCCL models it (topo.h SMxx_NVLINK_BW), and the
// nominal figure per link of that generation; their ratio derates NVLink links.
func nvlinkEfficiency(cc float64) float64 {
	switch {
	case cc >= 10:
		return 40.1 / 50
	case cc >= 9:
		return 20.6 / 25
	case cc >= 8.6:
		return 12.0 / 14.0625
	case cc >= 7:
		return 20.0 / 25
	default:
		return 18.0 / 20
	}
}

// pcieEfficiency is NCCL's PCIe figure per lane (width × GT/s / 80: 1.5 GB/s for Gen4, 24 GB/s
// for Gen4 x16) over the nominal one after line coding (1.969 GB/s).
const pcieEfficiency = 1.5 / 1.969

// launchUS is the host time to enqueue one collective on one rank; each node's host enqueues for
// its own ranks, in parallel with the other nodes (assumption, docs/model.md).
const launchUS = 2.0

// model is the cost model for one communicator.
type model struct {
	topo         *gpu.Topology
	devs         []int
	n, nodes     int
	ppn          int
	arch         int // 0 Volta, 1 Ampere, 2 Hopper, 3 Blackwell
	cc           float64
	amd          bool
	intraHW      int
	ll128        bool
	nvls         bool
	sameChannels bool
	rings        int
	channels     int     // NCCL's ring search channels (see channelCount)
	ringBus      float64 // ring Simple bus bandwidth, GB/s
	nvlinkGBs    float64 // a GPU's NVLink bandwidth as NCCL counts it, GB/s per direction
	memGBs       float64
}

func newModel(t *gpu.Topology, devs []int) *model {
	m := &model{topo: t, devs: devs, n: len(devs), cc: math.Inf(1), nvls: true, memGBs: math.Inf(1)}
	nodes := map[int]bool{}
	for _, d := range devs {
		g, node := t.GPU(d)
		nodes[t.NodeOf(d)] = true
		cc, _ := strconv.ParseFloat(g.ComputeCapability, 64)
		m.cc = math.Min(m.cc, cc)
		m.memGBs = math.Min(m.memGBs, g.MemoryGBs)
		m.nvls = m.nvls && t.NVLS(d)
		for _, c := range node.CPUs {
			m.amd = m.amd || strings.Contains(c.Name, "AMD")
		}
	}
	m.nodes = len(nodes)
	m.ppn = m.n / m.nodes
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
		if d != next && t.NodeOf(d) == t.NodeOf(next) && t.Route(d, next).Type != gpu.PathNVL {
			m.intraHW = hwPCI
		}
	}
	m.ll128 = m.intraHW == hwNVLink && m.cc >= 7
	m.sameChannels = m.nodes == 1 && m.intraHW == hwNVLink
	m.nvls = m.nvls && m.nodes == 1 && m.arch >= 2 && m.n >= 2
	if m.n > 1 {
		flows, rings := t.RingFlows(devs)
		m.rings = rings
		m.ringBus = float64(rings) / (t.LinkLoad(flows, m.efficiency) * 1e3)
		m.channels = m.channelCount()
	}
	if m.nvls {
		// The slowest GPU's NVLink bandwidth: what one unit of traffic between neighbours can use.
		m.nvlinkGBs = math.Inf(1)
		for i, d := range devs {
			flow := gpu.Flow{Path: t.Route(d, devs[(i+1)%len(devs)]), Bytes: 1}
			m.nvlinkGBs = math.Min(m.nvlinkGBs, 1/(t.LinkLoad([]gpu.Flow{flow}, m.efficiency)*1e3))
		}
	}
	return m
}

// channelCount estimates the channels NCCL's ring search finds, which the per-channel caps
// multiply: one per ring across nodes; on one NVLink node, as many channels of the search table's
// top speed (60 GB/s from Hopper on, 40 before) as the ring bandwidth holds, doubled as NCCL
// duplicates fast channels; one channel over PCIe.
func (m *model) channelCount() int {
	switch {
	case m.nodes > 1:
		return m.rings
	case m.intraHW == hwNVLink:
		top := 40.0
		if m.arch >= 2 {
			top = 60
		}
		return 2 * max(1, int(m.ringBus/top))
	}
	return 1
}

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

func (m *model) nsteps(c collKind) int {
	switch c {
	case collAllReduce:
		return 2 * (m.n - 1)
	case collAllGather, collReduceScatter:
		return m.n - 1
	}
	return m.n
}

func (m *model) llMax() float64 {
	if m.nodes == 1 {
		return llMaxBws[m.arch][0]
	}
	row := 0
	if m.amd {
		row = 1
	}
	return llMaxBws[row][min(m.nodes, 3)-1]
}

// algBw returns the algorithm bandwidth in GB/s NCCL's tuner assigns to (coll, algo, proto), or 0
// where the combination is not available.
func (m *model) algBw(c collKind, a, p int) float64 {
	n := float64(m.n)
	nch := float64(m.channels)
	bucket := min(m.nodes, 3) - 1
	switch a {
	case algoRing:
		bus := m.ringBus
		switch p {
		case protoLL:
			bus = math.Min(m.llMax(), 0.5*bus)
		case protoLL128:
			if !m.ll128 {
				return 0
			}
			bus = math.Min(0.92*bus, nch*perChMaxRingLL128Bws[m.arch][bucket])
		}
		return bus * n / float64(m.nsteps(c))
	case algoTree:
		if c != collAllReduce {
			return 0
		}
		bus := math.Min(0.92*m.ringBus, nch*perChMaxTreeBws[m.arch][bucket])
		switch p {
		case protoLL:
			bus = math.Min(bus/3.8, m.llMax())
		case protoLL128:
			if !m.ll128 {
				return 0
			}
			f := 120.0 / 128.0
			if m.nodes == 1 {
				f = 7.0 / 9.0
			}
			bus = math.Min(bus*f, nch*perChMaxTreeLL128Bws[m.arch][bucket])
		}
		return bus * 0.5
	case algoNVLS:
		if !m.nvls || p != protoSimple || c == collBroadcast || c == collReduce {
			return 0
		}
		nch := math.Min(32, n)
		bwIntra := m.nvlinkGBs / (n + 1)
		bwInter := math.Min(2*bwIntra, nvlsMaxChannelGBs[m.arch])
		intra := bwIntra * nvlsEfficiency[m.arch] * (nch - 1) / nch
		if c == collAllReduce {
			intra *= 2
		} else {
			intra *= float64(m.ppn-1) / float64(m.ppn)
		}
		bus := nch * math.Min(intra, bwInter)
		if c == collAllReduce {
			return bus * n / float64(m.nsteps(c))
		}
		return bus
	}
	return 0
}

// latency returns NCCL's latency in µs for (coll, algo, proto).
func (m *model) latency(c collKind, a, p int) float64 {
	switch a {
	case algoNVLS:
		return hwLat[hwNVLink][algoNVLS][p]
	case algoTree:
		intra, inter := hwLat[m.intraHW][algoTree][p], hwLat[hwNet][algoTree][p]
		return baseLat[algoTree][p] + 2*(float64(m.ppn-1)*intra+float64(log2i(m.nodes))*inter)
	}
	lat := baseLat[algoRing][p]
	hw := m.intraHW
	if m.nodes > 1 {
		hw = hwNet
	}
	if c == collBroadcast || c == collReduce {
		if m.sameChannels {
			return lat + hwLat[hw][algoRing][p]
		}
		step := hwLat[hw][algoRing][p]
		if p == protoSimple {
			step = hwLat[hw][algoTree][p]
		}
		return lat + float64(m.nsteps(c))*step
	}
	intra, inter := hwLat[m.intraHW][algoRing][p], hwLat[hwNet][algoRing][p]
	inters := 0
	if m.nodes > 1 {
		overhead := 1.0
		if m.amd {
			overhead = 2.0
		}
		if p == protoSimple {
			overhead *= 3
		}
		intra = math.Max(intra, overhead)
		inters = m.nodes - 1
		if c == collAllReduce {
			inters *= 2
		}
	}
	return lat + float64(m.nsteps(c)-inters)*intra + float64(inters)*inter
}

// choice is the algorithm and protocol the tuner picks, and the time it predicts.
type choice struct {
	algo, proto int
	us          float64
}

func (c choice) String() string { return algoNames[c.algo] + "/" + protoNames[c.proto] }

// collTime predicts a collective's duration for nBytes as NCCL counts them (the whole buffer for
// AllGather and ReduceScatter, one rank's buffer otherwise), taking the fastest (algo, proto) as
// NCCL's tuner does. One rank copies locally at memory speed.
func (m *model) collTime(c collKind, nBytes int64) choice {
	if nBytes == 0 {
		return choice{algo: algoRing, proto: protoSimple} // NCCL returns at once
	}
	if m.n == 1 {
		return choice{algo: algoRing, proto: protoSimple, us: 1 + 2*float64(nBytes)/(1e3*m.memGBs)}
	}
	best := choice{us: -1}
	for a := 0; a < numAlgos; a++ {
		for p := 0; p < numProtos; p++ {
			bw := m.algBw(c, a, p)
			if bw <= 0 {
				continue
			}
			lat := m.latency(c, a, p)
			if logSize := log2i(int(nBytes >> 6)); a == algoTree && logSize < 24 {
				bw *= treeCorrectionFactor[p][logSize]
			}
			// The ring plateau; NCCL runs two channels per ring on several nodes.
			if a == algoRing && p == protoSimple && m.nodes > 1 && c == collAllReduce &&
				float64(nBytes)/float64(2*m.rings*m.n) >= 64 {
				if m.arch >= 1 {
					lat *= 1.4
				} else {
					lat *= 1.9
				}
			}
			t := lat + float64(nBytes)/(1000*bw)
			if best.us < 0 || t < best.us {
				best = choice{algo: a, proto: p, us: t}
			}
		}
	}
	return best
}

// p2pTime predicts point-to-point transfers (send/recv, all-to-all) running together: NCCL's
// Ring/Simple base latency plus the longest path's link latencies, then the flows sharing the
// links. One rank copies locally at memory speed.
func (m *model) p2pTime(flows []gpu.Flow, bytes int64) float64 {
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
	return baseLat[algoRing][protoSimple] + lat + m.topo.LinkLoad(flows, m.efficiency)
}

// log2i is floor(log2(n)), 0 for n < 2.
func log2i(n int) int { return max(bits.Len(uint(max(n, 1)))-1, 0) }
