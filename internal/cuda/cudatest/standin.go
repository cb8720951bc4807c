// Package cudatest builds the stand-in CUDA runtime (csrc/cudart_standin.c, a test double) for
// tests that load the real binding without a GPU.
package cudatest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	once sync.Once
	path string
	err  error
	out  []byte
)

// Standin returns the path of the stand-in libcudart, building it with gcc once per test binary.
// The library reads its GPUBENCH_STANDIN_* settings at its first call, so set them before that.
func Standin(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		_, self, _, _ := runtime.Caller(0)
		src := filepath.Join(filepath.Dir(self), "..", "..", "..", "csrc", "cudart_standin.c")
		// The folder outlives any one test: the library stays loaded for the life of the binary.
		dir, e := os.MkdirTemp("", "gpubench-standin-")
		if e != nil {
			err = e
			return
		}
		path = filepath.Join(dir, "libcudart.so.12")
		out, err = exec.Command("gcc", "-shared", "-fPIC", "-O2", "-pthread", "-o", path, src).CombinedOutput()
	})
	if err != nil {
		t.Fatalf("building the stand-in libcudart: %v\n%s", err, out)
	}
	return path
}
