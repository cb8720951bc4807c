//go:build cgo

package nvmlib

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestInitError(t *testing.T) {
	for _, c := range []struct {
		ret  nvml.Return
		path string
		want string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, "", "libnvidia-ml.so.1 could not be loaded; install the NVIDIA driver"},
		{nvml.ERROR_LIBRARY_NOT_FOUND, "/x/libnvidia-ml.so", "/x/libnvidia-ml.so could not be loaded; check the path: it must be NVIDIA's NVML library"},
		{nvml.ERROR_DRIVER_NOT_LOADED, "", "kernel driver is not loaded"},
		{nvml.ERROR_NO_PERMISSION, "", "check access to /dev/nvidia*"},
		{nvml.ERROR_UNKNOWN, "", "NVML did not start"},
	} {
		err := InitError(c.ret, c.path)
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("InitError(%v, %q) = %v; want ErrUnavailable and %q", c.ret, c.path, err, c.want)
		}
	}
}

// A library that is not there fails Init with the path named, and nothing else is called.
func TestOpenMissingLibrary(t *testing.T) {
	_, err := Open("/nonexistent/libnvidia-ml.so.1")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "/nonexistent/libnvidia-ml.so.1") {
		t.Errorf("Open of a missing library: %v", err)
	}
}

func TestCString(t *testing.T) {
	b := []int8{'0', '0', '0', '0', ':', '1', '8', 0, 'x'}
	if got := CString(b); got != "0000:18" {
		t.Errorf("CString = %q", got)
	}
	if got := CString([]int8{'a', 'b'}); got != "ab" {
		t.Errorf("CString without NUL = %q", got)
	}
}
