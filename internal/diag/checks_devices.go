package diag

import (
	"fmt"
	"strconv"
	"strings"
)

var deviceChecks = []Check{
	{Name: "persistence", Group: "devices", Run: checkPersistence},
	{Name: "ecc", Group: "devices", Run: checkECC},
	{Name: "retired-memory", Group: "devices", Run: checkRetiredMemory},
	{Name: "mig", Group: "devices", Run: checkMIG},
	{Name: "throttle", Group: "devices", Run: checkThrottle},
	{Name: "pcie-link", Group: "devices", Run: checkPCIeLink},
}

// gpuNames writes GPU indices as "GPU 0, 1 and 3".
func gpuNames(idx []int) string {
	s := make([]string, len(idx))
	for i, x := range idx {
		s[i] = strconv.Itoa(x)
	}
	return plural(len(idx), "GPU ", "GPUs ") + list(s)
}

// perGPU sorts the GPUs by a question NVML may not answer: yes, no, and unknown.
func (f *Facts) perGPU(q func(GPU) *bool) (yes, no, unknown []int) {
	for _, g := range f.Devs.GPUs {
		switch v := q(g); {
		case v == nil:
			unknown = append(unknown, g.Index)
		case *v:
			yes = append(yes, g.Index)
		default:
			no = append(no, g.Index)
		}
	}
	return yes, no, unknown
}

// checkPersistence: persistence mode on every GPU (dcgmi diag level 1's "Persistence Mode"
// check, telemetry.md §2.6): without it the driver tears the GPUs down between processes, and
// every start pays for bringing them up again.
func checkPersistence(f *Facts) Result {
	if r, ok := f.nvmlSkip("GPUs"); ok {
		return r
	}
	on, off, unknown := f.perGPU(func(g GPU) *bool { return g.Persistence })
	switch {
	case len(off) > 0:
		return warn("sudo nvidia-smi -pm 1, or enable the nvidia-persistenced service",
			"persistence mode is off on "+gpuNames(off)+": each new process waits for the driver to set the GPUs up again").with("off", off)
	case len(on) == 0:
		return skip("NVML does not report persistence mode for "+gpuNames(unknown), "")
	}
	return pass("on for " + gpuNames(on))
}

// checkECC: ECC on, and no mode change waiting for a reset.
func checkECC(f *Facts) Result {
	if r, ok := f.nvmlSkip("GPUs"); ok {
		return r
	}
	on, off, unknown := f.perGPU(func(g GPU) *bool { return g.ECC })
	var changing []int
	for _, g := range f.Devs.GPUs {
		if g.ECC != nil && g.ECCPending != nil && *g.ECC != *g.ECCPending {
			changing = append(changing, g.Index)
		}
	}
	switch {
	case len(changing) > 0:
		return warn("reset the GPUs (sudo nvidia-smi -r -i N) or reboot to apply the new ECC mode",
			"an ECC mode change is pending on "+gpuNames(changing)+" until the GPU is reset").with("pending", changing)
	case len(off) > 0:
		return warn("sudo nvidia-smi -i N -e 1, then reset the GPU or reboot",
			"ECC is off on "+gpuNames(off)+": memory errors go undetected").with("off", off)
	case len(on) == 0:
		return skip("these GPUs have no ECC ("+gpuNames(unknown)+")", "")
	}
	return pass("on for " + gpuNames(on))
}

// checkRetiredMemory: no page retirement or row remap waiting for a reset, and no failed row
// remap (dcgmi diag level 1's "Page Retirement/Row Remap" check, telemetry.md §2.6).
func checkRetiredMemory(f *Facts) Result {
	if r, ok := f.nvmlSkip("GPUs"); ok {
		return r
	}
	failed, _, _ := f.perGPU(func(g GPU) *bool { return g.RemapFailed })
	remap, _, _ := f.perGPU(func(g GPU) *bool { return g.RemapPending })
	pages, _, _ := f.perGPU(func(g GPU) *bool { return g.RetiredPending })
	known := 0
	for _, g := range f.Devs.GPUs {
		if g.RemapFailed != nil || g.RemapPending != nil || g.RetiredPending != nil {
			known++
		}
	}
	switch {
	case len(failed) > 0:
		return fail("take the GPU out of service and have it replaced: a failed row remap cannot be repaired in the field",
			"row remapping failed on "+gpuNames(failed)+": the memory has errors it can no longer remap").with("remap_failed", failed)
	case len(remap) > 0 || len(pages) > 0:
		pending := append(append([]int(nil), remap...), pages...)
		return fail("reset the GPUs (sudo nvidia-smi -r -i N) or reboot, so that the pending rows or pages are remapped or retired",
			"memory repairs wait for a GPU reset on "+gpuNames(dedupe(pending))).with("remap_pending", remap).with("retire_pending", pages)
	case known == 0:
		return skip("NVML reports neither row remapping nor page retirement for these GPUs", "")
	}
	return pass(fmt.Sprintf("nothing pending or failed on %d %s", known, plural(known, "GPU", "GPUs")))
}

func dedupe(v []int) []int {
	seen := map[int]bool{}
	var out []int
	for _, x := range v {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// checkMIG: MIG off, and no mode change pending. With MIG on, CUDA sees the GPU's MIG devices
// rather than the GPU, and a process sees at most one of them, so multi-GPU runs have no GPU to use.
func checkMIG(f *Facts) Result {
	if r, ok := f.nvmlSkip("GPUs"); ok {
		return r
	}
	on, off, _ := f.perGPU(func(g GPU) *bool { return g.MIG })
	var changing []int
	for _, g := range f.Devs.GPUs {
		if g.MIG != nil && g.MIGPending != nil && *g.MIG != *g.MIGPending {
			changing = append(changing, g.Index)
		}
	}
	switch {
	case len(on) > 0:
		return warn("for multi-GPU runs turn MIG off: sudo nvidia-smi -i N -mig 0, then reset the GPU",
			"MIG is on for "+gpuNames(on)+": CUDA sees MIG devices instead, and NCCL and P2P cannot span them").with("on", on)
	case len(changing) > 0:
		return warn("reset the GPUs (sudo nvidia-smi -r -i N) to apply the MIG mode change",
			"a MIG mode change is pending on "+gpuNames(changing)).with("pending", changing)
	case len(off) == 0:
		return skip("these GPUs do not support MIG", "")
	}
	return pass("off for " + gpuNames(off))
}

// Clock event ("throttle") reason bits, NVML's nvmlClocksEventReason* and, for the hardware
// slowdowns, nvmlClocksThrottleReasonHw* (telemetry.md §1.5).
const (
	reasonSwThermal   = 32
	reasonHwSlowdown  = 8
	reasonHwThermal   = 64
	reasonHwPower     = 128
	reasonBoardLimit  = 512
	reasonReliability = 1024
)

var failReasons = []struct {
	bit  uint64
	name string
}{{reasonHwSlowdown, "hardware slowdown"}, {reasonHwThermal, "hardware thermal slowdown"}, {reasonHwPower, "hardware power brake"}}

var warnReasons = []struct {
	bit  uint64
	name string
}{{reasonSwThermal, "software thermal slowdown"}, {reasonBoardLimit, "board limit"}, {reasonReliability, "reliability limit"}}

// checkThrottle: no clock slowdown active now. The hardware slowdowns (a GPU too hot, or the power
// supply's brake) fail, as DCGM's burn-in checks treat them (telemetry.md §6); the software
// thermal, board and reliability limits warn. Idle, the power cap and application clocks are the
// GPU's normal running.
func checkThrottle(f *Facts) Result {
	if r, ok := f.nvmlSkip("GPUs"); ok {
		return r
	}
	var bad, poor []string
	known := 0
	for _, g := range f.Devs.GPUs {
		if g.ClockEvents == nil {
			continue
		}
		known++
		for _, r := range failReasons {
			if *g.ClockEvents&r.bit != 0 {
				bad = append(bad, fmt.Sprintf("GPU %d %s", g.Index, r.name))
			}
		}
		for _, r := range warnReasons {
			if *g.ClockEvents&r.bit != 0 {
				poor = append(poor, fmt.Sprintf("GPU %d %s", g.Index, r.name))
			}
		}
	}
	switch {
	case len(bad) > 0:
		return fail("check cooling (fans, airflow, inlet temperature) and power supplies; nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER shows the cause",
			"clocks held down now: "+list(bad)).with("reasons", bad)
	case len(poor) > 0:
		return warn("check cooling and the power limit (nvidia-smi -q -d PERFORMANCE)", "clocks limited now: "+list(poor)).with("reasons", poor)
	case known == 0:
		return skip("NVML does not report clock event reasons for these GPUs", "")
	}
	return pass(fmt.Sprintf("no slowdown active on %d %s", known, plural(known, "GPU", "GPUs")))
}

// checkPCIeLink: each GPU's PCIe link at its maximum width, and at its maximum generation while
// busy. An idle GPU (performance state above P0) lowers its link speed to save power, so a low
// generation then is normal (as gpubench topo reads it).
func checkPCIeLink(f *Facts) Result {
	if r, ok := f.nvmlSkip("GPUs"); ok {
		return r
	}
	var bad, unsure, good []string
	for _, g := range f.Devs.GPUs {
		switch {
		case g.Width <= 0 || g.WidthMax <= 0 || g.Gen <= 0 || g.GenMax <= 0:
			continue
		case g.Width < g.WidthMax:
			bad = append(bad, fmt.Sprintf("GPU %d x%d of x%d", g.Index, g.Width, g.WidthMax))
		case g.Gen < g.GenMax && g.PState == 0:
			bad = append(bad, fmt.Sprintf("GPU %d Gen%d of Gen%d while busy", g.Index, g.Gen, g.GenMax))
		case g.Gen < g.GenMax && g.PState < 0:
			unsure = append(unsure, fmt.Sprintf("GPU %d Gen%d of Gen%d", g.Index, g.Gen, g.GenMax))
		default:
			good = append(good, strconv.Itoa(g.Index))
		}
	}
	switch {
	case len(bad) > 0:
		return fail("reseat the card, try another slot or riser, and check the BIOS's PCIe speed setting; lspci -vv shows LnkSta against LnkCap",
			"PCIe link below its maximum: "+list(bad)).with("degraded", bad)
	case len(unsure) > 0:
		return warn("run again while the GPUs are busy (an idle GPU lowers its link speed), e.g. during gpubench p2p",
			"PCIe link below its maximum generation, and NVML gives no performance state to tell idle from degraded: "+list(unsure))
	case len(good) == 0:
		return skip("NVML does not report the GPUs' PCIe links", "")
	}
	return pass("every GPU at its maximum width (" + strings.Join(good, ",") + "); idle GPUs may run a lower generation to save power")
}
