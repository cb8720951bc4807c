package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/gpubench/gpubench/internal/gpu"
)

// CollRun is a measured collective run to calibrate from: ranks on the topology's first GPUs, a
// host thread launching perThread of them (1: a process per GPU; all of a node's: one thread),
// the timed iterations per size (a loop's time includes its first launch), and the out-of-place
// time of each size.
type CollRun struct {
	File      string
	Coll      string // allreduce, allgather, ...
	Ranks     int
	PerThread int
	Iters     int
	Rows      []MeasuredRow
}

// MeasuredRow is one size of a run: the size as the collective's command takes it, and the time
// of one call, µs.
type MeasuredRow struct {
	Bytes  int64
	TimeUS float64
}

// LocalCopy is a measured copy inside one GPU: bytes per copy and one copy's bytes over its time.
type LocalCopy struct {
	File   string
	Device int
	Bytes  int64
	GBs    float64
}

// sample is one measured row with what the uncalibrated model says of it.
type sample struct {
	file       string
	bytes      int64
	measured   float64
	key        string  // "Algo/Proto" of the tuner's pick
	lat, bw    float64 // the pick's simulated latency and bandwidth time, µs
	launches   int     // GPUs one host thread launches for each call
	iters      int     // calls in the timed loop
	calibrated bool    // tuned: its algorithm can be calibrated (not point to point)
}

// ErrCalibrate marks what calibration cannot use.
var ErrCalibrate = errors.New("calibrate")

// Calibrate fits the model to measured runs of the machine t describes (docs/calibrate.md): the
// host's launch cost, each algorithm and protocol's latency and bandwidth as the runs show them,
// and the local copy's efficiency. What the runs do not constrain keeps the model's figure and is
// listed in Defaults. t itself must carry no calibration.
func Calibrate(t *gpu.Topology, colls []CollRun, copies []LocalCopy) (*gpu.Calibration, error) {
	if t.Calibration != nil {
		return nil, fmt.Errorf("%w: topology %s is already calibrated: calibrate from the machine's own topology", ErrCalibrate, t.Name)
	}
	cal := &gpu.Calibration{Algorithms: map[string]gpu.AlgoCalibration{}, Measured: gpu.MeasuredRange{MinBytes: math.MaxInt64}}
	files := map[string]bool{}
	var samples []sample
	for _, r := range colls {
		s, err := samplesOf(t, r)
		if err != nil {
			return nil, err
		}
		samples = append(samples, s...)
		files[r.File] = true
		if _, tuned := collKinds[r.Coll]; !tuned || r.Ranks == 1 {
			why := "one rank runs no algorithm"
			if !tuned {
				why = "NCCL's tuner picks none for point to point"
			}
			cal.Defaults = append(cal.Defaults, fmt.Sprintf("%s: %s on %d rank%s fits no algorithm's figures (%s)", r.File, r.Coll, r.Ranks, plural(r.Ranks), why))
		}
		for _, x := range s {
			cal.Measured.MaxRanks = max(cal.Measured.MaxRanks, r.Ranks)
			cal.Measured.MinBytes = min(cal.Measured.MinBytes, x.bytes)
			cal.Measured.MaxBytes = max(cal.Measured.MaxBytes, x.bytes)
		}
	}
	if len(samples) == 0 {
		cal.Measured.MinBytes = 0 // no collective measured: MaxRanks 0 says so
	}
	fitLaunch(cal, samples)
	fitAlgorithms(cal, samples)
	if err := fitLocalCopy(t, cal, copies); err != nil {
		return nil, err
	}
	for _, c := range copies {
		files[c.File] = true
	}
	for f := range files {
		cal.From = append(cal.From, f)
	}
	sort.Strings(cal.From)
	cal.Error = bandErrors(cal, samples)
	if len(cal.Algorithms) == 0 && cal.LaunchUS == 0 && cal.LocalCopyEfficiency == 0 {
		why := slices.DeleteFunc(slices.Clone(cal.Defaults), func(d string) bool { return strings.HasPrefix(d, "local_copy_efficiency: no local copy") })
		return nil, fmt.Errorf("%w: these runs constrain none of the simulator's figures (%s): give runs of allreduce, allgather, reducescatter, broadcast or reduce on two ranks or more, swept from small sizes to large ones (8B:1GB), or gpubench p2p results for the copy inside a GPU",
			ErrCalibrate, strings.Join(why, "; "))
	}
	if len(cal.Algorithms) == 0 {
		cal.Algorithms = nil
	}
	return cal, nil
}

// informative is the least share of a row's measured time a term must have in the model for the
// row to fit it (fitOne).
const informative = 0.1

// samplesOf asks the uncalibrated model about every row of a run.
func samplesOf(t *gpu.Topology, r CollRun) ([]sample, error) {
	if r.Ranks == 0 {
		return nil, fmt.Errorf("%w: %s does not list the ranks it ran on (the lines under \"# Using devices\"): keep those lines in the log", ErrCalibrate, r.File)
	}
	if r.Ranks < 1 || r.Ranks > t.NumGPUs() {
		return nil, fmt.Errorf("%w: %s ran on %d ranks; topology %s has %d GPUs", ErrCalibrate, r.File, r.Ranks, t.Name, t.NumGPUs())
	}
	if !isExplained(r.Coll) {
		return nil, fmt.Errorf("%w: %s is a %s run, which the simulator does not model: use %s", ErrCalibrate, r.File, r.Coll, strings.Join(ExplainCollectives, ", "))
	}
	devs := make([]int, r.Ranks)
	for i := range devs {
		devs[i] = i
	}
	m := newModel(t, devs, nil)
	kind, tuned := collKinds[r.Coll]
	var out []sample
	for _, row := range r.Rows {
		if row.Bytes <= 0 || !(row.TimeUS > 0) {
			continue // a 0-byte row takes no time worth fitting
		}
		s := sample{file: r.File, bytes: row.Bytes, measured: row.TimeUS, launches: max(r.PerThread, 1), iters: max(r.Iters, 1),
			calibrated: tuned && r.Ranks > 1}
		if s.calibrated {
			c := m.decide(kind, row.Bytes).Chosen()
			s.key, s.lat, s.bw = c.Algo+"/"+c.Proto, c.SimLatencyUS, c.SimUS-c.SimLatencyUS
		} else {
			x, err := Explain(t, devs, nil, r.Coll, row.Bytes)
			if err != nil {
				continue // an all-to-all share under 16 B: nothing to model
			}
			s.lat, s.bw = x.Chosen.LatencyUS, x.Chosen.BandwidthUS
		}
		out = append(out, s)
	}
	return out, nil
}

// fitLaunch sets the launch cost from the rows the model says the host's launches pace (several
// GPUs to one thread, small sizes): a loop of n calls then takes n launches and the last call's
// device time, so launch = (measured - device time / n) / launches, the median over those rows.
// Only rows whose launches take twice the device's time in the model count: where the two are
// close, a device slower than the model (a network's latency above NCCL's) would pass its time
// off as the host's.
func fitLaunch(cal *gpu.Calibration, samples []sample) {
	var per []float64
	for _, s := range samples {
		if s.launches > 1 && launchUS*float64(s.launches) >= 2*(s.lat+s.bw) {
			per = append(per, (s.measured-(s.lat+s.bw)/float64(s.iters))/float64(s.launches))
		}
	}
	if len(per) == 0 {
		cal.Defaults = append(cal.Defaults, fmt.Sprintf("launch_us: no row was paced by one thread launching several GPUs (its launches twice the device's time in the model); the model's %g µs is kept", launchUS))
		return
	}
	cal.LaunchUS = round3(median(per))
}

// fitAlgorithms fits each algorithm and protocol the tuner picked for some rows: a loop's call
// takes (latency + ΔL) + bandwidth time / k, plus its first launch spread over the loop, by least
// squares on the relative error, over the rows the device (not the host's launches) paces. One
// row, or rows of one size, fit one of the two: k where the bandwidth term is the larger, else ΔL.
func fitAlgorithms(cal *gpu.Calibration, samples []sample) {
	byKey, seen := map[string][]sample{}, map[string]bool{}
	for _, s := range samples {
		if s.calibrated {
			seen[s.key] = true
		}
		if host := hostUS(cal, s); s.calibrated && s.measured-host/float64(s.iters) > host {
			s.lat += host / float64(s.iters) // the loop's first launch, which every fit pays alike
			byKey[s.key] = append(byKey[s.key], s)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if x, kept, ok := fitOne(byKey[k]); ok {
			x.Rows, x.MinBytes = len(byKey[k]), math.MaxInt64
			cal.Algorithms[k] = x // predicted reads it for the error left
			for _, s := range byKey[k] {
				x.MinBytes, x.MaxBytes = min(x.MinBytes, s.bytes), max(x.MaxBytes, s.bytes)
				s.lat -= hostUS(cal, s) / float64(s.iters) // the row as measured: predicted adds the launch
				x.ErrorPercent = max(x.ErrorPercent, 100*math.Abs(predicted(cal, s)/s.measured-1))
			}
			x.ErrorPercent = round3(x.ErrorPercent)
			cal.Algorithms[k] = x
			if kept != "" {
				cal.Defaults = append(cal.Defaults, k+": "+kept)
			}
		} else {
			cal.Defaults = append(cal.Defaults, k+": its rows do not fit latency + size / bandwidth with a positive bandwidth; NCCL's figures are kept")
		}
	}
	var paced []string
	for k := range seen {
		if byKey[k] == nil {
			paced = append(paced, k)
		}
	}
	sort.Strings(paced)
	for _, k := range paced {
		cal.Defaults = append(cal.Defaults, k+": the host's launches paced every row it ran; NCCL's figures are kept")
	}
	if len(cal.Algorithms) > 0 {
		cal.Defaults = append(cal.Defaults, "every other algorithm and protocol: no row ran it; NCCL's figures are kept")
	}
}

// fitOne fits one algorithm and protocol's rows; kept says which of its two figures the rows left
// at NCCL's ("" when both were fitted). A term is fitted only where, in the model, it is at least
// a tenth of some row's measured time (informative): a latency read off rows of milliseconds
// (the intercept of a line through 512 MiB to 8 GiB, where NCCL's latency is a few µs of each)
// is no latency, and sets every small call's time wrong.
func fitOne(ss []sample) (x gpu.AlgoCalibration, kept string, ok bool) {
	// Weighted least squares of y = a + b x, y = measured - latency, x = bandwidth time,
	// weights 1/measured² (relative error).
	var sw, sx, sy, sxx, sxy float64
	lo, hi := math.Inf(1), 0.0
	latRows, bwRows := false, false
	for _, s := range ss {
		w := 1 / (s.measured * s.measured)
		x, y := s.bw, s.measured-s.lat
		sw, sx, sy, sxx, sxy = sw+w, sx+w*x, sy+w*y, sxx+w*x*x, sxy+w*x*y
		lo, hi = math.Min(lo, x), math.Max(hi, x)
		latRows, bwRows = latRows || s.lat >= informative*s.measured, bwRows || s.bw >= informative*s.measured
	}
	const keepLat = "its latency is under a tenth of every row's time in the model; NCCL's latency is kept"
	const keepBW = "its bandwidth time is under a tenth of every row's time in the model; NCCL's bandwidth is kept"
	if det := sw*sxx - sx*sx; latRows && bwRows && hi > 1.5*lo && det > 0 {
		b := (sw*sxy - sx*sy) / det
		a := (sy - b*sx) / sw
		if b > 0 {
			if x, ok := calibration(a, 1/b, ss); ok {
				return x, "", true
			}
		}
	}
	// One parameter: the only one the rows inform, else the term that dominates them.
	var bwTime, latTime float64
	for _, s := range ss {
		bwTime, latTime = bwTime+s.bw, latTime+s.lat
	}
	if bwRows && !latRows || bwRows == latRows && bwTime >= latTime {
		x, ok := calibration(0, sxx/sxy, ss) // y = x / k through the origin, weighted
		return x, keepLat, ok
	}
	x, ok = calibration(sy/sw-sx/sw, 1, ss)
	return x, keepBW, ok
}

// calibration checks a fit: a positive bandwidth fraction in range, and no row's latency below 0.
func calibration(dLat, k float64, ss []sample) (gpu.AlgoCalibration, bool) {
	if !(k >= 0.01 && k <= 100) || math.IsNaN(dLat) {
		return gpu.AlgoCalibration{}, false
	}
	for _, s := range ss {
		if s.lat+dLat < 0 {
			dLat = -s.lat
		}
	}
	return gpu.AlgoCalibration{LatencyUS: math.Round(dLat*1000)/1000 + 0, Bandwidth: round3(k)}, true // + 0: no -0
}

// fitLocalCopy sets the local copy's efficiency from measured local copies: their bandwidth,
// corrected for the copy's start-up, over the GPU's memory bandwidth read and written.
func fitLocalCopy(t *gpu.Topology, cal *gpu.Calibration, copies []LocalCopy) error {
	var effs []float64
	for _, c := range copies {
		if c.Device < 0 || c.Device >= t.NumGPUs() {
			return fmt.Errorf("%w: %s measured GPU %d; topology %s has GPUs 0-%d", ErrCalibrate, c.File, c.Device, t.Name, t.NumGPUs()-1)
		}
		g, _ := t.GPU(c.Device)
		us := float64(c.Bytes)/(1e3*c.GBs) - localCopyUS
		if g.MemoryGBs <= 0 || c.Bytes <= 0 || !(c.GBs > 0) || us <= 0 {
			continue
		}
		effs = append(effs, 2*float64(c.Bytes)/(1e3*us)/g.MemoryGBs)
	}
	if len(effs) == 0 {
		cal.Defaults = append(cal.Defaults, fmt.Sprintf("local_copy_efficiency: no local copy was measured (gpubench p2p); the model's %g is kept", localCopyEfficiency))
		return nil
	}
	if e := median(effs); e >= 0.01 && e <= 1 {
		cal.LocalCopyEfficiency = round3(e)
	} else {
		cal.Defaults = append(cal.Defaults, fmt.Sprintf("local_copy_efficiency: the copies measured %.3g of the memory bandwidth, outside [0.01, 1]; the model's %g is kept", e, localCopyEfficiency))
	}
	return nil
}

// Bands of sizes for the fit's error.
var bands = []struct {
	name   string
	lo, hi int64
}{{"8 B - 64 KiB", 0, 64 << 10}, {"64 KiB - 1 MiB", 64 << 10, 1 << 20}, {"1 MiB - 64 MiB", 1 << 20, 64 << 20},
	{"64 MiB - 1 GiB", 64 << 20, 1 << 30}, {"1 GiB and up", 1 << 30, math.MaxInt64}}

// bandErrors is the largest relative error per size band, with the model's figures and with the
// calibration's (what the simulated loop of calls takes: the slower of the host's launches and
// the device).
func bandErrors(cal *gpu.Calibration, samples []sample) []gpu.BandError {
	var out []gpu.BandError
	for _, b := range bands {
		e := gpu.BandError{Band: b.name}
		for _, s := range samples {
			if s.bytes < b.lo || s.bytes >= b.hi {
				continue
			}
			e.Rows++
			before, after := predicted(nil, s), predicted(cal, s)
			e.Before = math.Max(e.Before, 100*math.Abs(before/s.measured-1))
			e.After = math.Max(e.After, 100*math.Abs(after/s.measured-1))
		}
		if e.Rows > 0 {
			e.Before, e.After = round3(e.Before), round3(e.After)
			out = append(out, e)
		}
	}
	return out
}

// hostUS is the host's time to launch one call of s's run, with cal's launch cost (nil: the
// model's).
func hostUS(cal *gpu.Calibration, s sample) float64 {
	if cal != nil && cal.LaunchUS > 0 {
		return cal.LaunchUS * float64(s.launches)
	}
	return launchUS * float64(s.launches)
}

// predicted is the time per call of s's loop of calls, with cal's figures where it has them
// (nil: the model's): n calls take n of the slower of the host's launch and the device's time,
// and once the faster of the two.
func predicted(cal *gpu.Calibration, s sample) float64 {
	lat, bw := s.lat, s.bw
	if cal != nil && s.calibrated {
		if x, ok := cal.Algorithms[s.key]; ok {
			lat, bw = max(0, lat+x.LatencyUS), bw/x.Bandwidth
		}
	}
	host, dev := hostUS(cal, s), lat+bw
	return math.Max(host, dev) + math.Min(host, dev)/float64(s.iters)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func round3(v float64) float64 {
	if v == 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return v
	}
	mag := math.Pow(10, 3-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*mag) / mag
}
