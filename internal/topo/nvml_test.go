//go:build cgo

package topo

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpubench/gpubench/internal/golden"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/sim"
	"github.com/gpubench/gpubench/internal/topo/topotest"
)

// discover runs Discover against a mock server and a fixture tree.
func discover(t *testing.T, srv Library, root string, opt Options) *Report {
	t.Helper()
	opt.Root = root
	r, err := DiscoverWith(srv, opt)
	if err != nil {
		t.Fatalf("DiscoverWith: %v", err)
	}
	return r
}

func device(srv *server.Server, i int) *server.Device { return srv.Devices[i].(*server.Device) }

// An NVSwitch machine, with the NVLink P2P matrix.
func TestGoldenDGXH100(t *testing.T) {
	t.Parallel()
	r := discover(t, topotest.DGXH100(), topotest.DGX(t).Root, Options{P2P: "nvlink"})
	if len(r.Warnings) != 0 || r.TopologyErr != nil {
		t.Errorf("warnings %q, topology error %v; want none", r.Warnings, r.TopologyErr)
	}
	golden.Check(t, "nvml-dgx-h100.txt", render(t, r, "table"))
	golden.Check(t, "nvml-dgx-h100.json", render(t, r, "json"))
	golden.Check(t, "nvml-dgx-h100.dot", render(t, r, "dot"))
}

// A two-socket PCIe machine: PIX, PHB, NODE and SYS, P2P refused across the sockets, an idle GPU,
// a busy GPU below its PCIe generation, a GPU at x8, a slow NIC link, a NIC that is down, and
// CUDA_VISIBLE_DEVICES by UUID.
func TestGoldenPCIeBox(t *testing.T) {
	t.Parallel()
	r := discover(t, topotest.PCIeA100(), topotest.PCIeBox(t).Root, Options{P2P: "read",
		VisibleDevices: ParseVisibleDevices("GPU-00000003,GPU-00000000", true)})
	golden.Check(t, "nvml-pcie-box.txt", render(t, r, "table"))
	golden.Check(t, "nvml-pcie-box.json", render(t, r, "json"))
	n := r.Topology.Nodes[0]
	if r.Topology.P2P != "none" || len(n.NICs) != 1 || n.NICs[0].ID != "mlx5_0" {
		t.Errorf("p2p %q, NICs %+v; want p2p none and only mlx5_0 (eno1 is down, so its speed is unknown)", r.Topology.P2P, n.NICs)
	}
	if got := r.Nodes[0].GPUs[3].CUDA + "," + r.Nodes[0].GPUs[0].CUDA; got != "0,1" {
		t.Errorf("CUDA ordinals of GPU3, GPU0: %s; want 0,1", got)
	}
}

// dgxa100's mock: twelve NVLink 3.0 links, no NVLink SHARP below compute capability 9.0.
func TestDGXA100(t *testing.T) {
	t.Parallel()
	r := discover(t, topotest.DGXA100(), topotest.DGX(t).Root, Options{})
	n := r.Topology.Nodes[0]
	if m := r.Nodes[0].Matrix; m[0][7] != "NV12" || m[3][4] != "NV12" {
		t.Errorf("GPU0-GPU7 %s, GPU3-GPU4 %s; want NV12", m[0][7], m[3][4])
	}
	sw := n.Switches[len(n.Switches)-1]
	if sw.ID != "nvswitch" || sw.NVLS {
		t.Errorf("switch %+v; want nvswitch without NVLS", sw)
	}
	g := n.GPUs[0]
	if g.Name != "Mock NVIDIA A100-SXM4-40GB" || g.MemoryGBs != 1555.2 || g.ComputeCapability != "8.0" || g.MemoryBytes != 40960<<20 {
		t.Errorf("GPU0 %+v; want the mock's A100 40GB with 1555.2 GB/s", g)
	}
	row := r.Nodes[0].NVLinks[0]
	if row.Remote != "nvswitch" || row.Up != 12 || row.Version != "3.0" || row.PerLinkGBs != 25 || row.TotalGBs != 300 {
		t.Errorf("GPU0's NVLinks %+v; want 12 NVLink 3.0 links up to nvswitch, 25 GB/s each, 300 in all", row)
	}
}

// The topology file a real machine writes runs on the simulator, and prints the same matrix.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		srv     *server.Server
		tree    *topotest.Tree
		dropped []int // matrix rows the file leaves out: NICs that are down
	}{
		{"dgx-h100", topotest.DGXH100(), topotest.DGX(t), nil},
		{"dgx-a100", topotest.DGXA100(), topotest.DGX(t), nil},
		{"pcie-box", topotest.PCIeA100(), topotest.PCIeBox(t), []int{5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			real := discover(t, tc.srv, tc.tree.Root, Options{})
			file := filepath.Join(t.TempDir(), "machine.json")
			if err := os.WriteFile(file, []byte(render(t, real, "json")), 0o644); err != nil {
				t.Fatal(err)
			}
			recorded, err := sim.LoadTopology(file)
			if err != nil {
				t.Fatalf("the simulator does not read the file: %v", err)
			}
			if _, err := sim.New(recorded, sim.Options{}); err != nil {
				t.Fatalf("the simulator does not run the file: %v", err)
			}
			want := without(real.Nodes[0].Matrix, tc.dropped)
			if got := FromTopology(recorded, "").Nodes[0].Matrix; !reflect.DeepEqual(got, want) {
				t.Errorf("matrix read back:\n%v\nwant:\n%v", got, want)
			}
		})
	}
}

// without drops rows and columns from a matrix.
func without(m [][]string, drop []int) [][]string {
	var out [][]string
	for i, row := range m {
		if slices.Contains(drop, i) {
			continue
		}
		var r []string
		for j, c := range row {
			if !slices.Contains(drop, j) {
				r = append(r, c)
			}
		}
		out = append(out, r)
	}
	return out
}

// After a failed Init nothing else is called (the mock panics on any call it has no function for),
// and the error is nvmlib's, saying how to fix it (its words are tested there).
func TestFailedInitCallsNothingElse(t *testing.T) {
	t.Parallel()
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	_, err := DiscoverWith(lib, Options{NVMLLib: "/opt/nv/libnvidia-ml.so.1", Root: t.TempDir()})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "/opt/nv/libnvidia-ml.so.1 could not be loaded") {
		t.Errorf("error %v; want ErrUnavailable naming the library", err)
	}
	if len(lib.InitCalls()) != 1 || len(lib.ShutdownCalls()) != 0 {
		t.Errorf("%d Init and %d Shutdown calls; want 1 and 0", len(lib.InitCalls()), len(lib.ShutdownCalls()))
	}
}

// NVML without GPUs is no NVML for topo; it is shut down again.
func TestNoGPU(t *testing.T) {
	t.Parallel()
	srv := topotest.DGXH100()
	srv.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
	_, err := DiscoverWith(srv, Options{Root: t.TempDir()})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "NVML sees no GPU") {
		t.Errorf("error %v; want ErrUnavailable: NVML sees no GPU", err)
	}
	if len(srv.ShutdownCalls()) != 1 {
		t.Errorf("%d Shutdown calls; want 1", len(srv.ShutdownCalls()))
	}
	srv = topotest.DGXH100()
	srv.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	if _, err := DiscoverWith(srv, Options{Root: t.TempDir()}); err == nil || errors.Is(err, ErrUnavailable) {
		t.Errorf("error %v; want a failure that is not ErrUnavailable", err)
	}
}

// Everything that looks wrong is said, once: an NVLink down that the other GPUs have up, a GPU
// that NVML cannot open, an InfiniBand NIC down while the others are up, and a
// CUDA_VISIBLE_DEVICES entry that matches no device.
func TestWarnings(t *testing.T) {
	t.Parallel()
	srv := topotest.DGXH100()
	d3 := device(srv, 3)
	up := d3.GetNvLinkStateFunc
	d3.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
		if l == 7 || l == 9 {
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return up(l)
	}
	d5 := device(srv, 5)
	d5.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
		if l == 0 {
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return up(l)
	}
	handle := srv.DeviceGetHandleByIndexFunc
	srv.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 6 {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return handle(i)
	}
	tree := topotest.DGX(t)
	tree.Write("sys/class/infiniband_devices/mlx5_3/ports/1/state", "1: DOWN")
	r := discover(t, srv, tree.Root, Options{VisibleDevices: ParseVisibleDevices("0,1,7,2", true)})
	want := []string{
		"GPU 6: NVML cannot open it (ERROR_GPU_IS_LOST), so it is left out",
		"GPU 3: NVLinks 7,9 are down while other GPUs have those links up",
		"GPU 5: NVLink 0 is down while other GPUs have their link 0 up",
		"NIC mlx5_3 (0000:3d:00.0) is down while other infiniband NICs are up",
		`CUDA_VISIBLE_DEVICES entry "7" matches no device, so CUDA ignores it and every entry after it`,
	}
	if !slices.Equal(r.Warnings, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(r.Warnings, "\n"), strings.Join(want, "\n"))
	}
	n := r.Nodes[0]
	if len(n.GPUs) != 7 || n.GPUs[6].Index != "7" || n.GPUs[6].CUDA != "-" || n.GPUs[1].CUDA != "1" {
		t.Errorf("GPU rows %+v; want seven, the last NVML's GPU 7, which CUDA does not see", n.GPUs)
	}
	if row := n.NVLinks[3]; row.Up != 16 || !slices.Equal(row.Down, []int{7, 9}) || row.TotalGBs != 400 {
		t.Errorf("GPU3's NVLinks %+v; want 16 up, 7 and 9 down, 400 GB/s", row)
	}
	var lanes []int
	for _, l := range r.Topology.Nodes[0].Links {
		if l.Kind == "nvlink" {
			lanes = append(lanes, l.Lanes)
		}
	}
	if want := []int{18, 18, 18, 16, 18, 17, 18}; !slices.Equal(lanes, want) {
		t.Errorf("NVLink lanes in the file %v; want %v (the links that are up)", lanes, want)
	}
	if m := n.Matrix; m[3][5] != "NV16" || m[0][1] != "NV18" {
		t.Errorf("GPU3-GPU5 %s, GPU0-GPU1 %s; want NV16 (the fewer links to the switch) and NV18", m[3][5], m[0][1])
	}
	for _, c := range r.Topology.Nodes[0].NICs {
		if c.ID == "mlx5_3" {
			t.Error("the topology file keeps mlx5_3, whose speed is unknown while it is down")
		}
	}
}

// Where NVML and the sysfs tree disagree, the matrix shows NVML's view and says so; the file
// records the tree.
func TestNVMLDisagreesWithSysfs(t *testing.T) {
	t.Parallel()
	srv := topotest.PCIeA100()
	for _, i := range []int{0, 2} {
		d, other := device(srv, i), 2-i
		level := d.GetTopologyCommonAncestorFunc
		d.GetTopologyCommonAncestorFunc = func(o nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			if o.(*server.Device).Index == other {
				return nvml.TOPOLOGY_SINGLE, nvml.SUCCESS
			}
			return level(o)
		}
	}
	r := discover(t, srv, topotest.PCIeBox(t).Root, Options{})
	if m := r.Nodes[0].Matrix; m[0][2] != "PIX" || m[2][0] != "PIX" {
		t.Errorf("GPU0-GPU2 %s/%s; want NVML's PIX", m[0][2], m[2][0])
	}
	want := "NVML and the sysfs PCIe tree disagree on 1 GPU pairs (GPU0-GPU2 NVML PIX, sysfs PHB)"
	if !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.HasPrefix(w, want) }) {
		t.Errorf("warnings %q; want one starting %q", r.Warnings, want)
	}
	if got := FromTopology(r.Topology, "").Nodes[0].Matrix[0][2]; got != "PHB" {
		t.Errorf("the file gives GPU0-GPU2 %s; want the tree's PHB", got)
	}
}

// CUDA_VISIBLE_DEVICES naming MIG devices: topo reads the MIG devices' UUIDs and maps them.
func TestMIGDevices(t *testing.T) {
	t.Parallel()
	srv := topotest.DGXH100()
	d := device(srv, 2)
	d.MigMode = nvml.DEVICE_MIG_ENABLE
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 3, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(k int) (nvml.Device, nvml.Return) {
		if k == 1 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		u := []string{"MIG-aaaa-1", "", "MIG-bbbb-2"}[k]
		return &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return u, nvml.SUCCESS }}, nvml.SUCCESS
	}
	r := discover(t, srv, topotest.DGX(t).Root, Options{VisibleDevices: ParseVisibleDevices("MIG-bbbb", true)})
	n := r.Nodes[0]
	if n.GPUs[2].CUDA != "0 (MIG)" || n.GPUs[2].MIG != "on" || n.GPUs[0].CUDA != "-" {
		t.Errorf("GPU2 CUDA %q MIG %q, GPU0 CUDA %q; want 0 (MIG), on, -", n.GPUs[2].CUDA, n.GPUs[2].MIG, n.GPUs[0].CUDA)
	}
	if want := []string{"CUDA 0 = GPU 2 MIG-bbbb-2"}; !slices.Equal(n.MIG, want) || len(r.Warnings) != 0 {
		t.Errorf("MIG lines %q, warnings %q; want %q and none", n.MIG, r.Warnings, want)
	}
	// Without MIG entries, the MIG devices are not read at all.
	r = discover(t, srv, topotest.DGX(t).Root, Options{})
	if n := r.Nodes[0]; n.GPUs[2].CUDA != "?" || n.GPUs[1].CUDA != "1" || len(d.GetMaxMigDeviceCountCalls()) != 1 {
		t.Errorf("CUDA column %q, %d MIG count calls; want ? from GPU2 on and no more MIG calls", n.GPUs[2].CUDA, len(d.GetMaxMigDeviceCountCalls()))
	}
}

// GPUs joined by NVLinks directly (no NVSwitch), and a GPU the sysfs tree does not have.
func TestDirectNVLinksAndMissingGPU(t *testing.T) {
	t.Parallel()
	m := topotest.Machine{Level: func(i, j int) nvml.GpuTopologyLevel { return nvml.TOPOLOGY_SYSTEM },
		P2P: func(int, int, nvml.GpuP2PCapsIndex) nvml.GpuP2PStatus { return nvml.P2P_STATUS_OK }}
	for i, bus := range topotest.PCIeBoxGPUs {
		m.GPUs = append(m.GPUs, topotest.GPU{Bus: bus, Gen: 4, Width: 16, GenMax: 4, WidthMax: 16, MemClockMHz: 1512, BusWidthBits: 5120})
		if i < 2 {
			peer := topotest.PCIeBoxGPUs[1-i]
			for l := 0; l < 4; l++ {
				m.GPUs[i].NVLinks = append(m.GPUs[i].NVLinks, topotest.NVLink{Up: true, Remote: nvml.NVLINK_DEVICE_TYPE_GPU, RemoteBus: peer, Version: 4})
			}
		}
	}
	m.GPUs[3].Bus = "0000:e3:00.0"
	srv := topotest.Wire(topotest.PCIeA100(), m)
	r := discover(t, srv, topotest.PCIeBox(t).Root, Options{})
	if r.TopologyErr != nil {
		t.Fatal(r.TopologyErr)
	}
	if got := r.Nodes[0].Matrix[0][1]; got != "NV4" {
		t.Errorf("GPU0-GPU1 %s; want NV4", got)
	}
	var nvlinks []gpu.Link
	for _, l := range r.Topology.Nodes[0].Links {
		if l.Kind == "nvlink" {
			nvlinks = append(nvlinks, l)
		}
	}
	if want := []gpu.Link{{A: "gpu0", B: "gpu1", Kind: "nvlink", Lanes: 4, GBs: 100}}; !reflect.DeepEqual(nvlinks, want) {
		t.Errorf("NVLinks in the file %+v; want %+v", nvlinks, want)
	}
	if len(r.Topology.Nodes[0].Switches) != 1 {
		t.Errorf("switches %+v; want the one PCIe switch and no NVSwitch", r.Topology.Nodes[0].Switches)
	}
	want := "GPU 3 (0000:e3:00.0) is not in sysfs"
	if !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.HasPrefix(w, want) }) {
		t.Errorf("warnings %q; want one starting %q", r.Warnings, want)
	}
	if g := r.Nodes[0].GPUs[3]; g.NUMA != "N/A" || g.Affinity != "N/A" {
		t.Errorf("GPU3's NUMA %s, affinity %s; want N/A", g.NUMA, g.Affinity)
	}
}

// An NVLink version without a known bandwidth, or none at all, leaves the NVLinks out of the
// file, and says so.
func TestUnknownNVLinkVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version uint32
		ret     nvml.Return
		shown   string
		warning string
	}{
		{8, nvml.SUCCESS, "6.0", "GPU 0: NVLink version 6.0 has no known bandwidth, so the topology file leaves its NVLinks out"},
		{0, nvml.ERROR_NOT_SUPPORTED, "-", "GPU 0: NVML does not give its NVLink version, so the topology file leaves its NVLinks out"},
	} {
		srv := topotest.DGXH100()
		for i := range srv.Devices {
			device(srv, i).GetNvLinkVersionFunc = func(int) (uint32, nvml.Return) { return tc.version, tc.ret }
		}
		r := discover(t, srv, topotest.DGX(t).Root, Options{})
		if len(r.Warnings) != 8 || r.Warnings[0] != tc.warning {
			t.Errorf("warnings %q; want eight, the first %q", r.Warnings, tc.warning)
		}
		if got := r.Nodes[0].NVLinks[0]; got.Version != tc.shown || got.PerLinkGBs != 0 || got.Up != 18 {
			t.Errorf("NVLink row %+v; want 18 links up, version %s, no bandwidth", got, tc.shown)
		}
		if got, file := r.Nodes[0].Matrix[0][1], FromTopology(r.Topology, "").Nodes[0].Matrix[0][1]; got != "NV18" || file != "PIX" {
			t.Errorf("GPU0-GPU1 is %s, and %s in the file; want NV18 as NVML has it, and PIX (over PCIe) in the file", got, file)
		}
	}
}

// A PCIe switch whose link sysfs does not give takes the figures of the link below it.
func TestUnknownSwitchLink(t *testing.T) {
	t.Parallel()
	tree := topotest.PCIeBox(t)
	for _, f := range []string{"current_link_speed", "max_link_speed", "current_link_width", "max_link_width"} {
		if err := os.Remove(filepath.Join(tree.Root, "sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0", f)); err != nil {
			t.Fatal(err)
		}
	}
	r := discover(t, topotest.PCIeA100(), tree.Root, Options{})
	want := "PCIe link pcie-0000:01:00.0-cpu0: sysfs gives no speed or width, so the topology file gives it those of gpu0-pcie-0000:01:00.0 (Gen4 x16)"
	if !slices.Equal(r.Warnings[:1], []string{want}) || slices.Contains(r.Warnings[1:], want) {
		t.Errorf("warnings %q; want %q first and once", r.Warnings, want)
	}
	for _, l := range r.Topology.Nodes[0].Links {
		if l.A == "pcie-0000:01:00.0" && (l.Gen != 4 || l.Width != 16 || l.HostBridge != "pci0000:00") {
			t.Errorf("switch uplink %+v; want Gen4 x16 into host bridge pci0000:00", l)
		}
	}
}

// An older driver without some of the functions topo uses: they are not called (the mock fails the
// test if they are), NVLinks to GPUs are still found by their far end's bus id, and a GPU whose
// memory bandwidth is unknown cannot be written as a topology file.
func TestOlderDriver(t *testing.T) {
	t.Parallel()
	missing := map[string]bool{"nvmlDeviceGetNvLinkRemoteDeviceType": true, "nvmlDeviceGetMemoryBusWidth": true}
	m := topotest.Machine{Level: func(i, j int) nvml.GpuTopologyLevel { return nvml.TOPOLOGY_SYSTEM },
		P2P: func(int, int, nvml.GpuP2PCapsIndex) nvml.GpuP2PStatus { return nvml.P2P_STATUS_OK }}
	for i, bus := range topotest.PCIeBoxGPUs {
		m.GPUs = append(m.GPUs, topotest.GPU{Bus: bus, Gen: 4, Width: 16, GenMax: 4, WidthMax: 16, MemClockMHz: 1512, BusWidthBits: 5120})
		if i < 2 {
			m.GPUs[i].NVLinks = []topotest.NVLink{{Up: true, Remote: nvml.NVLINK_DEVICE_TYPE_GPU, RemoteBus: topotest.PCIeBoxGPUs[1-i], Version: 4}}
		}
	}
	srv := topotest.Wire(topotest.PCIeA100(), m)
	srv.LookupSymbolFunc = func(sym string) error {
		if missing[sym] {
			return errors.New("undefined symbol: " + sym)
		}
		return nil
	}
	for i := range srv.Devices {
		d := device(srv, i)
		d.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			t.Error("called nvmlDeviceGetNvLinkRemoteDeviceType, which the library lacks")
			return 0, nvml.ERROR_FUNCTION_NOT_FOUND
		}
		d.GetMemoryBusWidthFunc = func() (uint32, nvml.Return) {
			t.Error("called nvmlDeviceGetMemoryBusWidth, which the library lacks")
			return 0, nvml.ERROR_FUNCTION_NOT_FOUND
		}
	}
	r := discover(t, srv, topotest.PCIeBox(t).Root, Options{})
	if got := r.Nodes[0].Matrix[0][1]; got != "NV1" {
		t.Errorf("GPU0-GPU1 %s; want NV1, found by the far end's bus id", got)
	}
	want := "this machine cannot be written as a topology file: node pcie-box gpu gpu0: name, memory_bytes and memory_bandwidth_gbs must be set"
	if r.Topology != nil || r.TopologyErr == nil || r.TopologyErr.Error() != want || !slices.Contains(r.Warnings, want) {
		t.Errorf("topology %v, error %v, warnings %q; want no topology and %q", r.Topology != nil, r.TopologyErr, r.Warnings, want)
	}
}
