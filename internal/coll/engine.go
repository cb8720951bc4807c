package coll

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
)

// Options describe one benchmark run.
type Options struct {
	Coll   *Collective
	Sweep  Sweep
	DTypes []gpu.DType
	Ops    []gpu.RedOp // ignored by collectives that take no op (Collective.TakesOp)
	Root   int         // rooted collectives: the root, or -1 for every root in turn
	NGPUs  int         // ranks to use: the first NGPUs devices; 0 means all
	// Ordinals, when set (in one process), are the devices to use instead, by ordinal, a rank
	// each in this order: a node's GPUs, or one GPU of every node (a rail).
	Ordinals []int
	Iters    int
	Warmup   int
	Check    int     // check iterations per size and placement; 0 turns checking off
	Average  Average // how per-process times combine
	Seed     uint64
	// Inputs, when set, keeps the crafted inputs of checked rows for later runs with the same
	// Seed, so that a caller that repeats a sweep (the burn-in) makes them once.
	Inputs *Inputs
	// Timeout bounds every wait for the devices; 0 waits for ever (or until ctx ends).
	Timeout time.Duration
	// Graph, when above 0, captures the timed loop as a graph and times that many launches of it
	// (nccl-tests' -G); the backend's Comm must be a gpu.GraphComm.
	Graph    int
	Blocking Blocking
	// PerIter times every iteration on the devices' streams (the Comm must be a
	// gpu.StreamTimer) and gives each placement its statistics; PerIterSkip leaves the first
	// that many iterations out of the statistics (nccl-tests' -K), though Times keeps them.
	PerIter     bool
	PerIterSkip int
	// CPUTime also times the host's launches alone, from before the first to after the last,
	// before waiting for the devices (nccl-tests' -C).
	CPUTime bool
	// Cycles is how many times the whole run repeats (nccl-tests' -N): 0 and 1 run it once, a
	// negative number until ctx ends; then the summary keeps the rows of the last repeat alone
	// (OnResult gets every one), so that memory stays bounded however long it runs.
	Cycles int
	// OnStart, when set, gets the summary's devices, sweep and peak before the first measurement.
	OnStart func(*Summary)
	// OnResult, when set, gets every row as soon as it is measured.
	OnResult func(Result)
	// Expect, when set, gives a row's placements their Expected figures once it is measured,
	// before OnResult and the summary see it.
	Expect func(*Result)

	// Comm, when set, is a communicator that spans processes (gpu.Joiner), made and closed by
	// the caller; this process drives its rank Rank. Devices lists every rank's device, and Group
	// is how the processes agree and combine their figures. NGPUs does not apply.
	Comm    gpu.Comm
	Rank    int
	Devices []gpu.Device
	Group   Group
}

// Average is how the processes' times combine into a row's, nccl-tests' -a.
type Average int

// The ways to combine times.
const (
	AverageRank0 Average = iota // rank 0's own time
	AverageMean
	AverageMin
	AverageMax
)

// Blocking is nccl-tests' -z: when the timed loop waits for the devices.
type Blocking int

// The blocking modes. In one process an iteration is one call, so 1, 2 and 3 wait alike; across
// processes 1 adds a barrier.
const (
	BlockingNone        Blocking = iota // let the timed calls queue up
	BlockingCallBarrier                 // wait after each call, then a barrier
	BlockingCall                        // wait after each call
	BlockingIteration                   // wait after each iteration of the loop
)

// Group joins the processes of a run that spans several. Every process calls AllGather at the
// same points of the run, and gets every process's values, in rank order.
type Group interface {
	AllGather(ctx context.Context, vals []float64) ([][]float64, error)
}

// Placement is the outcome of one placement (out-of-place or in-place) of one row.
type Placement struct {
	TimeUS float64
	AlgBW  float64
	BusBW  float64
	// CPUTimeUS is the host's launch time per collective, with Options.CPUTime (0 otherwise).
	CPUTimeUS float64
	// Wrong is the number of wrong elements; nil when the result was not checked (checking off,
	// an in-place result nccl-tests does not check, or a timing-only buffer).
	Wrong *int64
	// WrongByRank is, when checked, the wrong elements in each rank's output.
	WrongByRank []int64
	// TimingOnly: the backend held no data for this size (the simulator's data cap).
	TimingOnly bool
	// RankTimesUS is every process's own time, and SlowestRank the rank with the longest, when
	// the run spans processes (nil otherwise; SlowestRank is nil too when every rank took the
	// same time).
	RankTimesUS []float64
	SlowestRank *int
	// PerIter is the per-iteration statistics, with Options.PerIter.
	PerIter *IterStats
	// Expected is what the machine should do here, with Options.Expect; nil without.
	Expected *Expected
}

// Expected is the figure a placement is set beside: the time and busbw the simulator gives for
// the same machine, size and settings, and Ratio = expected time / measured time (the measured
// busbw over the expected one, also where busbw is 0 by definition).
type Expected struct {
	TimeUS, BusBW, Ratio float64
}

// IterStats describe the times of one placement's timed iterations, each measured on the
// devices' streams; across processes an iteration takes as long as its slowest rank.
type IterStats struct {
	TimesUS                                   []float64
	MinUS, MeanUS, P50US, P95US, P99US, MaxUS float64
	CV                                        float64 // standard deviation / mean
}

// NewIterStats computes the statistics of per-iteration times (µs); percentiles are the
// nearest rank.
func NewIterStats(times []float64) *IterStats {
	return newIterStats(times, 0)
}

// newIterStats leaves the first skip times out of the statistics, and keeps them in TimesUS.
func newIterStats(all []float64, skip int) *IterStats {
	s := &IterStats{TimesUS: all}
	times := all[min(skip, len(all)):]
	if len(times) == 0 {
		return s
	}
	sorted := slices.Sorted(slices.Values(times))
	pct := func(p float64) float64 {
		i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
		return sorted[max(i, 0)]
	}
	s.MinUS, s.P50US, s.P95US, s.P99US, s.MaxUS = sorted[0], pct(50), pct(95), pct(99), sorted[len(sorted)-1]
	for _, t := range times {
		s.MeanUS += t
	}
	s.MeanUS /= float64(len(times))
	var ss float64
	for _, t := range times {
		ss += (t - s.MeanUS) * (t - s.MeanUS)
	}
	if s.MeanUS > 0 {
		s.CV = math.Sqrt(ss/float64(len(times))) / s.MeanUS
	}
	return s
}

// Result is one row of the table.
type Result struct {
	Cycle int // which repeat of the run (Options.Cycles), from 0
	// Algo, Proto and Channels are how the backend runs this size, where it can say
	// (gpu.Explainer); empty otherwise.
	Algo, Proto string
	Channels    int
	Size        int64
	Count       int64
	Type        string
	Op          string
	Root        int
	OutOfPlace  Placement
	InPlace     Placement
}

// Summary is a whole run.
type Summary struct {
	Devices     []gpu.Device // one per rank
	Sweep       Sweep        // after clamping to device memory
	ClampedFrom int64        // the requested largest size, when it was reduced; else 0
	Results     []Result
	// OutOfBounds counts placements whose check found wrong data, as nccl-tests counts them.
	OutOfBounds int
	AvgBusBW    float64 // mean busbw over every printed result, as nccl-tests' footer
	BestBusBW   float64
	BestSize    int64
	BusPeak     float64 // the topology's nominal bus bandwidth for these ranks, GB/s (0: unknown)
	PeakLimit   string  // the kind of link that sets BusPeak
	// TimingOnlyFrom is the first size that ran without data (0: none did).
	TimingOnlyFrom int64
	// Interrupted: the run stopped early on Ctrl-C; Results holds what was measured.
	Interrupted bool
	// Err is why the run stopped early, if it did.
	Err error
}

// MemoryLimit is the largest size nccl-tests lets a sweep reach on a device with mem bytes:
// (mem - reserve - 1 GiB) / (3 with checking, 2 without), reserve = min(ceil(mem/16 GiB), 4) GiB.
func MemoryLimit(mem int64, check bool) int64 {
	const gib = int64(1) << 30
	reserve := min((mem/(16*gib)+min(mem%(16*gib), 1))*gib, 4*gib) // ceil(mem / 16 GiB) GiB, without overflow
	div := int64(2)
	if check {
		div = 3
	}
	return (mem - reserve - gib) / div
}

// Combine merges per-process times as nccl-tests' -a does. An Average outside the four is a
// programming error: Run refuses it before anything is measured.
func Combine(times []float64, a Average) float64 {
	switch a {
	case AverageRank0:
		return times[0]
	case AverageMean:
		sum := 0.0
		for _, t := range times {
			sum += t
		}
		return sum / float64(len(times))
	case AverageMin:
		return slices.Min(times)
	case AverageMax:
		return slices.Max(times)
	}
	panic(fmt.Sprintf("coll: Combine with Average %d", a))
}

// StepError says which collective, size and placement a failure happened in.
type StepError struct {
	Coll    string
	Size    int64
	InPlace bool
	Err     error
}

func (e *StepError) Error() string {
	place := "out-of-place"
	if e.InPlace {
		place = "in-place"
	}
	return fmt.Sprintf("%s at %d bytes (%s): %v", e.Coll, e.Size, place, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// ErrOption is wrapped by the errors CheckRanks and Run return for options that cannot run on
// these devices (too many GPUs, a root past the ranks): the caller's input, not a failure of the
// run.
var ErrOption = errors.New("invalid")

// Run runs the sweep and returns every result. When it stops early (Ctrl-C, a hang, a failure) it
// returns what it measured together with the error; it returns no summary when it could not start.
func Run(ctx context.Context, b gpu.Backend, opt Options) (*Summary, error) {
	switch {
	case opt.Average < AverageRank0 || opt.Average > AverageMax:
		return nil, fmt.Errorf("%w -a %d: use 0 (rank 0), 1 (mean), 2 (min) or 3 (max)", ErrOption, opt.Average)
	case opt.Blocking < BlockingNone || opt.Blocking > BlockingIteration:
		return nil, fmt.Errorf("%w -z %d: use 0, 1, 2 or 3", ErrOption, opt.Blocking)
	}
	devs, local, err := ranks(b, opt)
	if err != nil {
		return nil, err
	}
	s := &Summary{Devices: devs, Sweep: opt.Sweep}
	if err := clamp(ctx, b, opt, s, local); err != nil {
		return nil, err
	}
	ordinals := make([]int, len(devs))
	for i, d := range devs {
		ordinals[i] = d.Ordinal
	}
	if t := b.Topology(); t != nil {
		s.BusPeak, s.PeakLimit = t.BusPeak(ordinals)
	}
	comm := opt.Comm
	if comm == nil {
		if comm, err = b.NewComm(ordinals); err != nil {
			return nil, err
		}
		defer comm.Close()
	}
	if opt.OnStart != nil {
		opt.OnStart(s)
	}
	r := &runner{b: b, comm: comm, opt: opt, n: len(devs), local: local, devs: devs, ctx: ctx, largest: s.Sweep.Max,
		host: opt.Inputs.host()}
	for cycle := 0; cycle < max(opt.Cycles, 1) || opt.Cycles < 0; cycle++ {
		if opt.Cycles < 0 {
			s.Results = s.Results[:0]
		}
		for _, a := range r.args() {
			if err := r.warmup(s.Sweep, a); err != nil {
				return r.stop(s, err)
			}
			for _, size := range s.Sweep.Sizes() {
				if err := ctx.Err(); err != nil {
					return r.stop(s, err)
				}
				if err := r.row(s, cycle, size, a); err != nil {
					return r.stop(s, err)
				}
			}
		}
	}
	return s, nil
}

// CheckRanks says whether the options fit n devices (every process's, across processes): the GPUs
// asked for with NGPUs and the root. Run checks the same; a caller checks first to refuse the
// options before it writes anything.
func CheckRanks(opt Options, n int) error {
	if opt.Comm == nil && opt.NGPUs > n {
		return fmt.Errorf("%w -g %d: only %d GPUs were found", ErrOption, opt.NGPUs, n)
	}
	if opt.Comm == nil && opt.NGPUs > 0 {
		n = opt.NGPUs
	}
	if opt.Coll.Rooted && opt.Root >= n {
		return fmt.Errorf("%w -r %d: %d ranks have roots 0-%d (or -1 for every rank)", ErrOption, opt.Root, n, n-1)
	}
	return nil
}

// ranks returns every rank's device, and the ranks this process drives.
func ranks(b gpu.Backend, opt Options) (devs []gpu.Device, local []int, err error) {
	devs = b.Devices()
	if opt.Ordinals != nil && opt.Comm == nil {
		all := devs
		devs = make([]gpu.Device, len(opt.Ordinals))
		for i, o := range opt.Ordinals {
			if o < 0 || o >= len(all) {
				return nil, nil, fmt.Errorf("%w: device %d of %d: %w", ErrOption, o, len(all), gpu.ErrInvalid)
			}
			devs[i] = all[o]
		}
		opt.NGPUs = 0
	}
	if opt.Comm != nil {
		devs = opt.Devices
		if len(devs) != opt.Comm.Size() || opt.Rank < 0 || opt.Rank >= len(devs) || opt.Group == nil {
			return nil, nil, fmt.Errorf("rank %d of %d ranks with %d devices: %w", opt.Rank, opt.Comm.Size(), len(devs), gpu.ErrInvalid)
		}
	}
	if err := CheckRanks(opt, len(devs)); err != nil {
		return nil, nil, err
	}
	switch {
	case opt.Comm != nil:
		local = []int{opt.Rank}
	case opt.NGPUs > 0:
		devs = devs[:opt.NGPUs]
	}
	if local == nil {
		for i := range devs {
			local = append(local, i)
		}
	}
	return devs, local, nil
}

// clamp reduces the sweep to what the devices' memory holds, as nccl-tests does, and across
// processes to what every process's holds.
func clamp(ctx context.Context, b gpu.Backend, opt Options, s *Summary, local []int) error {
	minMem := s.Devices[0].MemoryBytes
	for _, d := range s.Devices {
		minMem = min(minMem, d.MemoryBytes)
	}
	limit := MemoryLimit(minMem, opt.Check > 0)
	if fm, ok := b.(interface{ FreeMemory(int) (int64, error) }); ok {
		// What is free now may be less than nccl-tests' share of the total.
		div := int64(2)
		if opt.Check > 0 {
			div = 3
		}
		for _, rank := range local {
			if free, err := fm.FreeMemory(s.Devices[rank].Ordinal); err == nil {
				limit = min(limit, free/div)
			}
		}
	}
	if opt.Group != nil { // every process must run the same sizes
		all, err := opt.Group.AllGather(ctx, []float64{float64(limit)})
		if err != nil {
			return err
		}
		for _, v := range all {
			limit = min(limit, int64(v[0]))
		}
	}
	if s.Sweep.Max > limit {
		if limit < 1 {
			return fmt.Errorf("devices have %d bytes of memory: too little for any size, as nccl-tests keeps 1 GiB and more of a GPU's memory free; use GPUs of 3 GiB or more (a simulated topology's memory_bytes)", minMem)
		}
		s.ClampedFrom = s.Sweep.Max
		s.Sweep.Max = limit
		s.Sweep.Min = min(s.Sweep.Min, limit)
	}
	return nil
}

// args lists the type, op and root combinations a run measures, in nccl-tests' order.
func (r *runner) args() []Args {
	ops := []gpu.RedOp{gpu.Sum}
	if r.opt.Coll.TakesOp {
		ops = r.opt.Ops
	}
	roots := []int{-1}
	if r.opt.Coll.Rooted {
		roots = []int{r.opt.Root}
		if r.opt.Root < 0 {
			roots = roots[:0]
			for i := 0; i < r.n; i++ {
				roots = append(roots, i)
			}
		}
	}
	var all []Args
	for _, dt := range r.opt.DTypes {
		for _, op := range ops {
			for _, root := range roots {
				all = append(all, Args{DType: dt, Op: op, Root: max(root, 0), Ranks: r.n})
			}
		}
	}
	return all
}

// row measures one size in both placements, adds it to the summary and hands it on.
func (r *runner) row(s *Summary, cycle int, size int64, a Args) error {
	c := r.opt.Coll
	k := c.Counts(size/int64(a.DType.Size()), a.DType.Size(), r.n)
	res := Result{Cycle: cycle, Size: k.Bytes, Count: k.Param, Type: a.DType.String(), Op: "none", Root: -1}
	if c.TakesOp {
		res.Op = a.Op.String()
	}
	if c.Rooted {
		res.Root = a.Root
	}
	if e, ok := r.comm.(gpu.Explainer); ok {
		res.Algo, res.Proto, res.Channels = e.Explain(c.Name, k.Bytes, a.DType, a.Op)
	}
	r.in = nil // inputs are made once per row, when a placement checks
	for _, inPlace := range []bool{false, true} {
		p, err := r.placement(k, a, inPlace)
		if err != nil {
			return &StepError{Coll: c.Name, Size: k.Bytes, InPlace: inPlace, Err: err}
		}
		if p.Wrong != nil && *p.Wrong > 0 {
			s.OutOfBounds++
		}
		if p.TimingOnly && s.TimingOnlyFrom == 0 {
			s.TimingOnlyFrom = k.Bytes
		}
		if p.BusBW > s.BestBusBW {
			s.BestBusBW, s.BestSize = p.BusBW, k.Bytes
		}
		r.busSum += p.BusBW
		r.cells++
		if inPlace {
			res.InPlace = p
		} else {
			res.OutOfPlace = p
		}
	}
	if r.opt.Expect != nil {
		r.opt.Expect(&res)
	}
	s.Results = append(s.Results, res)
	s.AvgBusBW = r.busSum / float64(r.cells)
	if r.opt.OnResult != nil {
		r.opt.OnResult(res)
	}
	return nil
}

type runner struct {
	b     gpu.Backend
	comm  gpu.Comm
	opt   Options
	n     int
	local []int        // the ranks this process drives
	devs  []gpu.Device // every rank's device
	ctx   context.Context
	// largest is the sweep's largest size once clamped to the devices' memory (nccl-tests'
	// maxbytes), which the timed iterations' places fit in (turns).
	largest int64
	in      *Row // the row's inputs, made as the process's ranks need them
	host    *hostMem
	// busSum and cells make the mean busbw over every measured cell, nccl-tests' footer figure.
	busSum float64
	cells  int
}

// stop ends a run early, keeping what was measured so that it can still be written out.
func (r *runner) stop(s *Summary, err error) (*Summary, error) {
	if cause := context.Cause(r.ctx); cause != nil && errors.Is(err, context.Canceled) {
		err = cause // across processes, the run's context ends with why: another rank's failure
	}
	s.Interrupted = errors.Is(err, context.Canceled)
	s.Err = err
	return s, err
}

// allGather meets the other processes (opt.Group) within the timeout, as a wait for the devices
// is: a rank that never comes (a stopped process) is a hang, not a wait for ever.
func (r *runner) allGather(vals []float64) ([][]float64, error) {
	ctx, cancel := r.within()
	defer cancel()
	all, err := r.opt.Group.AllGather(ctx, vals)
	var hang *gpu.HangError
	if err != nil && errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &hang) {
		err = &gpu.HangError{Err: err} // rank 0 did not answer: another rank is hung
	}
	return all, err
}

// sync waits for the devices, within the timeout.
func (r *runner) sync() error {
	ctx, cancel := r.within()
	defer cancel()
	return r.comm.Synchronize(ctx)
}

// within is the run's context bounded by the timeout for a wait on the devices or the other
// processes (none without one). Across processes a rank other than 0 waits gatherGrace longer:
// rank 0, where the figures meet, knows which ranks it awaits, and its word naming them comes
// first, rather than a word of the rank's own that names no one.
func (r *runner) within() (context.Context, context.CancelFunc) {
	if r.opt.Timeout <= 0 {
		return r.ctx, func() {}
	}
	wait := r.opt.Timeout
	if r.opt.Group != nil && r.opt.Rank != 0 {
		wait += gatherGrace
	}
	return context.WithTimeout(r.ctx, wait)
}

// gatherGrace is how much longer than the timeout a rank other than 0 waits for rank 0's word:
// rank 0 tells every rank of a hang within a few seconds of its own timeout (the rendezvous's
// word on a failure may take 2 s: cmd/gpubench's world.close).
const gatherGrace = 5 * time.Second

// buffers is one placement's device memory: each rank's send and receive buffer, and the places
// the timed iterations move through in turn (turn), the first of which is send and recv.
type buffers struct {
	send, recv []gpu.Buffer
	turns      []place
	allocs     []gpu.Buffer // what send and recv are views of
	spares     []gpu.Buffer // the further places
}

// place is where one turn's ranks send from and receive into.
type place struct{ send, recv []gpu.Buffer }

// turn is where timed iteration i runs.
func (bs *buffers) turn(i int) place { return bs.turns[i%len(bs.turns)] }

// turns is how many places a size's timed iterations move through. nccl-tests moves each timed
// iteration's buffers on by the size, along buffers of the sweep's largest size, "so that we avoid
// cache effects" (startColl in src/common.cu): iteration i runs at place i mod (largest / size),
// so a loop of n iterations touches at most n places. On a simulator, whose devices have no
// cache, the places change nothing but the memory the loop's calls name.
func (r *runner) turns(k Counts, dt gpu.DType) int {
	unit := max(k.Send, k.Recv) * int64(dt.Size())
	if unit == 0 {
		return 1
	}
	return int(max(1, min(int64(r.opt.Iters), r.largest/unit)))
}

// alloc gives each rank a send and a receive buffer, or, in place, one buffer holding both views,
// and, for turns above 1, the further places of the timed iterations in buffers of their own, so
// that send and recv are what they are with one turn (a simulator backs them first, within its
// data cap, and the places after them carry timing only once the cap is spent).
func (r *runner) alloc(k Counts, dt gpu.DType, inPlace bool, turns int) (*buffers, error) {
	elt := int64(dt.Size())
	sendN, recvN := k.Send*elt, k.Recv*elt
	unit := max(sendN, recvN)
	bs := &buffers{turns: make([]place, turns)}
	for t := range bs.turns {
		bs.turns[t] = place{send: make([]gpu.Buffer, r.n), recv: make([]gpu.Buffer, r.n)}
	}
	bs.send, bs.recv = bs.turns[0].send, bs.turns[0].recv
	// places allocates every local rank's places from turn from to turn to, one unit apart in
	// one buffer (two out of place), and sets their views.
	places := func(from, to int, allocs *[]gpu.Buffer) error {
		span := int64(to-from-1) * unit
		for _, rank := range r.local {
			sizes := []int64{span + sendN, span + recvN}
			if inPlace {
				sizes = []int64{span + unit}
			}
			var got []gpu.Buffer
			for _, n := range sizes {
				x, err := r.b.Alloc(r.devs[rank].Ordinal, n)
				if err != nil {
					return err
				}
				*allocs = append(*allocs, x)
				got = append(got, x)
			}
			so, ro := r.opt.Coll.InPlace(k, rank)
			for t := from; t < to; t++ {
				off, p := int64(t-from)*unit, &bs.turns[t]
				if inPlace {
					p.send[rank], p.recv[rank] = got[0].Slice(off+so*elt, sendN), got[0].Slice(off+ro*elt, recvN)
				} else {
					p.send[rank], p.recv[rank] = got[0].Slice(off, sendN), got[1].Slice(off, recvN)
				}
			}
		}
		return nil
	}
	err := places(0, 1, &bs.allocs)
	if err == nil && turns > 1 {
		err = places(1, turns, &bs.spares)
	}
	if err != nil {
		r.free(bs)
		return nil, err
	}
	return bs, nil
}

func (r *runner) free(bs *buffers) {
	for _, x := range slices.Concat(bs.allocs, bs.spares) {
		_ = r.b.Free(x)
	}
}

// hasData reports whether every local rank's send and receive buffer holds data.
func (bs *buffers) hasData() bool {
	for _, x := range bs.allocs {
		if !x.HasData() {
			return false
		}
	}
	return true
}

// warmup runs the warm-up iterations at every power-of-two multiple of the smallest size, as
// nccl-tests does.
func (r *runner) warmup(w Sweep, a Args) error {
	if r.opt.Warmup == 0 {
		return nil
	}
	for size := w.Min; size <= w.Max; size *= 2 {
		k := r.opt.Coll.Counts(size/int64(a.DType.Size()), a.DType.Size(), r.n)
		bs, err := r.alloc(k, a.DType, false, 1)
		if err != nil {
			return &StepError{Coll: r.opt.Coll.Name, Size: k.Bytes, Err: fmt.Errorf("warm-up: %w", err)}
		}
		r.skipData(true)
		err = r.calls(r.opt.Warmup, bs, k, a)
		r.skipData(false)
		r.free(bs)
		if err != nil {
			return &StepError{Coll: r.opt.Coll.Name, Size: k.Bytes, Err: fmt.Errorf("warm-up: %w", err)}
		}
		if size > w.Max/2 {
			break
		}
	}
	return nil
}

// placement measures one size in one placement, then checks it.
func (r *runner) placement(k Counts, a Args, inPlace bool) (Placement, error) {
	c := r.opt.Coll
	bs, err := r.alloc(k, a.DType, inPlace, r.turns(k, a.DType))
	if err != nil {
		return Placement{}, err
	}
	defer r.free(bs)
	timingOnly, err := r.anyOf(!bs.hasData())
	if err != nil {
		return Placement{}, err
	}
	p := Placement{TimingOnly: timingOnly}
	checking := r.opt.Check > 0 && !p.TimingOnly && !(inPlace && c.InPlaceUnchecked)
	var before [][]byte
	if checking {
		before = r.inputs(k, a, inPlace)
		if err := r.load(bs); err != nil {
			return p, err
		}
	}
	// One untimed collective, then the timed loop; their results are never read, since each
	// check reloads the inputs.
	r.skipData(true)
	err = r.calls(1, bs, k, a)
	var lt loopTimes
	if err == nil {
		lt, err = r.timedLoop(bs, k, a)
	}
	r.skipData(false)
	if err != nil {
		return p, err
	}
	var wrong int64
	byRank := make([]int64, r.n)
	if checking {
		if wrong, err = r.check(bs, k, a, before, byRank); err != nil {
			return p, err
		}
	}
	if r.opt.PerIter {
		if p.PerIter, err = r.iterStats(lt.iterUS); err != nil {
			return p, err
		}
	}
	sec, err := r.gather(&p, lt, &wrong, byRank)
	if err != nil {
		return p, err
	}
	if sec > 0 {
		p.AlgBW = float64(k.Bytes) / 1e9 / sec
	}
	p.BusBW = p.AlgBW * c.Factor(r.n)
	if checking {
		p.Wrong, p.WrongByRank = &wrong, byRank
	}
	return p, nil
}

// check runs the check iterations on freshly loaded inputs, counting wrong elements per rank in
// byRank; it stops at the first iteration that finds any, in every process together, since each
// must run as many collectives as the others.
func (r *runner) check(bs *buffers, k Counts, a Args, before [][]byte, byRank []int64) (wrong int64, err error) {
	c := r.opt.Coll
	elt := int64(a.DType.Size())
	got := hostBuf(&r.host.got, k.Recv*elt)
	for i := 0; i < r.opt.Check; i++ {
		if err := r.load(bs); err != nil {
			return wrong, err
		}
		if err := r.calls(1, bs, k, a); err != nil {
			return wrong, err
		}
		for _, rank := range r.local {
			if err := r.b.CopyOut(got, bs.recv[rank]); err != nil {
				return wrong, err
			}
			want := c.Expected(hostBuf(&r.host.want, k.Recv*elt)[:0], r.in, before[rank], rank, k, a)
			w := countWrong(got, want, a.DType, a.Op, c.Reduces)
			byRank[rank] += w
			wrong += w
		}
		if i == r.opt.Check-1 {
			break // every process stops after the last anyway, and gather adds up what they found
		}
		if stop, err := r.anyOf(wrong > 0); err != nil || stop {
			return wrong, err
		}
	}
	return wrong, nil
}

// iterStats are the per-iteration statistics; across processes an iteration lasts as long as its
// slowest rank.
func (r *runner) iterStats(iters []float64) (*IterStats, error) {
	if r.opt.Group != nil {
		all, err := r.allGather(iters)
		if err != nil {
			return nil, err
		}
		for _, v := range all {
			for i := range min(len(v), len(iters)) {
				iters[i] = max(iters[i], v[i])
			}
		}
	}
	return newIterStats(iters, r.opt.PerIterSkip), nil
}

// gather sets the placement's times from every process's, combined as nccl-tests' -a combines
// them, names the slowest rank, and sums the wrong elements over the processes; it returns the
// combined seconds per collective.
func (r *runner) gather(p *Placement, lt loopTimes, wrong *int64, byRank []int64) (float64, error) {
	times, cpu := []float64{lt.sec}, []float64{lt.cpuSec}
	if r.opt.Group != nil {
		all, err := r.allGather([]float64{lt.sec, float64(*wrong), lt.cpuSec})
		if err != nil {
			return 0, err
		}
		times, cpu, *wrong = make([]float64, len(all)), make([]float64, len(all)), 0
		slowest := 0
		for rank, v := range all {
			times[rank], cpu[rank] = v[0], v[2]
			*wrong += int64(v[1])
			byRank[rank] = int64(v[1])
			if v[0] > times[slowest] {
				slowest = rank
			}
			p.RankTimesUS = append(p.RankTimesUS, v[0]*1e6)
		}
		if slices.Min(times) < times[slowest] { // a tie names no rank
			p.SlowestRank = &slowest
		}
	}
	sec := Combine(times, r.opt.Average)
	p.TimeUS = sec * 1e6
	if r.opt.CPUTime {
		p.CPUTimeUS = Combine(cpu, r.opt.Average) * 1e6
	}
	return sec, nil
}

// skipData tells a backend whose data movement costs only host CPU (gpu.DataSkipper) to leave it
// out of calls whose results are not read.
func (r *runner) skipData(skip bool) {
	if s, ok := r.comm.(gpu.DataSkipper); ok {
		s.SkipData(skip)
	}
}

// anyOf reports whether v holds in any process (v itself in a run of one process).
func (r *runner) anyOf(v bool) (bool, error) {
	if r.opt.Group == nil {
		return v, nil
	}
	x := 0.0
	if v {
		x = 1
	}
	all, err := r.allGather([]float64{x})
	for _, a := range all {
		v = v || a[0] != 0
	}
	return v, err
}

// loopTimes is what the timed loop measured: seconds per collective from before the first
// launch to after the last completion, the host's launch time alone per collective, and with
// PerIter every iteration's stream time (µs).
type loopTimes struct {
	sec, cpuSec float64
	iterUS      []float64
}

// timedLoop runs the timed iterations, timed on the backend's host clock as nccl-tests times
// them; in graph mode every graph launch's stream time is divided by the iterations it holds.
func (r *runner) timedLoop(bs *buffers, k Counts, a Args) (loopTimes, error) {
	var lt loopTimes
	iters := r.opt.Iters
	var st gpu.StreamTimer
	mark := func() error { return nil }
	if r.opt.PerIter {
		var ok bool
		if st, ok = r.comm.(gpu.StreamTimer); !ok {
			return lt, fmt.Errorf("--per-iter: the %s backend cannot time its streams", r.b.Name())
		}
		// Every mark is made before the clock starts, so that marking costs the loop only the
		// recording.
		if err := st.Reserve(max(iters, r.opt.Graph) + 1); err != nil {
			return lt, err
		}
		mark = st.Mark
	}
	launches, per := iters, 1 // timed launches, and collectives in each
	var launch func(i int) error
	if r.opt.Graph > 0 {
		g, err := r.capture(bs, k, a)
		if err != nil {
			return lt, err
		}
		defer g.Destroy()
		launches, per, launch = r.opt.Graph, iters, func(int) error { return g.Launch() }
	} else {
		launch = func(i int) error {
			t := bs.turn(i)
			return r.opt.Coll.Call(r.comm, t.send, t.recv, k, a)
		}
	}
	done := r.ctx.Done() // a long loop (-n 1000000000) still ends on Ctrl-C
	t0 := r.b.Now()
	if err := mark(); err != nil {
		return lt, err
	}
	for i := 0; i < launches; i++ {
		select {
		case <-done:
			return lt, r.ctx.Err()
		default:
		}
		if err := launch(i); err != nil {
			return lt, err
		}
		if err := mark(); err != nil {
			return lt, err
		}
		if err := r.block(); err != nil {
			return lt, err
		}
	}
	// nccl-tests' -C: the launches alone, per collective (in graph mode, per captured iteration).
	lt.cpuSec = (r.b.Now() - t0).Seconds() / float64(iters)
	if err := r.sync(); err != nil {
		return lt, err
	}
	lt.sec = (r.b.Now() - t0).Seconds() / float64(launches*per)
	if st != nil {
		iv, err := st.Intervals()
		if err != nil {
			return lt, err
		}
		lt.iterUS = make([]float64, len(iv))
		for i, d := range iv {
			lt.iterUS[i] = float64(d.Nanoseconds()) / 1e3 / float64(per)
		}
	}
	return lt, nil
}

// capture records the timed loop's iterations as a graph (nccl-tests' -G).
func (r *runner) capture(bs *buffers, k Counts, a Args) (gpu.Graph, error) {
	gc, ok := r.comm.(gpu.GraphComm)
	if !ok {
		return nil, fmt.Errorf("graph mode (-G): the %s backend cannot capture graphs", r.b.Name())
	}
	if err := gc.BeginCapture(); err != nil {
		return nil, err
	}
	var err error
	for i := 0; i < r.opt.Iters && err == nil; i++ {
		t := bs.turn(i)
		err = r.opt.Coll.Call(r.comm, t.send, t.recv, k, a)
	}
	g, endErr := gc.EndCapture()
	if err != nil || endErr != nil {
		if g != nil {
			_ = g.Destroy()
		}
		return nil, errors.Join(err, endErr)
	}
	return g, nil
}

// block waits after a timed launch as nccl-tests' -z asks: not at all with 0; for the devices
// with 1, 2 and 3 (in one process an iteration is one call), with 1's barrier across processes.
// Graph launches are not blocked (-G and -z 3 do not combine in nccl-tests; gpubench drops -z
// with -G altogether, as each launch already holds the whole loop).
func (r *runner) block() error {
	if r.opt.Blocking == BlockingNone || r.opt.Graph > 0 {
		return nil
	}
	if err := r.sync(); err != nil {
		return err
	}
	if r.opt.Blocking == BlockingCallBarrier && r.opt.Group != nil { // the barrier across processes
		if _, err := r.allGather(nil); err != nil {
			return err
		}
	}
	return nil
}

// calls enqueues the collective n times, then waits for the devices.
func (r *runner) calls(n int, bs *buffers, k Counts, a Args) error {
	done := r.ctx.Done()
	for i := 0; i < n; i++ {
		select {
		case <-done:
			return r.ctx.Err()
		default:
		}
		if err := r.opt.Coll.Call(r.comm, bs.send, bs.recv, k, a); err != nil {
			return err
		}
	}
	return r.sync()
}

// inputs makes the row's inputs (once), and returns what each of this process's receive buffers
// holds once they are loaded (nil for other processes' ranks).
func (r *runner) inputs(k Counts, a Args, inPlace bool) (before [][]byte) {
	elt := int64(a.DType.Size())
	if r.in == nil {
		r.in = r.opt.Inputs.row(r.opt.Coll, r.n, k.Send*elt, a, r.opt.Seed)
	}
	before = make([][]byte, r.n)
	// Out of place every receive buffer starts zeroed. Nothing writes these zeros, so memory kept
	// from an earlier row still holds them, and fresh memory is not touched until a check reads it.
	zero := hostBuf(&r.host.zero, k.Recv*elt)
	if len(r.host.whole) < len(r.local) {
		r.host.whole = make([][]byte, len(r.local))
	}
	for i, rank := range r.local {
		before[rank] = zero
		if inPlace {
			whole := hostBuf(&r.host.whole[i], max(k.Send, k.Recv)*elt)
			clear(whole)
			so, ro := r.opt.Coll.InPlace(k, rank)
			copy(whole[so*elt:], r.in.Input(rank))
			before[rank] = whole[ro*elt : (ro+k.Recv)*elt]
		}
	}
	return before
}

// load zeroes the buffers and copies the process's ranks' inputs in.
func (r *runner) load(bs *buffers) error {
	for _, x := range bs.allocs {
		if err := r.b.Memset(x, 0); err != nil {
			return err
		}
	}
	for _, rank := range r.local {
		if err := r.b.CopyIn(bs.send[rank], r.in.Input(rank)); err != nil {
			return err
		}
	}
	return nil
}
