package sim

import (
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/metrics/telemetry"
)

// Simulated telemetry (docs/monitoring.md, "The simulator's telemetry"): every figure follows the
// load the simulator has run, on its virtual clock, between one sample and the next.
//
//   - Utilization is NVML's: the share of the interval in which a kernel (a collective) ran on
//     the device, in whole percent; a hung device is busy. Memory utilization adds the time
//     copies to or from it ran (copy engines run no kernel, but read and write memory).
//   - Power is idlePowerPct of the board limit, plus kernelPowerPct of it times the kernel
//     share, plus copyPowerPct times the share copies alone kept it busy.
//   - Temperature is a first-order thermal model: it moves towards the steady state of the
//     interval's mean power, idleC + (loadC - idleC)·(P - Pidle)/(Pload - Pidle), with the time
//     constant thermalTau (T += (Tss - T)·(1 - exp(-dt/tau))).
//   - Energy integrates power over virtual time; clocks run at boost, except when idle.
//   - ECC, row remap, PCIe replay and NVLink error counters stay at zero: the simulator injects
//     XIDs (xid faults), slow links and corrupted results, which the burn-in's other checks see.
//
// Clock figures are an H100 SXM's (base 1590 MHz, boost 1980 MHz, memory 2619 MHz) for every
// simulated GPU; power limits come from the GPU's name (simPowerLimit).
const (
	idleC          = 32.0
	loadC          = 74.0
	slowdownC      = 87.0
	thermalTau     = 60 * time.Second
	baseSMHz       = 1590e6
	boostSMHz      = 1980e6
	idleSMHz       = 345e6
	memClockHz     = 2619e6
	idlePowerPct   = 0.1
	kernelPowerPct = 0.8 // idle plus this: 90 % of the limit under kernels all the time
	copyPowerPct   = 0.25
)

// Telemetry reports a simulated backend's GPUs as a telemetry.Source.
type Telemetry struct {
	b   *Backend
	inv telemetry.Inventory

	mu       sync.Mutex
	lastUS   float64   // virtual time of the previous sample
	kernelUS []float64 // per device: the backend's kernel and copy time already reported
	copyUS   []float64
	tempC    []float64
	energyJ  []float64
	reported []bool // per fault: its XID was reported
	// wall, when set, is the clock an idle machine's virtual time follows (NewIdleTelemetry).
	wall     func() time.Time
	lastWall time.Time
}

var _ telemetry.Source = (*Telemetry)(nil)

// NewTelemetry returns the simulated telemetry of b's GPUs, starting idle at b's current time.
func NewTelemetry(b *Backend) *Telemetry {
	t := &Telemetry{b: b}
	t.inv = telemetry.Inventory{DriverVersion: "sim", CUDAVersion: "sim"}
	n := len(b.devices)
	for i := 0; i < n; i++ {
		g, node := b.topo.GPU(i)
		t.inv.Devices = append(t.inv.Devices, telemetry.Device{
			Index: i, UUID: simUUID(node.Hostname, g), Name: g.Name, PCIBusID: g.PCIBusID, NUMANode: g.NUMANode,
			MemoryBytes: float64(g.MemoryBytes), BaseSMClockHz: baseSMHz, NVLinks: nvlinkLanes(node, g.ID),
		})
	}
	b.mu.Lock()
	t.lastUS = b.hostUS
	t.kernelUS = append([]float64(nil), b.kernelUS...)
	t.copyUS = append([]float64(nil), b.copyUS...)
	b.mu.Unlock()
	t.tempC, t.energyJ = make([]float64, n), make([]float64, n)
	for i := range t.tempC {
		t.tempC[i] = idleC
	}
	t.reported = make([]bool, len(b.opt.Faults))
	return t
}

// NewIdleTelemetry is NewTelemetry for a machine on which nothing runs, as under serve: at each
// sample its virtual clock moves on by the time now has moved, the machine idle all along, so
// that idle power adds up to energy and timed faults (xid=3@30s) come, as on a real idle machine.
func NewIdleTelemetry(b *Backend, now func() time.Time) *Telemetry {
	t := NewTelemetry(b)
	t.wall, t.lastWall = now, now()
	return t
}

// simUUID is a stable UUID-shaped name for a simulated GPU: its topology UUID when the file has
// one, else one derived from its host and id.
func simUUID(host string, g gpu.GPU) string {
	if g.UUID != "" {
		return g.UUID
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%s", host, g.ID)
	v := h.Sum64()
	return fmt.Sprintf("GPU-%08x-%04x-4%03x-8%03x-%012x", uint32(v>>32), uint16(v>>16), uint16(v)&0xfff, uint16(v>>4)&0xfff, v&0xffffffffffff)
}

func nvlinkLanes(node *gpu.Node, id string) int {
	n := 0
	for _, l := range node.Links {
		if l.Kind == gpu.LinkNVLink && (l.A == id || l.B == id) {
			n += max(l.Lanes, 1)
		}
	}
	return n
}

func (t *Telemetry) Inventory() telemetry.Inventory { return t.inv }
func (t *Telemetry) Close() error                   { return nil }

// Sample advances the model to the backend's current virtual time and reports it.
func (t *Telemetry) Sample() telemetry.Sample {
	start := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.b
	b.mu.Lock()
	if t.wall != nil {
		w := t.wall()
		b.hostUS += max(w.Sub(t.lastWall).Seconds(), 0) * 1e6
		b.applyTimedFaults()
		t.lastWall = w
	}
	now := b.hostUS
	free := append([]float64(nil), b.free...)
	used := append([]int64(nil), b.used...)
	kernelUS := append([]float64(nil), b.kernelUS...)
	copyUS := append([]float64(nil), b.copyUS...)
	b.mu.Unlock()
	dtUS := now - t.lastUS
	s := telemetry.Sample{Durations: map[string]time.Duration{}}
	for i, d := range t.inv.Devices {
		g := telemetry.NewGPU(i)
		// Work queued past now counts in the next interval, hence the carry.
		util, copies := 0.0, 0.0
		if dtUS > 0 {
			util = math.Min(1, (kernelUS[i]-t.kernelUS[i])/dtUS)
			copies = math.Min(1-util, (copyUS[i]-t.copyUS[i])/dtUS)
		}
		if math.IsInf(free[i], 1) { // a hung kernel never stops running
			util, copies = 1, 0
		}
		t.kernelUS[i] = math.Min(kernelUS[i], t.kernelUS[i]+util*dtUS)
		t.copyUS[i] = math.Min(copyUS[i], t.copyUS[i]+math.Max(copies, 0)*dtUS)
		limit := simPowerLimit(d.Name)
		load := idlePowerPct + kernelPowerPct*util + copyPowerPct*copies
		power := limit * load
		target := idleC + (loadC-idleC)*(load-idlePowerPct)/kernelPowerPct
		dt := time.Duration(dtUS * 1e3)
		t.tempC[i] = target + (t.tempC[i]-target)*math.Exp(-dt.Seconds()/thermalTau.Seconds())
		t.energyJ[i] += power * dt.Seconds()
		g.TemperatureCelsius = math.Round(t.tempC[i])
		g.SlowdownTempCelsius = slowdownC
		g.PowerWatts = math.Round(power*1000) / 1000
		g.PowerLimitWatts = limit
		g.EnergyJoules = math.Round(t.energyJ[i]*1000) / 1000
		g.SMClockHz, g.ClockReasons = boostSMHz, 0
		if util < 0.05 {
			g.SMClockHz, g.ClockReasons = idleSMHz, telemetry.ReasonGPUIdle
		}
		g.ReasonsKnown = true
		g.MemoryClockHz = memClockHz
		g.Utilization = math.Round(util*100) / 100 // NVML reports whole percent
		g.MemoryUtilization = math.Round((util+copies)*100) / 100
		g.MemoryUsedBytes = float64(used[i])
		g.ECCCorrected, g.ECCUncorrected = 0, 0
		g.RemappedRowsCorrected, g.RemappedRowsUncorr, g.RemapFailed = 0, 0, 0
		g.PCIeReplays = 0
		for l := 0; l < d.NVLinks; l++ {
			g.Links = append(g.Links, telemetry.Link{Link: l, Up: true})
		}
		s.GPUs = append(s.GPUs, g)
	}
	t.lastUS = now
	s.Durations["gpu"] = time.Since(start)
	xidStart := time.Now()
	for i, f := range b.opt.Faults {
		if f.Kind == "xid" && !t.reported[i] && f.At <= time.Duration(now*1e3) {
			t.reported[i] = true
			s.XIDs = append(s.XIDs, telemetry.XID{GPU: f.Device, Code: f.Code, At: f.At})
		}
	}
	s.Durations["xid"] = time.Since(xidStart)
	return s
}

// simPowerLimit is a simulated GPU's board power limit in watts, from its name: the most its
// vendor's datasheet or specifications page gives for that board (NVIDIA's H100, A100, H200,
// H800, B200 and L40S datasheets; the GeForce RTX 3090, 4090 and 5090 specifications), 300 for
// a GPU it does not know.
func simPowerLimit(name string) float64 {
	n := strings.ToUpper(name)
	has := func(s string) bool { return strings.Contains(n, s) }
	switch {
	case has("B200"):
		return 1000
	case has("H100 NVL"):
		return 400
	case (has("H100") || has("H800")) && has("PCIE"):
		return 350
	case has("H100"), has("H200"), has("H800"):
		return 700
	case has("A100") && has("PCIE"):
		return 300
	case has("A100"):
		return 400
	case has("5090"):
		return 575
	case has("4090"):
		return 450
	case has("3090"), has("L40"):
		return 350
	}
	return 300
}
