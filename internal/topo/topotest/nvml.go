//go:build cgo

package topotest

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// GPU is what the stubs make NVML say of one GPU, beside what go-nvml's mock already says (name,
// memory, compute capability, MIG mode).
type GPU struct {
	Bus                          string
	PState                       nvml.Pstates // performance state: P0 busy, P8 idle
	Gen, Width, GenMax, WidthMax int
	MemClockMHz, BusWidthBits    uint32
	Persistence                  bool
	NVLinks                      []NVLink
}

// NVLink is one NVLink of a GPU.
type NVLink struct {
	Up        bool
	Remote    nvml.IntNvLinkDeviceType
	RemoteBus string
	Version   uint32
}

// Machine is a whole machine's stubs: its GPUs, the common ancestor NVML reports for each pair,
// and the P2P status of each ordered pair.
type Machine struct {
	GPUs  []GPU
	Level func(i, j int) nvml.GpuTopologyLevel
	P2P   func(i, j int, c nvml.GpuP2PCapsIndex) nvml.GpuP2PStatus
}

// UUID is the fixed UUID the stubs give GPU i (the mocks draw random ones).
func UUID(i int) string { return fmt.Sprintf("GPU-%08x-1111-4222-8333-%012x", i, i) }

// Wire stubs the calls go-nvml's mock server lacks (PCI bus id, NVLinks, topology, P2P status,
// persistence mode, PCIe link, memory clock and bus width) with the machine's answers.
func Wire(srv *server.Server, m Machine) *server.Server {
	index := func(d nvml.Device) int { return d.(*server.Device).Index }
	for i, d := range srv.Devices {
		dev, g := d.(*server.Device), m.GPUs[i]
		dev.UUID = UUID(i)
		dev.PciBusID = g.Bus
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pciInfo(g.Bus), nvml.SUCCESS }
		dev.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) {
			if g.Persistence {
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		dev.GetPerformanceStateFunc = func() (nvml.Pstates, nvml.Return) { return g.PState, nvml.SUCCESS }
		dev.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return g.Gen, nvml.SUCCESS }
		dev.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return g.Width, nvml.SUCCESS }
		dev.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return g.GenMax, nvml.SUCCESS }
		dev.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return g.WidthMax, nvml.SUCCESS }
		dev.GetMaxClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
			if c != nvml.CLOCK_MEM {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return g.MemClockMHz, nvml.SUCCESS
		}
		dev.GetMemoryBusWidthFunc = func() (uint32, nvml.Return) { return g.BusWidthBits, nvml.SUCCESS }
		link := func(l int) (NVLink, nvml.Return) {
			if len(g.NVLinks) == 0 {
				return NVLink{}, nvml.ERROR_NOT_SUPPORTED
			}
			if l < 0 || l >= len(g.NVLinks) {
				return NVLink{}, nvml.ERROR_INVALID_ARGUMENT
			}
			return g.NVLinks[l], nvml.SUCCESS
		}
		dev.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
			x, ret := link(l)
			if x.Up {
				return nvml.FEATURE_ENABLED, ret
			}
			return nvml.FEATURE_DISABLED, ret
		}
		dev.GetNvLinkRemoteDeviceTypeFunc = func(l int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			x, ret := link(l)
			return x.Remote, ret
		}
		dev.GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
			x, ret := link(l)
			return pciInfo(x.RemoteBus), ret
		}
		dev.GetNvLinkVersionFunc = func(l int) (uint32, nvml.Return) {
			x, ret := link(l)
			return x.Version, ret
		}
		dev.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			return m.Level(i, index(other)), nvml.SUCCESS
		}
		dev.GetP2PStatusFunc = func(other nvml.Device, c nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			return m.P2P(i, index(other), c), nvml.SUCCESS
		}
	}
	return srv
}

// pciInfo is NVML's PciInfo for a bus id, written as NVML writes it: with an 8-digit domain.
func pciInfo(bus string) nvml.PciInfo {
	var p nvml.PciInfo
	for k, c := range "0000" + bus {
		p.BusId[k] = int8(c)
	}
	return p
}

// NVSwitchLinks are n NVLinks of one version to the DGX's NVSwitches, all up.
func NVSwitchLinks(n int, version uint32) []NVLink {
	links := make([]NVLink, n)
	for l := range links {
		links[l] = NVLink{Up: true, Remote: nvml.NVLINK_DEVICE_TYPE_SWITCH, RemoteBus: DGXNVSwitches[l*len(DGXNVSwitches)/n], Version: version}
	}
	return links
}

// dgxLevel is the common ancestor of GPUs i and j on the DGX tree: the same switch (two GPUs a
// switch), the same NUMA node (four a node), or across the sockets.
func dgxLevel(i, j int) nvml.GpuTopologyLevel {
	switch {
	case i/2 == j/2:
		return nvml.TOPOLOGY_SINGLE
	case i/4 == j/4:
		return nvml.TOPOLOGY_NODE
	}
	return nvml.TOPOLOGY_SYSTEM
}

func allOK(int, int, nvml.GpuP2PCapsIndex) nvml.GpuP2PStatus { return nvml.P2P_STATUS_OK }

func dgxGPUs(links int, version uint32, memClock uint32) []GPU {
	var g []GPU
	for _, bus := range DGXGPUs {
		g = append(g, GPU{Bus: bus, Gen: 5, Width: 16, GenMax: 5, WidthMax: 16, MemClockMHz: memClock, BusWidthBits: 5120,
			Persistence: true, NVLinks: NVSwitchLinks(links, version)})
	}
	return g
}

// DGXH100 is go-nvml's dgxh100 mock wired to the DGX tree: eight H100s, each with 18 NVLink 4.0
// links to the NVSwitches, on PCIe Gen5 x16, persistence mode on, P2P possible between all.
func DGXH100() *server.Server {
	return Wire(dgxh100.New(), Machine{GPUs: dgxGPUs(18, 6, 2619), Level: dgxLevel, P2P: allOK})
}

// DGXA100 is go-nvml's dgxa100 mock (eight A100 SXM4 40GB) wired to the DGX tree, with 12 NVLink
// 3.0 links a GPU.
func DGXA100() *server.Server {
	return Wire(dgxa100.New(), Machine{GPUs: dgxGPUs(12, 4, 1215), Level: dgxLevel, P2P: allOK})
}

// PCIeA100 is go-nvml's dgxa100 mock with four A100 PCIe 80GB, wired to the PCIe box: no NVLink;
// GPU1 is idle (P8) at Gen1, as idle GPUs are; GPU2 is busy (P0) at Gen1, and GPU3 at x8; P2P works between the GPUs of NUMA node 0 and not
// across the sockets (CNS).
func PCIeA100() *server.Server {
	var g []GPU
	for _, bus := range PCIeBoxGPUs {
		g = append(g, GPU{Bus: bus, Gen: 4, Width: 16, GenMax: 4, WidthMax: 16, MemClockMHz: 1512, BusWidthBits: 5120})
	}
	g[1].Gen, g[1].PState = 1, nvml.PSTATE_8
	g[2].Gen, g[3].Width = 1, 8
	level := func(i, j int) nvml.GpuTopologyLevel {
		switch {
		case i == 3 || j == 3:
			return nvml.TOPOLOGY_SYSTEM
		case i+j == 1:
			return nvml.TOPOLOGY_SINGLE
		}
		return nvml.TOPOLOGY_HOSTBRIDGE
	}
	p2p := func(i, j int, c nvml.GpuP2PCapsIndex) nvml.GpuP2PStatus {
		switch {
		case c == nvml.P2P_CAPS_INDEX_NVLINK || c == nvml.P2P_CAPS_INDEX_ATOMICS:
			return nvml.P2P_STATUS_NOT_SUPPORTED
		case i == 3 || j == 3:
			return nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED
		}
		return nvml.P2P_STATUS_OK
	}
	return Wire(dgxa100.NewWithGPUs(gpus.Multiple(4, gpus.A100_PCIE_80GB)...), Machine{GPUs: g, Level: level, P2P: p2p})
}
