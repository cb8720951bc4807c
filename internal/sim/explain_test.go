package sim

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/gpu"
)

func explain(t *testing.T, topo string, n int, env map[string]string, coll string, bytes int64) Explanation {
	t.Helper()
	tp, err := LoadTopology(topo)
	if err != nil {
		t.Fatal(err)
	}
	x, err := Explain(tp, ranks(n), env, coll, bytes)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func pairOf(algo, proto string) string { return algo + "/" + proto }

// On an H100 NVSwitch, a tiny all-reduce is all startup cost and runs LL; a large one is all
// bandwidth and runs NVLS, the switch reducing the data; the pick changes between them, at a
// byte that explain finds exactly.
func TestExplainAllReduceRegimes(t *testing.T) {
	t.Parallel()
	small := explain(t, "dgx-h100", 8, nil, "allreduce", 8)
	if small.Chosen.Proto != "LL" || small.Dominant != "latency" {
		t.Errorf("8 B: %s, %s-dominated; want an LL protocol, latency-dominated", pairOf(small.Chosen.Algo, small.Chosen.Proto), small.Dominant)
	}
	if small.Chosen.LatencyUS < 1000*small.Chosen.BandwidthUS {
		t.Errorf("8 B: latency %v µs is not far above the bandwidth term %v µs", small.Chosen.LatencyUS, small.Chosen.BandwidthUS)
	}
	large := explain(t, "dgx-h100", 8, nil, "allreduce", 1<<30)
	if large.Chosen.Algo != "NVLS" || large.Dominant != "bandwidth" || large.Bottleneck != "nvlink" {
		t.Errorf("1 GiB: %s, %s-dominated, bottleneck %s; want NVLS, bandwidth-dominated, nvlink",
			pairOf(large.Chosen.Algo, large.Chosen.Proto), large.Dominant, large.Bottleneck)
	}
	if large.Chosen.BusGBs < 470 || large.Chosen.BusGBs > 485 || math.Abs(large.LinksBusGBs-370.8) > 1e-6 {
		t.Errorf("1 GiB: busbw %.1f, links %.1f; want NVLS's 470-485 over the ring's 370.8", large.Chosen.BusGBs, large.LinksBusGBs)
	}
	up, down := small.ChangeAbove, large.ChangeBelow
	if up == nil || down == nil || up.Bytes <= 8 || down.Bytes > 1<<30 {
		t.Fatalf("no regime change found between 8 B and 1 GiB: above 8 B %+v, below 1 GiB %+v", up, down)
	}
	// Each change is exact: one byte under it the lower pick, at it the upper one.
	for _, c := range []struct {
		name          string
		at            int64
		under, atPick string
	}{
		{"above 8 B", up.Bytes, pairOf(small.Chosen.Algo, small.Chosen.Proto), pairOf(up.Algo, up.Proto)},
		{"below 1 GiB", down.Bytes, pairOf(down.Algo, down.Proto), pairOf(large.Chosen.Algo, large.Chosen.Proto)},
	} {
		u, a := explain(t, "dgx-h100", 8, nil, "allreduce", c.at-1), explain(t, "dgx-h100", 8, nil, "allreduce", c.at)
		if got := pairOf(u.Chosen.Algo, u.Chosen.Proto); got != c.under {
			t.Errorf("%s: %d B picks %s; want %s", c.name, c.at-1, got, c.under)
		}
		if got := pairOf(a.Chosen.Algo, a.Chosen.Proto); got != c.atPick {
			t.Errorf("%s: %d B picks %s; want %s", c.name, c.at, got, c.atPick)
		}
	}
	// The nearest changes: the pick at 8 B holds up to its change, NVLS from its change on.
	for b := int64(8); b <= 1<<30; b *= 2 {
		want := pairOf(small.Chosen.Algo, small.Chosen.Proto)
		switch {
		case b >= down.Bytes:
			want = pairOf(large.Chosen.Algo, large.Chosen.Proto)
		case b >= up.Bytes:
			continue
		}
		if x := explain(t, "dgx-h100", 8, nil, "allreduce", b); pairOf(x.Chosen.Algo, x.Chosen.Proto) != want {
			t.Errorf("%d B picks %s; want %s (changes at %d B and %d B)", b, pairOf(x.Chosen.Algo, x.Chosen.Proto), want, up.Bytes, down.Bytes)
		}
	}
	if large.ChangeAbove != nil {
		t.Errorf("1 GiB: NVLS changes to %+v, but it should hold to 16 GiB", large.ChangeAbove)
	}
	if small.ChangeBelow != nil {
		t.Errorf("8 B: a change below the smallest size scanned: %+v", small.ChangeBelow)
	}
}

// The terms add up to the time, the bandwidth term is size / algbw, the balance size is where
// the chosen candidate's terms meet, and the candidates come fastest first.
func TestExplainTerms(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		topo  string
		coll  string
		bytes int64
	}{{"dgx-h100", "allreduce", 1 << 20}, {"dgx-h100x2", "allgather", 64 << 20}, {"pcie-4090x8", "broadcast", 3000}, {"dgx-a100", "reducescatter", 1 << 30}} {
		x := explain(t, c.topo, 8, nil, c.coll, c.bytes)
		ch := x.Chosen
		if math.Abs(ch.LatencyUS+ch.BandwidthUS-ch.TimeUS) > 1e-9*ch.TimeUS {
			t.Errorf("%s %s: latency %v + bandwidth %v != time %v", c.topo, c.coll, ch.LatencyUS, ch.BandwidthUS, ch.TimeUS)
		}
		if want := float64(c.bytes) / (1e3 * ch.AlgGBs); math.Abs(ch.BandwidthUS-want) > 1e-9*want {
			t.Errorf("%s %s: bandwidth term %v; want size / algbw = %v", c.topo, c.coll, ch.BandwidthUS, want)
		}
		if bal := float64(x.BalanceBytes) / (1e3 * ch.AlgGBs); math.Abs(bal-ch.LatencyUS) > 1e-3 {
			t.Errorf("%s %s: at the balance %d B the bandwidth term is %v µs, the latency %v µs", c.topo, c.coll, x.BalanceBytes, bal, ch.LatencyUS)
		}
		if (x.Dominant == "latency") != (ch.LatencyUS > ch.BandwidthUS) || (x.Dominant == "latency") != (c.bytes < x.BalanceBytes) {
			t.Errorf("%s %s: %s dominates at %d B, latency %v, bandwidth %v, balance %d B", c.topo, c.coll, x.Dominant, c.bytes, ch.LatencyUS, ch.BandwidthUS, x.BalanceBytes)
		}
		if x.RunnerUp == nil || x.RunnerUp.TimeUS <= ch.TimeUS || x.RunnerUp != nil && math.Abs(*x.RunnerUpSlowerPercent-100*(x.RunnerUp.TimeUS/ch.TimeUS-1)) > 1e-9 {
			t.Errorf("%s %s: runner-up %+v is not slower than %+v as said (%v%%)", c.topo, c.coll, x.RunnerUp, ch, x.RunnerUpSlowerPercent)
		}
		for i := 1; i < len(x.Candidates); i++ {
			if x.Candidates[i].TimeUS < x.Candidates[i-1].TimeUS {
				t.Errorf("%s %s: candidates out of order at %d", c.topo, c.coll, i)
			}
		}
	}
}

// NCCL_ALGO steers the explanation as it steers the simulated calls.
func TestExplainHonoursNCCLAlgo(t *testing.T) {
	t.Parallel()
	ring := map[string]string{"NCCL_ALGO": "Ring"}
	for _, size := range []int64{8, 1 << 20, 1 << 30} {
		x := explain(t, "dgx-h100", 8, ring, "allreduce", size)
		for _, c := range x.Candidates {
			if c.Algo != "Ring" {
				t.Errorf("NCCL_ALGO=Ring at %d B weighs %s", size, pairOf(c.Algo, c.Proto))
			}
		}
		if x.Chosen.Algo != "Ring" || x.RunnerUp == nil || x.RunnerUp.Algo != "Ring" {
			t.Errorf("NCCL_ALGO=Ring at %d B: %+v, runner-up %+v", size, x.Chosen, x.RunnerUp)
		}
		for _, d := range []*RegimeChange{x.ChangeBelow, x.ChangeAbove} {
			if d != nil && d.Algo != "Ring" {
				t.Errorf("NCCL_ALGO=Ring at %d B changes to %s", size, pairOf(d.Algo, d.Proto))
			}
		}
	}
	// NCCL's estimate: 12 channels of 30 GB/s, its search's speed; the simulated call: the links'
	// 370.8 GB/s.
	x := explain(t, "dgx-h100", 8, ring, "allreduce", 1<<30)
	if sim := x.Chosen.LatencyUS + float64(1<<30)/1e3/(370.8*8/14); x.Chosen.Proto != "Simple" || x.Capped || math.Abs(x.Chosen.BusGBs-360) > 1e-6 ||
		math.Abs(x.Chosen.SimTimeUS-sim) > 1e-6 || !slices.Equal(x.Chosen.SimWhy, []string{"search speed"}) {
		t.Errorf("NCCL_ALGO=Ring at 1 GiB: %+v, capped %v; want Ring/Simple at NCCL's 360 GB/s, simulated at the links' 370.8 (%.1f us)", x.Chosen, x.Capped, sim)
	}
	tp, _ := LoadTopology("dgx-h100")
	_, err := Explain(tp, ranks(8), map[string]string{"NCCL_ALGO": "NVLS"}, "broadcast", 1<<20)
	if !errors.Is(err, ErrExplain) || !strings.Contains(err.Error(), "NCCL_ALGO=NVLS") || !strings.Contains(err.Error(), "Ring") {
		t.Errorf("NVLS-only broadcast: %v; want a refusal naming NCCL_ALGO=NVLS and Ring", err)
	}
}

// The bottleneck is the link that bounds the chosen candidate: PCIe on PCIe machines, the
// network when NVLink SHARP across nodes waits on the NICs; LL's cap is not a link.
func TestExplainBottleneck(t *testing.T) {
	t.Parallel()
	if x := explain(t, "pcie-4090x8", 8, nil, "allreduce", 1<<30); x.Bottleneck != "pcie" || x.Capped || x.Chosen.Algo != "Ring" {
		t.Errorf("pcie-4090x8 1 GiB: %s over %s, capped %v; want Ring over pcie, not capped", pairOf(x.Chosen.Algo, x.Chosen.Proto), x.Bottleneck, x.Capped)
	}
	if x := explain(t, "dgx-h100", 8, nil, "broadcast", 8); x.Chosen.Proto != "LL" || !x.Capped || x.Bottleneck != "nvlink" {
		t.Errorf("dgx-h100 8 B broadcast: %s, capped %v, %s; want LL held by its cap on nvlink", pairOf(x.Chosen.Algo, x.Chosen.Proto), x.Capped, x.Bottleneck)
	}
	tp, err := LoadTopology("dgx-b200")
	if err != nil {
		t.Fatal(err)
	}
	if tp, err = tp.WithNodes(2); err != nil {
		t.Fatal(err)
	}
	x, err := Explain(tp, ranks(16), nil, "allreduce", 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if x.Chosen.Algo != "NVLSTree" || x.Bottleneck != tp.Network.Kind || x.Nodes != 2 {
		t.Errorf("two DGX B200, 1 GiB: %s over %s on %d nodes; want NVLSTree bounded by the network (%s)", pairOf(x.Chosen.Algo, x.Chosen.Proto), x.Bottleneck, x.Nodes, tp.Network.Kind)
	}
}

// Explain's time is the time the simulator gives the same call.
func TestExplainMatchesTheSimulator(t *testing.T) {
	t.Parallel()
	b := backend(t, "dgx-h100", Options{DataCap: 1})
	comm, bufs := commOn(t, b, 8, 1<<24)
	const bytes = 1 << 20
	for _, c := range []struct {
		coll string
		call func() error
	}{
		{"allreduce", func() error { return comm.AllReduce(bufs, bufs, bytes/4, gpu.Float, gpu.Sum) }},
		{"alltoall", func() error { return comm.AllToAll(bufs, bufs, bytes/8/4, gpu.Float) }},
		{"sendrecv", func() error {
			var ops []gpu.P2POp
			for r := range 8 {
				ops = append(ops, gpu.P2POp{Rank: r, Peer: (r + 1) % 8, Send: true, Buf: bufs[r]}, gpu.P2POp{Rank: r, Peer: (r + 7) % 8, Buf: bufs[r]})
			}
			return comm.SendRecv(ops, bytes/4, gpu.Float)
		}},
	} {
		before := b.Now()
		if err := c.call(); err != nil {
			t.Fatal(err)
		}
		if err := comm.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
		x := explain(t, "dgx-h100", 8, nil, c.coll, bytes)
		got := (b.Now()-before).Seconds()*1e6 - x.OneThreadLaunchUS
		if math.Abs(got-x.Chosen.TimeUS) > 0.01 {
			t.Errorf("%s of %d B: the simulator takes %.3f µs, explain says %.3f µs", c.coll, bytes, got, x.Chosen.TimeUS)
		}
		if x.PointToPoint != (c.coll != "allreduce") {
			t.Errorf("%s: point_to_point %v", c.coll, x.PointToPoint)
		}
	}
}

// explain's launch figures are the simulator's: one GPU's launch (a topology's calibrated one
// when it has it), times the most GPUs one thread launches on a node; and a loop of tiny calls
// from one thread runs at that pace.
func TestExplainLaunch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		topo      string
		n, gpus   int
		cal, want float64 // the topology's calibrated launch (0: none), and the launch explain gives
	}{{"dgx-a100", 8, 8, 0, launchUS}, {"dgx-a100", 3, 3, 0, launchUS}, {"dgx-h100x2", 16, 8, 0, launchUS}, {"dgx-h100", 8, 8, 3, 3}} {
		tp, err := LoadTopology(c.topo)
		if err != nil {
			t.Fatal(err)
		}
		if c.cal > 0 {
			tp.Calibration = &gpu.Calibration{LaunchUS: c.cal}
		}
		x, err := Explain(tp, ranks(c.n), nil, "allreduce", 8)
		if err != nil {
			t.Fatal(err)
		}
		if x.LaunchUS != c.want || x.LaunchGPUs != c.gpus || math.Abs(x.OneThreadLaunchUS-float64(c.gpus)*c.want) > 1e-9 {
			t.Errorf("%s (calibrated launch %v), %d GPUs: launch %.2f µs on %d GPUs, %.2f in all; want %.2f on %d", c.topo, c.cal, c.n, x.LaunchUS, x.LaunchGPUs, x.OneThreadLaunchUS, c.want, c.gpus)
		}
	}

	b := backend(t, "dgx-a100", Options{DataCap: 1})
	comm, bufs := commOn(t, b, 8, 8)
	const calls = 20
	before := b.Now()
	for range calls {
		if err := comm.AllReduce(bufs, bufs, 2, gpu.Float, gpu.Sum); err != nil {
			t.Fatal(err)
		}
	}
	if err := comm.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	x := explain(t, "dgx-a100", 8, nil, "allreduce", 8)
	perCall := (b.Now() - before).Seconds() * 1e6 / calls
	if x.OneThreadLaunchUS <= x.Chosen.SimTimeUS || math.Abs(perCall-x.OneThreadLaunchUS) > x.Chosen.SimTimeUS/calls+1e-6 {
		t.Errorf("8 B calls from one thread: %.3f µs a call; explain says the launches take %.3f µs against a %.3f µs call", perCall, x.OneThreadLaunchUS, x.Chosen.SimTimeUS)
	}
}

// The latency a net plugin reports enters NCCL's estimate as tuning.cc adds it (graph
// latencyInter): once per step between nodes, twice for Simple; the simulated call does not pay
// it, but it can change NCCL's pick, and then what the call runs. On two AWS p5 NCCL with AWS's
// plugin (75 µs) runs a 64 MiB all-reduce as Ring/LL128 where without it NVLSTree/Simple wins.
func TestPluginLatencyInNCCLsEstimate(t *testing.T) {
	t.Parallel()
	twenty := 20.0
	for _, proto := range []string{"LL", "Simple"} {
		env := map[string]string{"NCCL_ALGO": "Ring", "NCCL_PROTO": proto}
		tp := topoOf(t, "dgx-h100", 2)
		before, err := Explain(tp, ranks(16), env, "allreduce", 8) // under the ring's plateau (1.4x the latency)
		if err != nil {
			t.Fatal(err)
		}
		tp.Network.PluginLatencyUS = &twenty
		after, err := Explain(tp, ranks(16), env, "allreduce", 8)
		if err != nil {
			t.Fatal(err)
		}
		steps := 2.0 // a ring all-reduce on two nodes crosses between them twice
		want := steps * twenty
		if proto == "Simple" {
			want *= 2
		}
		if got := after.Chosen.LatencyUS - before.Chosen.LatencyUS; math.Abs(got-want) > 1e-9 || after.Chosen.SimTimeUS != before.Chosen.SimTimeUS {
			t.Errorf("Ring/%s: the plugin's 20 µs add %v µs to NCCL's latency (want %v), simulated %v against %v µs before", proto, got, want, after.Chosen.SimTimeUS, before.Chosen.SimTimeUS)
		}
	}
	p5, err := LoadTopology("../../accuracy/topologies/aws-p5-efa.json")
	if err != nil {
		t.Fatal(err)
	}
	pick := func() string {
		x, err := Explain(p5, ranks(16), nil, "allreduce", 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		return x.Chosen.Algo + "/" + x.Chosen.Proto
	}
	withPlugin := pick()
	zero := 0.0
	p5.Network.PluginLatencyUS = &zero
	if without := pick(); withPlugin != "Ring/LL128" || without != "NVLSTree/Simple" {
		t.Errorf("two p5, 64 MiB: %s with the plugin's latency, %s without; want Ring/LL128 and NVLSTree/Simple", withPlugin, without)
	}
}

func TestExplainRefuses(t *testing.T) {
	t.Parallel()
	tp, _ := LoadTopology("dgx-h100")
	for _, c := range []struct {
		coll  string
		devs  []int
		env   map[string]string
		bytes int64
		want  string
	}{
		{"allreduc", ranks(8), nil, 8, `unknown collective "allreduc"`},
		{"allreduce", ranks(8), nil, 0, "at least 1 byte"},
		{"allreduce", ranks(9), nil, 8, "GPU 8"},
		{"allreduce", nil, nil, 8, "no GPUs"},
		{"allreduce", ranks(8), map[string]string{"NCCL_PROTO": "LL256"}, 8, `NCCL_PROTO="LL256"`},
		{"alltoall", ranks(8), nil, 64, "at least 128 B"},
	} {
		if _, err := Explain(tp, c.devs, c.env, c.coll, c.bytes); !errors.Is(err, ErrExplain) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %d B on %d GPUs, %v: %v; want an error with %q", c.coll, c.bytes, len(c.devs), c.env, err, c.want)
		}
	}
}

// CollectiveTime is what a simulated call takes on its devices: the tuner's pick's simulated time,
// the point-to-point model's for all-to-all, and a calibration applies.
func TestCollectiveTime(t *testing.T) {
	topo, err := LoadTopology("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	devs := []int{0, 1, 2, 3, 4, 5, 6, 7}
	us, err := CollectiveTime(topo, devs, nil, "allreduce", 1<<30)
	if err != nil || math.Abs(us-3977.4) > 0.1 {
		t.Errorf("1 GiB all-reduce: %v µs, %v; want NVLS's simulated 3977.4: 3857.6 on its links and 119.8 for its pipeline to drain (NCCL's estimate is 3939.7)", us, err)
	}
	a2a, err := CollectiveTime(topo, devs, nil, "alltoall", 1<<30)
	if x, _ := Explain(topo, devs, nil, "alltoall", 1<<30); err != nil || a2a != x.Chosen.TimeUS {
		t.Errorf("all-to-all: %v µs, %v", a2a, err)
	}
	topo.Calibration = &gpu.Calibration{Algorithms: map[string]gpu.AlgoCalibration{"NVLS/Simple": {LatencyUS: 0, Bandwidth: 0.5}}}
	slow, _ := CollectiveTime(topo, devs, nil, "allreduce", 1<<30)
	if slow < 1.9*us {
		t.Errorf("at half the bandwidth: %v µs against %v", slow, us)
	}
	if _, err := CollectiveTime(topo, []int{0, 99}, nil, "allreduce", 8); err == nil {
		t.Error("GPU 99: no error")
	}
}

// NCCL's tree latency counts nRanks / nNodes GPUs per node in integers (tuning.cc): 4 and 3 GPUs on
// two nodes cost what 3 and 3 do, not what 4 and 4 do.
func TestTreeLatencyTruncatesRanksPerNode(t *testing.T) {
	t.Parallel()
	tp, err := LoadTopology("dgx-h100")
	if err == nil {
		tp, err = tp.WithNodes(2)
	}
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL"}
	lat := func(devs []int) float64 {
		x, err := Explain(tp, devs, env, "allreduce", 8)
		if err != nil {
			t.Fatal(err)
		}
		return x.Chosen.LatencyUS
	}
	uneven, even3, even4 := lat([]int{0, 1, 2, 3, 8, 9, 10}), lat([]int{0, 1, 2, 8, 9, 10}), lat([]int{0, 1, 2, 3, 8, 9, 10, 11})
	if uneven != even3 || even4 <= even3 {
		t.Errorf("tree latency: 4+3 GPUs %v µs, 3+3 %v, 4+4 %v; want 4+3 = 3+3 < 4+4", uneven, even3, even4)
	}
}

// CollNetDirect needs an NVSwitch in the node, as NCCL disables it where its topology has none
// (tuning.cc: nvsCount == 0); CollNetChain does not.
func TestCollNetDirectNeedsNVSwitch(t *testing.T) {
	t.Parallel()
	env := map[string]string{"NCCL_COLLNET_ENABLE": "1"}
	algos := func(tp *gpu.Topology, devs []int) map[string]bool {
		tp.Network.SHARP = true
		x, err := Explain(tp, devs, env, "allreduce", 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, c := range x.Candidates {
			seen[c.Algo] = true
		}
		return seen
	}
	dgx, err := LoadTopology("dgx-h100")
	if err == nil {
		dgx, err = dgx.WithNodes(2)
	}
	if err != nil {
		t.Fatal(err)
	}
	if a := algos(dgx, ranks(16)); !a["CollNetDirect"] || !a["CollNetChain"] {
		t.Errorf("two DGX H100 on SHARP weigh %v; want CollNetDirect and CollNetChain", a)
	}
	pcie, err := LoadTopology("../../accuracy/topologies/eth-l40s-x2.json")
	if err != nil {
		t.Fatal(err)
	}
	if a := algos(pcie, ranks(2)); a["CollNetDirect"] || !a["CollNetChain"] {
		t.Errorf("two PCIe L40S servers on SHARP weigh %v; want CollNetChain and no CollNetDirect", a)
	}
}

// Where the simulated call is not NCCL's estimate, the explanation says why: NVLS on one node
// held to its links, a fabric slower than InfiniBand, a calibration; nothing where they agree.
func TestExplainSimWhy(t *testing.T) {
	if x := explain(t, "dgx-h100", 8, nil, "allreduce", 1<<30); !slices.Equal(x.Chosen.SimWhy, []string{"nvls links"}) {
		t.Errorf("NVLS on one node: %q", x.Chosen.SimWhy)
	}
	if x := explain(t, "dgx-a100", 8, nil, "allreduce", 1<<30); len(x.Chosen.SimWhy) != 0 || x.Chosen.SimTimeUS != x.Chosen.TimeUS {
		t.Errorf("ring on one node: %q, %v against %v", x.Chosen.SimWhy, x.Chosen.SimTimeUS, x.Chosen.TimeUS)
	}
	if x := explain(t, "dgx-h100", 8, nil, "alltoall", 1<<20); x.Chosen.SimWhy == nil || len(x.Chosen.SimWhy) != 0 {
		t.Errorf("all-to-all: %#v; want an empty list (JSON [], not null)", x.Chosen.SimWhy)
	}
	efa := topoOf(t, "dgx-h100", 2)
	efa.Network.Kind, efa.Network.LatencyUS = "efa", 0
	x, err := Explain(efa, ranks(16), nil, "allreduce", 8)
	if err != nil || !slices.Equal(x.Chosen.SimWhy, []string{"fabric latency", "plugin latency"}) {
		t.Errorf("EFA: %q, %v", x.Chosen.SimWhy, err)
	}
	zero, twenty := 0.0, 20.0
	efa.Network.PluginLatencyUS = &zero
	if x, err = Explain(efa, ranks(16), nil, "allreduce", 8); err != nil || !slices.Equal(x.Chosen.SimWhy, []string{"fabric latency"}) {
		t.Errorf("EFA without the plugin's latency: %q, %v", x.Chosen.SimWhy, err)
	}
	ib := topoOf(t, "dgx-h100", 2)
	ib.Network.PluginLatencyUS = &twenty
	if x, err = Explain(ib, ranks(16), nil, "allreduce", 8); err != nil || !slices.Equal(x.Chosen.SimWhy, []string{"plugin latency"}) {
		t.Errorf("InfiniBand with a plugin's latency: %q, %v", x.Chosen.SimWhy, err)
	}
	// NVLSTree across two domains carries what the NICs do, NCCL's figure n/(n-1) of that.
	if x, err = Explain(topoOf(t, "dgx-b200", 2), ranks(16), nil, "allreduce", 1<<30); err != nil || x.Chosen.Algo != "NVLSTree" ||
		!slices.Equal(x.Chosen.SimWhy, []string{"nvlstree nics"}) || x.Chosen.SimTimeUS <= x.Chosen.TimeUS {
		t.Errorf("two DGX B200: %s, %q, %v against NCCL's %v, %v", x.Chosen.Algo, x.Chosen.SimWhy, x.Chosen.SimTimeUS, x.Chosen.TimeUS, err)
	}
	cal := topoOf(t, "dgx-a100", 1)
	cal.Calibration = &gpu.Calibration{Algorithms: map[string]gpu.AlgoCalibration{"Ring/Simple": {Bandwidth: 0.9}}}
	if x, err = Explain(cal, ranks(8), nil, "allreduce", 1<<30); err != nil || !slices.Equal(x.Chosen.SimWhy, []string{"calibration"}) {
		t.Errorf("calibrated: %q, %v", x.Chosen.SimWhy, err)
	}
}

// The sizes where the pick changes are sizes the collective's command runs: an all-gather's or
// reduce-scatter's are multiples of 16 B a rank, an all-reduce's whole floats; explaining the
// change gives the new pick, explaining the run size under it the old one.
func TestExplainChangesAreRunSizes(t *testing.T) {
	t.Parallel()
	h800x2, err := LoadTopology("hgx-h800")
	if err != nil {
		t.Fatal(err)
	}
	if h800x2, err = h800x2.WithNodes(2); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		topo  string
		n     int
		coll  string
		grain int64
	}{
		{"pcie-4090x8", 8, "allgather", 128}, {"dgx-h100x2", 16, "allgather", 256}, {"dgx-h100x2", 16, "reducescatter", 256},
		{"hgx-h800x2", 16, "allgather", 256}, {"dgx-a100", 3, "allgather", 48}, {"dgx-a100", 3, "reducescatter", 48},
		{"dgx-h100", 8, "allreduce", 4}, {"dgx-h100x2", 16, "allreduce", 4}, {"pcie-4090x8", 8, "broadcast", 4},
	} {
		tp := h800x2
		if c.topo != "hgx-h800x2" {
			if tp, err = LoadTopology(c.topo); err != nil {
				t.Fatal(err)
			}
		}
		at := func(b int64) string {
			x, err := Explain(tp, ranks(c.n), nil, c.coll, b)
			if err != nil {
				t.Fatal(err)
			}
			return pairOf(x.Chosen.Algo, x.Chosen.Proto)
		}
		changes := 0
		for _, size := range []int64{8 << 10, 1 << 30} {
			x, err := Explain(tp, ranks(c.n), nil, c.coll, size)
			if err != nil {
				t.Fatal(err)
			}
			if x.ScanMinBytes%c.grain != 0 || x.ScanMaxBytes%c.grain != 0 {
				t.Errorf("%s %s: scan %d-%d B is not of sizes the command runs (multiples of %d B)", c.topo, c.coll, x.ScanMinBytes, x.ScanMaxBytes, c.grain)
			}
			chosen := pairOf(x.Chosen.Algo, x.Chosen.Proto)
			for _, d := range []struct {
				change        *RegimeChange
				under, atPick string
			}{{x.ChangeBelow, "", chosen}, {x.ChangeAbove, chosen, ""}} {
				if d.change == nil {
					continue
				}
				changes++
				other := pairOf(d.change.Algo, d.change.Proto)
				under, atPick := d.under, d.atPick
				if under == "" {
					under = other
				} else {
					atPick = other
				}
				b := d.change.Bytes
				if b%c.grain != 0 {
					t.Errorf("%s %s from %d B: the change at %d B is not a size the command runs (a multiple of %d B)", c.topo, c.coll, size, b, c.grain)
				}
				if got := at(b); got != atPick {
					t.Errorf("%s %s from %d B: %d B picks %s; want %s", c.topo, c.coll, size, b, got, atPick)
				}
				if got := at(b - 1); got != under {
					t.Errorf("%s %s from %d B: %d B (run as %d B) picks %s; want %s", c.topo, c.coll, size, b-1, b-c.grain, got, under)
				}
			}
		}
		if changes == 0 {
			t.Errorf("%s %s: no change of pick between 8 KiB and 1 GiB", c.topo, c.coll)
		}
	}
}

// A refusal for want of an algorithm offers only what the other variables leave, and names the
// variable that turned off the algorithm NCCL_ALGO asks for.
func TestNoAlgorithmNamesWhatTurnedItOff(t *testing.T) {
	t.Parallel()
	tp, err := LoadTopology("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Explain(tp, ranks(8), map[string]string{"NCCL_ALGO": "nvls", "NCCL_NVLS_ENABLE": "0"}, "allreduce", 1<<30)
	want := "explain: NCCL_ALGO=nvls NCCL_NVLS_ENABLE=0 leaves no algorithm and protocol for allreduce here: NCCL_NVLS_ENABLE=0 turns off NVLS; " +
		"unset NCCL_NVLS_ENABLE, or enable one that serves it (allreduce runs Tree (LL, LL128, Simple), Ring (LL, LL128, Simple))"
	if err == nil || err.Error() != want {
		t.Errorf("NCCL_ALGO=nvls NCCL_NVLS_ENABLE=0: %v; want %q", err, want)
	}
	// Without an enabling variable in the way, the advice is what it was.
	_, err = Explain(tp, ranks(8), map[string]string{"NCCL_ALGO": "tree"}, "broadcast", 1<<20)
	want = "explain: NCCL_ALGO=tree leaves no algorithm and protocol for broadcast here: enable one that serves it (broadcast runs Ring (LL, LL128, Simple))"
	if err == nil || err.Error() != want {
		t.Errorf("NCCL_ALGO=tree on broadcast: %v; want %q", err, want)
	}
}

// Integer NCCL_* values are read as NCCL reads them: C's strtoll in base 0 (src/misc/param.cc),
// an empty value as unset, channel counts held to NCCL's range (connect.cc), NCCL_MIN_NRINGS and
// NCCL_MAX_NRINGS where the newer names are unset, and the switches that paths.cc and enqueue.cc
// test against 1 on only at 1; what is not a whole number is refused, naming the variable.
func TestNCCLNumbersReadAsNCCLReadsThem(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env            map[string]string
		minCh, maxCh   int
		nvls, collnet  bool
		p2pOff, pxnOff bool
		ibOff          bool
	}{
		{env: nil, maxCh: 64, nvls: true},
		{env: map[string]string{"NCCL_MAX_NCHANNELS": "010"}, maxCh: 8, nvls: true},
		{env: map[string]string{"NCCL_MAX_NCHANNELS": "0x10", "NCCL_MIN_NCHANNELS": " 4\n"}, minCh: 4, maxCh: 16, nvls: true},
		{env: map[string]string{"NCCL_MAX_NCHANNELS": "0", "NCCL_MIN_NCHANNELS": "-1"}, maxCh: 1, nvls: true},
		{env: map[string]string{"NCCL_MAX_NCHANNELS": "1000", "NCCL_MIN_NCHANNELS": "99999999999"}, minCh: 64, maxCh: 64, nvls: true},
		{env: map[string]string{"NCCL_MAX_NCHANNELS": "", "NCCL_NVLS_ENABLE": "", "NCCL_P2P_DISABLE": "", "NCCL_PXN_DISABLE": ""}, maxCh: 64, nvls: true},
		{env: map[string]string{"NCCL_MAX_NRINGS": "4", "NCCL_MIN_NRINGS": "2"}, minCh: 2, maxCh: 4, nvls: true},
		{env: map[string]string{"NCCL_MAX_NRINGS": "4", "NCCL_MAX_NCHANNELS": "8"}, maxCh: 8, nvls: true},
		{env: map[string]string{"NCCL_NVLS_ENABLE": "0x0", "NCCL_COLLNET_ENABLE": "1", "NCCL_P2P_DISABLE": "1", "NCCL_PXN_DISABLE": "1", "NCCL_IB_DISABLE": "2"},
			maxCh: 64, collnet: true, p2pOff: true, pxnOff: true, ibOff: true},
		{env: map[string]string{"NCCL_NVLS_ENABLE": "-1", "NCCL_COLLNET_ENABLE": "2", "NCCL_P2P_DISABLE": "2", "NCCL_PXN_DISABLE": "2"}, maxCh: 64, nvls: true},
	} {
		if err := CheckEnv(c.env); err != nil {
			t.Errorf("%q: %v", c.env, err)
			continue
		}
		e := parseTunerEnv(c.env)
		got := []any{e.minCh, e.maxCh, e.nvls, e.collnet, e.p2pDisable, e.noPXN, e.ibDisable}
		if want := []any{c.minCh, c.maxCh, c.nvls, c.collnet, c.p2pOff, c.pxnOff, c.ibOff}; !slices.Equal(got, want) {
			t.Errorf("%q: read as %v; want %v", c.env, got, want)
		}
	}
	for _, name := range envNumbers {
		for _, v := range []string{"x", "1e9", "12abc", "0x", "08", "+-1", "1 2"} {
			want := name + "=" + strconv.Quote(v) + ": give a whole number, such as 1 (decimal, or hex after 0x)"
			if err := CheckEnv(map[string]string{name: v}); err == nil || err.Error() != want {
				t.Errorf("%s=%q: %v; want %q", name, v, err, want)
			}
		}
	}
}

// NCCL_MAX_NCHANNELS applies first and NCCL_MIN_NCHANNELS after it (connect.cc: "We permit
// combining max, then min, to only use the first channels, then duplicate them"), so a MIN above
// MAX runs MIN channels.
func TestMinChannelsAboveMax(t *testing.T) {
	t.Parallel()
	env := map[string]string{"NCCL_MIN_NCHANNELS": "32", "NCCL_MAX_NCHANNELS": "4", "NCCL_ALGO": "ring"}
	x := explain(t, "dgx-h100", 8, env, "allreduce", 1<<30)
	if x.Chosen.Channels != 32 {
		t.Errorf("NCCL_MIN_NCHANNELS=32 NCCL_MAX_NCHANNELS=4: %d channels; want 32", x.Chosen.Channels)
	}
	for n, want := range map[int]int{1: 32, 24: 32, 64: 32} {
		if got := parseTunerEnv(env).clampChannels(n); got != want {
			t.Errorf("%d channels clamped to %d; want %d", n, got, want)
		}
	}
}

// Where the simulated call differs from NCCL's estimate, the sim_ figures describe the call (what a
// run shows) and the others stay NCCL's: an NVLSTree whose fabric carries 64 times less than its
// NICs is bound by the network at a few GB/s, where NCCL's estimate is NVLink's 461.6 GB/s busbw.
func TestExplainDescribesTheSimulatedCall(t *testing.T) {
	t.Parallel()
	over := topoOf(t, "dgx-h100", 1)
	net := *over.Network
	net.Layout, net.NodesPerLeaf, net.Tiers, net.Oversubscription = "fat-tree", 1, 2, 64
	over.Network = &net
	over, err := over.WithNodes(2)
	if err != nil {
		t.Fatal(err)
	}
	x, err := Explain(over, ranks(16), nil, "allreduce", 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	c := x.Chosen
	if c.Algo != "NVLSTree" || x.Bottleneck != "nvlink" || x.SimBottleneck != "infiniband" || x.SimCapped ||
		c.SimBusGBs > 15 || c.BusGBs < 400 || !slices.Contains(c.SimWhy, "network") {
		t.Errorf("fat tree 64:1: %s, NCCL's %s at busbw %.1f, simulated %s (capped %v) at %.1f, %q; want NVLSTree, nvlink at 461.6, infiniband at under 15",
			pairOf(c.Algo, c.Proto), x.Bottleneck, c.BusGBs, x.SimBottleneck, x.SimCapped, c.SimBusGBs, c.SimWhy)
	}
	// The simulated terms add up to its time, and its bandwidths are its bandwidth term's.
	for _, c := range x.Candidates {
		if math.Abs(c.SimLatencyUS+c.SimBandwidthUS-c.SimTimeUS) > 1e-9*c.SimTimeUS ||
			math.Abs(c.SimAlgGBs*1e3*c.SimBandwidthUS-float64(x.Bytes)) > 1e-6*float64(x.Bytes) ||
			math.Abs(c.SimBusGBs-c.SimAlgGBs*busFactor("allreduce", 16)) > 1e-9*c.SimBusGBs {
			t.Errorf("%s: simulated latency %v + bandwidth %v, time %v, algbw %v, busbw %v", pairOf(c.Algo, c.Proto), c.SimLatencyUS, c.SimBandwidthUS, c.SimTimeUS, c.SimAlgGBs, c.SimBusGBs)
		}
	}
	// NCCL_MAX_NCHANNELS=4: a Simple ring of 4 thread blocks carries a fifth of NCCL's figure,
	// held by its blocks, not the links.
	x, err = Explain(topoOf(t, "dgx-h100", 4), ranks(32), map[string]string{"NCCL_MAX_NCHANNELS": "4"}, "allgather", 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	if c := x.Chosen; x.Capped || !x.SimCapped || c.SimBusGBs > c.BusGBs/4 || c.SimBusGBs < 70 {
		t.Errorf("NCCL_MAX_NCHANNELS=4: NCCL's busbw %.1f (capped %v), simulated %.1f (capped %v); want about 80, held by its blocks", c.BusGBs, x.Capped, c.SimBusGBs, x.SimCapped)
	}
	// A fabric 1 ms a step slower than NCCL's tables: NCCL's estimate is bandwidth-bound at 64
	// MiB, the simulated call latency-bound, its balance past the size.
	slow := topoOf(t, "dgx-h100", 2)
	slow.Network.LatencyUS = 1000
	if x, err = Explain(slow, ranks(16), map[string]string{"NCCL_ALGO": "Ring"}, "allreduce", 64<<20); err != nil {
		t.Fatal(err)
	}
	if c := x.Chosen; x.Dominant != "bandwidth" || x.SimDominant != "latency" || x.SimBalanceBytes <= x.Bytes ||
		x.SimBalanceBytes != int64(math.Round(c.SimLatencyUS*1e3*c.SimAlgGBs)) {
		t.Errorf("1 ms fabric: NCCL's %s-dominated, simulated %s-dominated with balance %d B (latency %v, algbw %v)", x.Dominant, x.SimDominant, x.SimBalanceBytes, c.SimLatencyUS, c.SimAlgGBs)
	}
	// Where the two agree, so do the figures.
	x = explain(t, "dgx-a100", 8, nil, "allreduce", 1<<30)
	if c := x.Chosen; c.SimTimeUS != c.TimeUS || x.SimBottleneck != x.Bottleneck || x.SimCapped != x.Capped || x.SimDominant != x.Dominant ||
		math.Abs(c.SimBusGBs-c.BusGBs) > 1e-9*c.BusGBs || x.SimBalanceBytes != x.BalanceBytes {
		t.Errorf("ring on one node: %+v; want the simulated figures NCCL's", x)
	}
}

// A refusal names NCCL_COLLNET_ENABLE where CollNet is what NCCL_ALGO asks for and the fabric
// reduces: off by default, it is named unset as well as set to 0, with the value that turns it on.
// A fabric that cannot reduce is not sent to it.
func TestNoAlgorithmNamesCollNet(t *testing.T) {
	t.Parallel()
	sharp := topoOf(t, "dgx-h100", 2)
	sharp.Network.SHARP = true
	refusal := func(tp *gpu.Topology, env map[string]string) string {
		t.Helper()
		_, err := Explain(tp, ranks(16), env, "allreduce", 1<<30)
		if !errors.Is(err, ErrExplain) {
			t.Fatalf("%v: %v; want a refusal", env, err)
		}
		return err.Error()
	}
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"NCCL_ALGO": "CollNetDirect"}, "NCCL_COLLNET_ENABLE unset leaves CollNetDirect off; set NCCL_COLLNET_ENABLE=1, or enable one"},
		{map[string]string{"NCCL_ALGO": "CollNetDirect", "NCCL_COLLNET_ENABLE": "0"}, "NCCL_COLLNET_ENABLE=0 turns off CollNetDirect; set NCCL_COLLNET_ENABLE=1, or enable one"},
		// NVLS across nodes runs with CollNet: both are named.
		{map[string]string{"NCCL_ALGO": "NVLS", "NCCL_NVLS_ENABLE": "0"},
			"NCCL_NVLS_ENABLE=0 turns off NVLS; NCCL_COLLNET_ENABLE unset leaves NVLS off; unset NCCL_NVLS_ENABLE and set NCCL_COLLNET_ENABLE=1, or enable one"},
	} {
		if got := refusal(sharp, c.env); !strings.Contains(got, c.want) {
			t.Errorf("%v: %s; want %q", c.env, got, c.want)
		}
	}
	// The advice runs it.
	x, err := Explain(sharp, ranks(16), map[string]string{"NCCL_ALGO": "CollNetDirect", "NCCL_COLLNET_ENABLE": "1"}, "allreduce", 1<<30)
	if err != nil || x.Chosen.Algo != "CollNetDirect" {
		t.Errorf("NCCL_COLLNET_ENABLE=1: %s, %v; want CollNetDirect", x.Chosen.Algo, err)
	}
	// Without SHARP no variable brings CollNet, and none is named; nor where the protocol rules it out.
	if got := refusal(topoOf(t, "dgx-h100", 2), map[string]string{"NCCL_ALGO": "CollNetDirect"}); strings.Contains(got, "NCCL_COLLNET_ENABLE") {
		t.Errorf("no SHARP: %s; want NCCL_COLLNET_ENABLE left out", got)
	}
	if got := refusal(sharp, map[string]string{"NCCL_ALGO": "CollNetDirect", "NCCL_PROTO": "LL"}); strings.Contains(got, "NCCL_COLLNET_ENABLE") {
		t.Errorf("CollNetDirect with LL: %s; want NCCL_COLLNET_ENABLE left out (CollNet runs only Simple)", got)
	}
}
