//go:build cgo

package topo

import (
	"fmt"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
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
	var libOpts []nvml.LibraryOption
	if opt.NVMLLib != "" {
		libOpts = append(libOpts, nvml.WithLibraryPath(opt.NVMLLib))
	}
	return DiscoverWith(nvml.New(libOpts...), opt)
}

// DiscoverWith is Discover through a given NVML library (a go-nvml mock server in tests). After a
// failed Init it calls nothing else in the library: the symbols behind a library that did not
// load are unresolved, and calling them crashes.
func DiscoverWith(lib Library, opt Options) (*Report, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, InitError(ret, opt.NVMLLib)
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

// InitError says why NVML did not start and what to do about it, in the words every command
// uses; it wraps ErrUnavailable.
func InitError(ret nvml.Return, path string) error {
	if path == "" {
		path = "libnvidia-ml.so.1"
	}
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("%w: %s could not be loaded; install the NVIDIA driver, or give the library's path with --nvml-lib", ErrUnavailable, path)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("%w: the NVIDIA kernel driver is not loaded (%v); load it, and nvidia-smi should work too", ErrUnavailable, ret)
	case nvml.ERROR_NO_PERMISSION:
		return fmt.Errorf("%w: no permission to use the GPUs (%v); check access to /dev/nvidia*", ErrUnavailable, ret)
	}
	return fmt.Errorf("%w: NVML did not start: %v", ErrUnavailable, ret)
}

// collect asks NVML about every GPU, every pair of GPUs, and its driver.
func collect(lib Library, opt Options) (*machine, error) {
	m := &machine{p2p: map[string][][]string{}}
	m.driver, _ = ok(lib.SystemGetDriverVersion())
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
	if p, good := ok(d.GetPerformanceState()); good && p <= nvml.PSTATE_15 {
		f.pstate = int(p)
	}
	f.name, _ = ok(d.GetName())
	f.uuid, _ = ok(d.GetUUID())
	if pci, good := ok(d.GetPciInfo()); good {
		f.busID, _ = parseBusID(cString(pci.BusId[:]))
	}
	if mem, good := ok(d.GetMemoryInfo()); good {
		f.memoryBytes = int64(mem.Total)
	}
	if major, minor, ret := d.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		f.cc = fmt.Sprintf("%d.%d", major, minor)
	}
	// Memory bandwidth: two transfers per memory clock over the bus (MHz x bits / 4000 = GB/s).
	if has["nvmlDeviceGetMemoryBusWidth"] {
		clock, okClock := ok(d.GetMaxClockInfo(nvml.CLOCK_MEM))
		bus, okBus := ok(d.GetMemoryBusWidth())
		if okClock && okBus {
			f.memGBs = math.Round(float64(clock)*float64(bus)/4000*100) / 100
		}
	}
	if mode, good := ok(d.GetPersistenceMode()); good {
		on := mode == nvml.FEATURE_ENABLED
		f.persistence = &on
	}
	if has["nvmlDeviceGetMigMode"] {
		if current, _, ret := d.GetMigMode(); ret == nvml.SUCCESS {
			on := current == nvml.DEVICE_MIG_ENABLE
			f.mig = &on
		}
	}
	f.gen, _ = ok(d.GetCurrPcieLinkGeneration())
	f.width, _ = ok(d.GetCurrPcieLinkWidth())
	f.genMax, _ = ok(d.GetMaxPcieLinkGeneration())
	f.widthMax, _ = ok(d.GetMaxPcieLinkWidth())
	// NVML answers INVALID_ARGUMENT or NOT_SUPPORTED for link numbers the GPU does not have.
	for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
		state, ret := d.GetNvLinkState(l)
		if ret != nvml.SUCCESS {
			continue
		}
		link := nvlinkFacts{link: l, up: state == nvml.FEATURE_ENABLED}
		if pci, good := ok(d.GetNvLinkRemotePciInfo(l)); good {
			link.remoteBus, _ = parseBusID(cString(pci.BusId[:]))
		}
		if has["nvmlDeviceGetNvLinkRemoteDeviceType"] {
			if t, good := ok(d.GetNvLinkRemoteDeviceType(l)); good {
				link.remote = remoteKind[t]
			}
		}
		if v, good := ok(d.GetNvLinkVersion(l)); good {
			link.version = int(v)
		}
		f.links = append(f.links, link)
	}
	if withMIG && f.mig != nil && *f.mig && has["nvmlDeviceGetMaxMigDeviceCount"] && has["nvmlDeviceGetMigDeviceHandleByIndex"] {
		count, _ := ok(d.GetMaxMigDeviceCount())
		for k := 0; k < count; k++ {
			if md, good := ok(d.GetMigDeviceHandleByIndex(k)); good {
				if u, good := ok(md.GetUUID()); good {
					f.migUUIDs = append(f.migUUIDs, u)
				}
			}
		}
	}
	return f
}

// ok turns an NVML answer into a value and whether NVML gave it.
func ok[T any](v T, ret nvml.Return) (T, bool) {
	return v, ret == nvml.SUCCESS
}

// cString reads a NUL-terminated C char array.
func cString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}
