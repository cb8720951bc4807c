//go:build cgo

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/cuda/cudatest"
)

// scripts/gpu-vs-nccl-tests.sh runs only where a GPU is lent, for minutes that a typo would
// waste; here it runs whole on the stand-in libraries, with stand-ins for what the GPU machine
// has: nvidia-smi, nvcc, NCCL's Python wheel (the stand-in NCCL) and nccl-tests' source (a
// Makefile whose binaries print gpubench's simulated sweep, in nccl-tests' layout). The figures
// mean nothing; every step, the comparisons, the side-by-side table and the calibration must
// come out.
func TestGPUVsNCCLTestsScriptDryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the GPU script end to end")
	}
	for _, tool := range []string{"bash", "make", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the script needs %s: %v", tool, err)
		}
	}
	rt, lib := cudatest.StandinNCCL(t)
	gb := gpubenchOnPath(t)
	d := t.TempDir()
	write := func(name, text string, mode os.FileMode) {
		t.Helper()
		path := filepath.Join(d, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("bin/nvidia-smi", `#!/bin/sh
case "$*" in
  *compute_cap,*|*name,*) echo "name, driver_version, compute_cap"; echo "gpubench stand-in, 0.0, 9.0" ;;
  *compute_cap*) echo "9.0" ;;
  *) echo "GPU 0: gpubench stand-in" ;;
esac
`, 0o755)
	write("bin/nvcc", "#!/bin/sh\necho 'stand-in nvcc'\necho 'Build cuda_0.0'\n", 0o755)
	write("cuda/lib64/.keep", "", 0o644)
	write("py/nvidia/__init__.py", "", 0o644)
	write("py/nvidia/nccl/__init__.py", "", 0o644)
	write("py/nvidia/nccl/include/nccl.h", "", 0o644)
	if err := os.MkdirAll(filepath.Join(d, "py/nvidia/nccl/lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(lib, filepath.Join(d, "py/nvidia/nccl/lib/libnccl.so.2")); err != nil {
		t.Fatal(err)
	}
	// nccl-tests' build: each binary is gpubench's simulated sweep of the same collective.
	perf := ""
	for _, c := range []string{"all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"} {
		perf += "\tprintf '#!/bin/sh\\nexec %s " + strings.ReplaceAll(c, "_", "") + " --backend sim --topology hgx-h200 \"$$@\"\\n' '" + gb +
			"' >$(BUILDDIR)/" + c + "_perf && chmod +x $(BUILDDIR)/" + c + "_perf\n"
	}
	write("nccl-tests/src/Makefile", "build:\n\ttest -n \"$(NCCL_HOME)\" -a -f \"$(NCCL_HOME)/include/nccl.h\" -a -n \"$(NVCC_GENCODE)\"\n\tmkdir -p $(BUILDDIR)\n"+perf, 0o644)

	out := filepath.Join(d, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "../../scripts/gpu-vs-nccl-tests.sh", out)
	cmd.Env = append(slurmEnv(), "PATH="+filepath.Join(d, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"),
		"PYTHONPATH="+filepath.Join(d, "py"), "CUDA_HOME="+filepath.Join(d, "cuda"), "NCCL_TESTS_SRC="+filepath.Join(d, "nccl-tests"),
		"GPUBENCH_BIN="+gb, "REPS=1", "MAX_BYTES=64K",
		"GPUBENCH_CUDART="+rt, "GPUBENCH_STANDIN_CUDART="+rt, "GPUBENCH_STANDIN_DEVICES=1", "GPUBENCH_STANDIN_MEMORY=8589934592",
		"GPUBENCH_STANDIN_NAME=NVIDIA H200")
	log, err := cmd.CombinedOutput()
	summary, _ := os.ReadFile(filepath.Join(out, "summary.txt"))
	// Every step ran and ended well: the build, 5 sweeps, graph and 8 B a side, the local copy,
	// calibrate.
	steps := regexp.MustCompile(`(?m)^(\S+): exit (\d+) in \d+ s$`).FindAllStringSubmatch(string(summary), -1)
	if len(steps) != 1+2*7+2 {
		t.Errorf("%d steps; want 17:\n%s", len(steps), summary)
	}
	failed, refused := false, false
	for _, s := range steps {
		stderr, _ := os.ReadFile(filepath.Join(out, s[1]+".err"))
		// The stand-ins' copy inside a "GPU" is the host's memcpy, under a hundredth of an
		// H200's memory bandwidth: calibrate reads it, judges it, and (one rank fitting no
		// algorithm) refuses to write a calibration of nothing. On the H200 the copy is fitted.
		standIn := s[1] == "calibrate" && s[2] == "2" && strings.Contains(string(stderr), "constrain none of the simulator's figures") &&
			strings.Contains(string(stderr), "local_copy_efficiency: the copies measured")
		if s[2] != "0" && !standIn {
			t.Errorf("step %s: exit %s: %s", s[1], s[2], stderr)
			failed = true
		}
		refused = refused || standIn
	}
	if err != nil && failed { // the script's status is 1 for the stand-ins' calibrate step alone
		t.Fatalf("%v\n%s", err, log)
	}
	table, err := os.ReadFile(filepath.Join(out, "side-by-side.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Sizes 8 B to 32 KiB by 4 (-e 64K), both placements; the graph and 8 B runs' one row each.
	for _, want := range []string{
		"# gpubench time / nccl-tests time, median of 1 alternated pairs; -g 1 -b 8 -e 64K -f 4\n",
		"\nall_reduce                    8 ", "\nall_reduce                32768 ", "\nreduce_scatter            32768 ",
		"\nalltoall                  32768 ", "\nsendrecv                  32768 ",
		"\nall_reduce -G 5           65536 ", "\nall_reduce -n 1000            8 ",
	} {
		if !strings.Contains(string(table), want) {
			t.Errorf("side-by-side.txt lacks %q:\n%s", want, table)
		}
	}
	if !regexp.MustCompile(`\n# \d+ of \d+ within 2%; furthest [0-9.]+% off\n$`).Match(table) {
		t.Errorf("side-by-side.txt has no closing count:\n%s", table)
	}
	cal, err := os.ReadFile(filepath.Join(out, "hgx-h200-calibrated.json"))
	switch {
	case refused && err == nil:
		t.Errorf("calibrate refused, and wrote a file all the same")
	case !refused && (err != nil || !strings.Contains(string(cal), `"calibration"`)):
		t.Errorf("no calibrated hgx-h200 (%v):\n%s", err, cal)
	}
}
