//go:build cgo

package diag

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpubench/gpubench/internal/topo"
	"github.com/gpubench/gpubench/internal/topo/topotest"
)

// health is what the stubs make NVML say of a GPU's health, beside topotest's wiring.
type health struct {
	eccOff, eccPending, retirePending, remapPending, remapFailed bool
	events                                                       uint64
}

// withHealth stubs the health calls go-nvml's mock lacks; GPU i gets h[i] (healthy when absent).
func withHealth(srv *server.Server, h map[int]health) *server.Server {
	for i, d := range srv.Devices {
		dev, x := d.(*server.Device), h[i]
		dev.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
			cur, pending := nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED
			if x.eccOff {
				cur, pending = nvml.FEATURE_DISABLED, nvml.FEATURE_DISABLED
			}
			if x.eccPending {
				pending = nvml.FEATURE_DISABLED
			}
			return cur, pending, nvml.SUCCESS
		}
		dev.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) {
			if x.retirePending {
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		dev.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
			return 0, 0, x.remapPending, x.remapFailed, nvml.SUCCESS
		}
		dev.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return x.events, nvml.SUCCESS }
	}
	return srv
}

// reader is diag's NVML reader on a mock server.
func reader(srv *server.Server) func(string, topo.Options) (*Devices, error) {
	return func(_ string, o topo.Options) (*Devices, error) { return ReadDevicesWith(srv, o) }
}

// A healthy DGX H100: every device and interconnect check passes.
func TestHealthyDGXH100(t *testing.T) {
	tr := topotest.DGX(t)
	tr.Write("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 2024")
	rep := Run(Options{Root: tr.Root, ReadDevices: reader(withHealth(topotest.DGXH100(), nil)), Quick: true})
	for _, r := range rep.Results {
		if (r.Group == "devices" || r.Group == "interconnect" && r.Check != "acs") && r.Status != Pass {
			t.Errorf("%s: %s %q; want pass", r.Check, r.Status, r.Finding)
		}
	}
	opt := Options{Root: tr.Root, ReadDevices: reader(withHealth(topotest.DGXH100(), nil))}
	expect(t, result(t, opt, "nvml"), Pass, "NVML, driver 550.54.15 (CUDA 12.4), 8 GPUs")
	expect(t, result(t, opt, "driver"), Pass, "kernel module 550.54.15")
	expect(t, result(t, opt, "nvlink"), Pass, "144 links up, none down")
	expect(t, result(t, opt, "p2p-topology"), Pass, "between all 56 ordered pairs")
	expect(t, result(t, opt, "gpu-nic-affinity"), Pass, "every GPU has an RDMA NIC under its PCIe switch: GPU 0 PIX mlx5_0")
}

// Each device check fails or warns on the GPU that is wrong, and names it.
func TestUnhealthyGPUs(t *testing.T) {
	tr := topotest.DGX(t)
	srv := topotest.DGXH100()
	withHealth(srv, map[int]health{1: {eccOff: true}, 2: {remapFailed: true}, 3: {events: reasonHwThermal | 1}, 4: {retirePending: true}, 5: {eccPending: true}})
	dev := func(i int) *server.Device { return srv.Devices[i].(*server.Device) }
	dev(6).GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
	dev(7).GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return 8, nvml.SUCCESS }
	dev(0).GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
		if l >= 18 {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if l == 5 {
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	opt := Options{Root: tr.Root, ReadDevices: reader(srv), Quick: true}
	expect(t, result(t, opt, "ecc"), Warn, "an ECC mode change is pending on GPU 5")
	expect(t, result(t, opt, "retired-memory"), Fail, "row remapping failed on GPU 2")
	expect(t, result(t, opt, "throttle"), Fail, "GPU 3 hardware thermal slowdown")
	expect(t, result(t, opt, "persistence"), Warn, "persistence mode is off on GPU 6")
	expect(t, result(t, opt, "pcie-link"), Fail, "GPU 7 x8 of x16")
	expect(t, result(t, opt, "nvlink"), Fail, "GPU 0 link 5")

	withHealth(srv, map[int]health{1: {eccOff: true}, 4: {retirePending: true}, 3: {events: reasonSwThermal}})
	expect(t, result(t, opt, "ecc"), Warn, "ECC is off on GPU 1")
	expect(t, result(t, opt, "retired-memory"), Fail, "memory repairs wait for a GPU reset on GPU 4")
	expect(t, result(t, opt, "throttle"), Warn, "GPU 3 software thermal slowdown")
}

// A PCIe box: P2P refused between two GPUs under one switch fails, across sockets passes;
// the busy GPU at Gen1 fails the link check; the RoCE NIC is not under the GPUs' switch.
func TestPCIeBox(t *testing.T) {
	tr := topotest.PCIeBox(t)
	srv := withHealth(topotest.PCIeA100(), nil)
	opt := Options{Root: tr.Root, ReadDevices: reader(srv), Quick: true}
	expect(t, result(t, opt, "p2p-topology"), Pass, "P2P possible for 6 of 12 ordered pairs; the others cross CPU sockets")
	expect(t, result(t, opt, "pcie-link"), Fail, "GPU 2 Gen1 of Gen4 while busy and GPU 3 x8 of x16")
	expect(t, result(t, opt, "gpu-nic-affinity"), Warn, "GPU 0 NODE mlx5_0")
	expect(t, result(t, opt, "nvlink"), Skip, "no GPU reports NVLink")
	for i, d := range srv.Devices {
		d.(*server.Device).GetP2PStatusFunc = func(other nvml.Device, c nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			j := other.(*server.Device).Index
			if i+j == 1 || i == 3 || j == 3 { // GPU0-GPU1 share a switch (PIX)
				return nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED, nvml.SUCCESS
			}
			return nvml.P2P_STATUS_OK, nvml.SUCCESS
		}
	}
	expect(t, result(t, opt, "p2p-topology"), Fail, "GPU0-GPU1 CNS over PIX")
}

// NVML that does not start: the device checks skip, the nvml check fails.
func TestNVMLDown(t *testing.T) {
	srv := topotest.DGXH100()
	srv.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }
	opt := Options{Root: host(t).Root, ReadDevices: reader(srv), Quick: true}
	expect(t, result(t, opt, "nvml"), Fail, "the NVIDIA kernel driver is not loaded")
	expect(t, result(t, opt, "ecc"), Skip, "needs NVML")
}
