package diag

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/p2p"
	"github.com/gpubench/gpubench/internal/sim"
	"github.com/gpubench/gpubench/internal/topo"
)

var dataChecks = []Check{
	{Name: "p2p-bandwidth", Group: "data", Moves: true, Run: checkP2PBandwidth},
	{Name: "allreduce-bandwidth", Group: "data", Moves: true, Run: checkAllReduce},
}

// minFraction is how much of the topology's nominal bandwidth a measurement must reach: DCGM
// derives its pass thresholds as 0.75 of a reference figure (telemetry.md §2.6, "75 % of a
// reference" thresholds), and gpubench takes the nominal figure as that reference.
const minFraction = 0.75

// The data checks' sizes: large enough that bandwidth, not latency, sets the time (nvbandwidth
// uses 512 MiB; 64 MiB copies reach its figures within a few per cent), small enough to take
// well under a second a pair.
const (
	p2pBytes       = 64 << 20
	allReduceBytes = 256 << 20
	dataTimeout    = 30 * time.Second
)

// maxP2PPairs bounds the ordered pairs the P2P check measures: every pair of 2,048 simulated
// 8-GPU hosts (114,688, about 20 s), where 64 hosts of 256 GPUs would be 4 million.
var maxP2PPairs = 1 << 17 // lowered by tests

// notChecked is the finding's note when no data could be checked at any size.
const notChecked = "data not checked: the simulator backs too little device memory with data (--sim-data-cap)"

// dataSkip is the result of a data check without a backend.
func (f *Facts) dataSkip() (Result, bool) {
	if f.opt.Backend != nil {
		return Result{}, false
	}
	why, remedy := "no backend to move data on", "see the libraries checks"
	switch {
	case f.sim && f.opt.BackendErr != nil: // no library check on the simulator: the whole error
		why, remedy = f.opt.BackendErr.Error(), "see the nccl-names check"
	case f.opt.BackendErr != nil:
		why = strings.SplitN(f.opt.BackendErr.Error(), ":", 2)[0] // the whole error is the library check's
	}
	return skip(why, remedy), true
}

// nominalIndex finds a device in the nominal topology: by PCI bus id, or on the simulator by
// ordinal; -1 when it is not there.
func (f *Facts) nominalIndex(d gpu.Device) int {
	t := f.opt.Nominal
	if t == nil {
		return -1
	}
	// The simulator's devices are the topology's GPUs in order, and their bus ids cannot tell them
	// apart: every node of a topology of several repeats its template's.
	if f.sim {
		if d.Ordinal < t.NumGPUs() {
			return d.Ordinal
		}
		return -1
	}
	if bus, ok := topo.ParseBusID(d.PCIBusID); ok {
		for i := 0; i < t.NumGPUs(); i++ {
			if g, _ := t.GPU(i); g.PCIBusID != "" {
				if b, ok := topo.ParseBusID(g.PCIBusID); ok && b == bus {
					return i
				}
			}
		}
	}
	return -1
}

// pathGBs is the nominal bandwidth of the path from GPU a to GPU b: its slowest link.
func pathGBs(t *gpu.Topology, a, b int) float64 {
	p := t.Route(a, b)
	gbs := math.Inf(1)
	for _, h := range p.Hops {
		gbs = math.Min(gbs, t.LinkGBs(h.Edge))
	}
	if math.IsInf(gbs, 1) {
		return 0
	}
	return gbs
}

// expectedP2P is the unidirectional P2P-enabled matrix the simulator gives for the same copies on
// the nominal topology (nominal: a simulator of it), by the measured devices' order, or nil when a
// device is not in it.
func expectedP2P(f *Facts, nominal *sim.Backend, devs []gpu.Device, opt p2p.Options) *p2p.Matrix {
	var idx []int
	for _, d := range devs {
		k := f.nominalIndex(d)
		if k < 0 || nominal == nil {
			return nil
		}
		idx = append(idx, k)
	}
	opt.Devices, opt.Verify, opt.Timeout = idx, false, 0
	res, err := p2p.Run(f.opt.Context, nominal, opt)
	if err != nil {
		return nil
	}
	return res.Matrix("uni_enabled")
}

// checkP2PBandwidth: each pair of GPUs that can use P2P copies at 0.75 of what the simulator
// expects of the pair on the nominal topology (gpubench p2p --expect's figure), or where it cannot
// say, of its path's nominal bandwidth (gpubench p2p's unidirectional P2P-enabled matrix, with
// 64 MiB copies), host by host (p2p.Groups). Every copy's data is checked; where the
// copies carried none (the simulator's data cap), copies at a size within the cap are checked
// instead.
func checkP2PBandwidth(f *Facts) Result {
	if r, ok := f.dataSkip(); ok {
		return r
	}
	b, ok := f.opt.Backend.(p2p.Backend)
	if !ok {
		return skip("this backend cannot copy between GPUs", "")
	}
	devs := b.Devices()
	if len(devs) < 2 {
		return skip(fmt.Sprintf("%d GPU: no pair to measure", len(devs)), "")
	}
	var nominal *sim.Backend
	if f.opt.Nominal != nil {
		if n, err := sim.New(f.opt.Nominal, sim.Options{}); err == nil {
			nominal = n
			defer n.Close()
		}
	}
	groups, split := p2p.Groups(devs)
	popt := p2p.Options{Size: p2pBytes, Repeat: 4, Samples: 3, Verify: true, Timeout: dataTimeout}
	var slow []string
	var common []int // the GPUs every slow pair so far has
	measured, compared, enabled, paired := 0, 0, false, false
	worst := math.Inf(1)
	unchecked, fromExpected := "", true
	budget, left := maxP2PPairs, 0 // ordered pairs still to measure; groups left unmeasured
	for gi, g := range groups {
		if len(g) < 2 {
			continue
		}
		if budget -= len(g) * (len(g) - 1); budget < 0 && paired {
			left = len(groups) - gi
			break
		}
		paired = true
		popt.Devices = g
		res, err := p2p.Run(f.opt.Context, b, popt)
		if err != nil {
			return dataFail(err, "gpubench p2p")
		}
		checked := res
		if res.Mismatched == 0 && res.Unverified > 0 {
			var why string
			if checked, why, err = checkP2PData(f, b, g); err != nil {
				return dataFail(err, "gpubench p2p")
			}
			unchecked = cmp.Or(unchecked, why)
		}
		if checked != nil && checked.Mismatched > 0 {
			return wrongCopies(checked)
		}
		uni := res.Matrix("uni_enabled")
		if uni == nil {
			continue
		}
		enabled = true
		expected := expectedP2P(f, nominal, res.Devices, popt)
		fromExpected = fromExpected && expected != nil
		for i, a := range res.Devices {
			for j, c := range res.Devices {
				if i == j || uni.Cells[i][j].Value == nil {
					continue
				}
				measured++
				ta, tc := f.nominalIndex(a), f.nominalIndex(c)
				if ta < 0 || tc < 0 {
					continue
				}
				want := pathGBs(f.opt.Nominal, ta, tc)
				if expected != nil {
					want = 0
					if v := expected.Cells[i][j].Value; v != nil {
						want = *v
					}
				}
				if want <= 0 {
					continue
				}
				compared++
				got := *uni.Cells[i][j].Value
				worst = math.Min(worst, got/want)
				if got < minFraction*want {
					slow = append(slow, fmt.Sprintf("%d->%d %.1f of %.0f GB/s", a.Ordinal, c.Ordinal, got, want))
					if len(slow) == 1 {
						common = []int{a.Ordinal, c.Ordinal}
					} else {
						common = slices.DeleteFunc(common, func(g int) bool { return g != a.Ordinal && g != c.Ordinal })
					}
				}
			}
		}
	}
	switch {
	case !paired:
		return skip("no host has two GPUs: no pair to measure", "")
	case !enabled:
		return skip("gpubench p2p measured no P2P-enabled copies", "")
	}
	what, floor := "their path's nominal bandwidth", "nominal"
	if fromExpected && f.opt.Nominal != nil {
		what, floor = "what the simulator expects of them on "+f.opt.Nominal.Name, "expected"
	}
	// noted adds to a result what was not measured or checked, when something was not.
	noted := func(r Result) Result {
		if split {
			r.Finding += fmt.Sprintf("; measured in groups of at most %d GPUs, so pairs across groups of one host were not", p2p.MaxDevices)
		}
		if left > 0 {
			r.Finding += fmt.Sprintf("; the last %d of %d groups of GPUs (hosts, or parts of one) were not measured, past %d pairs", left, len(groups), maxP2PPairs)
		}
		if unchecked == "" {
			return r
		}
		r.Finding += "; " + unchecked
		return r.with("data_checked", false)
	}
	switch {
	case measured == 0:
		return skip("no pair of GPUs can use P2P, so there is no P2P copy to measure", "see the p2p-topology check")
	case len(slow) > 1 && len(common) == 1: // every slow pair has one GPU: its links, not the pairs'
		g := common[0]
		return noted(fail(fmt.Sprintf("look at GPU %d's NVLinks and PCIe link (nvlink, pcie-link checks); gpubench p2p shows every pair", g),
			fmt.Sprintf("%d of %d pairs copy below %.0f%% of %s, every one to or from GPU %d: %s", len(slow), compared, minFraction*100, what, g, firstFew(slow))).
			with("gpu", g).with("slow", slow).with("floor_from", floor))
	case len(slow) > 0:
		return noted(fail("look for a degraded PCIe link or NVLink (pcie-link, nvlink checks), ACS or the IOMMU (acs, iommu checks); gpubench p2p shows every pair",
			fmt.Sprintf("%d of %d pairs copy below %.0f%% of %s: %s", len(slow), compared, minFraction*100, what, firstFew(slow))).with("slow", slow).with("floor_from", floor))
	case compared == 0:
		return noted(skip(fmt.Sprintf("measured %d pairs, but the topology gives no nominal bandwidth to compare with", measured), ""))
	}
	return noted(pass(fmt.Sprintf("%d pairs at %.0f%% or more of %s", compared, math.Floor(worst*100), what)).with("worst_fraction", math.Round(worst*1000)/1000).with("floor_from", floor))
}

// checkP2PData copies between every pair of the GPUs devs at a size whose buffers the backend
// holds data for on all its GPUs (so that across the groups of p2p.Groups each GPU is checked at
// one size), and checks the copies: for when the measured copies carried none. It returns that run,
// or nil and why no data was checked.
func checkP2PData(f *Facts, b p2p.Backend, devs []int) (*p2p.Result, string, error) {
	size := coll.CheckSize(b, len(b.Devices()))
	if size == 0 {
		return nil, notChecked, nil
	}
	res, err := p2p.Run(f.opt.Context, b, p2p.Options{Devices: devs, Size: size, Repeat: 1, Samples: 1, Verify: true, Timeout: dataTimeout})
	if err != nil {
		return nil, "", err
	}
	if res.Verified+res.Mismatched == 0 {
		return nil, notChecked, nil
	}
	return res, "", nil
}

// wrongCopies fails the P2P check for the copies whose data came back wrong, naming the pairs and,
// when every such copy touches one GPU (one that corrupts what it receives, or its link), that GPU.
func wrongCopies(res *p2p.Result) Result {
	var pairs []string
	var common []int // the GPUs that every bad copy so far touches
	first := true
	touch := func(gpus ...int) {
		if first {
			common, first = slices.Compact(slices.Sorted(slices.Values(gpus))), false
			return
		}
		common = slices.DeleteFunc(common, func(g int) bool { return !slices.Contains(gpus, g) })
	}
	for _, c := range res.BadCopies() {
		touch(c.Src, c.Dst)
		if p := fmt.Sprintf("%d->%d", c.Src, c.Dst); strings.HasPrefix(c.Key, "uni_") && !slices.Contains(pairs, p) {
			pairs = append(pairs, p)
		}
	}
	for i, h := range res.Host {
		if h.H2D.Bad || h.D2H.Bad || h.Bidir.Bad || h.Local.Bad {
			touch(res.Devices[i].Ordinal)
		}
	}
	finding := fmt.Sprintf("%d copies delivered wrong data", res.Mismatched)
	remedy := "run gpubench p2p to see which pairs; reset the GPUs, and if it persists suspect the GPU, NVLink or PCIe path"
	r := Result{}
	if len(common) == 1 {
		finding += fmt.Sprintf(", every one to or from GPU %d", common[0])
		remedy = fmt.Sprintf("reset GPU %d, and if it persists suspect it or its NVLink or PCIe path; gpubench p2p shows every pair", common[0])
		r = r.with("gpu", common[0])
	}
	if len(pairs) > 0 {
		finding += ": " + firstFew(pairs)
		r = r.with("pairs", pairs)
	}
	r.Status, r.Finding, r.Remedy = Fail, finding, remedy
	return r.with("mismatched", res.Mismatched)
}

// dataFail turns a measurement's error into a result.
func dataFail(err error, tool string) Result {
	var hang *gpu.HangError
	if errors.As(err, &hang) {
		return fail("a GPU or link that never finishes: reset the GPUs, and run "+tool+" with --timeout to find which", err.Error())
	}
	return fail("run "+tool+" for the whole error", err.Error())
}

// allReduceOptions are the all-reduce check's: one size, checked.
func allReduceOptions() coll.Options {
	return coll.Options{Coll: coll.AllReduce, Sweep: coll.Sweep{Min: allReduceBytes, Max: allReduceBytes, Factor: 2},
		DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum}, Iters: 5, Warmup: 1, Check: 1, Average: 1, Timeout: dataTimeout}
}

// expectedAllReduce is the busbw the simulator gives for the check's all-reduce on the nominal
// topology's first n GPUs, or 0 when the ranks are not those GPUs or the simulator cannot say.
func expectedAllReduce(f *Facts, idx []int) float64 {
	for i, k := range idx {
		if k != i {
			return 0
		}
	}
	b, err := sim.New(f.opt.Nominal, sim.Options{})
	if err != nil {
		return 0
	}
	defer b.Close()
	o := allReduceOptions()
	o.NGPUs, o.Check, o.Timeout = len(idx), 0, 0
	s, err := coll.Run(f.opt.Context, b, o)
	if err != nil {
		return 0
	}
	return s.BestBusBW
}

// checkAllReduceData runs the check's all-reduce over the n GPUs at a size whose buffers the
// backend holds data for, checked: for when the measured size carried none. It returns that run,
// or nil and why no data was checked.
func checkAllReduceData(f *Facts, b gpu.Backend, n int) (*coll.Summary, string, error) {
	size := coll.CheckSize(b, n)
	if size == 0 {
		return nil, notChecked, nil
	}
	o := allReduceOptions()
	o.Sweep, o.Iters, o.Warmup = coll.Sweep{Min: size, Max: size, Factor: 2}, 1, 0
	s, err := coll.Run(f.opt.Context, b, o)
	if err != nil {
		return nil, "", err
	}
	if s.TimingOnlyFrom > 0 {
		return nil, notChecked, nil
	}
	return s, "", nil
}

// wrongSums fails the all-reduce check for wrong data, naming the GPUs whose output held it.
func wrongSums(s *coll.Summary) Result {
	var gpus []int
	var names []string
	for _, row := range s.Results {
		for _, p := range []coll.Placement{row.OutOfPlace, row.InPlace} {
			for rank, n := range p.WrongByRank {
				if g := s.Devices[rank].Ordinal; n > 0 && !slices.Contains(gpus, g) {
					gpus, names = append(gpus, g), append(names, fmt.Sprint(g))
				}
			}
		}
	}
	finding := fmt.Sprintf("all-reduce delivered wrong data in %d %s", s.OutOfBounds, plural(s.OutOfBounds, "placement", "placements"))
	remedy := "run gpubench allreduce to see which sizes; reset the GPUs, and if it persists suspect a GPU or link"
	r := Result{}
	if len(gpus) > 0 {
		finding += ", in the output of GPU " + firstFew(names)
		r = r.with("gpus", gpus)
	}
	if len(gpus) == 1 {
		remedy = fmt.Sprintf("reset GPU %d, and if it persists suspect it or its links; gpubench allreduce shows which sizes", gpus[0])
	}
	r.Status, r.Finding, r.Remedy = Fail, finding, remedy
	return r
}

// checkAllReduce: a 256 MiB float sum all-reduce over every GPU reaches 0.75 of what the simulator
// expects of the nominal topology (gpubench allreduce --expect's figure), or where it cannot say,
// 0.75 of the topology's nominal bus bandwidth (the nominal bus peak gpubench allreduce prints).
// Its data is checked; where it carried none (the simulator's data cap), an all-reduce at a size
// within the cap is checked instead.
func checkAllReduce(f *Facts) Result {
	if r, ok := f.dataSkip(); ok {
		return r
	}
	b := f.opt.Backend
	devs := b.Devices()
	if len(devs) < 2 {
		return skip(fmt.Sprintf("%d GPU: all-reduce moves no data between GPUs", len(devs)), "")
	}
	for _, d := range devs {
		if d.MemoryBytes > 0 && coll.MemoryLimit(d.MemoryBytes, true) < 1 {
			return skip(fmt.Sprintf("device %d has %s of memory, too little for nccl-tests' reserve and buffers", d.Ordinal, bytesText(d.MemoryBytes)), "")
		}
	}
	s, err := coll.Run(f.opt.Context, b, allReduceOptions())
	if errors.Is(err, gpu.ErrNoCollectives) {
		return skip("this backend has no collectives", "")
	}
	if err != nil {
		return dataFail(err, "gpubench allreduce")
	}
	if s.OutOfBounds > 0 {
		return wrongSums(s)
	}
	unchecked := ""
	if s.TimingOnlyFrom > 0 {
		small, why, err := checkAllReduceData(f, b, len(s.Devices))
		if err != nil {
			return dataFail(err, "gpubench allreduce")
		}
		if small != nil && small.OutOfBounds > 0 {
			return wrongSums(small)
		}
		unchecked = why
	}
	r := allReduceVerdict(f, s)
	if unchecked != "" {
		r.Finding += "; " + unchecked
		r = r.with("data_checked", false)
	}
	return r
}

// allReduceVerdict compares the check's busbw with its floor.
func allReduceVerdict(f *Facts, s *coll.Summary) Result {
	peak, limit := s.BusPeak, s.PeakLimit
	expected := 0.0
	if f.opt.Nominal != nil {
		var idx []int
		for _, d := range s.Devices {
			if k := f.nominalIndex(d); k >= 0 {
				idx = append(idx, k)
			}
		}
		if len(idx) == len(s.Devices) {
			if peak == 0 {
				peak, limit = f.opt.Nominal.BusPeak(idx)
			}
			expected = expectedAllReduce(f, idx)
		}
	}
	got := s.BestBusBW
	r := Result{}.with("busbw_gbs", got).with("size_bytes", s.BestSize)
	if expected > 0 {
		r = r.with("expected_gbs", expected).with("floor_from", "expected").with("nominal_gbs", peak).with("limit", limit)
		r.Finding = fmt.Sprintf("busbw %.1f GB/s over %d GPUs, %.0f%% of the %.1f GB/s the simulator expects of %s (floor %.0f%%; nominal bus peak %.1f GB/s, %s)",
			got, len(s.Devices), math.Floor(got/expected*100+1e-6), expected, f.opt.Nominal.Name, minFraction*100, peak, limit) // down: under the floor never reads as it
		if got < minFraction*expected {
			r.Status, r.Remedy = Fail, "check the p2p-bandwidth, nvlink and nccl checks above; NCCL_DEBUG=INFO gpubench allreduce shows the transports NCCL picked"
			if slices.Contains([]string{"infiniband", "roce", "ethernet", "efa", "net"}, limit) { // the network sets the peak: a NIC, its port or its PCIe path
				r.Remedy = "the network sets this machine's peak: check the rdma-ports, gpu-nic-affinity and gpudirect-rdma checks above and each NIC's port (ibstat); gpubench fleet names a slow NIC among nodes"
			}
			return r
		}
		r.Status = Pass
		return r
	}
	if peak <= 0 {
		r.Status, r.Finding = Skip, fmt.Sprintf("busbw %.1f GB/s over %d GPUs; the topology gives no nominal bus bandwidth to compare with", got, len(s.Devices))
		return r
	}
	r = r.with("nominal_gbs", peak).with("limit", limit).with("floor_from", "nominal")
	r.Finding = fmt.Sprintf("busbw %.1f GB/s over %d GPUs, %.0f%% of the %.1f GB/s nominal bus peak (%s)", got, len(s.Devices), got/peak*100, peak, limit)
	if got < minFraction*peak {
		r.Status, r.Remedy = Fail, "check the p2p-bandwidth, nvlink and nccl checks above; NCCL_DEBUG=INFO gpubench allreduce shows the transports NCCL picked"
		return r
	}
	r.Status = Pass
	return r
}
