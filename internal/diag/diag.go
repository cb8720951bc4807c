// Package diag finds what is wrong with a multi-GPU machine and says how to fix it: the driver and
// libraries, each GPU's health and configuration, NVLink, P2P, ACS and the IOMMU, RDMA, the
// container and scheduler around the process, the NCCL environment, and (unless quick) a short
// P2P and all-reduce measurement against the topology's nominal figures.
//
// Each check is one small definition in checks*.go. Every file a check reads is under
// Options.Root (as node_exporter's --path.sysfs and --path.procfs point at another tree), and the
// environment is Options.Env, so tests run the checks against fixture trees and fixed
// environments. NVML is read through go-nvml in nvml_cgo.go (ReadDevicesWith takes a mock).
package diag

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/topo"
)

// Status is a check's verdict.
type Status string

// The verdicts. A check that cannot run says Skip with the reason, never Pass.
const (
	Pass Status = "pass"
	Warn Status = "warn"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Result is one check's outcome.
type Result struct {
	Check   string         `json:"check"`
	Group   string         `json:"group"`
	Status  Status         `json:"status"`
	Finding string         `json:"finding"`
	Remedy  string         `json:"remedy"`
	Details map[string]any `json:"details,omitempty"`
}

// Check is one check: its name, its group, and what it does with the facts.
type Check struct {
	Name  string
	Group string
	Moves bool // moves data on the GPUs: --quick skips it
	Run   func(*Facts) Result
}

// LibInfo is what loading a library gave.
type LibInfo struct {
	Path    string
	Version int // NCCL's version code; for the CUDA runtime, the runtime's 1000*major+10*minor
	Driver  int // CUDA runtime only: the CUDA version the driver supports, 1000*major+10*minor
	Err     error
}

// Options say where diag looks and what it may use.
type Options struct {
	Root    string   // directory that holds sys/ and proc/; "" is "/"
	Env     []string // the environment, KEY=VALUE
	NVMLLib string   // the NVML library to load; "" is libnvidia-ml.so.1
	// Sim names the simulated machine when diag runs on the simulator: checks of real hardware
	// skip, and the data checks run on the simulator.
	Sim   string
	Quick bool
	// ReadDevices reads the GPUs through NVML; nil is ReadDevices.
	ReadDevices func(nvmlLib string, opt topo.Options) (*Devices, error)
	CUDA, NCCL  LibInfo // the CUDA runtime and NCCL, as the command loaded them
	// Backend moves data for the data checks (NCCL on the real GPUs, or the simulator); when it is
	// nil, BackendErr says why, and those checks skip.
	Backend    gpu.Backend
	BackendErr error
	// SimEnvErr is the simulator's refusal of the NCCL_* variables where it goes beyond their
	// values alone (NCCL_IB_HCA naming no NIC of the topology), on --backend sim.
	SimEnvErr error
	// Nominal gives the data checks their nominal figures: the simulator's topology, or the real
	// machine's as topo records it; nil when unknown.
	Nominal *gpu.Topology
	Context context.Context
}

// Facts are what the checks look at, gathered once.
type Facts struct {
	opt  Options
	fs   fsys
	env  map[string]string
	sim  bool
	Devs *Devices // nil when NVML could not be read; DevsErr says why
	// DevsErr is why Devs is nil.
	DevsErr error
}

// Report is a whole run.
type Report struct {
	Host    string   `json:"host"`
	Backend string   `json:"backend"`
	Quick   bool     `json:"quick"`
	Results []Result `json:"checks"`
}

// Counts tallies the results by status.
func (r *Report) Counts() map[Status]int {
	c := map[Status]int{Pass: 0, Warn: 0, Fail: 0, Skip: 0}
	for _, x := range r.Results {
		c[x.Status]++
	}
	return c
}

// Failed lists the checks that failed.
func (r *Report) Failed() []string {
	var f []string
	for _, x := range r.Results {
		if x.Status == Fail {
			f = append(f, x.Check)
		}
	}
	return f
}

// hardware names the checks whose failure is the machine's hardware (a GPU, its memory, a PCIe or
// NVLink link, an RDMA port) rather than its software or settings.
var hardware = map[string]bool{"ecc": true, "retired-memory": true, "throttle": true, "pcie-link": true, "nvlink": true, "rdma-ports": true}

// Failures are the failed checks as "check: finding", the hardware's apart from the rest (software,
// settings), so that a missing library is never taken for a bad node.
func (r *Report) Failures() (hw, other []string) {
	for _, x := range r.Results {
		if x.Status != Fail {
			continue
		}
		s := x.Check + ": " + x.Finding
		if hardware[x.Check] {
			hw = append(hw, s)
		} else {
			other = append(other, s)
		}
	}
	return hw, other
}

// Checks lists every check in the order diag runs and prints them.
func Checks() []Check {
	var all []Check
	for _, group := range [][]Check{libraryChecks, deviceChecks, interconnectChecks, rdmaChecks, containerChecks, ncclChecks, dataChecks} {
		all = append(all, group...)
	}
	return all
}

// Run gathers the facts and runs every check (those that move data only without Quick).
func Run(opt Options) *Report {
	if opt.Root == "" {
		opt.Root = "/"
	}
	if opt.Context == nil {
		opt.Context = context.Background()
	}
	f := &Facts{opt: opt, fs: fsys{root: opt.Root}, env: envMap(opt.Env), sim: opt.Sim != ""}
	if !f.sim {
		read := opt.ReadDevices
		if read == nil {
			read = ReadDevices
		}
		visible, set := f.lookup("CUDA_VISIBLE_DEVICES")
		f.Devs, f.DevsErr = read(opt.NVMLLib, topo.Options{Root: opt.Root, P2P: "read",
			VisibleDevices: topo.ParseVisibleDevices(visible, set), DeviceOrder: f.env["CUDA_DEVICE_ORDER"]})
		if f.Devs == nil && f.DevsErr == nil {
			f.DevsErr = fmt.Errorf("NVML gave no answer")
		}
		if f.opt.Nominal == nil && f.Devs != nil && f.Devs.Topo != nil {
			f.opt.Nominal = f.Devs.Topo.Topology // the real machine as gpubench topo records it
		}
	}
	r := &Report{Host: f.fs.hostname(), Backend: "cuda", Quick: opt.Quick}
	if f.sim {
		r.Backend = "sim (" + opt.Sim + ")"
	}
	for _, c := range Checks() {
		var res Result
		if c.Moves && opt.Quick {
			res = skip("--quick skips the checks that move data", "run without --quick to measure")
		} else {
			res = c.Run(f)
		}
		res.Check, res.Group = c.Name, c.Group
		r.Results = append(r.Results, res)
	}
	return r
}

// envMap turns KEY=VALUE lines into a map; a later line wins, as in a process's environment.
func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			m[k] = v
		}
	}
	return m
}

func (f *Facts) lookup(name string) (string, bool) {
	v, ok := f.env[name]
	return v, ok
}

// envNames lists the environment's names that start with prefix (case-insensitive), sorted.
func (f *Facts) envNames(prefix string) []string {
	var names []string
	for k := range f.env {
		if strings.HasPrefix(strings.ToUpper(k), prefix) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}

// The verdict constructors: a finding (printf-style) and a remedy.
func pass(finding string) Result { return Result{Status: Pass, Finding: finding} }

func warn(remedy, finding string) Result {
	return Result{Status: Warn, Finding: finding, Remedy: remedy}
}

func fail(remedy, finding string) Result {
	return Result{Status: Fail, Finding: finding, Remedy: remedy}
}

func skip(finding, remedy string) Result {
	return Result{Status: Skip, Finding: finding, Remedy: remedy}
}

// with adds machine-readable details to a result.
func (r Result) with(k string, v any) Result {
	if r.Details == nil {
		r.Details = map[string]any{}
	}
	r.Details[k] = v
	return r
}

// simSkip is the result of a check of real hardware on the simulator.
func (f *Facts) simSkip(what string) (Result, bool) {
	if !f.sim {
		return Result{}, false
	}
	return skip("the simulator ("+f.opt.Sim+") has no "+what, "run on the machine itself, without --backend sim"), true
}

// nvmlSkip is the result of a device check without NVML.
func (f *Facts) nvmlSkip(what string) (Result, bool) {
	if r, ok := f.simSkip(what); ok {
		return r, true
	}
	if f.Devs == nil {
		return skip("needs NVML, which is not available", "see the nvml check"), true
	}
	return Result{}, false
}

// list writes items as "a, b and c".
func list(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// plural picks a word's singular or plural for n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
