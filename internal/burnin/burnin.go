// Package burnin keeps every GPU and link of a machine busy for a set time with collectives and
// peer copies whose results are all checked, watches the GPUs' telemetry meanwhile, and judges
// each GPU (and pair, and the set as a whole) per check: pass, warn, fail or skip.
//
// The burn-in's clock is the backend's Now(): the wall clock on real GPUs and virtual time on the
// simulator, where a two-hour burn-in passes in seconds.
package burnin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/metrics"
	"github.com/gpubench/gpubench/internal/metrics/telemetry"
	"github.com/gpubench/gpubench/internal/p2p"
)

// smallCopy is the size of the copies that check data when the simulator's data cap leaves the
// measured ones timing-only: one page, enough to carry a corrupted byte, and cheap to check every
// pass.
const smallCopy = 4 << 10

// DefaultIgnoredXIDs are application errors that leave the GPU healthy (NVIDIA's device plugin
// skips the same set): 13 graphics engine exception, 31 MMU fault, 43 stopped channel, 45
// preemptive cleanup, 68 video decoder exception.
var DefaultIgnoredXIDs = []int{13, 31, 43, 45, 68}

// Options describe a burn-in.
type Options struct {
	Duration time.Duration // on the backend's clock
	// Baseline is the opening window whose best bandwidths set the floors (when neither MinBusBW
	// nor Reference gives one).
	Baseline    time.Duration
	Collectives []*coll.Collective
	Sweep       coll.Sweep
	Iters       int
	Warmup      int
	// P2PSize is the bytes per copy of the peer-bandwidth copies (0: no copies).
	P2PSize int64
	// Floor is the fraction of the baseline or reference bandwidth a measurement must reach.
	Floor float64
	// MinBusBW, when above 0, is the busbw (GB/s) every collective row must reach.
	MinBusBW  float64
	Reference Reference
	// ReferenceFrom names where Reference came from when it is not --reference files: "expected"
	// figures, with their source.
	ReferenceFrom string
	// P2PExpected, when set, is each ordered pair's expected copy bandwidth (GB/s, by device
	// ordinals): the p2p floors are Floor times it, from the first pass, instead of the baseline.
	P2PExpected map[[2]int]float64
	// IgnoredXIDs are XIDs that do not fail the xid check.
	IgnoredXIDs    []int
	MaxPCIeReplays float64
	MaxNVLinkErr   float64
	Timeout        time.Duration

	// Sampler, when set, supplies telemetry; without it the telemetry checks are skipped.
	Sampler *metrics.Sampler
	// PollEachPass polls the sampler after every step instead of reading its cache (the
	// simulator, whose clock runs faster than the sampler's timer).
	PollEachPass bool
	Bench        *metrics.Bench
	// Record, when set, gets every record as it is made; an error from it (a results file that
	// cannot be written) ends the burn-in at once with that error.
	Record func(Record) error
	// Progress, when set, hears after every step how far the burn-in is.
	Progress func(elapsed time.Duration, pass int, failing int)
	// Notice, when set, hears what the burn-in runs other than asked: sizes the GPUs' memory cut.
	Notice func(string)
}

// Report is a finished burn-in.
type Report struct {
	Devices []Device
	Start   time.Duration // backend clock
	Elapsed time.Duration
	// Passes counts the passes completed (a pass the end of --duration cut short counts; one
	// that an interruption or a failure cut short does not).
	Passes int
	Checks []Check
	// Verdict is the worst check's verdict when the burn-in ran to its end. One that stopped
	// early says Interrupted (Ctrl-C) or Incomplete (a failure), unless a check failed: what did
	// not run cannot pass. A hang fails the hang check of the GPU and of all.
	Verdict     string
	Interrupted bool
	// Err is why the burn-in stopped early (a hang, a failure), if it did.
	Err error
}

type runner struct {
	b      gpu.Backend
	opt    Options
	ctx    context.Context
	cancel context.CancelFunc
	v      *verdicts
	start  time.Duration
	pass   int // the pass running (from 1)
	done   int // the passes completed
	// unchecked counts results that carried no data to check (past the simulator's data cap).
	unchecked int
	devs      []gpu.Device
	// writeErr is the first error of Options.Record; it ends the burn-in.
	writeErr error

	inputs   coll.Inputs        // the collectives' crafted inputs, made in the first pass
	collBase map[string]float64 // coll/size -> best busbw in the baseline window
	p2pBase  map[[2]int]float64
	// interruptedOp is set when an interruption stopped a collective or copies while they ran;
	// callErr is a collective's or copy's own failure (a link, NCCL or the driver), which stops
	// the burn-in and fails the calls check.
	interruptedOp bool
	callErr       error
	// first is the telemetry at the start; xidsSeen counts the sampler's XIDs judged so far
	// (every one: the sampler is the burn-in's, so each XID it saw came during the burn-in).
	first    *metrics.Snapshot
	xidsSeen int
	// slowSeen counts, per GPU, the sampler's samples with a hardware slowdown judged so far.
	slowSeen map[int]int
	// xids are the distinct XIDs seen per GPU, failing and ignored apart, each with when it came
	// first: the xid check's reason names every one.
	xids map[xidKey][]xidAt
	// heldSample is set when the simulator's telemetry was sampled during the step now running,
	// while its buffers were held (sampleHeld): the step's end judges that sample rather than
	// one taken after they were freed.
	heldSample bool
	// cutTo is the largest size the GPUs' memory cut the sweep to, once said (0: not cut).
	cutTo int64
	// collRows counts the collective rows measured, collAfter those after the baseline window,
	// and lastColl is when the last came; lastCopies is when the last copies were measured.
	collRows, collAfter  int
	lastColl, lastCopies time.Duration
	copyGroup            int // the host group (p2p.Groups) the next pass's copies start at
}

type xidKey struct {
	gpu     int
	ignored bool
}

type xidAt struct {
	code int
	at   time.Duration
}

// Run runs the burn-in on b. It returns a report also when it stops early, with the reason in
// Report.Err and as the error; a collective's or copy's own failure stops it too, and is the
// calls check's verdict rather than an error.
func Run(ctx context.Context, b gpu.Backend, opt Options) (*Report, error) {
	r := &runner{b: b, opt: opt, collBase: map[string]float64{}, p2pBase: map[[2]int]float64{}, devs: b.Devices(), slowSeen: map[int]int{}, xids: map[xidKey][]xidAt{}}
	r.ctx, r.cancel = context.WithCancel(ctx)
	defer r.cancel()
	r.v = newVerdicts(func(c Check) {
		if opt.Bench != nil {
			opt.Bench.Verdict(c.Subject, c.Check, c.Verdict)
		}
	})
	rep := &Report{}
	for _, d := range r.devs {
		rep.Devices = append(rep.Devices, Device{Index: d.Ordinal, Name: d.Name, PCIBusID: d.PCIBusID})
	}
	if opt.Sampler != nil {
		inv := opt.Sampler.Latest().Inventory
		for i := range rep.Devices {
			if i < len(inv.Devices) {
				rep.Devices[i].UUID = inv.Devices[i].UUID
			}
		}
	}
	r.start = b.Now()
	rep.Start = r.start
	if opt.Bench != nil { // the counted checks' series exist from the start, at 0, for rate() and increase()
		for _, c := range []string{CheckHang, CheckCalls, CheckData, CheckBandwidth, CheckP2PBandwidth, CheckXID} {
			opt.Bench.CheckFailed(c, 0)
		}
	}
	r.initChecks()
	r.observe(true)
	err := r.loop()
	if r.writeErr != nil {
		err = r.writeErr // not an interruption: the burn-in stopped itself
	}
	var hang *gpu.HangError
	stopped := err != nil // before the end: the pass that was running did not complete
	switch {
	case errors.Is(err, context.Canceled) && (errors.As(err, &hang) || r.interruptedOp):
		// coll.Run ends with the context's cause, not the wait it cut short: an interrupted
		// collective did not finish, in time or not.
		r.v.set("all", CheckHang, Skip, "", "interrupted while waiting for the GPUs: no hang was confirmed")
	case errors.As(err, &hang): // a wait that timed out
		r.hung(hang)
	case r.callErr != nil && errors.Is(err, r.callErr):
		r.v.set("all", CheckCalls, Fail, "no error", "%v (pass %d, %v in); the burn-in stopped there", err, r.pass, round(r.elapsed()))
		r.failed(CheckCalls, 1)
		err = nil // judged: the verdict says it
	}
	if err == nil || r.writeErr == nil {
		r.observe(true)
	}
	r.finishChecks()
	rep.Elapsed, rep.Passes = b.Now()-r.start, r.done
	if !stopped {
		rep.Passes = r.pass // the last pass, cut short by the end of the duration, counts
	}
	rep.Checks = r.v.list()
	rep.Interrupted = errors.Is(err, context.Canceled)
	rep.Verdict = Overall(rep.Checks)
	switch {
	case err == nil || rep.Verdict == Fail:
	case rep.Interrupted:
		rep.Verdict = Interrupted
	default:
		rep.Verdict = Incomplete
	}
	rep.Err = err
	if opt.Bench != nil {
		opt.Bench.State(false, opt.Duration.Seconds(), rep.Elapsed.Seconds())
	}
	return rep, err
}

func (r *runner) elapsed() time.Duration { return r.b.Now() - r.start }

func (r *runner) record(rec Record) {
	if r.opt.Record == nil || r.writeErr != nil {
		return
	}
	rec.T = r.elapsed().Seconds()
	if err := r.opt.Record(rec); err != nil {
		r.writeErr = err
		r.cancel() // stop what is running now
	}
}

// hung fails the hang check of every GPU that did not finish in time, and of all. The burn-in
// drives every GPU in order, so a rank is the GPU of that position.
func (r *runner) hung(h *gpu.HangError) {
	thr := fmt.Sprintf("done within %v", r.opt.Timeout)
	at := round(r.elapsed())
	var gpus []string
	for _, rank := range h.Ranks {
		if rank >= 0 && rank < len(r.devs) {
			d := r.devs[rank].Ordinal
			gpus = append(gpus, strconv.Itoa(d))
			r.v.set(strconv.Itoa(d), CheckHang, Fail, thr, "GPU %d did not finish within %v (pass %d, %v in)", d, r.opt.Timeout, r.pass, at)
		}
	}
	r.failed(CheckHang, 1)
	what := "a GPU"
	if len(gpus) > 0 {
		what = "GPU " + strings.Join(gpus, ",")
	}
	r.v.set("all", CheckHang, Fail, thr, "%s did not finish within %v (pass %d, %v in)", what, r.opt.Timeout, r.pass, at)
}

func (r *runner) initChecks() {
	all := "all"
	if r.opt.P2PSize > 0 {
		if _, ok := r.b.(p2p.Backend); !ok {
			r.v.set(all, CheckP2PBandwidth, Skip, "", "this backend makes no peer copies")
		}
	}
	if r.opt.Sampler == nil {
		for _, c := range []string{CheckXID, CheckECC, CheckPCIeReplay, CheckNVLink, CheckThrottle, CheckClocks} {
			r.v.set(all, c, Skip, "", "no telemetry (NVML is not available)")
		}
	}
}

// floorText describes the collective floor when it is known before the run.
func (r *runner) floorText() (threshold, source string) {
	switch {
	case r.opt.MinBusBW > 0:
		return fmt.Sprintf("busbw >= %g GB/s", r.opt.MinBusBW), "--min-busbw"
	case len(r.opt.Reference) > 0 && r.opt.ReferenceFrom != "":
		return fmt.Sprintf("busbw >= %g x expected", r.opt.Floor), r.opt.ReferenceFrom
	case len(r.opt.Reference) > 0:
		return fmt.Sprintf("busbw >= %g x reference", r.opt.Floor), "reference file"
	}
	return fmt.Sprintf("busbw >= %g x best of the first %v", r.opt.Floor, r.opt.Baseline), "baseline"
}

func (r *runner) loop() error {
	if r.opt.Bench != nil {
		r.opt.Bench.State(true, r.opt.Duration.Seconds(), 0)
	}
	for r.elapsed() < r.opt.Duration {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		if len(r.opt.Collectives) == 0 && r.opt.P2PSize == 0 {
			why, _ := r.v.get("all", CheckP2PBandwidth)
			return fmt.Errorf("nothing left to run: %s, and no collectives were given", why.Reason)
		}
		r.pass++
		begin := r.elapsed()
		for _, c := range r.opt.Collectives {
			if err := r.collective(c); err != nil {
				return err
			}
			if r.elapsed() >= r.opt.Duration {
				break
			}
		}
		if r.opt.P2PSize > 0 && r.elapsed() < r.opt.Duration {
			if err := r.copies(); err != nil {
				return err
			}
		}
		if r.opt.Bench != nil {
			r.opt.Bench.Pass()
		}
		r.done++
		if r.elapsed() == begin && (len(r.opt.Collectives) > 0 || r.opt.P2PSize > 0) { // every pass must bring the end nearer
			return fmt.Errorf("pass %d took no time on the %s backend's clock", r.pass, r.b.Name())
		}
	}
	return nil
}

// step ends every measurement: the context, telemetry, metrics and progress.
func (r *runner) step() error {
	r.observe(!r.heldSample) // a sample taken while the step's buffers were held stands
	r.heldSample = false
	if r.opt.Bench != nil {
		r.opt.Bench.State(true, r.opt.Duration.Seconds(), r.elapsed().Seconds())
	}
	if r.opt.Progress != nil {
		failing := 0
		for _, c := range r.v.list() {
			if c.Verdict == Fail {
				failing++
			}
		}
		r.opt.Progress(r.elapsed(), r.pass, failing)
	}
	if r.writeErr != nil {
		return r.writeErr
	}
	return r.ctx.Err()
}

func (r *runner) collective(c *coll.Collective) error {
	warmup := r.opt.Warmup
	if r.pass > 1 {
		warmup = 0
	}
	opt := coll.Options{Coll: c, Sweep: r.opt.Sweep, DTypes: []gpu.DType{gpu.Float}, Ops: []gpu.RedOp{gpu.Sum},
		Iters: r.opt.Iters, Warmup: warmup, Check: 1, Average: 1, Seed: 1, Inputs: &r.inputs, Timeout: r.opt.Timeout}
	opt.OnResult = func(res coll.Result) { r.collResult(c, res) }
	s, err := coll.Run(r.ctx, r.b, opt)
	if err != nil {
		r.interruptedOp = errors.Is(err, context.Canceled)
		return r.callFailed(fmt.Errorf("%s: %w", c.Name, err))
	}
	if s.ClampedFrom > 0 && s.Sweep.Max != r.cutTo && r.opt.Notice != nil {
		r.cutTo = s.Sweep.Max
		r.opt.Notice(fmt.Sprintf("the collectives run sizes up to %d B, not the %d B of --sizes: the GPUs' memory cuts the largest size as nccl-tests cuts it (Reducing maxBytes to %d due to memory limitation)",
			s.Sweep.Max, s.ClampedFrom, s.Sweep.Max))
	}
	return r.step()
}

// sampleHeld samples the simulator's telemetry while the copies' buffers are held (before each
// matrix), so that its memory in use shows them: a sample at the step's end finds them freed.
// A collective frees its buffers before its rows come back (coll.Run has no hook while it holds
// them), so its step's sample shows none.
func (r *runner) sampleHeld() {
	if r.opt.Sampler != nil && r.opt.PollEachPass {
		r.observe(true)
		r.heldSample = true
	}
}

// callFailed notes err, a collective's or copy's error, as the call's own failure unless it is
// an interruption, a hang (the hang check's), or the burn-in's own asking (an invalid call, memory).
func (r *runner) callFailed(err error) error {
	var hang *gpu.HangError
	if !errors.Is(err, context.Canceled) && !errors.As(err, &hang) && !errors.Is(err, gpu.ErrInvalid) && !errors.Is(err, gpu.ErrOutOfMemory) {
		r.callErr = err
	}
	return err
}

func (r *runner) collResult(c *coll.Collective, res coll.Result) {
	t := r.elapsed()
	r.collRows, r.lastColl = r.collRows+1, t
	if t > r.opt.Baseline {
		r.collAfter++
	}
	op, ip := res.OutOfPlace, res.InPlace
	rec := Record{Record: "result", Kind: "collective", Pass: r.pass, Collective: c.Name, Size: res.Size, Type: res.Type,
		TimeUS: ptr(op.TimeUS), AlgBW: ptr(op.AlgBW), BusBW: ptr(op.BusBW), Wrong: op.Wrong, InPlaceBW: ptr(ip.BusBW), InWrong: ip.Wrong}
	if r.opt.Bench != nil {
		r.opt.Bench.Coll(c.Name, res.Size, op.BusBW, op.AlgBW, op.TimeUS)
	}
	wrong, checked := int64(0), false
	for _, w := range []*int64{op.Wrong, ip.Wrong} {
		if w != nil {
			wrong += *w
			checked = true
		}
	}
	if !checked {
		r.unchecked++
	}
	if checked {
		r.v.set("all", CheckData, Pass, "0 wrong elements", "every checked collective result matched")
		for _, d := range r.devs {
			r.v.set(strconv.Itoa(d.Ordinal), CheckData, Pass, "0 wrong", "every checked result on the GPU matched")
		}
	}
	if wrong > 0 {
		// Name the GPUs whose output was wrong; the engine's rank r is device r here.
		devs := r.b.Devices()
		for _, p := range []coll.Placement{op, ip} {
			for rank, w := range p.WrongByRank {
				if w > 0 && rank < len(devs) {
					r.v.set(strconv.Itoa(devs[rank].Ordinal), CheckData, Fail, "", "%s at %d bytes: %d wrong %s in GPU %d's output (pass %d, %v in)",
						c.Name, res.Size, w, elements(w), devs[rank].Ordinal, r.pass, round(t))
				}
			}
		}
		r.v.set("all", CheckData, Fail, "", "%s at %d bytes: %d wrong %s (pass %d, %v in)", c.Name, res.Size, wrong, elements(wrong), r.pass, round(t))
		r.failed(CheckData, 1)
	}
	key := c.Name + "/" + strconv.FormatInt(res.Size, 10)
	floor, src := 0.0, ""
	switch {
	case c.Factor(len(r.b.Devices())) == 0: // one GPU: busbw is 0 by definition, nothing to judge
	case r.opt.MinBusBW > 0:
		floor, src = r.opt.MinBusBW, "--min-busbw"
	case len(r.opt.Reference) > 0:
		if ref, ok := r.opt.Reference[c.Name][res.Size]; ok {
			what := "reference"
			if r.opt.ReferenceFrom != "" {
				what = "expected"
			}
			floor, src = r.opt.Floor*ref, fmt.Sprintf("%g x %s %.2f GB/s", r.opt.Floor, what, ref)
		}
	case t <= r.opt.Baseline:
		r.collBase[key] = math.Max(r.collBase[key], op.BusBW)
	default:
		if base, ok := r.collBase[key]; ok {
			floor, src = r.opt.Floor*base, fmt.Sprintf("%g x baseline %.2f GB/s", r.opt.Floor, base)
		}
	}
	if floor > 0 {
		rec.Floor = ptr(floor)
		thr, how := r.floorText()
		r.v.set("all", CheckBandwidth, Pass, thr, "every collective row at or above its floor (%s)", how)
		if op.BusBW < floor {
			r.v.set("all", CheckBandwidth, Fail, thr, "%s at %d bytes: busbw %.2f GB/s below %.2f GB/s (%s) at %v", c.Name, res.Size, op.BusBW, floor, src, round(t))
			r.failed(CheckBandwidth, 1)
		}
	}
	r.record(rec)
}

func (r *runner) failed(check string, n int) {
	if r.opt.Bench != nil {
		r.opt.Bench.CheckFailed(check, n)
		if check == CheckData {
			r.opt.Bench.Miscompares(n)
		}
	}
}

// copies measures every ordered pair's copy bandwidth and checks every copy's data.
func (r *runner) copies() error {
	pb, ok := r.b.(p2p.Backend)
	if !ok {
		return nil
	}
	// Host by host, as peer access joins one host's GPUs, and at most p2p.MaxDevices at once: the
	// matrices grow with the square of their GPUs. A simulated cluster's hosts take turns: when
	// the duration is up the copies stop after the host being measured, and the next pass starts
	// at the host after it. The telemetry is sampled while the first group's buffers are held (one
	// host's, on a real machine), not for every group: each sample reads every GPU.
	groups, _ := p2p.Groups(pb.Devices())
	var all []*p2p.Result
	start := r.copyGroup
	for i := range groups {
		if i > 0 && r.elapsed() >= r.opt.Duration {
			break
		}
		g := groups[(start+i)%len(groups)]
		r.copyGroup = (start + i + 1) % len(groups)
		var progress func(string)
		if i == 0 {
			progress = func(string) { r.sampleHeld() }
		}
		res, err := p2p.Run(r.ctx, pb, p2p.Options{Devices: g, Size: r.opt.P2PSize, Repeat: 1, Samples: 1, Verify: true, Timeout: r.opt.Timeout,
			Progress: progress})
		if errors.Is(err, p2p.ErrTooBig) {
			r.v.set("all", CheckP2PBandwidth, Skip, "", "copies of %d bytes stopped fitting in pass %d: %v", r.opt.P2PSize, r.pass, err)
			r.opt.P2PSize = 0
			return r.step()
		}
		if err != nil {
			r.interruptedOp = errors.Is(err, context.Canceled)
			return r.callFailed(fmt.Errorf("p2p: %w", err))
		}
		if res.Unverified > 0 && res.Verified+res.Mismatched == 0 {
			// The simulator's data cap left the large copies timing-only: check data with small ones.
			small, err := p2p.Run(r.ctx, pb, p2p.Options{Devices: g, Size: smallCopy, Repeat: 1, Samples: 1, Verify: true, Timeout: r.opt.Timeout})
			if err != nil && !errors.Is(err, p2p.ErrTooBig) {
				r.interruptedOp = errors.Is(err, context.Canceled)
				return r.callFailed(fmt.Errorf("p2p: %w", err))
			}
			if small != nil {
				r.copyData(small)
			}
		}
		r.copyData(res)
		all = append(all, res)
	}
	r.copyBandwidth(all)
	return r.step()
}

func (r *runner) copyData(res *p2p.Result) {
	if res.Verified+res.Mismatched > 0 {
		r.v.set("all", CheckData, Pass, "0 wrong", "every checked result matched")
		for _, d := range res.Devices {
			r.v.set(strconv.Itoa(d.Ordinal), CheckData, Pass, "0 wrong", "every checked result on the GPU matched")
		}
	}
	pairs := res.BadCopies()
	// A GPU that every wrong copy went through is the one at fault (copies from a GPU that
	// corrupts its data are wrong wherever they land); otherwise each copy's destination is named.
	seen := map[int]int{}
	for _, p := range pairs {
		seen[p.Src]++
		if p.Dst != p.Src {
			seen[p.Dst]++
		}
	}
	var common []int
	for d, n := range seen {
		if n == len(pairs) {
			common = append(common, d)
		}
	}
	bad := map[int][]string{}
	for _, p := range pairs {
		blame := p.Dst
		if len(common) == 1 {
			blame = common[0]
		}
		bad[blame] = append(bad[blame], fmt.Sprintf("%s %d->%d", p.Key, p.Src, p.Dst))
	}
	for i, h := range res.Host {
		for _, c := range []p2p.Cell{h.H2D, h.D2H, h.Bidir, h.Local} {
			if c.Bad {
				d := res.Devices[i].Ordinal
				bad[d] = append(bad[d], "host copy")
			}
		}
	}
	for d, where := range bad {
		r.v.set(strconv.Itoa(d), CheckData, Fail, "", "copies through GPU %d delivered wrong data (%d copies: %s; pass %d)", d, len(where), strings.Join(where[:min(len(where), 3)], ", "), r.pass)
		r.failed(CheckData, len(where))
		r.record(Record{Record: "result", Kind: "p2p_data", Pass: r.pass, Dst: ptr(d), Mismatched: ptr(len(where))})
	}
}

// copyBandwidth judges the copies of each group's result against their floors, and all of them
// together.
func (r *runner) copyBandwidth(results []*p2p.Result) {
	// Each group's matrix: P2P-enabled copies where some pair has them, else the disabled ones.
	matrices := make([]*p2p.Matrix, len(results))
	found, devices := false, 0
	for g, res := range results {
		devices += len(res.Devices)
		for _, key := range []string{"uni_enabled", "uni_disabled"} {
			for i := range res.Matrices {
				if res.Matrices[i].Key == key && matrices[g] == nil && hasValues(res.Matrices[i]) {
					matrices[g] = &res.Matrices[i]
					found = true
				}
			}
		}
	}
	if !found {
		why := "no pair could be measured"
		if devices < 2 {
			why = "one GPU: no pair to copy between"
		}
		r.v.set("all", CheckP2PBandwidth, Skip, "", "%s", why)
		return
	}
	t := r.elapsed()
	r.lastCopies = t
	thr := fmt.Sprintf("copy GB/s >= %g x best of the first %v", r.opt.Floor, r.opt.Baseline)
	useExp := len(r.opt.P2PExpected) > 0
	if useExp {
		thr = fmt.Sprintf("copy GB/s >= %g x expected", r.opt.Floor)
	}
	slow := map[int]int{} // by GPU, the slow pairs it is in
	nslow := 0
	for g, m := range matrices {
		if m == nil {
			continue
		}
		for _, p := range r.judgeCopies(results[g], m, t, thr, useExp) {
			slow[p[0]]++
			slow[p[1]]++
			nslow++
		}
	}
	if t <= r.opt.Baseline && !useExp {
		return
	}
	if nslow == 0 {
		r.v.set("all", CheckP2PBandwidth, Pass, thr, "every pair at or above its floor")
		return
	}
	suspect := ""
	for g, n := range slow {
		if n == nslow {
			suspect = fmt.Sprintf("; every slow pair involves GPU %d: suspect its link", g)
		}
	}
	r.v.set("all", CheckP2PBandwidth, Fail, thr, "%d pairs below their floor at %v%s", nslow, round(t), suspect)
}

// judgeCopies holds each pair of matrix m (of res's devices) to its floor at time t, and returns
// the pairs below it.
func (r *runner) judgeCopies(res *p2p.Result, m *p2p.Matrix, t time.Duration, thr string, useExp bool) (slow [][2]int) {
	for i, row := range m.Cells {
		for j, c := range row {
			if i == j || c.Value == nil {
				continue
			}
			a, d := res.Devices[i].Ordinal, res.Devices[j].Ordinal
			gbs := *c.Value
			if r.opt.Bench != nil {
				r.opt.Bench.P2P(a, d, gbs)
			}
			rec := Record{Record: "result", Kind: "p2p", Pass: r.pass, Src: ptr(a), Dst: ptr(d), Size: r.opt.P2PSize, GBs: ptr(gbs)}
			k := [2]int{a, d}
			base, ok, what := r.p2pBase[k], false, "baseline"
			switch exp, has := r.opt.P2PExpected[k]; {
			case useExp:
				base, ok, what = exp, has, "expected"
			case t <= r.opt.Baseline:
				r.p2pBase[k] = math.Max(r.p2pBase[k], gbs)
			default:
				_, ok = r.p2pBase[k]
			}
			if ok {
				floor := r.opt.Floor * base
				rec.Floor = ptr(floor)
				subject := fmt.Sprintf("%d-%d", a, d)
				if gbs < floor {
					r.v.set(subject, CheckP2PBandwidth, Fail, thr, "copies %d->%d at %.2f GB/s, below %.2f GB/s (%g x %s %.2f) at %v", a, d, gbs, floor, r.opt.Floor, what, base, round(t))
					r.failed(CheckP2PBandwidth, 1)
					slow = append(slow, [2]int{a, d})
				}
			}
			r.record(rec)
		}
	}
	return slow
}

func hasValues(m p2p.Matrix) bool {
	for i, row := range m.Cells {
		for j, c := range row {
			if i != j && c.Value != nil {
				return true
			}
		}
	}
	return false
}

func round(d time.Duration) time.Duration {
	if d > time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// finishChecks settles checks that could not be judged.
func (r *runner) finishChecks() {
	for _, s := range append([]string{"all"}, r.gpuSubjects()...) {
		if _, ok := r.v.get(s, CheckData); !ok {
			why := "no result was checked: the burn-in ended before its first check"
			if r.unchecked > 0 && r.b.Name() == "sim" {
				why = fmt.Sprintf("no result was checked: all %d carried no data (sizes past the simulator's --sim-data-cap; raise it, or give a smaller size)", r.unchecked)
			}
			r.v.set(s, CheckData, Skip, "", "%s", why)
		}
	}
	if _, ok := r.v.get("all", CheckHang); !ok {
		r.v.set("all", CheckHang, Pass, fmt.Sprintf("done within %v", r.opt.Timeout), "every operation finished in time")
	}
	if _, ok := r.v.get("all", CheckCalls); !ok {
		r.v.set("all", CheckCalls, Pass, "no error", "every collective and copy returned without an error")
	}
	if _, ok := r.v.get("all", CheckBandwidth); !ok {
		r.v.set("all", CheckBandwidth, Skip, "", "%s", r.noFloor())
	}
	if r.opt.P2PSize > 0 {
		if _, ok := r.v.get("all", CheckP2PBandwidth); !ok {
			why := fmt.Sprintf("the burn-in did not run past the %v baseline window", r.opt.Baseline)
			switch {
			case r.lastCopies == 0:
				why = "no copies were measured"
			case r.elapsed() > r.opt.Baseline:
				why = fmt.Sprintf("no copies were measured after the %v baseline window (the last at %v; the burn-in ended at %v)", r.opt.Baseline, round(r.lastCopies), round(r.elapsed()))
			}
			r.v.set("all", CheckP2PBandwidth, Skip, "", "%s", why)
		}
	}
}

// noFloor says why no collective row was held to a floor.
func (r *runner) noFloor() string {
	elapsed := round(r.elapsed())
	switch {
	case len(r.b.Devices()) < 2:
		return "one GPU: a collective's busbw is 0 by definition, so it has no floor"
	case len(r.opt.Collectives) == 0:
		return "no collective ran (--collectives none)"
	case r.collRows == 0:
		return fmt.Sprintf("no collective row was measured (the burn-in ended at %v)", elapsed)
	case len(r.opt.Reference) > 0 && r.opt.ReferenceFrom != "":
		return "the simulator expects no figure of these collectives and sizes: no floor to judge by (give --min-busbw or --reference)"
	case len(r.opt.Reference) > 0:
		return "the --reference files hold none of these collectives and sizes: no floor to judge by (give --min-busbw, or a reference of these sizes)"
	}
	// A pass's length on the backend's clock says how long a run must be: collectives run past
	// the window only in a pass that begins past it, which two passes past it make sure of.
	pass := r.elapsed() / time.Duration(max(r.pass, 1))
	enough := (r.opt.Baseline + 2*pass + time.Second - 1).Truncate(time.Second)
	advice := fmt.Sprintf("give --min-busbw or --reference, or a --duration of at least %v: the window and two passes of %v", enough, round(pass))
	switch {
	case r.elapsed() <= r.opt.Baseline:
		return fmt.Sprintf("the burn-in ran %v, not past the %v baseline window: no floor to judge by (%s)", elapsed, r.opt.Baseline, advice)
	case r.collAfter == 0:
		return fmt.Sprintf("no collective row was measured after the %v baseline window (the last at %v, and the burn-in ended at %v): no row to hold to its floor (%s)",
			r.opt.Baseline, round(r.lastColl), elapsed, advice)
	}
	return fmt.Sprintf("no collective row after the %v baseline window had a row of its collective and size inside the window to set its floor (give a longer --baseline, or --min-busbw or --reference)", r.opt.Baseline)
}

// observe reads telemetry and judges the telemetry checks on it; poll samples anew where the
// sampler has no timer of its own (PollEachPass), else the latest sample is judged.
func (r *runner) observe(poll bool) {
	if r.opt.Sampler == nil {
		return
	}
	var snap metrics.Snapshot
	if r.opt.PollEachPass && poll {
		snap = r.opt.Sampler.Refresh()
	} else {
		snap = r.opt.Sampler.Latest()
	}
	if snap.Samples == 0 {
		return
	}
	if r.first == nil {
		r.first = &snap
	}
	ignored := map[int]bool{}
	for _, x := range r.opt.IgnoredXIDs {
		ignored[x] = true
	}
	for _, x := range snap.XIDs[r.xidsSeen:] {
		g := strconv.Itoa(x.GPU)
		r.record(Record{Record: "event", Kind: "xid", GPU: ptr(x.GPU), XID: x.Code})
		k := xidKey{x.GPU, ignored[x.Code]}
		if !slices.ContainsFunc(r.xids[k], func(s xidAt) bool { return s.code == x.Code }) {
			r.xids[k] = append(r.xids[k], xidAt{x.Code, round(r.elapsed())})
		}
		if k.ignored {
			r.v.set(g, CheckXID, Warn, "", "XID %d (an application error, ignored) at %v", x.Code, round(r.elapsed()))
			if xs := r.xids[k]; len(xs) > 1 {
				r.v.explain(g, CheckXID, Warn, "XIDs "+xidList(xs)+" (application errors, ignored)")
			}
			continue
		}
		r.v.set(g, CheckXID, Fail, "", "XID %d on GPU %d at %v", x.Code, x.GPU, round(r.elapsed()))
		if xs := r.xids[k]; len(xs) > 1 { // every distinct XID, not only the first
			r.v.explain(g, CheckXID, Fail, fmt.Sprintf("XIDs %s on GPU %d", xidList(xs), x.GPU))
		}
		r.failed(CheckXID, 1)
	}
	r.xidsSeen = len(snap.XIDs)
	base := map[int]telemetry.GPU{}
	for _, g := range r.first.Sample.GPUs {
		base[g.Index] = g
	}
	baseClock := map[int]float64{}
	for _, d := range snap.Inventory.Devices {
		baseClock[d.Index] = d.BaseSMClockHz
	}
	for _, g := range snap.Sample.GPUs {
		// A hardware slowdown in a sample the sampler's timer took since the last look counts too.
		slowed := g
		if n := snap.Slowdowns[g.Index]; n > r.slowSeen[g.Index] {
			slowed, r.slowSeen[g.Index] = snap.Slowed[g.Index], n
		}
		r.judgeGPU(g, base[g.Index], slowed, baseClock[g.Index])
	}
}

// judgeGPU judges GPU g's latest sample against the first; slowed is the latest sample since the
// last look that had a hardware slowdown (else g).
func (r *runner) judgeGPU(g, first, slowed telemetry.GPU, baseClock float64) {
	s := strconv.Itoa(g.Index)
	r.v.set(s, CheckXID, Pass, "", "no new XID (ignoring %s)", intList(r.opt.IgnoredXIDs))
	known := telemetry.Known
	at := round(r.elapsed())
	// ECC and row remapping.
	switch {
	case !known(g.ECCUncorrected) && !known(g.RemapFailed):
		r.v.set(s, CheckECC, Skip, "", "ECC and row remapping are not reported")
	case known(g.ECCUncorrected) && known(first.ECCUncorrected) && g.ECCUncorrected > first.ECCUncorrected:
		r.v.set(s, CheckECC, Fail, "0 new", "%g new uncorrectable ECC errors by %v", g.ECCUncorrected-first.ECCUncorrected, at)
	case known(g.RemapFailed) && g.RemapFailed > 0 && !(known(first.RemapFailed) && first.RemapFailed > 0):
		r.v.set(s, CheckECC, Fail, "0 new", "a row remap failed by %v", at)
	default:
		r.v.set(s, CheckECC, Pass, "0 new", "no new uncorrectable ECC error or row-remap failure")
	}
	// PCIe replays.
	if known(g.PCIeReplays) && known(first.PCIeReplays) {
		d := g.PCIeReplays - first.PCIeReplays
		thr := fmt.Sprintf("<= %g new", r.opt.MaxPCIeReplays)
		switch {
		case d > r.opt.MaxPCIeReplays:
			r.v.set(s, CheckPCIeReplay, Fail, thr, "%g PCIe replays since the start (by %v)", d, at)
		case d > 0:
			r.v.set(s, CheckPCIeReplay, Warn, thr, "%g PCIe replays since the start", d)
		default:
			r.v.set(s, CheckPCIeReplay, Pass, thr, "no PCIe replay")
		}
	} else {
		r.v.set(s, CheckPCIeReplay, Skip, "", "PCIe replays are not reported")
	}
	// NVLink errors.
	if len(g.Links) == 0 {
		r.v.set(s, CheckNVLink, Skip, "", "no NVLink reported")
	} else {
		firstErr := map[int][4]float64{}
		for _, l := range first.Links {
			firstErr[l.Link] = l.Errors
		}
		worst, worstLink, down := 0.0, -1, []string{}
		for _, l := range g.Links {
			sum := 0.0
			for e, v := range l.Errors {
				if known(v) && known(firstErr[l.Link][e]) {
					sum += v - firstErr[l.Link][e]
				}
			}
			if sum > worst {
				worst, worstLink = sum, l.Link
			}
			if !l.Up {
				down = append(down, strconv.Itoa(l.Link))
			}
		}
		thr := fmt.Sprintf("<= %g new per link", r.opt.MaxNVLinkErr)
		switch {
		case worst > r.opt.MaxNVLinkErr:
			r.v.set(s, CheckNVLink, Fail, thr, "NVLink %d: %g new errors (replay, recovery, CRC) by %v", worstLink, worst, at)
		case len(down) > 0:
			r.v.set(s, CheckNVLink, Fail, thr, "NVLink %s down at %v", strings.Join(down, ","), at)
		case worst > 0:
			r.v.set(s, CheckNVLink, Warn, thr, "NVLink %d: %g new errors", worstLink, worst)
		default:
			r.v.set(s, CheckNVLink, Pass, thr, "no new NVLink error")
		}
	}
	// Hardware slowdown.
	if !g.ReasonsKnown {
		r.v.set(s, CheckThrottle, Skip, "", "clock-event reasons are not reported")
	} else if hw := slowed.ClockReasons & telemetry.ReasonsHardwareSlowing; hw != 0 {
		var names []string
		for _, rn := range telemetry.ReasonNames {
			if hw&rn.Bit != 0 {
				names = append(names, rn.Name)
			}
		}
		r.v.set(s, CheckThrottle, Fail, "no hardware slowdown", "%s active by %v (%.0f C, %.0f W)", strings.Join(names, ", "), at, slowed.TemperatureCelsius, slowed.PowerWatts)
	} else {
		r.v.set(s, CheckThrottle, Pass, "no hardware slowdown", "no hardware thermal or power slowdown")
	}
	// Clocks under load.
	switch {
	case !known(g.SMClockHz) || !known(baseClock) || baseClock <= 0:
		r.v.set(s, CheckClocks, Skip, "", "SM clock or base clock not reported")
	case known(g.Utilization) && g.Utilization < 0.5:
		// Idle: nothing to judge yet; a sample under load decides (a pass outranks this skip).
		r.v.set(s, CheckClocks, Skip, "", "no sample found the GPU under load (utilization 50%% or more)")
	case g.SMClockHz < baseClock:
		r.v.set(s, CheckClocks, Warn, fmt.Sprintf(">= base %.0f MHz under load", baseClock/1e6), "SM clock %.0f MHz below base %.0f MHz under load at %v", g.SMClockHz/1e6, baseClock/1e6, at)
	default:
		r.v.set(s, CheckClocks, Pass, fmt.Sprintf(">= base %.0f MHz under load", baseClock/1e6), "SM clock at or above base under load")
	}
}

// xidList lists distinct XIDs, each with when it came first: "79 at 5s, 48 at 6s".
func xidList(xids []xidAt) string {
	s := make([]string, len(xids))
	for i, x := range xids {
		s[i] = fmt.Sprintf("%d at %v", x.code, x.at)
	}
	return strings.Join(s, ", ")
}

func (r *runner) gpuSubjects() []string {
	var s []string
	for _, d := range r.devs {
		s = append(s, strconv.Itoa(d.Ordinal))
	}
	return s
}

func intList(v []int) string {
	if len(v) == 0 {
		return "none"
	}
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// elements is "element" or "elements" for n of them.
func elements[N int | int64](n N) string {
	if n == 1 {
		return "element"
	}
	return "elements"
}
