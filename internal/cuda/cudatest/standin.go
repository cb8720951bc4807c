// Package cudatest builds the stand-in CUDA runtime and NCCL libraries (csrc/, test doubles) for
// tests that load the real bindings without a GPU.
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
	once         sync.Once
	cudart, nccl string
	buildErr     error
	buildOut     []byte
)

func build() {
	_, self, _, _ := runtime.Caller(0)
	csrc := filepath.Join(filepath.Dir(self), "..", "..", "..", "csrc")
	// The folder outlives any one test: the libraries stay loaded for the life of the binary.
	dir, err := os.MkdirTemp("", "gpubench-standin-")
	if err != nil {
		buildErr = err
		return
	}
	cudart, nccl = filepath.Join(dir, "libcudart.so.12"), filepath.Join(dir, "libnccl.so.2")
	for _, b := range [][2]string{{cudart, "cudart_standin.c"}, {nccl, "nccl_standin.c"}} {
		out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-pthread", "-o", b[0], filepath.Join(csrc, b[1]), "-ldl").CombinedOutput()
		if err != nil {
			buildErr, buildOut = err, out
			return
		}
	}
}

// Standin returns the path of the stand-in libcudart, building the stand-ins with gcc once per
// test binary. The library reads its GPUBENCH_STANDIN_* settings at its first call, so set them
// before that.
func Standin(t testing.TB) string {
	t.Helper()
	once.Do(build)
	if buildErr != nil {
		t.Fatalf("building the stand-in libraries: %v\n%s", buildErr, buildOut)
	}
	return cudart
}

// StandinNCCL returns the paths of the stand-in libcudart and libnccl. The stand-in NCCL finds
// the runtime through GPUBENCH_STANDIN_CUDART, which this sets.
func StandinNCCL(t testing.TB) (cudartPath, ncclPath string) {
	t.Helper()
	Standin(t)
	t.Setenv("GPUBENCH_STANDIN_CUDART", cudart)
	return cudart, nccl
}
