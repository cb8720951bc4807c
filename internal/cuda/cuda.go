//go:build cgo

// Package cuda binds the CUDA runtime (libcudart) through dlopen and a small C shim. It is, with
// internal/nccl, the only place gpubench uses cgo and unsafe. The library is found at run time;
// gpubench builds and runs without it.
package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/gpubench/gpubench/internal/gpu"
)

// Code is a cudaError_t.
type Code int

// The cudaError_t values gpubench tells apart (driver_types.h; the same in CUDA 11, 12 and 13).
const (
	ErrorInvalidValue             Code = 1
	ErrorMemoryAllocation         Code = 2
	ErrorStubLibrary              Code = 34 // the toolkit's stub libcuda was loaded, not the driver's
	ErrorInsufficientDriver       Code = 35 // the driver is older than the runtime
	ErrorInvalidDevice            Code = 101
	ErrorPeerAccessUnsupported    Code = 217
	ErrorInvalidResourceHandle    Code = 400
	ErrorPeerAccessAlreadyEnabled Code = 704
	ErrorPeerAccessNotEnabled     Code = 705
	ErrorNotSupported             Code = 801
	// ErrorTimeout is the shim's own code for a wait that passed its deadline (shim.h), outside
	// CUDA's range.
	ErrorTimeout Code = C.GB_ERR_TIMEOUT
)

// The cudaDeviceP2PAttr values gpubench asks for (driver_types.h).
const (
	p2pAttrPerformanceRank       = 1
	p2pAttrNativeAtomicSupported = 3
)

// Error is a failed CUDA runtime call: the function, the cudaError_t code, its name and message.
type Error struct {
	Func string
	Code Code
	Name string
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s (%d): %s", e.Func, e.Name, e.Code, e.Msg) }

// Is matches the backend-neutral errors, so callers need not know CUDA's codes.
func (e *Error) Is(target error) bool {
	switch target {
	case gpu.ErrPeerEnabled:
		return e.Code == ErrorPeerAccessAlreadyEnabled
	case gpu.ErrPeerNotEnabled:
		return e.Code == ErrorPeerAccessNotEnabled
	case gpu.ErrPeerUnsupported:
		return e.Code == ErrorPeerAccessUnsupported
	case gpu.ErrOutOfMemory:
		return e.Code == ErrorMemoryAllocation
	case gpu.ErrTimeout:
		return e.Code == ErrorTimeout
	case gpu.ErrInvalid:
		return e.Code == ErrorInvalidValue || e.Code == ErrorInvalidDevice || e.Code == ErrorInvalidResourceHandle
	case gpu.ErrNotSupported:
		return e.Code == ErrorNotSupported
	}
	return false
}

func check(fn string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	return &Error{Func: fn, Code: Code(rc), Name: C.GoString(C.gb_error_name(rc)), Msg: C.GoString(C.gb_error_string(rc))}
}

// CodeError is the error for a cudaError_t that another binding (NCCL's) got from the runtime.
func CodeError(fn string, code int) error { return check(fn, C.int(code)) }

// ErrNotFound wraps the failure to load any libcudart.
var ErrNotFound = errors.New("no CUDA runtime library could be loaded")

var loaded struct {
	sync.Mutex
	path string
}

// Candidates lists where gpubench looks for libcudart, in order: the explicit path (flag or
// GPUBENCH_CUDART), the sonames of CUDA 13, 12 and 11, CUDA_HOME and the usual install folders,
// then the folders of the CUDA runtime Python wheels.
func Candidates(explicit string) []string {
	return LibraryCandidates(explicit, "GPUBENCH_CUDART", []string{"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"},
		[]string{"nvidia/cu13/lib", "nvidia/cuda_runtime/lib"})
}

// LibraryCandidates lists the paths to try for a library: explicit if given, else the path in
// the environment variable env, else the sonames themselves (for the dynamic linker's own search)
// followed by every existing file of those names in CUDA_HOME, the usual CUDA folders and the
// given folders of Python wheels under the usual site-packages.
func LibraryCandidates(explicit, env string, sonames, wheelDirs []string) []string {
	if explicit != "" {
		return []string{explicit}
	}
	if p := os.Getenv(env); p != "" {
		return []string{p}
	}
	c := append([]string(nil), sonames...)
	var dirs []string
	if home := os.Getenv("CUDA_HOME"); home != "" {
		dirs = append(dirs, filepath.Join(home, "lib64"), filepath.Join(home, "lib"))
	}
	dirs = append(dirs, "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu")
	more, _ := filepath.Glob("/usr/local/cuda-*/lib64")
	dirs = append(dirs, more...)
	var sites []string
	// The environment of the python3 on PATH too: images that ship PyTorch in a virtual
	// environment of their own put it first on PATH, unactivated.
	pyenvRoot := ""
	if py, err := exec.LookPath("python3"); err == nil {
		pyenvRoot = filepath.Dir(filepath.Dir(py))
	}
	for _, root := range []string{os.Getenv("VIRTUAL_ENV"), os.Getenv("CONDA_PREFIX"), pyenvRoot, "/usr", "/usr/local", os.Getenv("HOME") + "/.local", "/opt/conda"} {
		if root == "" {
			continue
		}
		for _, pat := range []string{"lib/python3*/site-packages", "lib/python3*/dist-packages", "lib64/python3*/site-packages"} {
			m, _ := filepath.Glob(filepath.Join(root, pat))
			sites = append(sites, m...)
		}
	}
	if pyenv := os.Getenv("PYENV_ROOT"); pyenv != "" {
		m, _ := filepath.Glob(filepath.Join(pyenv, "versions/*/lib/python3*/site-packages"))
		sites = append(sites, m...)
	}
	for _, s := range sites {
		for _, w := range wheelDirs {
			dirs = append(dirs, filepath.Join(s, w))
		}
	}
	for _, d := range dirs {
		for _, n := range sonames {
			p := filepath.Join(d, n)
			if _, err := os.Stat(p); err == nil {
				c = append(c, p)
			}
		}
	}
	return c
}

// Load opens the CUDA runtime: the explicit path if given, else the first of Candidates that
// loads. The library stays loaded for the life of the process; a second Load returns its path.
func Load(explicit string) (string, error) {
	loaded.Lock()
	defer loaded.Unlock()
	if loaded.path != "" {
		return loaded.path, nil
	}
	var tried []string
	buf := (*C.char)(C.malloc(1024))
	defer C.free(unsafe.Pointer(buf))
	for _, p := range Candidates(explicit) {
		cp := C.CString(p)
		ok := C.gb_load(cp, buf, 1024)
		C.free(unsafe.Pointer(cp))
		if ok != 1 {
			tried = append(tried, C.GoString(buf))
			continue
		}
		// A runtime newer than the driver loads, then fails every call: try the next one.
		var n C.int
		if rc := Code(C.gb_device_count(&n)); rc == ErrorStubLibrary || rc == ErrorInsufficientDriver {
			tried = append(tried, fmt.Sprintf("%s: %v", p, check("cudaGetDeviceCount", C.int(rc))))
			C.gb_unload()
			continue
		}
		loaded.path = p
		return p, nil
	}
	return "", fmt.Errorf("%w: tried %s; install the CUDA runtime (e.g. pip install nvidia-cuda-runtime-cu12) or point --cuda-lib or GPUBENCH_CUDART at libcudart.so, or use --backend sim",
		ErrNotFound, strings.Join(tried, "; "))
}

// Versions returns the driver's and the runtime's CUDA versions (1000*major + 10*minor).
func Versions() (driver, runtime int, err error) {
	var d, r C.int
	err = check("cudaDriverGetVersion/cudaRuntimeGetVersion", C.gb_versions(&d, &r))
	return int(d), int(r), err
}

// DeviceCount is the number of visible devices.
func DeviceCount() (int, error) {
	var n C.int
	if err := check("cudaGetDeviceCount", C.gb_device_count(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// DeviceInfo describes a device.
type DeviceInfo struct {
	Name        string
	PCIBusID    string
	CCMajor     int
	CCMinor     int
	MemoryBytes int64
}

// Device returns device dev's description.
func Device(dev int) (DeviceInfo, error) {
	var name, bus [256]C.char
	var major, minor C.int
	var total C.size_t
	var failed *C.char // a static string in the shim
	if rc := C.gb_device_info(C.int(dev), &name[0], 256, &bus[0], 256, &major, &minor, &total, &failed); rc != 0 {
		return DeviceInfo{}, check(C.GoString(failed), rc)
	}
	d := DeviceInfo{Name: C.GoString(&name[0]), PCIBusID: strings.ToLower(C.GoString(&bus[0])), CCMajor: int(major), CCMinor: int(minor), MemoryBytes: int64(total)}
	if d.Name == "" {
		d.Name = fmt.Sprintf("CUDA device %d", dev)
	}
	return d, nil
}

// MemInfo returns device dev's free and total memory.
func MemInfo(dev int) (free, total int64, err error) {
	var f, t C.size_t
	err = check("cudaMemGetInfo", C.gb_mem_info(C.int(dev), &f, &t))
	return int64(f), int64(t), err
}

func malloc(dev int, n int64) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := check("cudaMalloc", C.gb_malloc(C.int(dev), &p, C.size_t(n)))
	return p, err
}

func free(dev int, p unsafe.Pointer) error { return check("cudaFree", C.gb_free(C.int(dev), p)) }

func hostAlloc(busID string, n int64) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	cpus := C.CString(localCPUList(busID))
	defer C.free(unsafe.Pointer(cpus))
	err := check("cudaHostAlloc", C.gb_host_alloc(cpus, &p, C.size_t(n)))
	return p, err
}

// localCPUList is the list of CPUs near a PCI device ("0-55,112-167"), or "" when sysfs does not
// say.
func localCPUList(busID string) string {
	if busID == "" {
		return ""
	}
	data, err := os.ReadFile(filepath.Join("/sys/bus/pci/devices", busID, "local_cpulist"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

func freeHost(p unsafe.Pointer) error { return check("cudaFreeHost", C.gb_free_host(p)) }

func memset(dev int, p unsafe.Pointer, v byte, n int64) error {
	return check("cudaMemset", C.gb_memset(C.int(dev), p, C.int(v), C.size_t(n)))
}

func copyToDevice(dev int, dst unsafe.Pointer, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return check("cudaMemcpy", C.gb_copy_to_device(C.int(dev), dst, unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

func copyFromDevice(dev int, dst []byte, src unsafe.Pointer) error {
	if len(dst) == 0 {
		return nil
	}
	return check("cudaMemcpy", C.gb_copy_from_device(C.int(dev), unsafe.Pointer(&dst[0]), src, C.size_t(len(dst))))
}

func peerInfo(dev, peer int) (gpu.PeerInfo, error) {
	var can, rank, atomics C.int
	if err := check("cudaDeviceCanAccessPeer", C.gb_can_access_peer(C.int(dev), C.int(peer), &can)); err != nil {
		return gpu.PeerInfo{}, err
	}
	info := gpu.PeerInfo{Access: can == 1}
	if !info.Access {
		return info, nil
	}
	if err := check("cudaDeviceGetP2PAttribute", C.gb_p2p_attr(C.int(dev), C.int(peer), p2pAttrPerformanceRank, &rank)); err != nil {
		return info, err
	}
	if err := check("cudaDeviceGetP2PAttribute", C.gb_p2p_attr(C.int(dev), C.int(peer), p2pAttrNativeAtomicSupported, &atomics)); err != nil {
		return info, err
	}
	info.PerfRank, info.NativeAtomics = int(rank), atomics == 1
	return info, nil
}

func enablePeer(dev, peer int) error {
	return check("cudaDeviceEnablePeerAccess", C.gb_enable_peer(C.int(dev), C.int(peer)))
}

func disablePeer(dev, peer int) error {
	return check("cudaDeviceDisablePeerAccess", C.gb_disable_peer(C.int(dev), C.int(peer)))
}

// copySpec is a copy for timedCopies, in device pointers.
type copySpec struct {
	dst, src       unsafe.Pointer
	bytes          int64
	dstDev, srcDev int
	issuer, repeat int
}

func timedCopies(specs []copySpec, timeout time.Duration) ([]time.Duration, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	cs := (*[1 << 20]C.gb_copy)(C.malloc(C.size_t(len(specs)) * C.sizeof_gb_copy))[:len(specs):len(specs)]
	defer C.free(unsafe.Pointer(&cs[0]))
	for i, s := range specs {
		cs[i] = C.gb_copy{dst: s.dst, src: s.src, bytes: C.size_t(s.bytes), dst_dev: C.int(s.dstDev), src_dev: C.int(s.srcDev), issuer: C.int(s.issuer), repeat: C.int(s.repeat)}
	}
	ms := make([]C.float, len(specs))
	if err := check("gb_timed_copies", C.gb_timed_copies(C.int(len(specs)), &cs[0], &ms[0], C.int(timeout.Milliseconds()))); err != nil {
		return nil, err
	}
	out := make([]time.Duration, len(specs))
	for i, m := range ms {
		out[i] = time.Duration(float64(m) * 1e6)
	}
	return out, nil
}
