package sim

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpubench/gpubench/internal/gpu"
)

// NCCL's algorithms and protocols, in its order (src/include/device.h, src/init.cc).
const (
	algoTree = iota
	algoRing
	algoCollNetDirect
	algoCollNetChain
	algoNVLS
	algoNVLSTree
	algoPAT
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

var algoNames [numAlgos]string = gpu.NCCLAlgorithms
var protoNames [numProtos]string = gpu.NCCLProtocols

type collKind int

// The collectives, in NCCL's function order (ncclFuncStr).
const (
	collBroadcast collKind = iota
	collReduce
	collAllGather
	collReduceScatter
	collAllReduce
	numColls
)

var collNames = [numColls]string{"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"}

// baseLat and hwLat are NCCL's latency tables in µs (ncclTunerConstantsDefaults).
var baseLat = [numAlgos][numProtos]float64{
	algoTree: {6.8, 14.0, 8.4}, algoRing: {6.6, 14.0, 8.4},
	algoCollNetDirect: {0, 0, 0}, algoCollNetChain: {0, 0, 0},
	algoNVLS: {0, 0, 0}, algoNVLSTree: {0, 0, 0},
	algoPAT: {8.0, 8.0, 8.0},
}

var hwLat = [3][numAlgos][numProtos]float64{
	hwNVLink: {algoTree: {.6, 1.25, 4.0}, algoRing: {.6, 1.9, 3.4}, algoCollNetDirect: {0, 0, 3.7}, algoCollNetChain: {0, 0, 2.8},
		algoNVLS: {0, 0, 25}, algoNVLSTree: {0, 0, 25}, algoPAT: {0, 0, 4.0}},
	hwPCI: {algoTree: {1.0, 1.9, 4.0}, algoRing: {1.0, 2.5, 5.7}, algoCollNetDirect: {0, 0, 3.7}, algoCollNetChain: {0, 0, 2.8},
		algoNVLS: {0, 0, 0}, algoNVLSTree: {0, 0, 0}, algoPAT: {0, 0, 4.0}},
	hwNet: {algoTree: {5.0, 8.5, 14}, algoRing: {2.7, 4.0, 14.0}, algoCollNetDirect: {0, 0, 31}, algoCollNetChain: {0, 0, 30},
		algoNVLS: {0, 0, 18}, algoNVLSTree: {0, 0, 20.9}, algoPAT: {0, 0, 14}},
}

// llMaxBws[row][nodes bucket]: the LL protocol's bandwidth cap in GB/s. On one node the row is
// the architecture (Volta, Ampere, Hopper, Blackwell); on several, 0 for Intel CPUs, 1 for AMD.
var llMaxBws = [4][3]float64{{39, 39, 20.4}, {87.7, 22.5, 19.0}, {141, 45, 35}, {282, 90, 70}}

// Per-channel bandwidth caps in GB/s, [arch][nodes bucket: 1, 2, 3 or more nodes].
var perChMaxRingLL128Bws = [4][3]float64{{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {40, 40, 40}}
var perChMaxTreeLL128Bws = [4][3]float64{{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}}
var perChMaxTreeBws = [4][3]float64{{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}}
var perChMaxNVLSTreeBws = [4][3]float64{{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0, 57.7, 45.5}, {0, 96.0, 80.0}}

// nvlsEfficiency by architecture (Volta, Ampere, Hopper, Blackwell).
var nvlsEfficiency = [4]float64{0, 0, 0.85, 0.74}

// treeCorrectionFactor[proto][log2(bytes/64)]: NCCL's correction of Tree's bandwidth at mid sizes.
var treeCorrectionFactor = [numProtos][24]float64{
	{1, 1, 1, 1, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1, 1, 1, 1, 1},
	{1, 1, 1, 1, 1, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1, 1, 1},
	{.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9},
}

// Candidate is one (algorithm, protocol) NCCL's tuner weighs for a collective of a size: its
// latency, its bandwidth (algorithm bandwidth, GB/s) and the time they make.
type Candidate struct {
	Algo, Proto string
	Channels    int
	LatencyUS   float64
	AlgGBs      float64
	TimeUS      float64
	// SimLatencyUS and SimUS are the latency and time the simulated machine takes: NCCL's,
	// with the fabric's own latency in place of the InfiniBand latency NCCL's tables assume.
	SimLatencyUS float64
	SimUS        float64
	// FillUS is the part of SimUS that a pipeline of stages takes to drain, which NCCL's
	// estimate leaves out (nvlsFillUS).
	FillUS float64
	// blockBound: the simulated call runs at what its channels copy (ringBlockGBs), below what
	// the links carry.
	blockBound bool
	// fewerCh: the simulated call runs on fewer channels than NCCL's figures count (fewerChannels).
	fewerCh bool
	// fabricLat: the simulated latency holds the fabric's own (its kind's latency, the switches
	// between its leaves, its per-message cost), not NCCL's tables'; pluginLat: NCCL's estimate
	// holds the net plugin's reported latency, which the wire does not pay.
	fabricLat, pluginLat bool
}

// Decision is what the tuner decides for one collective and size, and why: every candidate it
// weighed, fastest first; the first is NCCL's choice.
type Decision struct {
	Coll       string
	Bytes      int64
	Ranks      int
	Nodes      int
	Candidates []Candidate
	// RingLimit is the kind of link that bounds the ring's bandwidth.
	RingLimit string
}

// Chosen is the candidate NCCL runs.
func (d Decision) Chosen() Candidate { return d.Candidates[0] }

// candidate evaluates (algorithm a, protocol p) for collective c, as ncclTopoTuneModel sets its
// bandwidth and latency and ncclTopoGetAlgoTime its time; ok is false where NCCL would not run it.
func (m *model) candidate(c collKind, a, p int, nBytes int64) (Candidate, bool) {
	// bw is NCCL's estimate, simBw what the links carry (bandwidthOf).
	bw, simBw := m.bandwidth(c, a, p), m.bandwidthOf(c, a, p, false)
	lat := m.latency(c, a, p, 0, m.pluginLatUS, m.netOverhead())
	simLat := m.latency(c, a, p, m.netExtraUS, 0, m.msgUS) + m.fabricUS(c, a)
	tables := m.latency(c, a, p, 0, 0, m.netOverhead()) // NCCL's tables alone
	fabricLat, pluginLat := simLat != tables, lat != tables
	if bw <= 0 || !m.env.enabled(c, a, p) || !m.algoOK(c, a) || !m.protoOK(c, a, p) {
		return Candidate{}, false
	}
	blockBound := false
	if most := m.ringBlockGBs(c, a, p, nBytes); most > 0 && most < simBw {
		simBw, blockBound = most, true
	}
	logSize := log2i(int(nBytes >> 6))
	if (a == algoTree && c == collAllReduce && nBytes>>6 > 0 && logSize < 23) ||
		(a == algoNVLSTree && c == collAllReduce && nBytes>>6 > 0 && logSize < 24 && m.arch >= 3 && !m.arm) { // NVLSTree: x86 only, as NCCL
		bw *= treeCorrectionFactor[p][logSize]
		simBw *= treeCorrectionFactor[p][logSize]
	}
	if a == algoRing && p == protoSimple && m.nodes > 1 && c == collAllReduce &&
		float64(nBytes)/float64(m.commChannels()*m.n) >= 64 { // NCCL: comm->nChannels
		plateau := 1.4 // the plateau effect of the ring
		if m.cc < 8 {
			plateau = 1.9
		}
		lat, simLat = lat*plateau, simLat*plateau
	}
	bwUS, simBwUS, fillUS := float64(nBytes)/(1000*bw), float64(nBytes)/(1000*simBw), 0.0
	if a == algoNVLS && m.nodes == 1 && c == collAllReduce {
		fillUS = m.nvlsFillUS(nBytes, simBwUS)
		simBwUS += fillUS
	}

	if cal := m.topo.Calibration; cal != nil { // the machine's own figures, which NCCL does not know
		if x, ok := cal.Algorithms[algoNames[a]+"/"+protoNames[p]]; ok {
			simLat, simBwUS = max(0, simLat+x.LatencyUS), simBwUS/x.Bandwidth
		}
	}
	return Candidate{Algo: algoNames[a], Proto: protoNames[p], Channels: m.runChannels(a, p, nBytes),
		LatencyUS: lat, AlgGBs: bw, TimeUS: lat + bwUS, SimLatencyUS: simLat, SimUS: simLat + simBwUS, FillUS: fillUS,
		blockBound: blockBound, fewerCh: m.fewerChannels(c, a, p), fabricLat: fabricLat, pluginLat: pluginLat}, true
}

// ringBlockGBs is the most a Simple ring of nBytes moves in the simulated call, as algorithm
// bandwidth: each channel NCCL runs it on is one thread block copying, and a block carries about
// one NVLink's worth by NCCL's figure (nvlinkPerLinkGBs), no more. NCCL launches two blocks a
// link "in order to saturate the BW" (NVIDIA/nccl#1703), and its tuner holds every other Simple
// and LL128 channel of Hopper to 36-41 GB/s a search channel, which runs as two blocks
// (tuning.cc, perChMaxTreeBws, perChMaxRingLL128Bws), where it leaves the Simple ring unbounded.
// Through an NVSwitch a block's traffic spreads over all of its GPU's links, so the bound shows
// only where the links outrun the blocks: 8 H100 a node over 8 NDR NICs run 16 blocks, 330 GB/s
// busbw where the NICs carry 384. 0 where it does not apply: not a Simple ring, or a ring not
// over NVLink (PCIe boxes, whose blocks no NVLink figure describes).
func (m *model) ringBlockGBs(c collKind, a, p int, nBytes int64) float64 {
	if a != algoRing || p != protoSimple || m.intraHW != hwNVLink {
		return 0
	}
	bus := float64(m.runChannels(a, p, nBytes)) * nvlinkPerLinkGBs(m.cc)
	return bus * float64(m.n) / float64(m.nsteps(c))
}

// nvlsStages are the warp groups of a channel of NCCL's NVLS all-reduce on one NVLink domain
// (all_reduce.h, RunWorkColl NVLS, oneNode): scatter (the input into each head's buffer), reduce
// (through the switch, multimem), gather (the result into the output). Each hands the next one
// loop of nHeads chunks per step (ProtoSimple<1, 1>), so the call is a pipeline of three stages.
const nvlsStages = 3

// nvlsFillUS is how much longer than its bandwidth time bwUS the NVLS all-reduce of nBytes on
// one domain takes: a pipeline of nvlsStages ends (stages - 1) loop-times after its first stage
// has passed the last loop, a loop being heads × chunk bytes a channel (the whole call when it
// is smaller) and taking its share of bwUS. NCCL's chunk shrinks with the size (nvlsChunk), so
// the fill is the largest part of the time at mid sizes: with 8 H100, 2 loop-times of 7.5 µs
// at 4 MiB, 30 µs at 64 MiB.
func (m *model) nvlsFillUS(nBytes int64, bwUS float64) float64 {
	if nBytes <= 0 {
		return 0
	}
	ops := int64(m.nvlsRunChannels(algoNVLS) * m.graphs[algoNVLS].nChannels) // channels × heads
	loop := min(ops*nvlsChunk(nBytes, ops), nBytes)
	return (nvlsStages - 1) * bwUS * float64(loop) / float64(nBytes)
}

// nvlsChunk is the chunk NCCL's NVLS all-reduce runs nBytes with on ops concurrent (channel,
// head) pairs (enqueue.cc, calcCollChunking): NCCL_NVLS_CHUNKSIZE, 128 KiB, then 64 KiB under 64
// loops of ops chunks, 32 KiB under 8 and 16 KiB under 2.
func nvlsChunk(nBytes, ops int64) int64 {
	chunk := int64(128 << 10)
	for _, s := range [...]struct{ loops, chunk int64 }{{64, 64 << 10}, {8, 32 << 10}, {2, 16 << 10}} {
		if nBytes < s.loops*ops*chunk {
			chunk = s.chunk
		}
	}
	return chunk
}

// NCCL's threads a channel and bytes a thread before a launch takes more of either
// (src/include/device.h, src/include/comm.h, tuning.cc ncclTopoTuneModel).
const (
	maxThreads       = 640 // NCCL_MAX_NTHREADS: NVLS, CollNet; NCCL_LL128_MAX_NTHREADS alike
	maxThreadsSimple = 512 // NCCL_SIMPLE_MAX_NTHREADS; NCCL_LL_MAX_NTHREADS alike
	pciGBs           = 12  // PCI_BW: a ring slower than this runs Simple on 256 threads
)

// runChannels is how many channels NCCL launches a collective of nBytes on with (a, p)
// (enqueue.cc, topoGetAlgoInfo): NVLS and NVLSTree their own count (nvlsRunChannels); CollNet
// Direct the communicator's, fewer while nBytes is under channels × heads × threads × 512, down
// to 16 and then 8, 4, 2, 1, halving the 512 as it passes 24, 12, 6 and 3; PAT the communicator's;
// Ring, Tree and CollNet Chain the communicator's, one fewer while nBytes is under channels ×
// threads × bytes a thread (Simple 64, LL128 8, LL 8, the ring's LL 8 a rank, CollNet 512).
func (m *model) runChannels(a, p int, nBytes int64) int {
	nc := m.commChannels()
	switch a {
	case algoNVLS, algoNVLSTree:
		return m.nvlsRunChannels(a)
	case algoPAT:
		return nc
	case algoCollNetDirect:
		thr := int64(512)
		more := true
		for sw := 16; sw >= 1 && more; sw /= 2 {
			for {
				more = nBytes < int64(nc*maxThreads*m.graphs[algoCollNetDirect].nChannels)*thr
				if !more || nc <= sw {
					break
				}
				if nc == sw+sw/2 {
					thr /= 2
				}
				nc--
			}
		}
		return nc
	}
	nt, thr := maxThreadsSimple, int64(64)
	switch {
	case a == algoCollNetChain:
		nt, thr = maxThreads, 512
	case p == protoLL128:
		nt, thr = maxThreads, 8
	case p == protoLL:
		thr = 8
		if a == algoRing {
			thr *= int64(m.n)
		}
	case a == algoRing && m.graphs[algoRing].bwIntra*float64(m.graphs[algoRing].nChannels) <= pciGBs:
		nt = 256
	}
	for nc >= 2 && nBytes < int64(nc*nt)*thr {
		nc--
	}
	return nc
}

// nvlsRunChannels is NCCL's NVLS channel count (nvls.cc, ncclNvlsTuning): 16 on Hopper; on
// Blackwell 24 in one NVLink domain and 32 across domains, where with NICs of 48 GB/s (400
// Gb/s) or more it is 32 on two domains and otherwise 24 (ncclNvlsTreeSm100Tuning; 32 again on
// NICs of 96 and more past 8 GPUs a domain); across domains NVLS itself takes no more than the
// communicator's channels.
func (m *model) nvlsRunChannels(a int) int {
	nv := 16
	if m.cc >= 10 {
		nv = 24
		if m.nodes > 1 {
			nv = 32
			switch nic := m.netGBs / float64(max(m.heads, 1)); {
			case m.nodes == 2 && nic >= 48:
			case nic >= 96 && m.ppn > 8:
			case nic >= 48:
				nv = 24
			}
		}
	}
	if a == algoNVLS && m.nodes > 1 {
		return min(nv, m.commChannels())
	}
	return nv
}

// algoOK applies NCCL's rules for which algorithms serve which collectives on this machine.
func (m *model) algoOK(c collKind, a int) bool {
	switch {
	case (c == collBroadcast || c == collReduce) && a != algoRing:
		return false
	case (c == collAllGather || c == collReduceScatter) && a != algoPAT && a != algoRing && a != algoNVLS && a != algoCollNetDirect:
		return false
	case c == collAllReduce && a == algoPAT:
		return false
	case a == algoNVLSTree && m.nodes == 1:
		return false
	case (a == algoCollNetDirect || a == algoCollNetChain) && (!m.collnet || m.maxLocal > maxDirectArity+1):
		return false // NCCL: "CollNetDirect is only supported for up to 8 local GPUs", Chain alike (enqueue.cc)
	case (a == algoNVLS || a == algoNVLSTree) && c != collAllReduce && m.maxLocal > maxNVLSArity:
		return false // NCCL serves all-gather and reduce-scatter by NVLS on at most 32 GPUs a node (enqueue.cc)
	case a == algoCollNetDirect && !m.nvs: // NCCL: "Disable CollNet+Direct if not on an NVSwitch system"
		return false
	case a == algoNVLS && m.nodes > 1 && !m.collnet: // NVLS across nodes runs with CollNet
		return false
	case (a == algoNVLS || a == algoCollNetDirect) && (c == collAllGather || c == collReduceScatter) && m.nodes > 1 &&
		(!m.collnet || m.ppn > float64(m.heads)):
		return false
	case a == algoPAT && (m.ppn != 1 || m.cc < 6):
		return false
	}
	return true
}

// protoOK: NVLS, NVLSTree, CollNet and PAT run only Simple; LL128 is on by default only over
// NVLink from Volta on (NCCL's LL128 rule, its same-capability and PXN clauses being met by the
// presets).
func (m *model) protoOK(c collKind, a, p int) bool {
	switch {
	case p != protoSimple && (a == algoNVLS || a == algoNVLSTree || a == algoCollNetDirect || a == algoCollNetChain || a == algoPAT):
		return false
	case p == protoLL128 && !m.ll128 && !m.env.protoForce[c][protoLL128]:
		return false
	}
	return true
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

// bandwidth is ncclTopoTuneModel's bandwidth for (c, a, p), as algorithm bandwidth in GB/s; 0 where
// the algorithm has no graph here.
func (m *model) bandwidth(c collKind, a, p int) float64 { return m.bandwidthOf(c, a, p, true) }

// bandwidthOf is bandwidth; with searchCap false, what the machine moves rather than what NCCL's
// tuner expects of it: NVLS on one NVLink domain is not held to its channels' bwInter, which there
// is no link but the top of NCCL's search speed table (docs/model.md, "NVLS on one node"), and a
// graph whose search speed falls short of its links runs at the links' (searchGraph.linksIntra).
func (m *model) bandwidthOf(c collKind, a, p int, searchCap bool) float64 {
	gr := m.graphs[a]
	if gr.nChannels == 0 {
		return 0
	}
	if !searchCap && gr.linksIntra > 0 {
		gr.bwIntra = gr.linksIntra
	}
	if !searchCap && gr.linksInter > 0 {
		gr.bwInter = gr.linksInter
	}
	nch := float64(gr.nChannels)
	bucket := min(m.nodes, 3) - 1
	bw := gr.bwInter
	if m.nodes <= 2 || a == algoCollNetDirect || a == algoCollNetChain {
		bw = gr.bwIntra
	}
	if a == algoNVLS || a == algoNVLSTree {
		if gr.nChannels < 2 {
			return 0
		}
		intra := gr.bwIntra * nvlsEfficiency[m.arch] * (nch - 1) / nch
		if c == collAllReduce {
			intra *= 2
		} else {
			intra *= (m.ppn - 1) / m.ppn
		}
		inter := math.Inf(1)
		if m.nodes > 1 {
			inter = gr.bwInter
			if m.nodes <= 2 && a == algoNVLSTree {
				inter *= 2
			}
			if a == algoNVLSTree && !searchCap {
				// What the NICs carry: a domain of a two-domain tree sends the other its whole
				// partial result and receives the other's, one of a double binary tree's twice
				// that, so the algorithm bandwidth is nch × bwInter, or half of it. NCCL's
				// estimate, a ring's bus bandwidth, gives n/(n-1) of that.
				inter *= float64(m.n-1) / float64(m.n)
			}
		} else if searchCap {
			// NCCL's search raises a domain's bwInter one speed of its table at a time while it
			// is under twice bwIntra (search.cc, pass 2), so to the first at or above that, or
			// the table's top.
			speeds := searchSpeedsIntra[m.arch]
			i := len(speeds) - 1
			for i > 0 && speeds[i] < 2*gr.bwIntra*(1-1e-9) {
				i--
			}
			inter = speeds[i]
		}
		bw = math.Min(intra, inter)
		if a == algoNVLSTree {
			bw = math.Min(bw, perChMaxNVLSTreeBws[m.arch][bucket])
		}
	}
	bus := nch * bw
	switch {
	case a == algoRing && p == protoLL:
		bus = math.Min(m.llMax(), 0.5*bus)
	case a == algoRing && p == protoLL128:
		bus = math.Min(0.92*bus, nch*perChMaxRingLL128Bws[m.arch][bucket])
	}
	if a == algoTree && c == collAllReduce {
		bus = math.Min(0.92*bus, nch*perChMaxTreeBws[m.arch][bucket])
	}
	switch {
	case a == algoTree && p == protoLL:
		bus = math.Min(bus/3.8, m.llMax())
	case a == algoTree && p == protoLL128:
		f := 120.0 / 128.0
		if m.nodes == 1 {
			f = 7.0 / 9.0
		}
		bus = math.Min(bus*f, nch*perChMaxTreeLL128Bws[m.arch][bucket])
	}
	if a == algoTree && m.minLocal == 1 && m.nodes > 1 {
		// NCCL's tree search takes its simple TREE pattern on a node of one GPU (search.cc),
		// which its tuner prices at .85 (tuning.cc, maxTreePattern).
		bus *= .85
	}
	switch {
	case a == algoPAT:
		bus *= 0.75
	case a == algoCollNetDirect && (c == collAllGather || c == collReduceScatter):
		bus = m.ppn * math.Min(gr.bwIntra, gr.bwInter*0.9)
	case a == algoCollNetDirect:
		factor := m.ppn / nch // GPUs per NIC
		factor -= (factor - 1) / 2
		bus /= factor
		if m.cc >= 9 {
			bus *= .85
		}
	}
	if !searchCap && m.fewerChannels(c, a, p) {
		bus *= float64(m.commChannels()) / float64(m.searchCommChannels())
	}
	// Bus bandwidth to algorithm bandwidth.
	if a != algoRing && (c == collAllGather || c == collReduceScatter) {
		return bus
	}
	if a == algoRing || a == algoNVLS || a == algoNVLSTree {
		return bus * float64(m.n) / float64(m.nsteps(c))
	}
	return bus * 0.5
}

// fewerChannels says whether a Ring, Tree or PAT call runs on fewer channels than NCCL's search
// found (NCCL_MAX_NCHANNELS: the communicator's, connect.cc), each carrying its share of the
// search's bandwidth; more than the search's carry no more than the links. A Simple ring over
// NVLink is held to its blocks instead (ringBlockGBs).
func (m *model) fewerChannels(c collKind, a, p int) bool {
	return (a == algoRing || a == algoTree || a == algoPAT) && m.commChannels() < m.searchCommChannels() &&
		m.ringBlockGBs(c, a, p, math.MaxInt64) == 0
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

// latency is ncclTopoTuneModel's latency in µs for (c, a, p) with the net plugin's reported
// latency plugin (NCCL's graph latencyInter), with netExtra µs added to every step between
// nodes and overhead the cost of posting a message to the network, which bounds every step of a
// ring across nodes: NCCL's own estimate with (0, the plugin's, netOverhead), the simulated
// call's with (the fabric's extra, 0, its per-message cost).
func (m *model) latency(c collKind, a, p int, netExtra, plugin, overhead float64) float64 {
	intraHW := m.intraHW
	if a == algoNVLS || a == algoNVLSTree {
		intraHW = hwNVLink
	}
	intra := hwLat[intraHW][a][p]
	inter := hwLat[hwNet][a][p] + netExtra
	if m.ppn == 1 { // latencies are fully exposed: NCCL takes the Tree network latency
		inter = hwLat[hwNet][algoTree][p] + netExtra
	}
	inter += plugin
	if p == protoSimple { // NCCL: "Also add the flush extra latency"
		inter += plugin
	}
	lat := baseLat[a][p]
	ppn := m.n / m.nodes // NCCL's latencies divide the ranks by the nodes in integers (nRanks / nNodes)
	switch a {
	case algoRing:
		hw := intraHW
		if m.nodes > 1 {
			hw = hwNet
		}
		if c == collBroadcast || c == collReduce {
			if m.sameCh {
				return lat + hwLat[hw][algoRing][p]
			}
			step := hwLat[hw][algoRing][p]
			if p == protoSimple { // NCCL: "some chunk latency, waiting for proper chunk modeling"
				step = hwLat[hw][algoTree][p]
			}
			return lat + float64(m.nsteps(c))*step + float64(m.nodes-1)*netExtra
		}
		interSteps := 0
		if m.nodes > 1 {
			if p == protoSimple { // NCCL's net overhead per step, x3 for Simple
				overhead *= 3
			}
			intra = math.Max(intra, overhead)
			interSteps = m.nodes - 1
			if c == collAllReduce {
				interSteps *= 2
			}
		}
		return lat + float64(m.nsteps(c)-interSteps)*intra + float64(interSteps)*inter
	case algoTree:
		if c == collAllReduce {
			lat += 2 * (float64(ppn-1)*intra + float64(log2i(m.nodes))*inter)
		}
	case algoCollNetDirect:
		lat += 2*(float64(min(1, ppn-1))*intra+float64(ppn-1)*0.4) + inter
	case algoCollNetChain:
		lat += 2*float64(ppn-1)*intra + inter
	case algoNVLS:
		lat = intra
		if m.nodes > 1 {
			lat += inter
		}
	case algoNVLSTree:
		lat += intra + 2*float64(log2i(m.nodes))*inter
	case algoPAT:
		if c == collAllGather || c == collReduceScatter {
			lat += float64(log2i(m.nodes))*(inter/3.5) + float64(m.n)*2.8
		}
	}
	return lat
}

// netOverhead is NCCL's cost of posting one message to the network, µs (tuning.cc,
// getNetOverhead: "Network post overhead"): 1 on Intel and other hosts, 2 on AMD x86.
func (m *model) netOverhead() float64 {
	if m.amd {
		return 2
	}
	return 1
}

// fabricUS is what the switches between the fabric's leaves add to a call of algorithm a, which
// NCCL's latency tables, measured under one switch, leave out: crossUS for each of the call's
// messages on its way that goes from one leaf to another. A ring meets the nodes in order, so one
// lap crosses between leaves once a leaf (a chain, broadcast's and reduce's, once fewer); a tree's
// levels above one leaf's nodes, log2 of the leaves, are crossed on the way up and again down
// (PAT's steps once); CollNet and NVLS reach the switches' reduction once.
func (m *model) fabricUS(c collKind, a int) float64 {
	if m.leaves < 2 || m.crossUS == 0 {
		return 0
	}
	leaves := float64(m.leaves)
	switch a {
	case algoRing:
		switch c {
		case collBroadcast, collReduce:
			return (leaves - 1) * m.crossUS
		case collAllReduce:
			return 2 * leaves * m.crossUS
		}
		return leaves * m.crossUS
	case algoTree, algoNVLSTree:
		return 2 * float64(log2i(m.leaves)) * m.crossUS
	case algoPAT:
		return float64(log2i(m.leaves)) * m.crossUS
	}
	return m.crossUS
}

// decide is NCCL's choice for collective c of nBytes (the whole buffer for AllGather and
// ReduceScatter, one rank's buffer otherwise; ncclFuncMaxSendRecvCount), with every candidate,
// for a sum of floats (nccl-tests' default).
func (m *model) decide(c collKind, nBytes int64) Decision {
	return m.decideOp(c, nBytes, gpu.Float, gpu.Sum)
}

// decideOp is decide for a type and reduction op. NCCL runs an average as PreMulSum or
// SumPostDiv, which its PAT reduce-scatter does not serve (enqueue.cc, updateCollCostTable), and
// reduces over NVLS only what the NVLink switches can (nvlsServes).
func (m *model) decideOp(c collKind, nBytes int64, dt gpu.DType, op gpu.RedOp) Decision {
	d := Decision{Coll: collNames[c], Bytes: nBytes, Ranks: m.n, Nodes: m.nodes, RingLimit: m.limit}
	switch {
	case nBytes == 0: // NCCL returns at once
		d.Candidates = []Candidate{{Algo: "none", Proto: "none"}}
		return d
	case m.n == 1: // a local copy at memory speed
		us := 1 + 2*float64(nBytes)/(1e3*m.memGBs)
		d.Candidates = []Candidate{{Algo: "copy", Proto: "none", LatencyUS: 1, AlgGBs: m.memGBs / 2, TimeUS: us, SimLatencyUS: 1, SimUS: us}}
		return d
	}
	for a := range numAlgos {
		if a == algoPAT && c == collReduceScatter && op == gpu.Avg ||
			(a == algoNVLS || a == algoNVLSTree) && c != collAllGather && !nvlsServes(dt, op) {
			continue
		}
		for p := range numProtos {
			if cand, ok := m.candidate(c, a, p, nBytes); ok {
				d.Candidates = append(d.Candidates, cand)
			}
		}
	}
	// The fastest first; ties go to the earlier pair, as NCCL's strict-less minimum.
	slices.SortStableFunc(d.Candidates, func(x, y Candidate) int {
		switch {
		case x.TimeUS < y.TimeUS:
			return -1
		case x.TimeUS > y.TimeUS:
			return 1
		}
		return 0
	})
	if len(d.Candidates) == 0 { // everything disabled by NCCL_ALGO/NCCL_PROTO: NCCL fails too
		d.Candidates = []Candidate{{Algo: "none", Proto: "none", TimeUS: math.Inf(1), SimUS: math.Inf(1)}}
	}
	return d
}

// choice is the algorithm and protocol the tuner picks, and the time it predicts.
type choice struct {
	algo, proto string
	us          float64
}

func (c choice) String() string { return c.algo + "/" + c.proto }

// collTime predicts a collective's duration for nBytes, taking the fastest (algo, proto) as
// NCCL's tuner does.
func (m *model) collTime(c collKind, nBytes int64) choice {
	best := m.decide(c, nBytes).Chosen()
	return choice{algo: best.Algo, proto: best.Proto, us: best.SimUS}
}

// nvlsServes reports whether NVLS reduces op over dt in the NVLink switches: a sum of 32- and
// 64-bit integers, halves, bfloat16s, floats and doubles, and a min or max of all of those but
// floats and doubles; no product or average, and no 8-bit type (NCCL's ncclNvlsSupported,
// src/include/device.h, which enqueue.cc applies to every collective but AllGather).
func nvlsServes(dt gpu.DType, op gpu.RedOp) bool {
	switch dt {
	case gpu.Int32, gpu.Uint32, gpu.Int64, gpu.Uint64, gpu.Half, gpu.BFloat16:
		return op == gpu.Sum || op == gpu.Min || op == gpu.Max
	case gpu.Float, gpu.Double:
		return op == gpu.Sum
	}
	return false
}

// tunerEnv is how NCCL_* variables steer the tuner, as they steer NCCL.
type tunerEnv struct {
	algo, proto       [numColls][]bool          // nil: all enabled (LL128 as its rule says)
	protoForce        [numColls][numProtos]bool // named in NCCL_PROTO for the collective: on even where its rule says off
	minCh, maxCh      int
	nvls, collnet     bool
	p2pDisable, noPXN bool
	ibDisable         bool                 // NCCL_IB_DISABLE: no IB verbs transport (sockets instead)
	hca               func(id string) bool // NCCL_IB_HCA: the NICs NCCL may use; nil for all
	// Point-to-point: NCCL_NCHANNELS_PER_NET_PEER (0 unset), NCCL_MIN_P2P_NCHANNELS and
	// NCCL_MAX_P2P_NCHANNELS.
	netPeerCh, minP2P, maxP2P int
}

// parseTunerEnv reads the variables the simulator honours; bad values are reported by
// CheckEnv, and here fall back to NCCL's defaults.
func parseTunerEnv(env map[string]string) tunerEnv {
	var e tunerEnv
	if v, ok := env["NCCL_ALGO"]; ok {
		e.algo, _ = parseNCCLList(v, algoNames[:])
	}
	if v, ok := env["NCCL_PROTO"]; ok {
		var force [numColls][]bool
		e.proto, _ = parseNCCLList(v, protoNames[:])
		force, _ = parseNCCLList(v, protoNames[:])
		for c := range numColls {
			for p := range numProtos {
				e.protoForce[c][p] = force[c] != nil && force[c][p]
			}
		}
	}
	// NCCL_MIN_NRINGS and NCCL_MAX_NRINGS, the older names, count where the new ones are unset
	// (connect.cc, ncclMinNchannels and ncclMaxNchannels), and both are held to NCCL's range.
	e.minCh = int(min(max(envNum(env, "NCCL_MIN_NCHANNELS", envNum(env, "NCCL_MIN_NRINGS", 0)), 0), maxChannels))
	e.maxCh = int(min(max(envNum(env, "NCCL_MAX_NCHANNELS", envNum(env, "NCCL_MAX_NRINGS", maxChannels)), 1), maxChannels))
	e.nvls = envNum(env, "NCCL_NVLS_ENABLE", 2) != 0       // 2, NCCL's default: where the GPUs have it
	e.collnet = envNum(env, "NCCL_COLLNET_ENABLE", 0) == 1 // enqueue.cc takes CollNet where its support is 1
	e.p2pDisable = envNum(env, "NCCL_P2P_DISABLE", 0) == 1 // paths.cc, ncclGetLevel: "disable == 1"
	e.noPXN = envNum(env, "NCCL_PXN_DISABLE", 0) == 1      // paths.cc: "ncclPxnDisable(comm) != 1" keeps PXN
	e.ibDisable = envNum(env, "NCCL_IB_DISABLE", 0) != 0   // net_ib/init.cc
	// init.cc leaves NCCL_NCHANNELS_PER_NET_PEER unset at 0 or less; paths.cc bounds the
	// communicator's point-to-point channels by the other two.
	e.netPeerCh = int(min(max(envNum(env, "NCCL_NCHANNELS_PER_NET_PEER", 0), 0), maxChannels))
	e.minP2P = int(min(envNum(env, "NCCL_MIN_P2P_NCHANNELS", 1), maxChannels))
	e.maxP2P = int(max(envNum(env, "NCCL_MAX_P2P_NCHANNELS", maxChannels), 1))
	if v := strings.TrimSpace(env["NCCL_IB_HCA"]); v != "" {
		e.hca = hcaFilter(v)
	}
	return e
}

// hcaFilter reads NCCL_IB_HCA as NCCL's user guide ("Environment Variables", NCCL_IB_HCA) gives
// it: NIC names separated by commas, each with an optional :port (ignored here), matched as
// prefixes; a leading = matches them exactly, and a leading ^ (before any =) excludes them
// instead ("^=mlx5_1,mlx5_4").
func hcaFilter(v string) func(id string) bool {
	exclude := strings.HasPrefix(v, "^")
	v = strings.TrimPrefix(v, "^")
	exact := strings.HasPrefix(v, "=")
	v = strings.TrimPrefix(v, "=")
	var names []string
	for _, n := range strings.Split(v, ",") {
		if n, _, _ = strings.Cut(strings.TrimSpace(n), ":"); n != "" {
			names = append(names, n)
		}
	}
	return func(id string) bool {
		for _, n := range names {
			if id == n || !exact && strings.HasPrefix(id, n) {
				return !exclude
			}
		}
		return exclude
	}
}

// envNum reads an integer variable as NCCL reads it (src/misc/param.cc, ncclLoadParam): unset or
// empty is def, and the number is C's strtoll in base 0, so 0x10 is 16 and 010 is 8. A value that
// is not a whole number, which CheckEnv refuses, is def too.
func envNum(env map[string]string, name string, def int64) int64 {
	if n, ok, err := cNumber(env[name]); ok && err == nil {
		return n
	}
	return def
}

// cNumber reads s as C's strtoll(s, NULL, 0) does a whole number: an optional sign, then hex
// after 0x, octal after a leading 0, decimal otherwise; spaces around it are ignored. ok is false
// for an empty s; err is set where strtoll would stop before the end, or overflow.
func cNumber(s string) (n int64, ok bool, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false, nil
	}
	digits, neg := s, false
	if digits[0] == '+' || digits[0] == '-' {
		digits, neg = digits[1:], digits[0] == '-'
	}
	base := 10
	switch {
	case len(digits) > 2 && (digits[:2] == "0x" || digits[:2] == "0X"):
		digits, base = digits[2:], 16
	case len(digits) > 1 && digits[0] == '0':
		digits, base = digits[1:], 8
	}
	u, err := strconv.ParseUint(digits, base, 63)
	if err != nil {
		return 0, true, fmt.Errorf("not a whole number")
	}
	if neg {
		return -int64(u), true, nil
	}
	return int64(u), true, nil
}

// EnvVars are the NCCL_* variables the simulator reads (docs/model.md, "NCCL's environment").
var EnvVars = append([]string{"NCCL_ALGO", "NCCL_PROTO", "NCCL_IB_HCA"}, envNumbers...)

// envNumbers are the variables of EnvVars that hold a whole number.
var envNumbers = []string{"NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NRINGS", "NCCL_MAX_NRINGS",
	"NCCL_NVLS_ENABLE", "NCCL_COLLNET_ENABLE", "NCCL_P2P_DISABLE", "NCCL_PXN_DISABLE", "NCCL_IB_DISABLE",
	"NCCL_NCHANNELS_PER_NET_PEER", "NCCL_MIN_P2P_NCHANNELS", "NCCL_MAX_P2P_NCHANNELS"}

// noPerfEffect are NCCL_* variables that name, log, check or identify, and leave what a call
// moves and how fast alone (NCCL's docs/userguide/source/env.rst at 2.30.7, and NCCL_COMM_ID,
// src/bootstrap.cc); NCCL_GRAPH_MIXING_SUPPORT is what gpubench's own -G sets. A set NCCL_*
// variable that is neither one of these nor read by the simulator is Unmodelled.
var noPerfEffect = []string{"NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS",
	"NCCL_DEBUG_TIMESTAMP_FORMAT", "NCCL_DEBUG_TIMESTAMP_LEVELS", "NCCL_SOCKET_IFNAME",
	"NCCL_SOCKET_FAMILY", "NCCL_SOCKET_MAGIC", "NCCL_SOCKET_RETRY_CNT", "NCCL_SOCKET_RETRY_SLEEP_MSEC",
	"NCCL_SOCKET_POLL_TIMEOUT_MSEC", "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT", "NCCL_IB_GID_INDEX",
	"NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE", "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_RETURN_ASYNC_EVENTS",
	"NCCL_OOB_NET_ENABLE", "NCCL_OOB_NET_IFNAME", "NCCL_UID_STAGGER_THRESHOLD", "NCCL_UID_STAGGER_RATE",
	"NCCL_PROFILER_PLUGIN", "NCCL_ENV_PLUGIN", "NCCL_CONF_FILE", "NCCL_TOPO_DUMP_FILE",
	"NCCL_SET_THREAD_NAME", "NCCL_CHECKS_DISABLE", "NCCL_CHECK_POINTERS", "NCCL_CHECK_MODE",
	"NCCL_IGNORE_NET_MISMATCH", "NCCL_IGNORE_COLLNET_MISMATCH", "NCCL_COMM_BLOCKING",
	"NCCL_MULTI_RANK_GPU_ENABLE", "NCCL_MNNVL_UUID", "NCCL_MNNVL_CLIQUE_ID", "NCCL_RAS_ENABLE",
	"NCCL_RAS_ADDR", "NCCL_RAS_TIMEOUT_FACTOR", "NCCL_LAUNCH_RACE_FATAL", "NCCL_IPC_USE_ABSTRACT_SOCKET",
	"NCCL_SET_STACK_SIZE", "NCCL_COMM_ID", "NCCL_GRAPH_MIXING_SUPPORT"}

// Unmodelled is the set NCCL_* variables of env, sorted, that steer NCCL and that the simulator
// does not read (NCCL_BUFFSIZE, NCCL_NTHREADS, NCCL_P2P_LL_THRESHOLD, a tuner plugin, ...), so
// that a user is told its figures are NCCL's without them. nccl-tests' own NCCL_TESTS_* variables
// and the variables of noPerfEffect are not NCCL's tuning, and an empty value is unset, as NCCL
// reads it.
func Unmodelled(env map[string]string) []string {
	var out []string
	for k, v := range env {
		if v != "" && strings.HasPrefix(k, "NCCL_") && !strings.HasPrefix(k, "NCCL_TESTS_") &&
			!slices.Contains(EnvVars, k) && !slices.Contains(noPerfEffect, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// CheckEnv refuses NCCL_* values the simulator cannot read, naming the variable.
func CheckEnv(env map[string]string) error {
	for _, v := range []struct {
		name  string
		elems []string
	}{{"NCCL_ALGO", algoNames[:]}, {"NCCL_PROTO", protoNames[:]}} {
		if s, ok := env[v.name]; ok {
			if _, err := parseNCCLList(s, v.elems); err != nil {
				return fmt.Errorf("%s=%q: %v", v.name, s, err)
			}
		}
	}
	// NCCL reads any whole number and holds it to its range (a channel count from 0 or 1 to 64);
	// what is not one it would read as the digits it starts with, or 0, and here is refused.
	for _, name := range envNumbers {
		if s, ok := env[name]; ok {
			if _, _, err := cNumber(s); err != nil {
				return fmt.Errorf("%s=%q: give a whole number, such as 1 (decimal, or hex after 0x)", name, s)
			}
		}
	}
	return nil
}

// parseNCCLList reads NCCL's list syntax as tuning.cc's parseList does: "ring,tree", "^nvls",
// "allreduce:tree;broadcast:ring", names case-insensitive and nothing trimmed; the result has an
// enabled flag per collective and element (nil rows for collectives it leaves alone). Like
// parseList, it splits with strtok, which skips empty pieces ("ring;", ";;", "ring,,tree",
// "allreduce::ring"), and reads an entry no further than its second ':'.
func parseNCCLList(s string, elems []string) ([numColls][]bool, error) {
	var out [numColls][]bool
	for i, entry := range strtok(s, ";") {
		parts := strtok(entry, ":")
		if len(parts) == 0 {
			return out, fmt.Errorf("entry %q names nothing: give [collective:]names, such as %q", entry, "allreduce:Ring")
		}
		prefix, list := "", parts[0]
		if len(parts) > 1 {
			prefix, list = parts[0], parts[1]
		} else if i > 0 || s[0] == ';' { // parseList's first entry is the one at the string's start
			return out, fmt.Errorf("every entry but the first needs a collective prefix, such as %q", "allreduce:Ring")
		}
		set := true
		if strings.HasPrefix(list, "^") {
			set, list = false, list[1:]
		}
		found := false
		for c := range numColls {
			if prefix != "" && !strings.EqualFold(prefix, collNames[c]) {
				continue
			}
			found = true
			row := make([]bool, len(elems))
			for e := range row {
				row[e] = !set
			}
			for _, name := range strtok(list, ",") {
				k := slices.IndexFunc(elems, func(x string) bool { return strings.EqualFold(x, name) })
				if k < 0 {
					return out, fmt.Errorf("unknown %q: use %s", name, strings.Join(elems, ", "))
				}
				row[k] = set
			}
			out[c] = row
		}
		if !found {
			return out, fmt.Errorf("unknown collective %q: use %s", prefix, strings.Join(collNames[:], ", "))
		}
	}
	return out, nil
}

// strtok splits s at any byte of sep and drops the empty pieces, as C's strtok does.
func strtok(s, sep string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(sep, r) })
}

func (e tunerEnv) enabled(c collKind, a, p int) bool {
	if row := e.algo[c]; row != nil && !row[a] {
		return false
	}
	if row := e.proto[c]; row != nil && !row[p] {
		return false
	}
	return true
}

// clampChannels applies NCCL_MAX_NCHANNELS, then NCCL_MIN_NCHANNELS, as connect.cc does ("We
// permit combining max, then min, to only use the first channels, then duplicate them"): a MIN
// above MAX runs MIN channels.
func (e tunerEnv) clampChannels(n int) int {
	return max(1, min(n, e.maxCh), e.minCh)
}
