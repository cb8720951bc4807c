//go:build cgo

// diag on go-nvml's mock servers, which need cgo.

package main

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpubench/gpubench/internal/diag"
	"github.com/gpubench/gpubench/internal/golden"
	"github.com/gpubench/gpubench/internal/topo"
	"github.com/gpubench/gpubench/internal/topo/topotest"
)

// The real path on go-nvml's DGX H100 mock and the DGX tree, without a CUDA runtime: the library
// check fails (exit 3), the device checks pass.
func TestGoldenDiagNVML(t *testing.T) {
	fixEnv(t, "CUDA_VISIBLE_DEVICES=0,1,2,3")
	dgxH100 := func(_ string, o topo.Options) (*diag.Devices, error) {
		srv := topotest.DGXH100()
		for _, d := range srv.Devices {
			dev := d.(*server.Device)
			dev.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
				return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS
			}
			dev.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
			dev.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
			dev.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 1, nvml.SUCCESS }
		}
		return diag.ReadDevicesWith(srv, o)
	}
	out, errOut, code := diagRun(t, dgxH100, "--root", diagHost(t), "--quick", "--cuda-lib", "/nonexistent/libcudart.so.12")
	if code != exitCheck || errOut != "gpubench: diag: 1 check failed: cuda-runtime\n" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden.Check(t, "diag-nvml-dgx-h100.txt", out)
}
