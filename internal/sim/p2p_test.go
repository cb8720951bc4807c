package sim

import (
	"math"
	"strings"
	"testing"
)

// NCCL's point-to-point plan, worked by hand from its rules (docs/model.md, "Point to point"):
//   - DGX A100: 12 ring channels doubled to 24, so 32 point-to-point channels; 12 NVLinks to every
//     peer give 24 channels a peer, 32 as a power of two; over 8 ranks a call starts at 32/8 = 4 a
//     peer; NVLink chunks of 512 KiB.
//   - two DGX H100: 8 rings, 16 channels; the GPU's own 400 Gb/s NIC carries its Gen5 link (48
//     GB/s as NCCL counts it), which needs ceil(48/14) = 4 channels a peer, and 16 ranks start
//     at 1; network chunks of 128 KiB.
//   - 8 RTX 4090 on PCIe: 2 channels a peer, PCIe chunks.
func TestP2PPlan(t *testing.T) {
	t.Parallel()
	tests := []struct {
		topo                     string
		nodes, n                 int
		channels, perPeer, minCh int
		chunk                    int64
		bytes                    []int64
		opChannels               []int
	}{
		{"dgx-a100", 1, 8, 32, 32, 4, 512 << 10,
			[]int64{8 << 10, 256 << 10, 8 << 20, 128 << 20, 1 << 30}, []int{1, 4, 4, 8, 32}},
		{"dgx-h100", 2, 16, 16, 4, 1, 128 << 10,
			[]int64{8 << 10, 1 << 20, 1 << 30}, []int{1, 4, 4}},
		// Two DGX A100: the GPU's own 200 Gb/s NIC carries its Gen4 link (24 GB/s as NCCL
		// counts it): ceil(24/14) = 2 a peer. Two OCI A100 nodes: a 100 Gb/s NIC does not, so
		// the second under the same switch counts too: 2 NICs, 25 GB/s, 2 a peer.
		{"dgx-a100", 2, 16, 16, 2, 1, 128 << 10, []int64{1 << 20}, []int{2}},
		{"../../accuracy/topologies/oci-a100-roce.json", 1, 16, 32, 2, 2, 128 << 10, []int64{1 << 20}, []int{2}},
		{"pcie-4090x8", 1, 8, 2, 2, 1, 128 << 10,
			[]int64{8, 1 << 30}, []int{1, 2}},
		// HGX H800: 8 ring channels doubled to 16 (nvlinkRingSearch); 8 NVLinks to every peer
		// give 16 a peer; NCCL logs "16 coll channels, 0 nvls channels, 16 p2p channels, 16 p2p
		// channels per peer" on one (NVIDIA/nccl#892).
		{"hgx-h800", 1, 8, 16, 16, 2, 512 << 10, []int64{1 << 30}, []int{16}},
	}
	for _, tc := range tests {
		t.Run(tc.topo, func(t *testing.T) {
			t.Parallel()
			p := modelOf(t, tc.topo, tc.nodes, tc.n).p2pPlan()
			if p.channels != tc.channels || p.perPeer != tc.perPeer || p.minCh != tc.minCh || p.chunk != tc.chunk {
				t.Errorf("plan %+v; want %d channels, %d a peer, %d to start, chunk %d", p, tc.channels, tc.perPeer, tc.minCh, tc.chunk)
			}
			for i, b := range tc.bytes {
				if got := p.opChannels(b); got != tc.opChannels[i] {
					t.Errorf("an operation of %d B on %d channels; want %d", b, got, tc.opChannels[i])
				}
			}
		})
	}
}

// A 128 MiB send/recv ring on DGX A100 runs on 8 channels of 10 GB/s (half of NCCL's 20 GB/s
// A100 NVLink, as NCCL plans two channels a link), 80 GB/s, well under the NVLinks' 240; at 1 GiB
// its 32 channels could carry more than the links, which then bound it.
func TestSendRecvChannelBound(t *testing.T) {
	t.Parallel()
	x := explain(t, "dgx-a100", 8, nil, "sendrecv", 128<<20)
	if x.Chosen.Channels != 8 || x.Bottleneck != "channels" || math.Abs(x.Chosen.BusGBs-80) > 1e-9 {
		t.Errorf("128 MiB: %d channels, bottleneck %s, busbw %v; want 8, channels, 80", x.Chosen.Channels, x.Bottleneck, x.Chosen.BusGBs)
	}
	x = explain(t, "dgx-a100", 8, nil, "sendrecv", 1<<30)
	if x.Chosen.Channels != 32 || x.Bottleneck != "nvlink" || x.Chosen.BusGBs < 239 || x.Chosen.BusGBs > 241 {
		t.Errorf("1 GiB: %d channels, bottleneck %s, busbw %v; want 32, nvlink, 240", x.Chosen.Channels, x.Bottleneck, x.Chosen.BusGBs)
	}
	// NCCL_MAX_NCHANNELS=4 leaves 4 channels in all: 4 a peer at most, 40 GB/s.
	x = explain(t, "dgx-a100", 8, map[string]string{"NCCL_MAX_NCHANNELS": "4"}, "sendrecv", 1<<30)
	if x.Chosen.Channels != 4 || math.Abs(x.Chosen.BusGBs-40) > 1e-9 {
		t.Errorf("1 GiB under NCCL_MAX_NCHANNELS=4: %d channels, busbw %v; want 4, 40", x.Chosen.Channels, x.Chosen.BusGBs)
	}
}

// ncclTopoPostset doubles the channels again on Hopper across nodes while the ring's channels
// carry over 45 GB/s and are fewer than 16: four GPUs of each of two DGX H100 have 4 rings, 8
// channels, then 16. GB200 hosts (Arm, Blackwell) across racks double the network chunk.
func TestP2PPostsetRules(t *testing.T) {
	t.Parallel()
	if p := newModel(topoOf(t, "dgx-h100", 2), []int{0, 1, 2, 3, 8, 9, 10, 11}, nil).p2pPlan(); p.channels != 16 {
		t.Errorf("4 GPUs of each of two DGX H100: %d point-to-point channels; want 16", p.channels)
	}
	if p := modelOf(t, "gb200-nvl72", 36, 144).p2pPlan(); p.chunk != 256<<10 || p.nodes != 2 {
		t.Errorf("two GB200 NVL72 racks (36 trays): chunk %d over %d domains; want 256 KiB over 2", p.chunk, p.nodes)
	}
}

// A rank's operations share the communicator's point-to-point channels: an all-to-all over the
// 72 GPUs of a GB200 NVL72 gives each of the 71 operations one channel, and the rank's 32
// channels carry 32 × 20.05 = 641.6 GB/s (half of NCCL's 40.1 GB/s SM100 NVLink a channel), under
// the NVLinks' 722. Across two racks a channel is NCCL's network figure, 14 GB/s.
func TestAllToAllSharesChannels(t *testing.T) {
	t.Parallel()
	x := explain(t, "gb200-nvl72", 72, nil, "alltoall", 1<<30)
	if x.Chosen.Channels != 1 || x.Bottleneck != "channels" || math.Abs(x.Chosen.BusGBs-641.6) > 0.5 {
		t.Errorf("1 GiB all-to-all on 72 GB200: %d channels a peer, bottleneck %s, busbw %.1f; want 1, channels, 641.6",
			x.Chosen.Channels, x.Bottleneck, x.Chosen.BusGBs)
	}
	if m := modelOf(t, "gb200-nvl72", 36, 144); m.p2pChannelGBs() != p2pNetChannelGBs {
		t.Errorf("two GB200 NVL72 racks: %v GB/s a point-to-point channel; want the network's %v", m.p2pChannelGBs(), p2pNetChannelGBs)
	}
}

// NCCL_IB_HCA narrows point-to-point routes too: an all-to-all over two DGX H100 left one NIC a
// node runs at an eighth of the busbw of all eight, over four NICs at half; a name that leaves a
// node no NIC is refused (NCCL would fall back to sockets), and on one node the NICs go unused.
func TestAllToAllHonoursIBHCA(t *testing.T) {
	t.Parallel()
	all := explain(t, "dgx-h100x2", 16, nil, "alltoall", 1<<30).Chosen.BusGBs
	for hca, share := range map[string]float64{"mlx5_0": 1.0 / 8, "mlx5_0,mlx5_4,mlx5_6,mlx5_10": 0.5} {
		got := explain(t, "dgx-h100x2", 16, map[string]string{"NCCL_IB_HCA": hca}, "alltoall", 1<<30).Chosen.BusGBs
		if math.Abs(got/all-share) > 0.02 {
			t.Errorf("NCCL_IB_HCA=%s: busbw %v, %.3f of the %v with every NIC; want %.3f", hca, got, got/all, all, share)
		}
	}
	tp, err := LoadTopology("dgx-h100x2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Explain(tp, ranks(16), map[string]string{"NCCL_IB_HCA": "mlx6"}, "alltoall", 1<<20); err == nil ||
		!strings.Contains(err.Error(), `NCCL_IB_HCA="mlx6" leaves node`) {
		t.Errorf("NCCL_IB_HCA naming no NIC: %v; want it refused", err)
	}
	if x := explain(t, "dgx-h100", 8, map[string]string{"NCCL_IB_HCA": "mlx6"}, "alltoall", 1<<20); x.Chosen.BusGBs <= 0 {
		t.Errorf("one node, NCCL_IB_HCA naming no NIC: busbw %v", x.Chosen.BusGBs)
	}
	// NCCL_IB_DISABLE leaves NCCL sockets between nodes of an InfiniBand network: refused too.
	if _, err := Explain(tp, ranks(16), map[string]string{"NCCL_IB_DISABLE": "1"}, "alltoall", 1<<20); err == nil ||
		!strings.Contains(err.Error(), "NCCL_IB_DISABLE=1 on a network of kind infiniband: NCCL would fall back to sockets") {
		t.Errorf("NCCL_IB_DISABLE=1 across nodes: %v; want it refused", err)
	}
	if x := explain(t, "dgx-h100", 8, map[string]string{"NCCL_IB_DISABLE": "1"}, "alltoall", 1<<20); x.Chosen.BusGBs <= 0 {
		t.Errorf("one node, NCCL_IB_DISABLE=1: busbw %v", x.Chosen.BusGBs)
	}
	for env, want := range map[string]string{
		"NCCL_IB_DISABLE=x":      `NCCL_IB_DISABLE="x": give a whole number, such as 1 (decimal, or hex after 0x)`,
		"NCCL_MAX_NCHANNELS=1.5": `NCCL_MAX_NCHANNELS="1.5": give a whole number, such as 1 (decimal, or hex after 0x)`,
	} {
		k, v, _ := strings.Cut(env, "=")
		if err := CheckEnv(map[string]string{k: v}); err == nil || err.Error() != want {
			t.Errorf("%s: %v; want %q", env, err, want)
		}
	}
}

// A rank's host posts the first message of each of its operations with other nodes one after
// another, at the network's per-message cost (NCCL's 1 µs post overhead on InfiniBand): an
// all-to-all of 1 MiB on 16 DGX H100 (120 peers elsewhere, 8 KiB each, one channel) takes at
// least 240 posts, 240 µs, where its links carry it in a few; with message_us 0 the links set it
// again. A ring across nodes is paced by the same cost on every step (NCCL's "inter-node rings
// still have to launch nsteps * net overhead"): at 5 µs a message each step of a Ring/Simple
// call inside the nodes takes 15 µs (x3 for Simple) where NVLink's own is 3.4; NCCL's estimate,
// which knows only its own cost, stays.
func TestMessageCost(t *testing.T) {
	t.Parallel()
	at := func(msgUS *float64) *model {
		tp := topoOf(t, "dgx-h100", 16)
		tp.Network.MessageUS = msgUS
		return newModel(tp, ranks(128), nil)
	}
	a2a := func(m *model) float64 {
		flows, err := m.topo.AllToAllFlows(m.devs)
		if err != nil {
			t.Fatal(err)
		}
		per := int64(1<<20) / 128
		for i := range flows {
			flows[i].Bytes = float64(per)
		}
		return m.p2pTime(flows, per, 127, m.allToAllRemoteOps())
	}
	zero, five := 0.0, 5.0
	def, none := at(nil), at(&zero)
	if got := def.allToAllRemoteOps(); got != 240 {
		t.Fatalf("remote operations %d; want 2 x 120", got)
	}
	withPosts, linksOnly := a2a(def), a2a(none)
	if want := baseLat[algoRing][protoSimple] + 240; withPosts < want || withPosts > want+10 {
		t.Errorf("all-to-all of 1 MiB on 128 GPUs: %.1f µs; want the 240 posts, about %.1f", withPosts, want)
	}
	if linksOnly > 60 {
		t.Errorf("without a per-message cost: %.1f µs; want the links' few tens", linksOnly)
	}
	if x, err := Explain(def.topo, ranks(128), nil, "alltoall", 1<<20); err != nil || x.Bottleneck != "messages" {
		t.Errorf("explain names %q (%v); want messages", x.Bottleneck, err)
	}
	ring := func(m *model) Candidate {
		for _, c := range m.decide(collAllReduce, 8<<10).Candidates { // small: no ring plateau
			if c.Algo == "Ring" && c.Proto == "Simple" {
				return c
			}
		}
		t.Fatal("no Ring/Simple candidate")
		return Candidate{}
	}
	for _, c := range at(&five).decide(collAllReduce, 8<<10).Candidates { // only rings pay it
		if want := c.Algo == "Ring"; c.fabricLat != want {
			t.Errorf("%s/%s at 5 µs a message: explain's \"fabric latency\" %v; want %v", c.Algo, c.Proto, c.fabricLat, want)
		}
	}
	slow, base := ring(at(&five)), ring(def)
	intraSteps := float64(2*(128-1) - 2*(16-1))
	if d := slow.SimLatencyUS - base.SimLatencyUS; math.Abs(d-intraSteps*(15-3.4)) > 1e-6 || slow.LatencyUS != base.LatencyUS {
		t.Errorf("Ring/Simple at 5 µs a message: %v µs more (NCCL's estimate %v, was %v); want %v steps of 15 for NVLink's 3.4", d, slow.LatencyUS, base.LatencyUS, intraSteps)
	}
}

// NCCL's point-to-point variables steer the plan as paths.cc reads them: NCCL_NCHANNELS_PER_NET_PEER
// sets the channels a peer in another domain gets, and skips the halving that fits every peer in
// one round; NCCL_MAX_P2P_NCHANNELS bounds the communicator's point-to-point channels, which the
// halving then shares out. A send/recv of 1 GiB between two DGX H100 runs each operation on 4
// channels, held by the NIC at 48 GB/s; on 1 channel, at NCCL's 14 GB/s a channel; on 8, the NIC
// again; with 4 channels in the communicator, on 2 (28 GB/s).
func TestP2PNetVariables(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env      map[string]string
		channels int
		busbw    float64
	}{
		{nil, 4, 48},
		{map[string]string{"NCCL_NCHANNELS_PER_NET_PEER": "1"}, 1, 14},
		{map[string]string{"NCCL_NCHANNELS_PER_NET_PEER": "8"}, 8, 48},
		{map[string]string{"NCCL_NCHANNELS_PER_NET_PEER": "0"}, 4, 48}, // NCCL leaves it unset
		{map[string]string{"NCCL_MAX_P2P_NCHANNELS": "4"}, 2, 28},
	} {
		x := explain(t, "dgx-h100x2", 16, c.env, "sendrecv", 1<<30)
		if x.Chosen.Channels != c.channels || math.Abs(x.Chosen.BusGBs-c.busbw) > 0.5 {
			t.Errorf("%v: %d channels, busbw %.1f; want %d and %v", c.env, x.Chosen.Channels, x.Chosen.BusGBs, c.channels, c.busbw)
		}
	}
}
