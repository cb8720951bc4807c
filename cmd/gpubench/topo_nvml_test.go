//go:build cgo

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/topo"
	"github.com/gpubench/gpubench/internal/topo/topotest"
)

// dgxH100 is discovery on go-nvml's DGX H100 mock; the tree comes from --sysfs-root.
func dgxH100(o topo.Options) (*topo.Report, error) { return topo.DiscoverWith(topotest.DGXH100(), o) }

// matrix is the connection matrix of a topo table: its header line to the blank line after it.
func matrix(t *testing.T, out string) string {
	t.Helper()
	lines := strings.Split(out, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "      GPU0") })
	if start < 0 {
		t.Fatalf("no matrix in:\n%s", out)
	}
	end := start + slices.Index(lines[start:], "")
	return strings.Join(lines[start:end], "\n")
}

// A real machine written with --output json, read back with --backend sim --topology FILE, prints
// the same connection matrix.
func TestTopoJSONRoundTrip(t *testing.T) {
	for _, v := range []string{"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"} {
		t.Setenv(v, "") // restored after the test
		os.Unsetenv(v)
	}
	root := topotest.DGX(t).Root
	real, errOut, code := topoRun(t, dgxH100, "--sysfs-root", root)
	if code != 0 || errOut != "" {
		t.Fatalf("table: exit %d, stderr %q", code, errOut)
	}
	js, errOut, code := topoRun(t, dgxH100, "--sysfs-root", root, "--output", "json")
	if code != 0 || !strings.HasPrefix(errOut, "gpubench: note: the topology file's smp links") {
		t.Fatalf("json: exit %d, stderr %q", code, errOut)
	}
	file := filepath.Join(t.TempDir(), "dgx01.json")
	if err := os.WriteFile(file, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	simulated, errOut, code := topoRun(t, mustNotDiscover(t), "--backend", "sim", "--topology", file)
	if code != 0 || errOut != "" {
		t.Fatalf("sim: exit %d, stderr %q", code, errOut)
	}
	if got, want := matrix(t, simulated), matrix(t, real); got != want {
		t.Errorf("the recorded machine's matrix:\n%s\nwant:\n%s", got, want)
	}
	if !strings.HasPrefix(simulated, "gpubench topo: dgx01 (simulator)\n") || !strings.HasPrefix(real, "gpubench topo: dgx01 (NVML, driver 550.54.15)\n") {
		t.Errorf("headers %q and %q", strings.SplitN(simulated, "\n", 2)[0], strings.SplitN(real, "\n", 2)[0])
	}
}

// CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER reach the CUDA column.
func TestTopoCUDAVisibleDevices(t *testing.T) {
	t.Setenv("CUDA_VISIBLE_DEVICES", "GPU-00000005,3,1")
	t.Setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
	out, _, code := topoRun(t, dgxH100, "--sysfs-root", topotest.DGX(t).Root)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	want := `CUDA_VISIBLE_DEVICES entry "3" matches no device, so CUDA ignores it and every entry after it`
	if !strings.Contains(out, "\nWarnings:\n  "+want+"\n") || !strings.Contains(out, "\n5    0     NVIDIA H100") || !strings.Contains(out, "\n0    -     NVIDIA H100") {
		t.Errorf("want GPU 5 as CUDA 0, the rest hidden, and a warning for \"3\":\n%s", out)
	}
}
