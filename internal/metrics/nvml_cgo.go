//go:build cgo

package metrics

import (
	"fmt"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpubench/gpubench/internal/metrics/telemetry"
	"github.com/gpubench/gpubench/internal/nvmlib"
)

// NVML is the telemetry of the real GPUs, read through go-nvml. XIDs come from an NVML event set
// registered for EventTypeXidCriticalError on every GPU that supports it.
type NVML struct {
	lib   nvml.Interface
	devs  []nvml.Device
	inv   telemetry.Inventory
	set   nvml.EventSet
	start time.Time
	owned bool // Close shuts the library down
}

var _ telemetry.Source = (*NVML)(nil)

// OpenNVML loads libnvidia-ml (from path, when given) and returns its telemetry.
func OpenNVML(path string) (telemetry.Source, error) {
	lib, err := nvmlib.Open(path)
	if err != nil {
		return nil, err
	}
	n, err := NewNVML(lib)
	if err != nil {
		lib.Shutdown()
		return nil, err
	}
	n.owned = true
	return n, nil
}

// NewNVML reads the inventory of an initialised library and registers for XID events.
func NewNVML(lib nvml.Interface) (*NVML, error) {
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML device count: %s", nvml.ErrorString(ret))
	}
	if count == 0 {
		return nil, fmt.Errorf("NVML reports no GPU")
	}
	n := &NVML{lib: lib, start: time.Now()}
	n.inv.DriverVersion, _ = lib.SystemGetDriverVersion()
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		n.inv.CUDAVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	if set, ret := lib.EventSetCreate(); ret == nvml.SUCCESS {
		n.set = set
	}
	for i := 0; i < count; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d: %s", i, nvml.ErrorString(ret))
		}
		n.devs = append(n.devs, d)
		info := telemetry.Device{Index: i, NUMANode: -1, MemoryBytes: telemetry.Unknown, BaseSMClockHz: telemetry.Unknown}
		info.UUID, _ = d.GetUUID()
		info.Name, _ = d.GetName()
		if p, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			info.PCIBusID = busID(p.BusId[:])
		}
		if node, ret := d.GetNumaNodeId(); ret == nvml.SUCCESS {
			info.NUMANode = node
		}
		if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			info.MemoryBytes = float64(m.Total)
		}
		if mhz, ret := d.GetClock(nvml.CLOCK_SM, nvml.CLOCK_ID_APP_CLOCK_DEFAULT); ret == nvml.SUCCESS && mhz > 0 {
			info.BaseSMClockHz = float64(mhz) * 1e6
		}
		for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
			if _, ret := d.GetNvLinkState(l); ret != nvml.SUCCESS {
				break // INVALID_ARGUMENT or NOT_SUPPORTED: no such link
			}
			info.NVLinks++
		}
		if n.set != nil {
			if types, ret := d.GetSupportedEventTypes(); ret == nvml.SUCCESS && types&nvml.EventTypeXidCriticalError != 0 {
				d.RegisterEvents(nvml.EventTypeXidCriticalError, n.set)
			}
		}
		n.inv.Devices = append(n.inv.Devices, info)
	}
	return n, nil
}

func busID(b []int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return strings.ToLower(s.String())
}

func (n *NVML) Inventory() telemetry.Inventory { return n.inv }

func (n *NVML) Close() error {
	if n.set != nil {
		n.set.Free()
	}
	if n.owned {
		n.lib.Shutdown()
	}
	return nil
}

// Sample reads every GPU's figures, then drains the event set without waiting.
func (n *NVML) Sample() telemetry.Sample {
	s := telemetry.Sample{Errors: map[string]error{}, Durations: map[string]time.Duration{}}
	start := time.Now()
	var failed []string
	for i, d := range n.devs {
		g, err := n.sampleGPU(i, d)
		if err != nil {
			failed = append(failed, fmt.Sprintf("GPU %d: %v", i, err))
		}
		s.GPUs = append(s.GPUs, g)
	}
	if failed != nil {
		s.Errors["gpu"] = fmt.Errorf("%s", strings.Join(failed, "; "))
	}
	s.Durations["gpu"] = time.Since(start)
	start = time.Now()
	if n.set == nil {
		s.Errors["xid"] = fmt.Errorf("no NVML event set")
	} else {
		for k := 0; k < 1024; k++ { // bounded: a storm of events cannot stall the sampler
			e, ret := n.set.Wait(0)
			if ret == nvml.ERROR_TIMEOUT {
				break
			}
			if ret != nvml.SUCCESS {
				s.Errors["xid"] = fmt.Errorf("NVML event wait: %s", nvml.ErrorString(ret))
				break
			}
			if e.EventType&nvml.EventTypeXidCriticalError == 0 {
				continue
			}
			idx := -1
			for i, d := range n.devs {
				if d == e.Device {
					idx = i
				}
			}
			if idx < 0 && e.Device != nil {
				if i, ret := e.Device.GetIndex(); ret == nvml.SUCCESS {
					idx = i
				}
			}
			s.XIDs = append(s.XIDs, telemetry.XID{GPU: idx, Code: int(e.EventData), At: time.Since(n.start)})
		}
	}
	if len(s.Errors) == 0 {
		s.Errors = nil
	}
	s.Durations["xid"] = time.Since(start)
	return s
}

// sampleGPU reads one GPU. Figures the GPU does not support stay Unknown; the error names calls
// that failed for another reason.
func (n *NVML) sampleGPU(i int, d nvml.Device) (telemetry.GPU, error) {
	g := telemetry.NewGPU(i)
	var failed []string
	ok := func(what string, ret nvml.Return) bool {
		switch ret {
		case nvml.SUCCESS:
			return true
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NO_PERMISSION:
		default:
			failed = append(failed, what+": "+nvml.ErrorString(ret))
		}
		return false
	}
	if v, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ok("temperature", ret) {
		g.TemperatureCelsius = float64(v)
	}
	if v, ret := d.GetTemperatureThreshold(nvml.TEMPERATURE_THRESHOLD_SLOWDOWN); ok("temperature threshold", ret) {
		g.SlowdownTempCelsius = float64(v)
	}
	if v, ret := d.GetPowerUsage(); ok("power", ret) {
		g.PowerWatts = float64(v) / 1000
	}
	if v, ret := d.GetEnforcedPowerLimit(); ok("power limit", ret) {
		g.PowerLimitWatts = float64(v) / 1000
	}
	if v, ret := d.GetTotalEnergyConsumption(); ok("energy", ret) {
		g.EnergyJoules = float64(v) / 1000
	}
	if v, ret := d.GetClockInfo(nvml.CLOCK_SM); ok("SM clock", ret) {
		g.SMClockHz = float64(v) * 1e6
	}
	if v, ret := d.GetClockInfo(nvml.CLOCK_MEM); ok("memory clock", ret) {
		g.MemoryClockHz = float64(v) * 1e6
	}
	if u, ret := d.GetUtilizationRates(); ok("utilization", ret) {
		g.Utilization, g.MemoryUtilization = float64(u.Gpu)/100, float64(u.Memory)/100
	}
	if m, ret := d.GetMemoryInfo(); ok("memory", ret) {
		g.MemoryUsedBytes = float64(m.Used)
	}
	if v, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC); ok("ECC", ret) {
		g.ECCCorrected = float64(v)
	}
	if v, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ok("ECC", ret) {
		g.ECCUncorrected = float64(v)
	}
	if corr, unc, _, failedRemap, ret := d.GetRemappedRows(); ok("remapped rows", ret) {
		g.RemappedRowsCorrected, g.RemappedRowsUncorr = float64(corr), float64(unc)
		g.RemapFailed = 0
		if failedRemap {
			g.RemapFailed = 1
		}
	}
	if v, ret := d.GetPcieReplayCounter(); ok("PCIe replays", ret) {
		g.PCIeReplays = float64(v)
	}
	if v, ret := d.GetCurrentClocksEventReasons(); ok("clock-event reasons", ret) {
		g.ClockReasons, g.ReasonsKnown = v, true
	}
	counters := []nvml.NvLinkErrorCounter{nvml.NVLINK_ERROR_DL_REPLAY, nvml.NVLINK_ERROR_DL_RECOVERY, nvml.NVLINK_ERROR_DL_CRC_FLIT, nvml.NVLINK_ERROR_DL_CRC_DATA}
	for l := 0; l < n.inv.Devices[i].NVLinks; l++ {
		link := telemetry.Link{Link: l}
		if st, ret := d.GetNvLinkState(l); ok("NVLink state", ret) {
			link.Up = st == nvml.FEATURE_ENABLED
		}
		for e, c := range counters {
			link.Errors[e] = telemetry.Unknown
			if v, ret := d.GetNvLinkErrorCounter(l, c); ok("NVLink errors", ret) {
				link.Errors[e] = float64(v)
			}
		}
		g.Links = append(g.Links, link)
	}
	if failed != nil {
		return g, fmt.Errorf("%s", strings.Join(failed, ", "))
	}
	return g, nil
}
