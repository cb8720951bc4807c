//go:build cgo

package nvmlib

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// New returns NVML's interface for the library at path ("" is libnvidia-ml.so.1, found by the
// system's loader). Nothing is loaded until Init.
func New(path string) nvml.Interface {
	if path == "" {
		return nvml.New()
	}
	return nvml.New(nvml.WithLibraryPath(path))
}

// Open loads and initializes NVML; the caller shuts it down.
func Open(path string) (nvml.Interface, error) {
	lib := New(path)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, InitError(ret, path)
	}
	return lib, nil
}

// InitError says why NVML did not start and what to do about it, in the words every command
// uses; it wraps ErrUnavailable. After a failed Init nothing else in the library may be called:
// go-nvml binds lazily, and the symbols of a library that did not load are unresolved.
func InitError(ret nvml.Return, path string) error {
	fix := "install the NVIDIA driver, or give the library's path with --nvml-lib"
	if path == "" {
		path = "libnvidia-ml.so.1"
	} else {
		fix = "check the path: it must be NVIDIA's NVML library (libnvidia-ml.so.1) for this machine's architecture"
	}
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("%w: %s could not be loaded; %s", ErrUnavailable, path, fix)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("%w: the NVIDIA kernel driver is not loaded (%v); load it, and nvidia-smi should work too", ErrUnavailable, ret)
	case nvml.ERROR_NO_PERMISSION:
		return fmt.Errorf("%w: no permission to use the GPUs (%v); check access to /dev/nvidia*", ErrUnavailable, ret)
	}
	return fmt.Errorf("%w: NVML did not start: %v", ErrUnavailable, ret)
}

// OK turns an NVML answer into a value and whether NVML gave it.
func OK[T any](v T, ret nvml.Return) (T, bool) { return v, ret == nvml.SUCCESS }

// CString reads a NUL-terminated C char array.
func CString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// Has says which of the given NVML functions the loaded library has. go-nvml binds lazily, so
// calling a function an older driver lacks ends the process: readers ask first.
func Has(lib interface{ Extensions() nvml.ExtendedInterface }, symbols ...string) map[string]bool {
	has := map[string]bool{}
	for _, s := range symbols {
		has[s] = lib.Extensions().LookupSymbol(s) == nil
	}
	return has
}
