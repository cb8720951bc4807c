package metrics

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubench/gpubench/internal/metrics/telemetry"
)

// Collectors are the sampler's parts, as gpubench_scrape_collector_* name them.
var Collectors = []string{"gpu", "xid"}

// WatchedXIDs are the XIDs of failing hardware in NVIDIA's catalog
// (https://docs.nvidia.com/deploy/xid-errors/): 48 double-bit ECC error, 63 and 64 row remapping
// (page retirement) recorded and failed, 74 NVLink error, 79 GPU fallen off the bus, 92 high
// single-bit ECC rate, 94 and 95 contained and uncontained ECC error. Their series exist for
// every GPU from the first scrape, at 0, so that increase() sees the first one (unless XIDs cannot
// be read); a series of another XID starts at its first event.
var WatchedXIDs = []int{48, 63, 64, 74, 79, 92, 94, 95}

type desc struct {
	d *prometheus.Desc
	t prometheus.ValueType
}

func newDesc(name, help string, t prometheus.ValueType, labels ...string) desc {
	return desc{prometheus.NewDesc(name, help, labels, nil), t}
}

var (
	gpuLabels = []string{"gpu", "uuid"}
	cached    = " (sampled by gpubench on its own timer; see gpubench_last_sample_timestamp_seconds)"

	dInfo = newDesc("gpubench_gpu_info", "GPU metadata; always 1.", prometheus.GaugeValue,
		"gpu", "uuid", "name", "pci_bus_id", "driver_version", "cuda_version", "numa_node")
	dTemp     = newDesc("gpubench_gpu_temperature_celsius", "GPU temperature (NVML GetTemperature)"+cached, prometheus.GaugeValue, gpuLabels...)
	dSlowTemp = newDesc("gpubench_gpu_temperature_slowdown_threshold_celsius", "Temperature at which the GPU slows down (NVML GetTemperatureThreshold SLOWDOWN).", prometheus.GaugeValue, gpuLabels...)
	dPower    = newDesc("gpubench_gpu_power_watts", "Power draw (NVML GetPowerUsage, mW / 1000)"+cached, prometheus.GaugeValue, gpuLabels...)
	dPowerLim = newDesc("gpubench_gpu_power_limit_watts", "Enforced power limit (NVML GetEnforcedPowerLimit, mW / 1000).", prometheus.GaugeValue, gpuLabels...)
	dEnergy   = newDesc("gpubench_gpu_energy_joules_total", "Energy used since the driver loaded (NVML GetTotalEnergyConsumption, mJ / 1000)"+cached, prometheus.CounterValue, gpuLabels...)
	dSMClock  = newDesc("gpubench_gpu_sm_clock_hertz", "SM clock (NVML GetClockInfo CLOCK_SM, MHz x 1e6)"+cached, prometheus.GaugeValue, gpuLabels...)
	dBaseClk  = newDesc("gpubench_gpu_sm_base_clock_hertz", "SM base clock the burn-in's clocks check compares against.", prometheus.GaugeValue, gpuLabels...)
	dMemClock = newDesc("gpubench_gpu_memory_clock_hertz", "Memory clock (NVML GetClockInfo CLOCK_MEM, MHz x 1e6)"+cached, prometheus.GaugeValue, gpuLabels...)
	dUtil     = newDesc("gpubench_gpu_utilization_ratio", "Share of time a kernel ran (NVML GetUtilizationRates gpu / 100)"+cached, prometheus.GaugeValue, gpuLabels...)
	dMemUtil  = newDesc("gpubench_gpu_memory_utilization_ratio", "Share of time memory was read or written (NVML GetUtilizationRates memory / 100)"+cached, prometheus.GaugeValue, gpuLabels...)
	dMem      = newDesc("gpubench_gpu_memory_bytes", "Device memory capacity.", prometheus.GaugeValue, gpuLabels...)
	dMemUsed  = newDesc("gpubench_gpu_memory_used_bytes", "Device memory in use (NVML GetMemoryInfo used)"+cached, prometheus.GaugeValue, gpuLabels...)
	dECC      = newDesc("gpubench_gpu_ecc_errors_total", "Volatile ECC error counts (NVML GetTotalEccErrors VOLATILE_ECC)"+cached, prometheus.CounterValue, "gpu", "uuid", "severity")
	dRemapped = newDesc("gpubench_gpu_remapped_rows", "Rows remapped (NVML GetRemappedRows)"+cached, prometheus.GaugeValue, "gpu", "uuid", "severity")
	dRemapBad = newDesc("gpubench_gpu_row_remap_failed", "1 when a row remap failed (NVML GetRemappedRows failed)"+cached, prometheus.GaugeValue, gpuLabels...)
	dReplays  = newDesc("gpubench_gpu_pcie_replays_total", "PCIe replays (NVML GetPcieReplayCounter)"+cached, prometheus.CounterValue, gpuLabels...)
	dReason   = newDesc("gpubench_gpu_clock_event_reason_active", "1 while the clock-event reason holds the clocks down (NVML GetCurrentClocksEventReasons)"+cached, prometheus.GaugeValue, "gpu", "uuid", "reason")
	dLinkUp   = newDesc("gpubench_gpu_nvlink_up", "1 when the NVLink is up (NVML GetNvLinkState)"+cached, prometheus.GaugeValue, "gpu", "uuid", "link")
	dLinkErr  = newDesc("gpubench_gpu_nvlink_errors_total", "NVLink data-link errors (NVML GetNvLinkErrorCounter)"+cached, prometheus.CounterValue, "gpu", "uuid", "link", "error")
	dXID      = newDesc("gpubench_gpu_xid_errors_total", "XID events seen since gpubench started (NVML event set, EventTypeXidCriticalError).", prometheus.CounterValue, "gpu", "uuid", "xid")
	dLastAt   = newDesc("gpubench_last_sample_timestamp_seconds", "When the cached telemetry was sampled (Unix time).", prometheus.GaugeValue)
	dOK       = newDesc("gpubench_scrape_collector_success", "1 when the collector's last sample worked.", prometheus.GaugeValue, "collector")
	dDur      = newDesc("gpubench_scrape_collector_duration_seconds", "How long the collector's last sample took.", prometheus.GaugeValue, "collector")
)

var telemetryDescs = []desc{dInfo, dTemp, dSlowTemp, dPower, dPowerLim, dEnergy, dSMClock, dBaseClk, dMemClock, dUtil,
	dMemUtil, dMem, dMemUsed, dECC, dRemapped, dRemapBad, dReplays, dReason, dLinkUp, dLinkErr, dXID, dLastAt, dOK, dDur}

// TelemetryCollector exports a sampler's cached snapshot. It never polls.
type TelemetryCollector struct{ s *Sampler }

// NewTelemetryCollector returns the collector of s's cache.
func NewTelemetryCollector(s *Sampler) *TelemetryCollector { return &TelemetryCollector{s: s} }

func (c *TelemetryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range telemetryDescs {
		ch <- d.d
	}
}

func (c *TelemetryCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.s.Latest()
	inv := snap.Inventory
	emit := func(d desc, v float64, labels ...string) {
		if telemetry.Known(v) {
			ch <- prometheus.MustNewConstMetric(d.d, d.t, v, labels...)
		}
	}
	uuid := map[int]string{}
	for _, d := range inv.Devices {
		idx := strconv.Itoa(d.Index)
		uuid[d.Index] = d.UUID
		numa := ""
		if d.NUMANode >= 0 {
			numa = strconv.Itoa(d.NUMANode)
		}
		emit(dInfo, 1, idx, d.UUID, d.Name, d.PCIBusID, inv.DriverVersion, inv.CUDAVersion, numa)
		emit(dMem, d.MemoryBytes, idx, d.UUID)
		emit(dBaseClk, d.BaseSMClockHz, idx, d.UUID)
	}
	for _, g := range snap.Sample.GPUs {
		idx, id := strconv.Itoa(g.Index), uuid[g.Index]
		emit(dTemp, g.TemperatureCelsius, idx, id)
		emit(dSlowTemp, g.SlowdownTempCelsius, idx, id)
		emit(dPower, g.PowerWatts, idx, id)
		emit(dPowerLim, g.PowerLimitWatts, idx, id)
		emit(dEnergy, g.EnergyJoules, idx, id)
		emit(dSMClock, g.SMClockHz, idx, id)
		emit(dMemClock, g.MemoryClockHz, idx, id)
		emit(dUtil, g.Utilization, idx, id)
		emit(dMemUtil, g.MemoryUtilization, idx, id)
		emit(dMemUsed, g.MemoryUsedBytes, idx, id)
		emit(dECC, g.ECCCorrected, idx, id, "corrected")
		emit(dECC, g.ECCUncorrected, idx, id, "uncorrected")
		emit(dRemapped, g.RemappedRowsCorrected, idx, id, "corrected")
		emit(dRemapped, g.RemappedRowsUncorr, idx, id, "uncorrected")
		emit(dRemapBad, g.RemapFailed, idx, id)
		emit(dReplays, g.PCIeReplays, idx, id)
		if g.ReasonsKnown {
			for _, r := range telemetry.ReasonNames {
				v := 0.0
				if g.ClockReasons&r.Bit != 0 {
					v = 1
				}
				emit(dReason, v, idx, id, r.Name)
			}
		}
		for _, l := range g.Links {
			link := strconv.Itoa(l.Link)
			up := 0.0
			if l.Up {
				up = 1
			}
			emit(dLinkUp, up, idx, id, link)
			for e, name := range telemetry.NVLinkErrorNames {
				emit(dLinkErr, l.Errors[e], idx, id, link, name)
			}
		}
	}
	keys := make([][2]int, 0, len(snap.XIDCounts))
	for k := range snap.XIDCounts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		emit(dXID, snap.XIDCounts[k], strconv.Itoa(k[0]), uuid[k[0]], strconv.Itoa(k[1]))
	}
	if snap.Sample.Errors["xid"] == nil { // else no event set: a 0 would say no XID came, and none can be seen
		for _, d := range inv.Devices {
			for _, x := range WatchedXIDs {
				if _, seen := snap.XIDCounts[[2]int{d.Index, x}]; !seen {
					emit(dXID, 0, strconv.Itoa(d.Index), d.UUID, strconv.Itoa(x))
				}
			}
		}
	}
	if snap.Samples == 0 {
		return
	}
	emit(dLastAt, float64(snap.At.UnixNano())/1e9)
	for _, name := range Collectors {
		ok := 1.0
		if snap.Sample.Errors[name] != nil {
			ok = 0
		}
		emit(dOK, ok, name)
		emit(dDur, snap.Sample.Durations[name].Seconds(), name)
	}
}
