package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpubench/gpubench/internal/gpu"
)

// ExplainCollectives are the collectives Explain takes: the tuner's five, then the two NCCL runs
// as point-to-point operations.
var ExplainCollectives = []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "sendrecv"}

// The sizes Explain scans for regime changes: powers of two from ScanMinBytes to ScanMaxBytes.
const (
	ScanMinBytes = int64(8)
	ScanMaxBytes = int64(16) << 30
)

// Explanation is the cost model's reasoning for one collective of one size on one machine
// (gpubench explain; docs/model.md, "gpubench explain").
type Explanation struct {
	Collective string `json:"collective"`
	Topology   string `json:"topology"`
	Bytes      int64  `json:"bytes"`
	Ranks      int    `json:"ranks"`
	Nodes      int    `json:"nodes"`
	// PointToPoint: NCCL runs the collective (alltoall, sendrecv) as point-to-point operations,
	// which its tuner does not choose; Chosen is then the point-to-point model, with no runner-up
	// and no regime changes.
	PointToPoint bool `json:"point_to_point"`
	// Chosen is what the model runs; RunnerUp the next fastest candidate (nil when there is none)
	// and RunnerUpSlowerPercent how much longer it takes, in percent of Chosen's time.
	Chosen                ExplainedCandidate  `json:"chosen"`
	RunnerUp              *ExplainedCandidate `json:"runner_up"`
	RunnerUpSlowerPercent *float64            `json:"runner_up_slower_percent"`
	// Bottleneck is the kind of link that bounds Chosen's bandwidth: nvlink, pcie, smp, the
	// network's kind (infiniband, ethernet, roce, efa; net when the file names none), or memory for
	// one rank's local copy. Capped: NCCL's per-protocol or per-channel limit, not the links, sets
	// the figure (doubling the links' bandwidth would not raise it).
	Bottleneck string `json:"bottleneck"`
	Capped     bool   `json:"capped"`
	// LinksBusGBs is the bus bandwidth the links carry as NCCL's rings use them, and LinksLimit
	// the kind of link that bounds it (0 and "" on one rank). Staged: the rings' hops between
	// GPUs of a host go through host memory (P2P off), at the staged-copy efficiency.
	LinksBusGBs float64 `json:"links_bus_gbs"`
	LinksLimit  string  `json:"links_limit"`
	Staged      bool    `json:"staged"`
	// Dominant is the larger of Chosen's two terms: "latency" or "bandwidth".
	Dominant string `json:"dominant"`
	// BalanceBytes is the size at which Chosen's latency and bandwidth terms are equal:
	// latency × algorithm bandwidth.
	BalanceBytes int64 `json:"balance_bytes"`
	// Bottleneck, Capped, Dominant and BalanceBytes describe NCCL's estimate, which it picks by;
	// SimBottleneck, SimCapped, SimDominant and SimBalanceBytes the same for the simulated call
	// (Chosen's sim_ terms), what a run shows. They agree where the two times do.
	SimBottleneck   string `json:"sim_bottleneck"`
	SimCapped       bool   `json:"sim_capped"`
	SimDominant     string `json:"sim_dominant"`
	SimBalanceBytes int64  `json:"sim_balance_bytes"`
	// ChangeBelow and ChangeAbove are the nearest sizes, within the scan, where the chosen
	// (algorithm, protocol) changes; nil where it holds to the end of the scan.
	ChangeBelow *RegimeChange `json:"change_below"`
	ChangeAbove *RegimeChange `json:"change_above"`
	// LaunchUS is the host's time to launch the call on one GPU (the topology's calibrated
	// figure, else the model's), LaunchGPUs the most of the call's GPUs on one node, and
	// OneThreadLaunchUS what one thread takes to launch it on all of them, as nccl-tests -g does: a
	// timed loop of calls cannot run faster than that a call (docs/model.md, "Clocks").
	LaunchUS          float64 `json:"launch_us"`
	LaunchGPUs        int     `json:"launch_gpus"`
	OneThreadLaunchUS float64 `json:"one_thread_launch_us"`
	// ScanMinBytes and ScanMaxBytes bound the sizes scanned for regime changes.
	ScanMinBytes int64 `json:"scan_min_bytes"`
	ScanMaxBytes int64 `json:"scan_max_bytes"`
	// Candidates is every (algorithm, protocol) the tuner weighed, fastest first.
	Candidates []ExplainedCandidate `json:"candidates"`
}

// ExplainedCandidate is one (algorithm, protocol) at the explained size. Time is the latency
// term plus the bandwidth term, bytes / algorithm bandwidth; BusGBs is the algorithm bandwidth
// times nccl-tests' bus factor for the collective.
type ExplainedCandidate struct {
	Algo        string  `json:"algo"`
	Proto       string  `json:"proto"`
	Channels    int     `json:"channels"`
	TimeUS      float64 `json:"time_us"`
	LatencyUS   float64 `json:"latency_us"`
	BandwidthUS float64 `json:"bandwidth_us"`
	AlgGBs      float64 `json:"algbw_gbs"`
	BusGBs      float64 `json:"busbw_gbs"`
	// SimTimeUS is what the simulated call takes: TimeUS is NCCL's own estimate, which it picks
	// by; they differ where the fabric's latency is not InfiniBand's, a calibration applies, for
	// NVLS on one NVLink domain and where NCCL's search speed falls short of the links.
	SimTimeUS float64 `json:"sim_time_us"`
	// SimLatencyUS and SimBandwidthUS are SimTimeUS's two terms, and SimAlgGBs and SimBusGBs the
	// bandwidths of its bandwidth term, as LatencyUS, BandwidthUS, AlgGBs and BusGBs are TimeUS's.
	SimLatencyUS   float64 `json:"sim_latency_us"`
	SimBandwidthUS float64 `json:"sim_bandwidth_us"`
	SimAlgGBs      float64 `json:"sim_algbw_gbs"`
	SimBusGBs      float64 `json:"sim_busbw_gbs"`
	// FillUS is the part of SimTimeUS a pipeline of stages takes to drain, which NCCL's estimate
	// leaves out: NVLS all-reduce on one NVLink domain (docs/model.md, "NVLS's pipeline").
	FillUS float64 `json:"fill_us"`
	// SimWhy says why SimTimeUS differs from TimeUS, each reason that applies: "fabric latency"
	// (a network slower than the InfiniBand of NCCL's tables, switches between its leaves, a
	// per-message cost other than NCCL's own), "plugin latency" (NCCL's estimate
	// holds the latency its net plugin reports, the wire does not), "nvls links" (NVLS on one
	// NVLink domain, held to its links rather than NCCL's channel figure), "search speed" (channels
	// that NCCL's search gave a speed of its table below what the links carry), "block copy" (a
	// Simple ring's channels, one thread block each, carry less than its links: ringBlockGBs),
	// "channels" (NCCL_MAX_NCHANNELS runs the call on fewer channels than NCCL's figures count),
	// "network" (NVLS or CollNet across domains, held to what the network's links carry where
	// that is less than the NICs' rate NCCL counts: netLinks; a fabric of fewer uplinks than NICs,
	// or a node whose few GPUs leave by fewer NICs than it has), "nvlstree nics" (NVLSTree across
	// domains, held to what the NICs carry, where NCCL's figure gives n/(n-1) of it),
	// "calibration" (the topology's own fit); empty where they are the same model.
	SimWhy []string `json:"sim_why"`
}

// RegimeChange is a size where the tuner's pick changes. Bytes is the first size of the upper
// side; Algo and Proto are the pick on the far side from the explained size: just below Bytes
// for ChangeBelow, from Bytes on for ChangeAbove.
type RegimeChange struct {
	Bytes int64  `json:"bytes"`
	Algo  string `json:"algo"`
	Proto string `json:"proto"`
}

// ErrExplain marks an Explain refusal that the caller's input caused.
var ErrExplain = errors.New("explain")

// Explain says why the cost model (NCCL's tuner) runs collective coll of bytes as it does on the
// ranks devs of t, with env's NCCL_* variables: the pick and the runner-up, the bottleneck, the
// latency and bandwidth terms, and the sizes where the pick changes. bytes is the size the
// collective's command takes (--sizes): the whole buffer for allgather, reducescatter and
// alltoall, one rank's buffer otherwise. It explains the size that command runs with its default
// type (float): whole elements, and an all-gather's, reduce-scatter's or all-to-all's share a
// rank rounded down to 16 B; the sizes where the pick changes are sizes it runs too.
func Explain(t *gpu.Topology, devs []int, env map[string]string, coll string, bytes int64) (Explanation, error) {
	return explainSize(t, devs, env, coll, bytes, true)
}

// explainSize is Explain; round rounds an all-reduce's, broadcast's, reduce's or send/recv's size down
// to whole elements, as their commands run it (CollectiveTime prices the size it is given).
func explainSize(t *gpu.Topology, devs []int, env map[string]string, coll string, bytes int64, round bool) (Explanation, error) {
	switch {
	case !isExplained(coll):
		return Explanation{}, fmt.Errorf("%w: unknown collective %q: use %s", ErrExplain, coll, strings.Join(ExplainCollectives, ", "))
	case bytes < 1:
		return Explanation{}, fmt.Errorf("%w: size %d B: give at least 1 byte", ErrExplain, bytes)
	case len(devs) == 0:
		return Explanation{}, fmt.Errorf("%w: no GPUs to explain", ErrExplain)
	}
	for _, d := range devs {
		if d < 0 || d >= t.NumGPUs() {
			return Explanation{}, fmt.Errorf("%w: GPU %d: %s has GPUs 0-%d", ErrExplain, d, t.Name, t.NumGPUs()-1)
		}
	}
	if err := CheckEnv(env); err != nil {
		return Explanation{}, fmt.Errorf("%w: %v", ErrExplain, err)
	}
	if err := routeEnv(t, env); err != nil {
		return Explanation{}, fmt.Errorf("%w: %v", ErrExplain, err)
	}
	m := newModel(t, devs, env)
	switch coll {
	case "allgather", "reducescatter":
		// nccl-tests gives each rank its share rounded down to 16 B, and runs that (the row's size).
		share := rankShare(bytes, m.n)
		if share == 0 {
			return Explanation{}, fmt.Errorf("%w: %s of %d B over %d ranks gives each rank 0 B (nccl-tests rounds each rank's share down to 16 B): give at least %d B", ErrExplain, coll, bytes, m.n, 16*m.n)
		}
		bytes = share * int64(m.n)
	case "alltoall":
		// Likewise each share to a peer (explainP2P refuses 0 B).
		if share := rankShare(bytes, m.n); share > 0 {
			bytes = share * int64(m.n)
		}
	case "allreduce", "broadcast", "reduce", "sendrecv":
		// The command runs whole elements of its default type (float): size / 4 of them.
		if round && bytes%elemBytes != 0 {
			if bytes < elemBytes {
				return Explanation{}, fmt.Errorf("%w: %s of %d B is 0 elements (the command runs whole %d-byte floats): give at least %d B", ErrExplain, coll, bytes, elemBytes, elemBytes)
			}
			bytes -= bytes % elemBytes
		}
	}
	x := Explanation{Collective: coll, Topology: t.Name, Bytes: bytes, Ranks: m.n, Nodes: m.nodes,
		LinksBusGBs: m.ringBus, LinksLimit: m.limit, Staged: m.staged, ScanMinBytes: ScanMinBytes, ScanMaxBytes: ScanMaxBytes,
		LaunchUS: hostLaunchUS(t), LaunchGPUs: mostOnANode(t, devs), OneThreadLaunchUS: launchCostUS(t, devs, 1)}
	kind, tuned := collKinds[coll]
	if !tuned {
		if err := m.explainP2P(&x, coll, bytes); err != nil {
			return Explanation{}, err
		}
	} else {
		d := m.decide(kind, bytes)
		if d.Chosen().Algo == "none" {
			return Explanation{}, fmt.Errorf("%w: %v", ErrExplain, noAlgorithm(t, devs, env, coll, kind, bytes))
		}
		for _, c := range d.Candidates {
			x.Candidates = append(x.Candidates, m.explained(c, bytes, busFactor(coll, m.n)))
		}
		x.Chosen = x.Candidates[0]
		if len(x.Candidates) > 1 {
			r := x.Candidates[1]
			slower := 100 * (r.TimeUS/x.Chosen.TimeUS - 1)
			x.RunnerUp, x.RunnerUpSlowerPercent = &r, &slower
		}
		x.Bottleneck, x.Capped = m.bottleneck(kind, d.Chosen(), bytes, false)
		x.SimBottleneck, x.SimCapped = m.bottleneck(kind, d.Chosen(), bytes, true)
		grain := sizeGrain(coll, m.n)
		x.ScanMinBytes = (ScanMinBytes + grain - 1) / grain * grain
		x.ScanMaxBytes = ScanMaxBytes / grain * grain
		x.ChangeBelow, x.ChangeAbove = m.regimes(kind, bytes, d.Chosen(), grain)
	}
	c := x.Chosen
	x.Dominant, x.BalanceBytes = terms(c.LatencyUS, c.BandwidthUS, c.AlgGBs)
	x.SimDominant, x.SimBalanceBytes = terms(c.SimLatencyUS, c.SimBandwidthUS, c.SimAlgGBs)
	return x, nil
}

// terms says which of a latency and a bandwidth term is larger, and the size at which they are
// equal: latency × algorithm bandwidth.
func terms(latUS, bwUS, algGBs float64) (dominant string, balance int64) {
	dominant = "bandwidth"
	if latUS > bwUS {
		dominant = "latency"
	}
	if !math.IsInf(algGBs, 0) {
		balance = int64(math.Round(latUS * 1e3 * algGBs))
	}
	return dominant, balance
}

// noAlgorithm says which variables leave coll nothing to run, and what to do: what it runs with
// the other variables as set (NCCL_ALGO and NCCL_PROTO left out), and which of the algorithms
// NCCL_ALGO and NCCL_PROTO ask for NCCL_NVLS_ENABLE or NCCL_COLLNET_ENABLE keep off, with the
// value that turns them on, so that the advice never offers one of those.
func noAlgorithm(t *gpu.Topology, devs []int, env map[string]string, coll string, kind collKind, bytes int64) error {
	var set []string
	for _, v := range []string{"NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "NCCL_COLLNET_ENABLE"} {
		if s, ok := env[v]; ok {
			set = append(set, v+"="+s)
		}
	}
	if set == nil {
		set = []string{"the NCCL_* variables"}
	}
	with := func(base map[string]string, change map[string]string, drop ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			if !slices.Contains(drop, k) {
				out[k] = v
			}
		}
		for k, v := range change {
			if v == "" {
				delete(out, k)
			} else {
				out[k] = v
			}
		}
		return out
	}
	left := newModel(t, devs, with(env, nil, "NCCL_ALGO", "NCCL_PROTO")).decide(kind, bytes)
	// What turns each on: NVLS is on by default, CollNet off (NCCL_COLLNET_ENABLE=1 on a fabric
	// that reduces). Each variable's part is what the others, turned on too, would run without it.
	on := map[string]string{"NCCL_NVLS_ENABLE": "", "NCCL_COLLNET_ENABLE": "1"}
	allOn := servedAlgos(newModel(t, devs, with(env, on)).decide(kind, bytes))
	var off, fix []string
	for _, v := range []string{"NCCL_NVLS_ENABLE", "NCCL_COLLNET_ENABLE"} {
		s, ok := env[v]
		if ok && s == on[v] {
			continue
		}
		rest := with(env, on)
		if ok {
			rest[v] = s
		} else {
			delete(rest, v)
		}
		var lost []string
		without := servedAlgos(newModel(t, devs, rest).decide(kind, bytes))
		for _, a := range allOn {
			if !slices.Contains(without, a) {
				lost = append(lost, a)
			}
		}
		if lost == nil {
			continue
		}
		if ok {
			off = append(off, fmt.Sprintf("%s=%s turns off %s", v, s, strings.Join(lost, " and ")))
		} else {
			off = append(off, fmt.Sprintf("%s unset leaves %s off", v, strings.Join(lost, " and ")))
		}
		if on[v] == "" {
			fix = append(fix, "unset "+v)
		} else {
			fix = append(fix, "set "+v+"="+on[v])
		}
	}
	runs := served(left)
	if runs == "" {
		runs = "nothing"
	}
	advice := fmt.Sprintf("enable one that serves it (%s runs %s)", coll, runs)
	if off != nil {
		advice = fmt.Sprintf("%s; %s, or %s", strings.Join(off, "; "), strings.Join(fix, " and "), advice)
	}
	return fmt.Errorf("%s leaves no algorithm and protocol for %s here: %s", strings.Join(set, " "), coll, advice)
}

// servedAlgos lists the algorithms a decision weighed, in NCCL's order.
func servedAlgos(d Decision) []string {
	var out []string
	for _, a := range algoNames {
		if slices.ContainsFunc(d.Candidates, func(c Candidate) bool { return c.Algo == a }) {
			out = append(out, a)
		}
	}
	return out
}

// served lists the algorithms a decision weighed, in NCCL's order, each with its protocols.
func served(d Decision) string {
	protos := map[string][]string{}
	for _, c := range d.Candidates {
		protos[c.Algo] = append(protos[c.Algo], c.Proto)
	}
	var out []string
	for _, a := range algoNames {
		if p := protos[a]; p != nil {
			slices.SortFunc(p, func(x, y string) int { return slices.Index(protoNames[:], x) - slices.Index(protoNames[:], y) })
			out = append(out, a+" ("+strings.Join(p, ", ")+")")
		}
	}
	return strings.Join(out, ", ")
}

func isExplained(coll string) bool { return slices.Contains(ExplainCollectives, coll) }

// busFactor is nccl-tests' busbw / algbw for the collective on n ranks.
func busFactor(coll string, n int) float64 {
	switch coll {
	case "allreduce":
		return 2 * float64(n-1) / float64(n)
	case "allgather", "reducescatter", "alltoall":
		return float64(n-1) / float64(n)
	}
	return 1
}

// explained is a tuner candidate with its two terms and its bus bandwidth.
func (m *model) explained(c Candidate, bytes int64, factor float64) ExplainedCandidate {
	why := []string{}
	if c.fabricLat {
		why = append(why, "fabric latency")
	}
	if c.pluginLat {
		why = append(why, "plugin latency")
	}
	if c.Algo == algoNames[algoNVLS] && m.nodes == 1 {
		why = append(why, "nvls links")
	}
	if a := algoIndex(c.Algo); a >= 0 && m.graphs[a].linksIntra > m.graphs[a].bwIntra && c.SimUS < c.TimeUS {
		why = append(why, "search speed")
	}
	if c.blockBound {
		why = append(why, "block copy")
	}
	if c.fewerCh {
		why = append(why, "channels")
	}
	if a := algoIndex(c.Algo); a >= 0 && m.graphs[a].linksInter > 0 && c.SimUS > c.TimeUS {
		why = append(why, "network")
	}
	// NVLSTree (all-reduce only) across domains: where the NICs bound it, the simulated call
	// carries what they do, NCCL's figure n/(n-1) of that (bandwidthOf).
	if a := algoIndex(c.Algo); a == algoNVLSTree && m.nodes > 1 &&
		m.scaled(collAllReduce, c, bytes, a, 1, 2, true) > simAlgGBs(c, bytes)*(1+1e-9) {
		why = append(why, "nvlstree nics")
	}
	if cal := m.topo.Calibration; cal != nil {
		if _, ok := cal.Algorithms[c.Algo+"/"+c.Proto]; ok {
			why = append(why, "calibration")
		}
	}
	x := ExplainedCandidate{Algo: c.Algo, Proto: c.Proto, Channels: c.Channels, TimeUS: c.TimeUS,
		LatencyUS: c.LatencyUS, BandwidthUS: c.TimeUS - c.LatencyUS, AlgGBs: c.AlgGBs, BusGBs: c.AlgGBs * factor,
		SimTimeUS: c.SimUS, SimLatencyUS: c.SimLatencyUS, SimBandwidthUS: c.SimUS - c.SimLatencyUS, FillUS: c.FillUS, SimWhy: why}
	x.SimAlgGBs = simAlgGBs(c, bytes)
	x.SimBusGBs = x.SimAlgGBs * factor
	return x
}

// simAlgGBs is the algorithm bandwidth of candidate c's simulated bandwidth term for bytes
// (NVLS's pipeline fill and a calibration included); 0 where that term is none.
func simAlgGBs(c Candidate, bytes int64) float64 {
	if us := c.SimUS - c.SimLatencyUS; us > 0 {
		return float64(bytes) / (1e3 * us)
	}
	return 0
}

// netKind names the network as the link load does: its kind, or net.
func (m *model) netKind() string {
	if m.topo.Network != nil && m.topo.Network.Kind != "" {
		return m.topo.Network.Kind
	}
	return string(gpu.LinkNet)
}

// bottleneck names the kind of link that bounds candidate c's bandwidth, and whether NCCL's
// protocol or per-channel limit sets it instead: in NCCL's estimate, or with sim in the simulated
// call. Ring, Tree and PAT run on the rings' links, whose busiest link model.limit names; CollNet
// runs through the NICs; NVLS runs over NVLink inside a node and, across nodes, over the NICs
// too, and the bound is the side whose halving costs more. The candidate is capped when doubling
// its channels' bandwidth leaves it where it is.
func (m *model) bottleneck(kind collKind, c Candidate, bytes int64, sim bool) (string, bool) {
	a := algoIndex(c.Algo)
	if a < 0 { // one rank: a local copy
		return "memory", false
	}
	link := m.limit
	switch a {
	case algoNVLS, algoNVLSTree:
		link = string(gpu.LinkNVLink)
		if m.nodes > 1 && m.scaled(kind, c, bytes, a, 1, 0.5, sim) < m.scaled(kind, c, bytes, a, 0.5, 1, sim) {
			link = m.netKind()
		}
	case algoCollNetDirect, algoCollNetChain:
		link = m.netKind()
	}
	now := c.AlgGBs
	if sim {
		now = simAlgGBs(c, bytes)
	}
	return link, m.scaled(kind, c, bytes, a, 2, 2, sim) <= now*(1+1e-9)
}

// scaled is candidate c's algorithm bandwidth, NCCL's or with sim the simulated call's, with
// algorithm a's channels carrying intra times as much inside a node and inter times as much
// between nodes: NCCL's search speeds and, for the simulated call, what the links carry.
func (m *model) scaled(kind collKind, c Candidate, bytes int64, a int, intra, inter float64, sim bool) float64 {
	other := *m
	g := &other.graphs[a]
	g.bwIntra, g.linksIntra = g.bwIntra*intra, g.linksIntra*intra
	g.bwInter, g.linksInter = g.bwInter*inter, g.linksInter*inter
	for _, x := range other.decide(kind, bytes).Candidates {
		if x.Algo == c.Algo && x.Proto == c.Proto {
			c = x
			break
		}
	}
	if sim {
		return simAlgGBs(c, bytes)
	}
	return c.AlgGBs
}

func algoIndex(name string) int {
	for a, n := range algoNames {
		if n == name {
			return a
		}
	}
	return -1
}

// regimes finds the nearest sizes below and above bytes where the tuner's pick differs from
// chosen, among the sizes the collective's command runs: the multiples of grain (sizeGrain). It
// compares the pick at the powers of two from ScanMinBytes to ScanMaxBytes (each rounded down to
// grain), walking away from bytes, and bisects, over multiples of grain, to the first size the
// command runs on the upper side of the first that differs and its neighbour. Each candidate's
// time is linear in the size between powers of two (NCCL's tree correction changes only at powers
// of two), so a pick holds over one interval there and the bisection finds its end; only
// Ring/Simple's step in latency across nodes (the ring plateau) can break this.
func (m *model) regimes(kind collKind, bytes int64, chosen Candidate, grain int64) (below, above *RegimeChange) {
	pick := func(units int64) Candidate { return m.decide(kind, units*grain).Chosen() }
	same := func(units int64) bool {
		c := pick(units)
		return c.Algo == chosen.Algo && c.Proto == chosen.Proto
	}
	// boundary is the least unit count above lo, up to hi, whose pick is as hi's where lo's is not.
	boundary := func(lo, hi int64) int64 {
		want := same(hi)
		for hi-lo > 1 {
			if mid := lo + (hi-lo)/2; same(mid) == want {
				hi = mid
			} else {
				lo = mid
			}
		}
		return hi
	}
	at := max(bytes/grain, 1) // bytes, in multiples of grain
	// Below: hi holds the chosen pick; find the first power of two under it that does not.
	hi := at
	for p := ScanMaxBytes; p >= ScanMinBytes; p /= 2 {
		if q := p / grain; q >= 1 && q < hi {
			if !same(q) {
				b := boundary(q, hi)
				other := pick(b - 1)
				below = &RegimeChange{Bytes: b * grain, Algo: other.Algo, Proto: other.Proto}
				break
			}
			hi = q
		}
	}
	lo := at
	for p := ScanMinBytes; p <= ScanMaxBytes; p *= 2 {
		if q := p / grain; q > lo {
			if !same(q) {
				b := boundary(lo, q)
				other := pick(b)
				above = &RegimeChange{Bytes: b * grain, Algo: other.Algo, Proto: other.Proto}
				break
			}
			lo = q
		}
	}
	return below, above
}

// elemBytes is the size of the collectives' default type (float), whose whole elements their
// commands run.
var elemBytes = int64(gpu.Float.Size())

// sizeGrain is the step between the sizes coll's command runs on ranks GPUs with its default
// type: an all-gather's or reduce-scatter's share a rank is rounded down to 16 B (rankShare), so
// it runs multiples of 16 B × ranks; the other collectives run whole elements.
func sizeGrain(coll string, ranks int) int64 {
	if coll == "allgather" || coll == "reducescatter" {
		return 16 * int64(ranks)
	}
	return elemBytes
}

// rankShare is a rank's part of a size as nccl-tests splits it (an all-to-all's bytes to each
// peer, an all-gather's or reduce-scatter's bytes a rank): the size over the ranks, rounded down
// to 16 bytes.
func rankShare(bytes int64, ranks int) int64 { return bytes / int64(ranks) / 16 * 16 }

// explainP2P fills x for all-to-all and send/recv with the point-to-point model the simulated
// calls use (model.p2pTime): every transfer a flow on its route, all running together.
func (m *model) explainP2P(x *Explanation, coll string, bytes int64) error {
	x.PointToPoint = true
	n := m.n
	per, peers := bytes, 1 // send/recv: every rank sends its buffer to the next
	var flows []gpu.Flow
	var remote int
	switch coll {
	case "alltoall":
		per, peers = rankShare(bytes, n), n-1
		if per == 0 {
			return fmt.Errorf("%w: an all-to-all of %d B over %d ranks sends 0 B to each peer (nccl-tests rounds each share down to 16 B): give at least %d B", ErrExplain, bytes, n, 16*n)
		}
		var err error
		if flows, err = m.topo.AllToAllFlows(m.devs); err != nil {
			return fmt.Errorf("%w: %v (use -g)", ErrExplain, err)
		}
		for i := range flows {
			flows[i].Bytes = float64(per)
		}
		remote = m.allToAllRemoteOps()
	default:
		lanes := m.topo.LaneCount(m.devs)
		var pairs []pair
		for i := range n {
			if j := (i + 1) % n; j != i {
				flows = append(flows, m.topo.RouteFlows(m.devs[i], m.devs[j], float64(per), lanes)...)
				pairs = append(pairs, pair{i, j})
			}
		}
		remote = m.remoteOps(pairs)
	}
	total := m.p2pTime(flows, per, peers, remote)
	bw, link := m.linkLoad(flows)
	if n == 1 {
		c := m.decide(collBroadcast, per).Chosen() // a local copy, as the simulated call
		bw, link = c.TimeUS-c.LatencyUS, "memory"
	}
	if ch := m.p2pChannelUS(per, peers); n > 1 && ch > bw {
		bw, link = ch, "channels" // one operation's channels carry less than the links
	}
	if post := m.p2pPostUS(per, remote); n > 1 && post > bw {
		link = "messages" // the host posts the messages slower than the links carry them: a fixed cost, in the latency term
	}
	lat := math.Round((total-bw)*1e6) / 1e6 // to the picosecond: the sum's rounding is noise
	c := ExplainedCandidate{Algo: "P2P", Proto: "Simple", Channels: m.p2pOpChannels(per), TimeUS: total, LatencyUS: lat, BandwidthUS: bw,
		SimTimeUS: total, SimLatencyUS: lat, SimBandwidthUS: bw, SimWhy: []string{}} // the simulated call's model is the only one
	if bw > 0 {
		c.AlgGBs = float64(bytes) / (1e3 * bw)
		c.BusGBs = c.AlgGBs * busFactor(coll, n)
		c.SimAlgGBs, c.SimBusGBs = c.AlgGBs, c.BusGBs
	}
	x.Chosen, x.Candidates, x.Bottleneck, x.SimBottleneck = c, []ExplainedCandidate{c}, link, link
	x.ScanMinBytes, x.ScanMaxBytes = 0, 0
	return nil
}

// CollectiveTime is the simulated device time, µs, of one collective of bytes (the size as the
// collective's command takes it, as Explain does) over the GPUs devs of t, with env's NCCL_*
// variables: what the simulated call takes on its devices, the host's launch left out. A
// calibrated topology's figures apply.
func CollectiveTime(t *gpu.Topology, devs []int, env map[string]string, coll string, bytes int64) (float64, error) {
	kind, tuned := collKinds[coll]
	if !tuned || len(devs) < 2 { // point to point, or a local copy: Explain's time is the run's
		x, err := explainSize(t, devs, env, coll, bytes, false)
		return x.Chosen.TimeUS, err
	}
	for _, d := range devs {
		if d < 0 || d >= t.NumGPUs() {
			return 0, fmt.Errorf("%w: GPU %d: %s has GPUs 0-%d", ErrExplain, d, t.Name, t.NumGPUs()-1)
		}
	}
	if bytes < 1 {
		return 0, fmt.Errorf("%w: size %d B: give at least 1 byte", ErrExplain, bytes)
	}
	if err := CheckEnv(env); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrExplain, err)
	}
	if err := routeEnv(t, env); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrExplain, err)
	}
	c := newModel(t, devs, env).decide(kind, bytes).Chosen()
	if c.Algo == "none" {
		return 0, fmt.Errorf("%w: %v", ErrExplain, noAlgorithm(t, devs, env, coll, kind, bytes))
	}
	return c.SimUS, nil
}
