package sim

import (
	"math"
	"slices"
	"testing"

	"github.com/gpubench/gpubench/internal/gpu"
)

// topoOf loads a preset or file, as that many of its first node when nodes > 1.
func topoOf(t *testing.T, topo string, nodes int) *gpu.Topology {
	t.Helper()
	tp, err := LoadTopology(topo)
	if err != nil {
		t.Fatal(err)
	}
	if nodes > 1 {
		if tp, err = tp.WithNodes(nodes); err != nil {
			t.Fatal(err)
		}
	}
	return tp
}

// modelOf is the model of the first n GPUs of topoOf(topo, nodes).
func modelOf(t *testing.T, topo string, nodes, n int) *model {
	t.Helper()
	return newModel(topoOf(t, topo, nodes), ranks(n), nil)
}

// oneGPUANode is the model of GPU 0 of each of nodes DGX H100 (--gpus-per-node 1).
func oneGPUANode(t *testing.T, nodes int) *model {
	t.Helper()
	tp, err := topoOf(t, "dgx-h100", nodes).WithGPUsPerNode(1)
	if err != nil {
		t.Fatal(err)
	}
	return newModel(tp, ranks(nodes), nil)
}

// One GPU on each of two DGX H100 reaches two NICs over its PCIe switch, and its PCIe link
// carries no more than one: the rings leave by its own NIC alone (gpu.BestRingFlows), one ring
// at 48 GB/s, as NCCL keeps one channel at full speed over two at half.
func TestOneGPUANodeRings(t *testing.T) {
	t.Parallel()
	if m := oneGPUANode(t, 2); m.rings != 1 || math.Abs(m.ringBus-48) > 0.05 {
		t.Errorf("one GPU a node: %d rings at %.2f GB/s busbw; want 1 at 48", m.rings, m.ringBus)
	}
}

// A B300 of OCI's has two NIC ports of its own (a ConnectX-8), of which its "nic" names one: a
// ring leaving by the other port crosses NVLink to the GPU beside it (NCCL's PXN), not the CPU,
// so the rings of two such nodes use all sixteen ports and are bounded by NVLink inside the
// nodes (721.8 GB/s busbw), where through the CPU they carried 256 and through one port a GPU 400.
func TestSecondPortRings(t *testing.T) {
	t.Parallel()
	m := modelOf(t, "../../accuracy/topologies/oci-b300.json", 2, 16)
	if m.rings != 16 || math.Abs(m.ringBus-721.8) > 0.05 || m.limit != "nvlink" {
		t.Errorf("two OCI B300: %d rings at %.2f GB/s busbw (%s); want 16 at 721.8 (nvlink)", m.rings, m.ringBus, m.limit)
	}
}

// NCCL's search raises a tree's bwIntra up to twice its bwInter where the chain inside a node
// carries it: on two DGX A100 each of the 8 channels leaves by a 200 Gb/s NIC behind PCIe (24 GB/s
// a ring), and the NVLinks (240 GB/s) carry 30 a channel, so the tree's bwIntra is 30, its bwInter
// and the ring's 24. On one node the tree is the ring.
func TestTreeBwIntra(t *testing.T) {
	t.Parallel()
	m := modelOf(t, "dgx-a100", 2, 16)
	ring, tree := m.graphs[algoRing], m.graphs[algoTree]
	if math.Abs(ring.bwIntra-24) > 1e-9 || math.Abs(ring.bwInter-24) > 1e-9 || math.Abs(tree.bwInter-24) > 1e-9 || math.Abs(tree.bwIntra-30) > 1e-9 {
		t.Errorf("two DGX A100: ring %+v, tree %+v; want the ring 24/24, the tree 30 inside, 24 between", ring, tree)
	}
	one := modelOf(t, "dgx-a100", 1, 8)
	if one.graphs[algoTree] != one.graphs[algoRing] {
		t.Errorf("one DGX A100: tree %+v, ring %+v; want the same graph", one.graphs[algoTree], one.graphs[algoRing])
	}
}

// NVLS on one node: NCCL's tuner holds each channel to the top of its search speed table, so on
// 5 H100 it expects 300 GB/s busbw and picks the ring (370). Forced, the simulated call moves what
// the NVLinks carry, 2 × 370.8 × 0.85 × (n-1)/(n+1): about the 420 and 480 GB/s that real runs
// give on 5 and 8 GPUs (NVIDIA/nccl#1455).
func TestNVLSOneNode(t *testing.T) {
	t.Parallel()
	busbw := func(c Candidate, n int) float64 { // what the links carry: without the pipeline's fill
		return float64(4<<30) / (1e3 * (c.SimUS - c.SimLatencyUS - c.FillUS)) * 2 * float64(n-1) / float64(n)
	}
	for _, tc := range []struct {
		n            int
		tuned, moved float64 // NCCL's expected busbw, the simulated one
	}{{5, 300, 420.2}, {7, 408, 472.8}, {8, 476, 490.4}} {
		m := modelOf(t, "dgx-h100", 1, tc.n)
		var nvls Candidate
		for _, c := range m.decide(collAllReduce, 4<<30).Candidates {
			if c.Algo == "NVLS" {
				nvls = c
			}
		}
		tuned := float64(4<<30) / (1e3 * (nvls.TimeUS - nvls.LatencyUS)) * 2 * float64(tc.n-1) / float64(tc.n)
		if math.Abs(tuned-tc.tuned) > 0.5 || math.Abs(busbw(nvls, tc.n)-tc.moved) > 0.5 {
			t.Errorf("%d GPUs: NVLS expected at %.1f, simulated at %.1f GB/s busbw; want %v and %v", tc.n, tuned, busbw(nvls, tc.n), tc.tuned, tc.moved)
		}
		if pick := m.decide(collAllReduce, 4<<30).Chosen().Algo; tc.n == 5 && pick != "Ring" {
			t.Errorf("5 GPUs: NCCL's tuner picks %s; want Ring", pick)
		}
	}
}

// NVLS all-reduce on one node is a pipeline of three stages handing on loops of heads × chunk
// bytes a channel, NCCL's chunk shrinking with the size: the simulated call takes two loop-times
// more than its bandwidth time, and nothing else does.
func TestNVLSPipelineFill(t *testing.T) {
	t.Parallel()
	const ops = 16 * 8 // 8 H100: 16 NVLS channels, 8 heads
	for _, c := range []struct{ bytes, chunk int64 }{
		{1 << 20, 16 << 10}, {4 << 20, 16 << 10}, {2*ops*(32<<10) - 1, 16 << 10}, {2 * ops * (32 << 10), 32 << 10},
		{16 << 20, 32 << 10}, {64 << 20, 64 << 10}, {256 << 20, 64 << 10}, {1 << 30, 128 << 10}, {4 << 30, 128 << 10},
	} {
		if got := nvlsChunk(c.bytes, ops); got != c.chunk {
			t.Errorf("%d B: chunk %d; want NCCL's %d", c.bytes, got, c.chunk)
		}
	}
	m := modelOf(t, "dgx-h100", 1, 8)
	nvls := func(m *model, coll collKind, bytes int64) Candidate {
		for _, c := range m.decide(coll, bytes).Candidates {
			if c.Algo == "NVLS" {
				return c
			}
		}
		t.Fatalf("no NVLS candidate for %d B", bytes)
		return Candidate{}
	}
	for _, c := range []struct {
		bytes int64
		loops float64 // the call's loops a channel: its bandwidth time is this many loop-times
	}{{1 << 20, 1}, {64 << 20, 8}, {1 << 30, 64}} {
		x := nvls(m, collAllReduce, c.bytes)
		bwUS := x.SimUS - x.SimLatencyUS - x.FillUS
		if want := 2 * bwUS / c.loops; math.Abs(x.FillUS-want) > 1e-9*want {
			t.Errorf("%d B: fill %.2f µs; want two loop-times of %.2f (the links' %.2f over %v loops)", c.bytes, x.FillUS, want/2, bwUS, c.loops)
		}
	}
	if fill := m.nvlsFillUS(0, 0); fill != 0 {
		t.Errorf("0 B: fill %v; want 0", fill)
	}
	if x := nvls(m, collAllGather, 64<<20); x.FillUS != 0 {
		t.Errorf("NVLS all-gather: fill %v; want 0 (another kernel, not modelled)", x.FillUS)
	}
	for _, c := range m.decide(collAllReduce, 64<<20).Candidates {
		if c.Algo != "NVLS" && c.FillUS != 0 {
			t.Errorf("%s/%s: fill %v; want 0", c.Algo, c.Proto, c.FillUS)
		}
	}
	two := modelOf(t, "dgx-h100", 2, 16)
	for _, c := range two.decide(collAllReduce, 64<<20).Candidates {
		if c.FillUS != 0 {
			t.Errorf("two nodes, %s/%s: fill %v; want 0 (NVLS across nodes is another kernel)", c.Algo, c.Proto, c.FillUS)
		}
	}
}

// The tree's graph does not depend on which rank comes first (NCCL keeps the least any rank
// found): on two 8x L40S nodes, one rank on the first node and eight on the second give the same
// tree either way round. PAT runs on the tree's graph, and the raise never lowers a tree below
// the ring (two DGX H100: the NVLinks carry 46.4 a channel, under the ring's 48).
func TestTreeGraphRules(t *testing.T) {
	t.Parallel()
	tp := topoOf(t, "pcie-l40s-8", 2)
	a := newModel(tp, []int{0, 8, 9, 10, 11, 12, 13, 14, 15}, nil).graphs[algoTree]
	b := newModel(tp, []int{8, 9, 10, 11, 12, 13, 14, 15, 0}, nil).graphs[algoTree]
	if a != b {
		t.Errorf("tree graph by rank order: %+v against %+v", a, b)
	}
	m := modelOf(t, "dgx-h100", 2, 16)
	if m.graphs[algoPAT] != m.graphs[algoTree] || m.graphs[algoTree].bwIntra < m.graphs[algoRing].bwIntra {
		t.Errorf("two DGX H100: PAT %+v, tree %+v, ring %+v; want PAT on the tree's graph, the tree not below the ring",
			m.graphs[algoPAT], m.graphs[algoTree], m.graphs[algoRing])
	}
}

// NCCL's ring search on one NVSwitch node, worked by hand from search.cc (nvlinkRingSearch): a
// GPU's NVLink bandwidth, its architecture and compute capability give the channels found after
// duplication and each one's speed. 8x H100 (18 NVLinks, 370.8 GB/s as NCCL counts them): 6 at 60,
// then 12 of 30. HGX H800 (8 NVLinks, 164.8): 60 holds 2, 50 holds 3, 40 holds 4 (160), 30 and
// 24 hold less, 20 holds 8 but no more (160): 4 at 40, then 8 of 20. DGX A100 (12 x 20 = 240): 6
// at 40 fills it, then 12 of 20. B200 (18 x 40.1): 8 at 90, then 16 of 45. 210 GB/s on Hopper: 7
// at 30 fill it, and more than four channels under 50 GB/s are not duplicated. An A40 bridge pair
// (56.25): 1 at 40, then 2 of 20.
func TestNVLinkRingChannels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		bw    float64
		arch  int
		cc    float64
		want  int
		speed float64
	}{{370.8, 2, 9, 12, 30}, {164.8, 2, 9, 8, 20}, {240, 1, 8, 12, 20}, {721.8, 3, 10, 16, 45}, {210, 2, 9, 7, 30}, {56.25, 1, 8.6, 2, 20}} {
		if got, speed := nvlinkRingSearch(tc.bw, tc.arch, tc.cc); got != tc.want || speed != tc.speed {
			t.Errorf("%v GB/s, arch %d, cc %v: %d channels of %v; want %d of %v", tc.bw, tc.arch, tc.cc, got, speed, tc.want, tc.speed)
		}
	}
	if m := modelOf(t, "hgx-h800", 1, 8); m.graphs[algoRing].nChannels != 8 || m.commChannels() != 16 {
		t.Errorf("HGX H800: %d ring channels, %d in the communicator; want 8 and 16 (NVIDIA/nccl#892)", m.graphs[algoRing].nChannels, m.commChannels())
	}
}

// NCCL's NVLS search on one NVLink domain takes min(32, GPUs) heads (NCCL_MAX_NVLS_ARITY), each
// channel carrying the NVLink over the heads + 1: 64 GPUs of one GB200 NVL72 rack have 32
// channels of 721.8/33 GB/s, not 721.8/65, which NCCL's search gives 20 of its table. Across
// racks the simulator keeps the domain's GPUs + 1.
func TestNVLSHeadsInABigDomain(t *testing.T) {
	t.Parallel()
	one := modelOf(t, "gb200-nvl72", 18, 64)
	if g := one.graphs[algoNVLS]; g.nChannels != 32 || math.Abs(g.linksIntra-721.8/33) > 0.05 || g.bwIntra != 20 {
		t.Errorf("64 GPUs of one rack: NVLS graph %+v; want 32 channels of %.2f on the links, 20 by NCCL's search", g, 721.8/33)
	}
	two := modelOf(t, "gb200-nvl72", 36, 144)
	if g := two.graphs[algoNVLS]; g.nChannels != 32 || math.Abs(g.bwIntra-721.8/73) > 0.05 {
		t.Errorf("two racks: NVLS graph %+v; want 32 channels of %.2f", g, 721.8/73)
	}
}

// NVLSTree between NVLink domains is held to the network as the rings are: to the NICs
// NCCL_IB_HCA leaves (one 400 Gb/s NIC a DGX H100), to the smaller domain's NICs (a GB200 rack
// and one 4-GPU tray: 4 NICs), and to a fabric's uplinks (a fat tree of one node a leaf with 64
// times fewer uplinks than NICs, which NCCL does not see). Each byte of an all-reduce crosses a
// domain's NICs at least once each way, so the call's algorithm bandwidth is at most the NICs'
// (on two domains; half that on more), within what NCCL's busbw-to-algbw factor n / (2(n-1))
// adds to it, n / (n-1).
// Before, the simulated NVLSTree ran at the first domain's NICs' nominal rate in all three.
func TestNVLSTreeHeldToNetwork(t *testing.T) {
	t.Parallel()
	overTopo := func() *gpu.Topology {
		tp, err := LoadTopology("dgx-h100")
		if err != nil {
			t.Fatal(err)
		}
		net := *tp.Network
		net.Layout, net.NodesPerLeaf, net.Tiers, net.Oversubscription = "fat-tree", 1, 2, 64
		tp.Network = &net
		if tp, err = tp.WithNodes(4); err != nil {
			t.Fatal(err)
		}
		return tp
	}
	for _, tc := range []struct {
		name  string
		m     *model
		bound float64 // GB/s of algorithm bandwidth: the network's, each way
	}{
		{"two DGX H100, NCCL_IB_HCA=mlx5_0", newModel(topoOf(t, "dgx-h100", 2), ranks(16), map[string]string{"NCCL_IB_HCA": "mlx5_0"}), 50},
		{"a GB200 rack and one tray", newModel(topoOf(t, "gb200-nvl72", 19), ranks(76), nil), 200},
		{"four DGX H100 on a fat tree 64:1", newModel(overTopo(), ranks(32), nil), 400.0 / 64 / 2},
	} {
		var tree Candidate
		for _, c := range tc.m.decide(collAllReduce, 1<<32).Candidates {
			if c.Algo == "NVLSTree" {
				tree = c
			}
		}
		if tree.SimUS == 0 {
			t.Errorf("%s: no NVLSTree candidate", tc.name)
			continue
		}
		if alg := float64(1<<32) / (1e3 * tree.SimUS); alg > tc.bound {
			t.Errorf("%s: simulated NVLSTree all-reduce of 4 GiB at %.1f GB/s algbw; the network carries %.1f", tc.name, alg, tc.bound)
		}
	}
}

// NCCL's rules on a node's size (enqueue.cc, updateCollCostTable; its node is the NVLink
// domain): NVLS serves all-gather and reduce-scatter on at most 32 ranks a node, CollNet Direct
// and Chain at most 8, and CollNet Direct's search takes at most 8 heads (search.cc). A GB200
// rack of 72 gathers by Ring and reduces across racks without CollNet; 32 GPUs of it gather by
// NVLS; a SuperPOD's 8-GPU nodes keep CollNet, Direct on 8 channels.
func TestNodeSizeRules(t *testing.T) {
	t.Parallel()
	has := func(d Decision, algo string) bool {
		for _, c := range d.Candidates {
			if c.Algo == algo {
				return true
			}
		}
		return false
	}
	rack := modelOf(t, "gb200-nvl72", 18, 72)
	if d := rack.decide(collAllGather, 16<<20); has(d, "NVLS") || !has(rack.decide(collAllReduce, 16<<20), "NVLS") {
		t.Errorf("72 GPUs of a rack: NVLS all-gather %v; want none (all-reduce still)", has(d, "NVLS"))
	}
	if part := modelOf(t, "gb200-nvl72", 18, 32); !has(part.decide(collAllGather, 16<<20), "NVLS") {
		t.Error("32 GPUs of a rack: no NVLS all-gather")
	}
	collnet := map[string]string{"NCCL_COLLNET_ENABLE": "1"}
	racks := newModel(topoOf(t, "gb200-nvl72", 36), ranks(144), collnet)
	if d := racks.decide(collAllReduce, 1<<30); has(d, "CollNetDirect") || has(d, "CollNetChain") {
		t.Errorf("two racks of 72: CollNet candidates %v; want none", d.Candidates)
	}
	pod := newModel(topoOf(t, "dgx-h100-superpod", 2), ranks(16), collnet)
	if d := pod.decide(collAllReduce, 1<<30); !has(d, "CollNetDirect") || pod.graphs[algoCollNetDirect].nChannels != 8 {
		t.Errorf("two SuperPOD nodes: CollNetDirect %v on %d channels; want it, on 8", has(d, "CollNetDirect"), pod.graphs[algoCollNetDirect].nChannels)
	}
}

// NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS bound the channels a call runs on, not the graphs
// NCCL's tuner prices with (connect.cc): a 1 GiB all-reduce on 8 H100 still runs NVLS, in the
// same time, with either; a ring forced on 4 channels runs slower than on the search's, its
// blocks each carrying at most one NVLink's worth, and a tree on 4 channels at 4/24 of its speed.
func TestChannelVariablesLeaveThePick(t *testing.T) {
	t.Parallel()
	tp := topoOf(t, "dgx-h100", 1)
	call := func(env map[string]string) Candidate {
		return newModel(tp, ranks(8), env).decide(collAllReduce, 1<<30).Chosen()
	}
	def := call(nil)
	for _, env := range []map[string]string{{"NCCL_MIN_NCHANNELS": "32"}, {"NCCL_MAX_NCHANNELS": "4"}} {
		if c := call(env); c.Algo != def.Algo || c.SimUS != def.SimUS || c.TimeUS != def.TimeUS {
			t.Errorf("%v: %s %.1f µs (NCCL %.1f); want %s %.1f (%.1f) as without", env, c.Algo, c.SimUS, c.TimeUS, def.Algo, def.SimUS, def.TimeUS)
		}
	}
	ring, ring4 := call(map[string]string{"NCCL_ALGO": "Ring"}), call(map[string]string{"NCCL_ALGO": "Ring", "NCCL_MAX_NCHANNELS": "4"})
	if ring4.TimeUS != ring.TimeUS || !(ring4.SimUS > 3*ring.SimUS) || !ring4.blockBound {
		t.Errorf("Ring on 4 channels: %.1f µs (NCCL %.1f), block bound %v; Ring on the search's: %.1f (%.1f)", ring4.SimUS, ring4.TimeUS, ring4.blockBound, ring.SimUS, ring.TimeUS)
	}
	tree, tree4 := call(map[string]string{"NCCL_ALGO": "Tree"}), call(map[string]string{"NCCL_ALGO": "Tree", "NCCL_MAX_NCHANNELS": "4"})
	if ring4.fewerCh || !tree4.fewerCh { // what explain says: "channels" for the tree alone
		t.Errorf("fewer channels: Ring %v, Tree %v; want false, true", ring4.fewerCh, tree4.fewerCh)
	}
	if bw, bw4 := tree.SimUS-tree.SimLatencyUS, tree4.SimUS-tree4.SimLatencyUS; math.Abs(bw4/bw-6) > 1e-9 {
		t.Errorf("Tree on 4 channels: bandwidth time %.1f µs, %.3f times the search's 24; want 6", bw4, bw4/bw)
	}
}

// Inside one domain NCCL's ring channels all take one path (sameChannels), so a Broadcast or
// Reduce costs one hop, on a PCIe box as on NVLink: 8 B on 8 RTX 4090, Ring/LL 6.6 + 1.0 µs.
func TestSameChannelsOnPCIe(t *testing.T) {
	t.Parallel()
	m := modelOf(t, "pcie-4090x8", 1, 8)
	if c := m.decide(collBroadcast, 8).Chosen(); c.Algo != "Ring" || c.Proto != "LL" || math.Abs(c.LatencyUS-7.6) > 1e-9 {
		t.Errorf("8 B broadcast: %s/%s, latency %.2f µs; want Ring/LL, 7.6", c.Algo, c.Proto, c.LatencyUS)
	}
}

// A node of one GPU makes NCCL's tree search take its TREE pattern, which its tuner prices at
// .85 (tuning.cc, maxTreePattern).
func TestTreePatternOneGPUANode(t *testing.T) {
	t.Parallel()
	m := oneGPUANode(t, 4)
	one := m.bandwidth(collAllReduce, algoTree, protoSimple)
	m.minLocal = 2
	if r := one / m.bandwidth(collAllReduce, algoTree, protoSimple); math.Abs(r-.85) > 1e-9 {
		t.Errorf("one GPU a node: Tree at %.3f of a balanced tree's; want .85", r)
	}
}

// NCCL runs an average as PreMulSum or SumPostDiv, which its PAT reduce-scatter does not serve
// (enqueue.cc): on one GPU a node PAT wins a 1 MiB reduce-scatter of a sum, and an average runs
// Ring, the call's time and its row's algorithm alike.
func TestPATNotForAverage(t *testing.T) {
	t.Parallel()
	m := oneGPUANode(t, 8)
	sum, avg := m.decideOp(collReduceScatter, 1<<20, gpu.Float, gpu.Sum).Chosen(), m.decideOp(collReduceScatter, 1<<20, gpu.Float, gpu.Avg).Chosen()
	if sum.Algo != "PAT" || avg.Algo == "PAT" || !(avg.SimUS > sum.SimUS) {
		t.Errorf("sum %s %.1f µs, avg %s %.1f µs; want PAT, then another, slower", sum.Algo, sum.SimUS, avg.Algo, avg.SimUS)
	}
	c := &comm{m: m, devs: ranks(8)}
	if algo, _, _ := c.Explain("reducescatter", 1<<20, gpu.Float, gpu.Avg); algo != avg.Algo {
		t.Errorf("the row names %s; the call runs %s", algo, avg.Algo)
	}
}

// NVLS reduces in the NVLink switches only what they can (NCCL's ncclNvlsSupported): on 8 H100
// a 64 MiB all-reduce of a float sum runs NVLS, and a product, an average, a float max or any
// 8-bit reduction runs another algorithm, slower, where a max of bfloat16s keeps NVLS, and an
// all-gather of bytes its candidates; the row names what the call runs.
func TestNVLSOnlyWhatTheSwitchesReduce(t *testing.T) {
	t.Parallel()
	m := newModel(topoOf(t, "dgx-h100", 1), ranks(8), nil)
	sum := m.decideOp(collAllReduce, 64<<20, gpu.Float, gpu.Sum).Chosen()
	if sum.Algo != "NVLS" {
		t.Fatalf("a float sum runs %s; want NVLS", sum.Algo)
	}
	c := &comm{m: m, devs: ranks(8)}
	for _, x := range []struct {
		dt   gpu.DType
		op   gpu.RedOp
		nvls bool
	}{{gpu.Float, gpu.Prod, false}, {gpu.Float, gpu.Avg, false}, {gpu.Float, gpu.Max, false}, {gpu.Int8, gpu.Sum, false},
		{gpu.BFloat16, gpu.Max, true}, {gpu.Int32, gpu.Min, true}, {gpu.Double, gpu.Sum, true}} {
		got := m.decideOp(collAllReduce, 64<<20, x.dt, x.op).Chosen()
		if (got.Algo == "NVLS") != x.nvls || !x.nvls && !(got.SimUS > sum.SimUS) {
			t.Errorf("%v %v: %s, %.1f µs (a float sum: %.1f); want NVLS %v, and slower without", x.dt, x.op, got.Algo, got.SimUS, sum.SimUS, x.nvls)
		}
		if algo, _, _ := c.Explain("allreduce", 64<<20, x.dt, x.op); algo != got.Algo {
			t.Errorf("%v %v: the row names %s; the call runs %s", x.dt, x.op, algo, got.Algo)
		}
	}
	// An all-gather reduces nothing: NVLS stays a candidate whatever the type.
	ag := func(dt gpu.DType) Decision { return m.decideOp(collAllGather, 64<<20, dt, gpu.Sum) }
	if !slices.ContainsFunc(ag(gpu.Int8).Candidates, func(c Candidate) bool { return c.Algo == "NVLS" }) || ag(gpu.Int8).Chosen() != ag(gpu.Float).Chosen() {
		t.Errorf("an all-gather of bytes: %+v; want NVLS among its candidates, and the pick of floats", ag(gpu.Int8).Chosen())
	}
}

// The switches a message between a fabric's leaves crosses add to a call, which NCCL's tables
// leave out: on 64 DGX H100 under two leaves of 32 with 0.5 µs a switch (1 µs between leaves), a
// ring's lap 2 µs (two leaves), a tree's way up and down one level above the leaves 2 µs,
// CollNet's (NCCL_COLLNET_ENABLE=1) and NVLS's way to the switches' reduction 1 µs; under one
// leaf, nothing. NCCL's own estimate, and so its pick, stays as it was.
func TestSwitchLatencyInCollectives(t *testing.T) {
	t.Parallel()
	at := func(nodes int, switchUS float64) *model {
		tp, err := LoadTopology("dgx-h100-superpod")
		if err != nil {
			t.Fatal(err)
		}
		tp.Network.SwitchLatencyUS = switchUS
		if tp, err = tp.WithNodes(nodes); err != nil {
			t.Fatal(err)
		}
		return newModel(tp, ranks(8*nodes), map[string]string{"NCCL_COLLNET_ENABLE": "1"})
	}
	for _, c := range []struct {
		nodes int
		coll  collKind
		more  map[string]float64 // by algorithm
	}{
		{64, collAllReduce, map[string]float64{"Ring": 4, "Tree": 2, "NVLSTree": 2, "CollNetDirect": 1, "CollNetChain": 1, "NVLS": 1}},
		{64, collAllGather, map[string]float64{"Ring": 2, "CollNetDirect": 1, "NVLS": 1}},
		{64, collBroadcast, map[string]float64{"Ring": 1}},
		{32, collAllReduce, map[string]float64{"Ring": 0, "Tree": 0, "NVLSTree": 0, "CollNetDirect": 0, "CollNetChain": 0, "NVLS": 0}},
	} {
		slow, base := at(c.nodes, 0.5).decide(c.coll, 8), at(c.nodes, 0).decide(c.coll, 8)
		if len(slow.Candidates) != len(base.Candidates) || slow.Chosen().Algo != base.Chosen().Algo {
			t.Fatalf("%d nodes, %s: the switches changed NCCL's candidates or pick", c.nodes, collNames[c.coll])
		}
		seen := map[string]bool{}
		for i, s := range slow.Candidates {
			b := base.Candidates[i]
			want, ok := c.more[s.Algo]
			if !ok {
				t.Errorf("%d nodes, %s: unexpected candidate %s", c.nodes, collNames[c.coll], s.Algo)
				continue
			}
			seen[s.Algo] = true
			if d := s.SimLatencyUS - b.SimLatencyUS; math.Abs(d-want) > 1e-9 || s.LatencyUS != b.LatencyUS {
				t.Errorf("%d nodes, %s %s/%s: %v µs more (NCCL's %v, was %v); want %v", c.nodes, collNames[c.coll], s.Algo, s.Proto, d, s.LatencyUS, b.LatencyUS, want)
			}
		}
		if len(seen) != len(c.more) {
			t.Errorf("%d nodes, %s: candidates %v; want %v", c.nodes, collNames[c.coll], seen, c.more)
		}
	}
}

// Across nodes NCCL duplicates a ring graph whose channels run at 25 GB/s or more, unless past
// compute capability 8.0 they are more than four under 50 GB/s (ncclTopoDupChannels, search.cc):
// with 4 H100 a node each ring leaves by its GPU's 400 Gb/s NIC at 48 GB/s of NCCL's table, and
// its 4 channels become 8 of 24, which doubles the per-channel caps, so that with NVLS off a
// 64 MiB all-reduce on 4 nodes runs Ring/LL128 (NCCL's own figures: 796 µs against Simple's
// 899); 8 H100 a node keep 8 channels.
func TestRingGraphDuplicatedAcrossNodes(t *testing.T) {
	t.Parallel()
	tp := topoOf(t, "dgx-h100", 4)
	var four []int
	for node := range 4 {
		four = append(four, node*8, node*8+1, node*8+2, node*8+3)
	}
	m := newModel(tp, four, map[string]string{"NCCL_NVLS_ENABLE": "0"})
	if g := m.graphs[algoRing]; g.nChannels != 8 || math.Abs(g.bwIntra*8-m.ringBus) > 1e-6 {
		t.Errorf("4 GPUs a node: %d ring channels of %.1f GB/s (rings carry %.1f); want 8 sharing them", g.nChannels, g.bwIntra, m.ringBus)
	}
	if c := m.decide(collAllReduce, 64<<20).Chosen(); c.Algo != "Ring" || c.Proto != "LL128" || math.Abs(c.TimeUS-795.9) > 1 {
		t.Errorf("64 MiB, NVLS off: %s/%s %.1f µs; want Ring/LL128, 795.9", c.Algo, c.Proto, c.TimeUS)
	}
	if g := newModel(tp, ranks(32), nil).graphs[algoRing]; g.nChannels != 8 {
		t.Errorf("8 GPUs a node: %d ring channels; want 8, not duplicated (more than four under 50 GB/s)", g.nChannels)
	}
}

// NCCL's search gives NVLS's heads the fastest speed of its table that each GPU's NVLink holds
// heads + 1 times, and raises the graph's bwInter to the first speed at or above twice that
// (search.cc): on an HGX H800, whose 8 NVLinks carry 164.8 GB/s, 15 and 30 of 18.3, so NCCL
// expects 178.5 GB/s busbw of NVLS and runs a 768 KiB all-reduce on Ring/LL; the simulated NVLS
// call still moves what the links carry.
func TestNVLSSearchSpeedsH800(t *testing.T) {
	t.Parallel()
	x, err := Explain(topoOf(t, "hgx-h800", 1), ranks(8), nil, "allreduce", 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if c := x.Chosen; c.Algo != "NVLS" || math.Abs(c.BusGBs-178.5) > 0.1 || !(c.SimBusGBs > 200) {
		t.Errorf("1 GiB: %s at %.1f GB/s busbw by NCCL's figures, %.1f simulated; want NVLS at 178.5, above 200 simulated", c.Algo, c.BusGBs, c.SimBusGBs)
	}
	if c := modelOf(t, "hgx-h800", 1, 8).decide(collAllReduce, 768<<10).Chosen(); c.Algo != "Ring" || c.Proto != "LL" {
		t.Errorf("768 KiB: %s/%s; want Ring/LL", c.Algo, c.Proto)
	}
}
