//go:build cgo

package diag

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpubench/gpubench/internal/nvmlib"
	"github.com/gpubench/gpubench/internal/topo"
)

// cgoBuild says whether this build has cgo, and so NVML and the CUDA and NCCL bindings.
const cgoBuild = true

// Library is the part of NVML diag uses: topo's, and the driver's CUDA version. nvml.Interface
// and go-nvml's mock servers have it.
type Library interface {
	topo.Library
	SystemGetCudaDriverVersion() (int, nvml.Return)
}

// ReadDevices reads the GPUs through NVML (nvmlLib, or libnvidia-ml.so.1) and the machine
// through gpubench topo's discovery. When NVML cannot be used the error wraps
// topo.ErrUnavailable and says how to fix it.
func ReadDevices(nvmlLib string, opt topo.Options) (*Devices, error) {
	opt.NVMLLib = nvmlLib
	return ReadDevicesWith(nvmlib.New(nvmlLib), opt)
}

// ReadDevicesWith is ReadDevices through a given NVML library (a go-nvml mock server in tests).
func ReadDevicesWith(lib Library, opt topo.Options) (*Devices, error) {
	rep, err := topo.DiscoverWith(lib, opt)
	if errors.Is(err, topo.ErrUnavailable) {
		return nil, err // NVML did not start: nothing else may be called
	}
	d := &Devices{Topo: rep, TopoErr: err}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: NVML did not start: %v", topo.ErrUnavailable, ret)
	}
	defer lib.Shutdown()
	d.Driver, _ = nvmlib.OK(lib.SystemGetDriverVersion())
	d.CUDAVersion, _ = nvmlib.OK(lib.SystemGetCudaDriverVersion())
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML cannot count the GPUs: %v", ret)
	}
	// go-nvml binds lazily: calling a function the loaded library lacks ends the process, so the
	// newer ones are looked up first.
	newer := nvmlib.Has(lib, "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetMigMode")
	for i := 0; i < n; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		d.GPUs = append(d.GPUs, gpuOf(dev, i, newer))
	}
	return d, nil
}

// gpuOf asks NVML about one GPU; what it cannot answer stays nil.
func gpuOf(d nvml.Device, index int, newer map[string]bool) GPU {
	g := GPU{Index: index, PState: -1}
	g.Name, _ = nvmlib.OK(d.GetName())
	g.UUID, _ = nvmlib.OK(d.GetUUID())
	if pci, good := nvmlib.OK(d.GetPciInfo()); good {
		g.BusID, _ = topo.ParseBusID(nvmlib.CString(pci.BusId[:]))
	}
	if p, good := nvmlib.OK(d.GetPerformanceState()); good && p <= nvml.PSTATE_15 {
		g.PState = int(p)
	}
	if m, good := nvmlib.OK(d.GetPersistenceMode()); good {
		g.Persistence = boolp(m == nvml.FEATURE_ENABLED)
	}
	if cur, pending, ret := d.GetEccMode(); ret == nvml.SUCCESS {
		g.ECC, g.ECCPending = boolp(cur == nvml.FEATURE_ENABLED), boolp(pending == nvml.FEATURE_ENABLED)
	}
	if st, good := nvmlib.OK(d.GetRetiredPagesPendingStatus()); good {
		g.RetiredPending = boolp(st == nvml.FEATURE_ENABLED)
	}
	if newer["nvmlDeviceGetRemappedRows"] {
		if _, _, pending, failed, ret := d.GetRemappedRows(); ret == nvml.SUCCESS {
			g.RemapPending, g.RemapFailed = boolp(pending), boolp(failed)
		}
	}
	if newer["nvmlDeviceGetMigMode"] {
		if cur, pending, ret := d.GetMigMode(); ret == nvml.SUCCESS {
			g.MIG, g.MIGPending = boolp(cur == nvml.DEVICE_MIG_ENABLE), boolp(pending == nvml.DEVICE_MIG_ENABLE)
		}
	}
	// The same bits under two names; the older one is deprecated from NVML 13 but in every driver.
	var reasons uint64
	var ret nvml.Return
	if newer["nvmlDeviceGetCurrentClocksEventReasons"] {
		reasons, ret = d.GetCurrentClocksEventReasons()
	} else {
		reasons, ret = d.GetCurrentClocksThrottleReasons()
	}
	if ret == nvml.SUCCESS {
		g.ClockEvents = &reasons
	}
	g.Gen, _ = nvmlib.OK(d.GetCurrPcieLinkGeneration())
	g.Width, _ = nvmlib.OK(d.GetCurrPcieLinkWidth())
	g.GenMax, _ = nvmlib.OK(d.GetMaxPcieLinkGeneration())
	g.WidthMax, _ = nvmlib.OK(d.GetMaxPcieLinkWidth())
	// NVML answers INVALID_ARGUMENT or NOT_SUPPORTED for link numbers the GPU does not have.
	for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
		if st, ret := d.GetNvLinkState(l); ret == nvml.SUCCESS {
			if g.NVLinks == nil {
				g.NVLinks = map[int]bool{}
			}
			g.NVLinks[l] = st == nvml.FEATURE_ENABLED
		}
	}
	return g
}

func boolp(b bool) *bool { return &b }
