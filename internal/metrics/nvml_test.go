//go:build cgo

package metrics

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpubench/gpubench/internal/metrics/telemetry"
)

// stubTelemetry gives a mock DGX H100 the calls the sampler makes, with figures per GPU; GPU 5
// reports XID 48 through the event set, GPU 1 supports no ECC, and GPU 2's power read fails.
func stubTelemetry(t *testing.T) nvml.Interface {
	t.Helper()
	srv := dgxh100.New()
	events := []nvml.EventData{{EventType: nvml.EventTypeXidCriticalError, EventData: 48, Device: srv.Devices[5]}}
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
				if len(events) == 0 {
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
				e := events[0]
				events = events[1:]
				return e, nvml.SUCCESS
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		i := i
		bus := dev.PciBusID
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for k := range bus {
				p.BusId[k] = int8(bus[k])
			}
			return p, nvml.SUCCESS
		}
		dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return i / 4, nvml.SUCCESS }
		dev.GetClockFunc = func(nvml.ClockType, nvml.ClockId) (uint32, nvml.Return) { return 1590, nvml.SUCCESS }
		dev.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
			if l >= 18 {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		dev.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeXidCriticalError, nvml.SUCCESS }
		dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 40 + uint32(i), nvml.SUCCESS }
		dev.GetTemperatureThresholdFunc = func(nvml.TemperatureThresholds) (uint32, nvml.Return) { return 87, nvml.SUCCESS }
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) {
			if i == 2 {
				return 0, nvml.ERROR_UNKNOWN
			}
			return 650500, nvml.SUCCESS
		}
		dev.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS }
		dev.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 123456789, nvml.SUCCESS }
		dev.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
			if c == nvml.CLOCK_MEM {
				return 2619, nvml.SUCCESS
			}
			return 1980, nvml.SUCCESS
		}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 97, Memory: 40}, nvml.SUCCESS }
		dev.GetTotalEccErrorsFunc = func(typ nvml.MemoryErrorType, _ nvml.EccCounterType) (uint64, nvml.Return) {
			if i == 1 {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			if typ == nvml.MEMORY_ERROR_TYPE_UNCORRECTED {
				return 0, nvml.SUCCESS
			}
			return 7, nvml.SUCCESS
		}
		dev.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 1, 0, false, false, nvml.SUCCESS }
		dev.GetPcieReplayCounterFunc = func() (int, nvml.Return) { return 3, nvml.SUCCESS }
		dev.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) {
			return uint64(nvml.ClocksThrottleReasonHwThermalSlowdown), nvml.SUCCESS
		}
		dev.GetNvLinkErrorCounterFunc = func(l int, c nvml.NvLinkErrorCounter) (uint64, nvml.Return) {
			return uint64(l) * uint64(c+1), nvml.SUCCESS
		}
	}
	return srv
}

func TestNVMLSampler(t *testing.T) {
	lib := stubTelemetry(t)
	src, err := NewNVML(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	inv := src.Inventory()
	if len(inv.Devices) != 8 || inv.DriverVersion == "" || inv.CUDAVersion == "" {
		t.Fatalf("inventory %+v", inv)
	}
	d := inv.Devices[4]
	if d.NVLinks != 18 || d.NUMANode != 1 || d.BaseSMClockHz != 1590e6 || d.PCIBusID != "0000:04:00.0" || d.UUID == "" {
		t.Errorf("device 4: %+v", d)
	}
	s := NewSampler(src, DefaultInterval)
	snap := s.Refresh()
	g := snap.Sample.GPUs[3]
	if g.TemperatureCelsius != 43 || g.PowerWatts != 650.5 || g.PowerLimitWatts != 700 || g.EnergyJoules != 123456.789 ||
		g.SMClockHz != 1980e6 || g.MemoryClockHz != 2619e6 || g.Utilization != 0.97 || g.ECCCorrected != 7 ||
		g.PCIeReplays != 3 || g.ClockReasons&telemetry.ReasonHWThermal == 0 || len(g.Links) != 18 || g.Links[2].Errors[1] != 4 {
		t.Errorf("GPU 3: %+v", g)
	}
	if telemetry.Known(snap.Sample.GPUs[1].ECCUncorrected) {
		t.Error("GPU 1's unsupported ECC reads as a figure")
	}
	if telemetry.Known(snap.Sample.GPUs[2].PowerWatts) || snap.Sample.Errors["gpu"] == nil {
		t.Errorf("GPU 2's failed power read: %v, errors %v", snap.Sample.GPUs[2].PowerWatts, snap.Sample.Errors)
	}
	if len(snap.XIDs) != 1 || snap.XIDs[0].GPU != 5 || snap.XIDs[0].Code != 48 || snap.XIDCounts[[2]int{5, 48}] != 1 {
		t.Errorf("XIDs %+v", snap.XIDs)
	}
	if again := s.Refresh(); len(again.XIDs) != 1 {
		t.Errorf("the XID counted twice: %+v", again.XIDs)
	}
}
