//go:build cgo

package topo

import (
	"fmt"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpubench/gpubench/internal/nvmlib"
)

// Library is the part of NVML's library interface that Discover uses; nvml.Interface and go-nvml's
// mock servers have it.
type Library interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	Extensions() nvml.ExtendedInterface
	SystemGetDriverVersion() (string, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
}

// newerSymbols are the NVML functions topo calls that older drivers lack. go-nvml binds lazily, so
// calling one that the loaded library does not have ends the process; topo asks first.
var newerSymbols = []string{"nvmlDeviceGetNvLinkRemoteDeviceType", "nvmlDeviceGetMemoryBusWidth",
	"nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex"}

// Discover reads the machine through NVML (opt.NVMLLib, or libnvidia-ml.so.1) and sysfs. When
// NVML cannot be used the error wraps ErrUnavailable and says how to fix it.
func Discover(opt Options) (*Report, error) {
	return DiscoverWith(nvmlib.New(opt.NVMLLib), opt)
}

// DiscoverWith is Discover through a given NVML library (a go-nvml mock server in tests). After a
// failed Init it calls nothing else in the library: the symbols behind a library that did not
// load are unresolved, and calling them crashes.
func DiscoverWith(lib Library, opt Options) (*Report, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, nvmlib.InitError(ret, opt.NVMLLib)
	}
	defer lib.Shutdown()
	m, err := collect(lib, opt)
	if err != nil {
		return nil, err
	}
	root := opt.Root
	if root == "" {
		root = "/"
	}
	return build(m, sysReader{root: root}, opt), nil
}

// collect asks NVML about every GPU, every pair of GPUs, and its driver.
func collect(lib Library, opt Options) (*machine, error) {
	m := &machine{p2p: map[string][][]string{}}
	m.driver, _ = nvmlib.OK(lib.SystemGetDriverVersion())
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML cannot count the GPUs: %v", ret)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: NVML sees no GPU", ErrUnavailable)
	}
	has := map[string]bool{}
	for _, sym := range newerSymbols {
		has[sym] = lib.Extensions().LookupSymbol(sym) == nil
	}
	var devs []nvml.Device
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			m.notes = append(m.notes, fmt.Sprintf("GPU %d: NVML cannot open it (%v), so it is left out", i, ret))
			continue
		}
		devs = append(devs, d)
		m.gpus = append(m.gpus, gpuFactsOf(d, i, has, opt.VisibleDevices.Kind == "mig"))
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("%w: NVML cannot open any of its %d GPUs", ErrUnavailable, n)
	}
	m.level = make([][]string, len(devs))
	for i := range devs {
		m.level[i] = make([]string, len(devs))
	}
	for i := range devs {
		for j := i + 1; j < len(devs); j++ {
			if lvl, ret := devs[i].GetTopologyCommonAncestor(devs[j]); ret == nvml.SUCCESS {
				m.level[i][j], m.level[j][i] = levelClass[lvl], levelClass[lvl]
			}
		}
	}
	caps := []string{"read"}
	if opt.P2P != "" && opt.P2P != "read" {
		caps = append(caps, opt.P2P)
	}
	for _, c := range caps {
		s := make([][]string, len(devs))
		for i := range devs {
			s[i] = make([]string, len(devs))
			for j := range devs {
				if i == j {
					continue
				}
				st, ret := devs[i].GetP2PStatus(devs[j], capIndex[c])
				s[i][j] = "U"
				if code, known := statusCode[st]; ret == nvml.SUCCESS && known {
					s[i][j] = code
				}
			}
		}
		m.p2p[c] = s
	}
	return m, nil
}

// levelClass names NVML's common-ancestor levels as nvidia-smi topo -m does; two GPUs on one board
// (TOPOLOGY_INTERNAL) sit behind the board's own switch.
var levelClass = map[nvml.GpuTopologyLevel]string{
	nvml.TOPOLOGY_INTERNAL: "PIX", nvml.TOPOLOGY_SINGLE: "PIX", nvml.TOPOLOGY_MULTIPLE: "PXB",
	nvml.TOPOLOGY_HOSTBRIDGE: "PHB", nvml.TOPOLOGY_NODE: "NODE", nvml.TOPOLOGY_SYSTEM: "SYS",
}

var capIndex = map[string]nvml.GpuP2PCapsIndex{
	"read": nvml.P2P_CAPS_INDEX_READ, "write": nvml.P2P_CAPS_INDEX_WRITE,
	"nvlink": nvml.P2P_CAPS_INDEX_NVLINK, "atomics": nvml.P2P_CAPS_INDEX_ATOMICS,
}

// statusCode names P2P statuses as nvidia-smi topo -p2p does.
var statusCode = map[nvml.GpuP2PStatus]string{
	nvml.P2P_STATUS_OK: "OK", nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED: "CNS", nvml.P2P_STATUS_GPU_NOT_SUPPORTED: "GNS",
	nvml.P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED: "TNS", nvml.P2P_STATUS_DISABLED_BY_REGKEY: "DR",
	nvml.P2P_STATUS_NOT_SUPPORTED: "NS", nvml.P2P_STATUS_UNKNOWN: "U",
}

// remoteKind names what an NVLink leads to; an IBM NPU is the CPU of a POWER machine.
var remoteKind = map[nvml.IntNvLinkDeviceType]string{
	nvml.NVLINK_DEVICE_TYPE_GPU: "gpu", nvml.NVLINK_DEVICE_TYPE_SWITCH: "switch", nvml.NVLINK_DEVICE_TYPE_IBMNPU: "cpu",
}

// gpuFactsOf asks NVML about one GPU; what it cannot answer stays unknown, and functions of
// newerSymbols the library lacks (has) are not called. Its MIG devices are read only when
// CUDA_VISIBLE_DEVICES names MIG devices (withMIG).
func gpuFactsOf(d nvml.Device, index int, has map[string]bool, withMIG bool) gpuFacts {
	f := gpuFacts{index: index, pstate: -1}
	if p, good := nvmlib.OK(d.GetPerformanceState()); good && p <= nvml.PSTATE_15 {
		f.pstate = int(p)
	}
	f.name, _ = nvmlib.OK(d.GetName())
	f.uuid, _ = nvmlib.OK(d.GetUUID())
	if pci, good := nvmlib.OK(d.GetPciInfo()); good {
		f.busID, _ = parseBusID(nvmlib.CString(pci.BusId[:]))
	}
	if mem, good := nvmlib.OK(d.GetMemoryInfo()); good {
		f.memoryBytes = int64(mem.Total)
	}
	if major, minor, ret := d.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		f.cc = fmt.Sprintf("%d.%d", major, minor)
	}
	// Memory bandwidth: two transfers per memory clock over the bus (MHz x bits / 4000 = GB/s).
	if has["nvmlDeviceGetMemoryBusWidth"] {
		clock, okClock := nvmlib.OK(d.GetMaxClockInfo(nvml.CLOCK_MEM))
		bus, okBus := nvmlib.OK(d.GetMemoryBusWidth())
		if okClock && okBus {
			f.memGBs = math.Round(float64(clock)*float64(bus)/4000*100) / 100
		}
	}
	if mode, good := nvmlib.OK(d.GetPersistenceMode()); good {
		on := mode == nvml.FEATURE_ENABLED
		f.persistence = &on
	}
	if has["nvmlDeviceGetMigMode"] {
		if current, _, ret := d.GetMigMode(); ret == nvml.SUCCESS {
			on := current == nvml.DEVICE_MIG_ENABLE
			f.mig = &on
		}
	}
	f.gen, _ = nvmlib.OK(d.GetCurrPcieLinkGeneration())
	f.width, _ = nvmlib.OK(d.GetCurrPcieLinkWidth())
	f.genMax, _ = nvmlib.OK(d.GetMaxPcieLinkGeneration())
	f.widthMax, _ = nvmlib.OK(d.GetMaxPcieLinkWidth())
	// NVML answers INVALID_ARGUMENT or NOT_SUPPORTED for link numbers the GPU does not have.
	for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
		state, ret := d.GetNvLinkState(l)
		if ret != nvml.SUCCESS {
			continue
		}
		link := nvlinkFacts{link: l, up: state == nvml.FEATURE_ENABLED}
		if pci, good := nvmlib.OK(d.GetNvLinkRemotePciInfo(l)); good {
			link.remoteBus, _ = parseBusID(nvmlib.CString(pci.BusId[:]))
		}
		if has["nvmlDeviceGetNvLinkRemoteDeviceType"] {
			if t, good := nvmlib.OK(d.GetNvLinkRemoteDeviceType(l)); good {
				link.remote = remoteKind[t]
			}
		}
		if v, good := nvmlib.OK(d.GetNvLinkVersion(l)); good {
			link.version = int(v)
		}
		f.links = append(f.links, link)
	}
	if withMIG && f.mig != nil && *f.mig && has["nvmlDeviceGetMaxMigDeviceCount"] && has["nvmlDeviceGetMigDeviceHandleByIndex"] {
		count, _ := nvmlib.OK(d.GetMaxMigDeviceCount())
		for k := 0; k < count; k++ {
			if md, good := nvmlib.OK(d.GetMigDeviceHandleByIndex(k)); good {
				if u, good := nvmlib.OK(md.GetUUID()); good {
					f.migUUIDs = append(f.migUUIDs, u)
				}
			}
		}
	}
	return f
}
