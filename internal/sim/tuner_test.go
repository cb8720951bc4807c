package sim

import (
	"math"
	"slices"
	"testing"
)

// The channels NCCL launches a call on (runChannels), worked by hand from enqueue.cc's
// topoGetAlgoInfo and nvls.cc: 8 H100 run Ring/Simple on the communicator's 24 channels from
// 24 × 512 × 64 B = 768 KiB, one fewer for every 32 KiB below; Ring/LL at 64 KiB on 2 (8 bytes a
// thread for each of 8 ranks, 512 threads: 32 KiB a channel); LL128 at 64 KiB on 12 (640 × 8 B a
// channel); NVLS on 16 whatever the size. One B200 node runs NVLS on 24; two DGX B200 (400 Gb/s
// NICs) on 32, capped by the communicator's channels across nodes; two DGX H100 run Tree/LL at
// 1 KiB on one channel.
func TestRunChannels(t *testing.T) {
	t.Parallel()
	h100 := modelOf(t, "dgx-h100", 1, 8)
	for _, tc := range []struct {
		a, p  int
		bytes int64
		want  int
	}{
		{algoRing, protoSimple, 1 << 30, 24}, {algoRing, protoSimple, 768 << 10, 24}, {algoRing, protoSimple, 768<<10 - 1, 23},
		{algoRing, protoSimple, 64 << 10, 2}, {algoRing, protoLL, 64 << 10, 2}, {algoRing, protoLL128, 64 << 10, 12},
		{algoRing, protoLL, 8, 1}, {algoNVLS, protoSimple, 8, 16}, {algoNVLS, protoSimple, 1 << 30, 16},
	} {
		if got := h100.runChannels(tc.a, tc.p, tc.bytes); got != tc.want {
			t.Errorf("8 H100, %s/%s of %d B: %d channels; want %d", algoNames[tc.a], protoNames[tc.p], tc.bytes, got, tc.want)
		}
	}
	if got := modelOf(t, "dgx-b200", 1, 8).runChannels(algoNVLS, protoSimple, 1<<30); got != 24 {
		t.Errorf("one DGX B200: NVLS on %d channels; want 24", got)
	}
	two := modelOf(t, "dgx-b200", 2, 16)
	if got, want := two.runChannels(algoNVLSTree, protoSimple, 1<<30), 32; got != want {
		t.Errorf("two DGX B200: NVLSTree on %d channels; want %d", got, want)
	}
	if got, want := two.runChannels(algoNVLS, protoSimple, 1<<30), min(32, two.commChannels()); got != want {
		t.Errorf("two DGX B200: NVLS on %d channels; want %d", got, want)
	}
	// NCCL_IB_HCA leaving half the NICs halves their sum, not each NIC's rate: four DGX B200 still
	// run NVLSTree on 24 channels, as with every NIC (400 Gb/s NICs past two domains).
	four := newModel(topoOf(t, "dgx-b200", 4), ranks(32), map[string]string{"NCCL_IB_HCA": "mlx5_0,mlx5_1,mlx5_2,mlx5_3"})
	if got := four.runChannels(algoNVLSTree, protoSimple, 1<<30); got != 24 || four.heads != 4 {
		t.Errorf("four DGX B200 with half their NICs: NVLSTree on %d channels, %d heads; want 24 and 4", got, four.heads)
	}
	if got := modelOf(t, "dgx-h100", 2, 16).runChannels(algoTree, protoLL, 1<<10); got != 1 {
		t.Errorf("two DGX H100: Tree/LL of 1 KiB on %d channels; want 1", got)
	}
}

// CheckCollective refuses exactly the NCCL_ALGO and NCCL_PROTO values that leave a collective
// nothing to run, and builds no model without them (Ring/Simple serves every collective).
func TestCheckCollective(t *testing.T) {
	for _, c := range []struct {
		topo, coll string
		env        map[string]string
		refused    bool
	}{
		{"dgx-h100", "broadcast", nil, false},
		{"dgx-h100", "broadcast", map[string]string{"NCCL_NVLS_ENABLE": "0", "NCCL_COLLNET_ENABLE": "0"}, false},
		{"dgx-h100", "broadcast", map[string]string{"NCCL_ALGO": "nvls"}, true},
		{"dgx-h100", "allreduce", map[string]string{"NCCL_ALGO": "nvls"}, false},
		{"dgx-h100", "allreduce", map[string]string{"NCCL_ALGO": "nvls", "NCCL_NVLS_ENABLE": "0"}, true},
		{"dgx-h100", "allreduce", map[string]string{"NCCL_ALGO": "nvlstree"}, true}, // one node
		{"dgx-h100", "allreduce", map[string]string{"NCCL_ALGO": "nvls", "NCCL_PROTO": "LL"}, true},
		{"pcie-4090x8", "allreduce", map[string]string{"NCCL_PROTO": "LL128"}, false}, // asked for, so on
		{"pcie-4090x8", "allreduce", map[string]string{"NCCL_PROTO": "^LL,LL128,Simple"}, true},
	} {
		err := backend(t, c.topo, Options{Env: c.env}).CheckCollective(c.coll, 8)
		if (err != nil) != c.refused {
			t.Errorf("%s %s %v: CheckCollective gave %v, want refused %v", c.topo, c.coll, c.env, err, c.refused)
		}
	}
}

// NCCL_P2P_DISABLE takes away the P2P transport, not NVLS: with it, 8 H100 still run NVLS at 1 GiB
// as fast as without (its multicast reaches the switch over NVLink, no peer access), while the
// rings go through host memory, staged, and say so.
func TestP2PDisableLeavesNVLS(t *testing.T) {
	on := backend(t, "dgx-h100", Options{})
	off := backend(t, "dgx-h100", Options{Env: map[string]string{"NCCL_P2P_DISABLE": "1"}})
	mOn, mOff := newModel(on.topo, ranks(8), nil), newModel(off.topo, ranks(8), off.opt.Env)
	a, b := mOn.decide(collAllReduce, 1<<30).Chosen(), mOff.decide(collAllReduce, 1<<30).Chosen()
	if a.Algo != "NVLS" || b.Algo != "NVLS" || a.SimUS != b.SimUS {
		t.Errorf("1 GiB all-reduce: %s/%s %.1f us with P2P, %s/%s %.1f us without; want NVLS alike", a.Algo, a.Proto, a.SimUS, b.Algo, b.Proto, b.SimUS)
	}
	if mOn.staged || !mOff.staged || mOff.ringBus >= mOn.ringBus/10 {
		t.Errorf("rings: staged %v, %.1f GB/s with P2P; staged %v, %.1f GB/s without", mOn.staged, mOn.ringBus, mOff.staged, mOff.ringBus)
	}
}

// NCCL's tuner prices a ring on one NVLink node at the speed its search gave the channels, and
// the simulated ring runs at what the links carry. On 8 B200 the search gives 16 channels of 45
// GB/s (720 of the links' 721.8) and NVLS is held to its table's top speed, 90 a channel, 720
// on 8: the two tie on bandwidth and NVLS's lower latency wins at 8 GiB, as NCCL picks. With the
// links' figure in NCCL's estimate the ring won by 0.1%. So on 6 H100: 6 channels of 60 GB/s
// against the ring's 12 of 30.
func TestRingPricedAtSearchSpeed(t *testing.T) {
	t.Parallel()
	if c := modelOf(t, "dgx-h100", 1, 6).decide(collAllReduce, 1<<30).Chosen(); c.Algo != "NVLS" {
		t.Errorf("1 GiB on 6 H100: %s/%s; want NVLS", c.Algo, c.Proto)
	}
	m := modelOf(t, "dgx-b200", 1, 8)
	d := m.decide(collAllReduce, 8<<30)
	if c := d.Chosen(); c.Algo != "NVLS" {
		t.Errorf("8 GiB on 8 B200: %s/%s; want NVLS", c.Algo, c.Proto)
	}
	for _, c := range d.Candidates {
		if c.Algo != "Ring" || c.Proto != "Simple" {
			continue
		}
		if bus := c.AlgGBs * 14 / 8; math.Abs(bus-720) > 1e-6 {
			t.Errorf("Ring/Simple: NCCL's estimate %.2f GB/s busbw; want the search's 16 x 45 = 720", bus)
		}
		if sim := float64(8<<30) / 1e3 / (c.SimUS - c.SimLatencyUS) * 14 / 8; math.Abs(sim-m.ringBus) > 1e-6 || math.Abs(m.ringBus-721.8) > 0.05 {
			t.Errorf("Ring/Simple: simulated at %.2f GB/s busbw; want the links' %.2f (721.8)", sim, m.ringBus)
		}
	}
}

// A Simple ring's channels are thread blocks that each copy about one NVLink's worth (NCCL's
// per-link figure): where the links carry more, the blocks bound the simulated call. Ten DGX
// H100 run all-gather on 16 blocks, 16 x 20.6 GB/s busbw against the NICs' 384, while NCCL's
// estimate keeps the NICs'; one DGX H100's 24 blocks are past its NVLinks' 370.8, and a PCIe box
// has no such bound.
func TestRingBlockBound(t *testing.T) {
	t.Parallel()
	ring := func(m *model, bytes int64) Candidate {
		t.Helper()
		for _, c := range m.decide(collAllGather, bytes).Candidates {
			if c.Algo == "Ring" && c.Proto == "Simple" {
				return c
			}
		}
		t.Fatalf("no Ring/Simple candidate for %d B", bytes)
		return Candidate{}
	}
	busOf := func(c Candidate, bytes int64, n int) (nccl, sim float64) {
		f := float64(n-1) / float64(n)
		return c.AlgGBs * f, float64(bytes) / 1e3 / (c.SimUS - c.SimLatencyUS) * f
	}
	const size = 16 << 30
	ten := modelOf(t, "dgx-h100", 10, 80)
	c := ring(ten, size)
	nccl, sim := busOf(c, size, 80)
	if c.Channels != 16 || math.Abs(sim-16*20.6) > 0.01 || math.Abs(nccl-384) > 0.01 || !c.blockBound {
		t.Errorf("ten DGX H100: %d channels, simulated %.2f GB/s busbw, NCCL's estimate %.2f, bound %v; want 16, 16 x 20.6 = 329.6, 384, true", c.Channels, sim, nccl, c.blockBound)
	}
	if why := ten.explained(c, size, 79.0/80).SimWhy; !slices.Equal(why, []string{"block copy"}) {
		t.Errorf("explain's reason for ten DGX H100: %v; want [block copy]", why)
	}
	c = ring(modelOf(t, "dgx-h100", 1, 8), size)
	if _, sim := busOf(c, size, 8); c.blockBound || math.Abs(sim-370.8) > 0.05 {
		t.Errorf("one DGX H100: simulated %.2f GB/s busbw, bound %v; want the NVLinks' 370.8, not the %d blocks'", sim, c.blockBound, c.Channels)
	}
	if m := modelOf(t, "pcie-4090x8", 1, 8); m.ringBlockGBs(collAllGather, algoRing, protoSimple, size) != 0 {
		t.Error("8 RTX 4090 over PCIe: a block bound; want none")
	}
}

// Unmodelled names the set variables that steer NCCL and that the simulator does not read:
// not those it reads, not logging or naming ones, not nccl-tests' own, not empty (unset) ones.
func TestUnmodelled(t *testing.T) {
	env := map[string]string{"NCCL_NTHREADS": "256", "NCCL_BUFFSIZE": "1048576", "NCCL_ALGO": "ring",
		"NCCL_MAX_NCHANNELS": "4", "NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_TESTS_MIN_BW": "1",
		"NCCL_TUNER_PLUGIN": "", "NCCL_SOME_FUTURE_KNOB": "1", "CUDA_VISIBLE_DEVICES": "0"}
	got := Unmodelled(env)
	want := []string{"NCCL_BUFFSIZE", "NCCL_NTHREADS", "NCCL_SOME_FUTURE_KNOB"}
	if !slices.Equal(got, want) {
		t.Errorf("Unmodelled = %v, want %v", got, want)
	}
	for _, name := range EnvVars {
		if u := Unmodelled(map[string]string{name: "1"}); len(u) != 0 {
			t.Errorf("%s is read by the simulator, and Unmodelled names it", name)
		}
	}
}
