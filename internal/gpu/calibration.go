package gpu

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Calibration (format version 2) is what `gpubench calibrate` fitted from measured runs of the
// machine the topology describes: figures the simulated machine then uses in place of the
// model's own, each for what it names, and a record of where they came from (docs/calibrate.md).
type Calibration struct {
	// LaunchUS is the host's time to launch one collective on one GPU, µs (the model's 4.9).
	LaunchUS float64 `json:"launch_us,omitempty"`
	// Algorithms are per "Algo/Proto" (NCCL's names, as rows report them: "Ring/LL",
	// "NVLS/Simple"): what that algorithm and protocol take on this machine beside NCCL's
	// figures. NCCL still picks by its own figures; the run pays these.
	Algorithms map[string]AlgoCalibration `json:"algorithms,omitempty"`
	// LocalCopyEfficiency is the fraction of a GPU's memory bandwidth a copy inside it reaches,
	// read and write counted once each (the model's 0.75).
	LocalCopyEfficiency float64 `json:"local_copy_efficiency,omitempty"`
	// Measured is the range the runs covered: beyond it figures are extrapolated.
	Measured MeasuredRange `json:"measured"`
	// From lists the files fitted, Defaults what they did not constrain (kept at the model's
	// figures), and Error the fit's error per size band before and after.
	From     []string    `json:"from"`
	Defaults []string    `json:"defaults,omitempty"`
	Error    []BandError `json:"error,omitempty"`
}

// AlgoCalibration is one algorithm and protocol's calibration: the simulated time of a call is
// (the model's latency + LatencyUS) + (the model's bandwidth time) / Bandwidth.
type AlgoCalibration struct {
	LatencyUS float64 `json:"latency_us"` // added to the model's latency
	Bandwidth float64 `json:"bandwidth"`  // the fraction of the model's bandwidth reached
	// The record of the fit, which the simulator does not read: how many rows it was fitted
	// from, their smallest and largest size, and the largest relative error left among them, %.
	Rows         int     `json:"rows,omitempty"`
	MinBytes     int64   `json:"min_bytes,omitempty"`
	MaxBytes     int64   `json:"max_bytes,omitempty"`
	ErrorPercent float64 `json:"error_percent,omitempty"`
}

// MeasuredRange is the sizes and ranks the calibrating runs covered.
type MeasuredRange struct {
	MinBytes int64 `json:"min_bytes"`
	MaxBytes int64 `json:"max_bytes"`
	MaxRanks int   `json:"max_ranks"`
}

// BandError is the fit's largest relative error in one band of sizes, in percent, before and
// after calibration, over the rows of that band.
type BandError struct {
	Band   string  `json:"band"`
	Rows   int     `json:"rows"`
	Before float64 `json:"before_percent"`
	After  float64 `json:"after_percent"`
}

// NCCLAlgorithms and NCCLProtocols are NCCL's algorithms and protocols as NCCL_ALGO and
// NCCL_PROTO, rows and calibration keys name them, in NCCL's order (NCCL_ALGO_TREE = 0 to
// NCCL_ALGO_PAT = 6, NCCL_PROTO_LL = 0 to NCCL_PROTO_SIMPLE = 2: NCCL's tuner plugin header,
// src/include/plugin/nccl_tuner.h).
var (
	NCCLAlgorithms = [...]string{"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"}
	NCCLProtocols  = [...]string{"LL", "LL128", "Simple"}
)

// calibration limits: a figure past them is a wrong file, not a machine.
const (
	maxCalLatencyUS = 1e5
	minCalFraction  = 0.01
	maxCalFraction  = 100.0
)

// check validates a calibration, naming the field at fault.
func (c *Calibration) check() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("calibration.%s is %v: %s", field, v, want)
	}
	if c.LaunchUS != 0 && !(c.LaunchUS > 0 && c.LaunchUS <= maxCalLatencyUS) {
		return bad("launch_us", c.LaunchUS, fmt.Sprintf("give microseconds in (0, %g], or leave it out", maxCalLatencyUS))
	}
	if c.LocalCopyEfficiency != 0 && !(c.LocalCopyEfficiency >= minCalFraction && c.LocalCopyEfficiency <= 1) {
		return bad("local_copy_efficiency", c.LocalCopyEfficiency, fmt.Sprintf("give a fraction in [%g, 1], or leave it out", minCalFraction))
	}
	names := make([]string, 0, len(c.Algorithms))
	for k := range c.Algorithms {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		a := c.Algorithms[k]
		algo, proto, ok := strings.Cut(k, "/")
		if !ok || algo == "" || proto == "" || strings.ContainsAny(proto, "/ ") {
			return fmt.Errorf("calibration.algorithms: key %q: name an algorithm and protocol as rows do, e.g. \"Ring/Simple\"", k)
		}
		if err := knownName(k, "algorithm", algo, NCCLAlgorithms[:]); err != nil {
			return err
		}
		if err := knownName(k, "protocol", proto, NCCLProtocols[:]); err != nil {
			return err
		}
		if math.IsNaN(a.LatencyUS) || math.Abs(a.LatencyUS) > maxCalLatencyUS {
			return bad("algorithms."+k+".latency_us", a.LatencyUS, fmt.Sprintf("give microseconds within ±%g", maxCalLatencyUS))
		}
		if !(a.Bandwidth >= minCalFraction && a.Bandwidth <= maxCalFraction) {
			return bad("algorithms."+k+".bandwidth", a.Bandwidth, fmt.Sprintf("give a fraction of the model's bandwidth in [%g, %g]", minCalFraction, maxCalFraction))
		}
	}
	m := c.Measured
	if m.MinBytes < 0 || m.MaxBytes < m.MinBytes || m.MaxRanks < 0 {
		return bad("measured", fmt.Sprintf("%+v", m), "give min_bytes <= max_bytes and max_ranks >= 0")
	}
	return nil
}

// knownName checks that name, part of calibration key k, is one of NCCL's names.
func knownName(k, what, name string, names []string) error {
	for _, n := range names {
		switch {
		case n == name:
			return nil
		case strings.EqualFold(n, name):
			return fmt.Errorf("calibration.algorithms: key %q: %s %q is spelt %q, as NCCL and rows spell it", k, what, name, n)
		}
	}
	return fmt.Errorf("calibration.algorithms: key %q: NCCL has no %s %q; use one of %s", k, what, name, strings.Join(names, ", "))
}
