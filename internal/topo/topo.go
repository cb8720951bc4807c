// Package topo reports what is in a multi-GPU machine and how it is wired: the GPUs, their NVLinks
// and P2P status (through NVML), the PCIe tree, NUMA nodes and NICs (through sysfs), as a
// gpu.Topology that the simulator can run, and as the tables `gpubench topo` prints. The same
// tables are printed for a simulated machine, from its topology alone.
//
// NVML is read through go-nvml, loaded by internal/nvmlib; go-nvml needs cgo, so that code is in
// nvml_cgo.go, and built without cgo Discover reports that NVML is unavailable (nvml_nocgo.go).
// Everything else (sysfs, the matrix, the renderers) is plain Go.
package topo

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/nvmlib"
)

// ErrUnavailable is returned (wrapped, with the reason and how to fix it) when NVML cannot be used:
// no library, no driver, no permission, no GPU, or a build without cgo.
var ErrUnavailable = nvmlib.ErrUnavailable

// P2PCaps are the capabilities --p2p reports, as nvidia-smi topo -p2p names them.
var P2PCaps = []string{"read", "write", "nvlink", "atomics"}

// Options says what Discover reads and reports.
type Options struct {
	Root           string // directory that holds sys/ and proc/; "" is "/"
	NVMLLib        string // the NVML library to load; "" is libnvidia-ml.so.1
	P2P            string // one of P2PCaps to report as a matrix, or ""
	VisibleDevices VisibleDevices
	DeviceOrder    string // CUDA_DEVICE_ORDER
}

// Report is what `gpubench topo` prints, one section per node.
type Report struct {
	Source   string        // where the facts come from: "NVML, driver 550.54.15" or "simulator"
	Topology *gpu.Topology // the machine as a topology file; nil when it cannot be written
	// TopologyErr says why the machine cannot be written as a topology file.
	TopologyErr error
	Nodes       []*NodeReport
	P2PCap      string   // the capability of each node's P2P matrix, or ""
	Warnings    []string // anything that looks wrong
	Notes       []string // assumptions in the topology file

	nodes []gpu.Node // every part found, for the graph; nil: Topology's nodes
}

// NodeReport is one machine.
type NodeReport struct {
	Hostname string
	GPUs     []GPURow
	NICs     []NICRow
	Matrix   [][]string // connection matrix over the GPUs, then the NICs
	P2P      [][]string // P2P status between GPUs for Report.P2PCap; nil without one
	NVLinks  []NVLinkRow
	MIG      []string // the MIG devices CUDA sees: "CUDA 0 = GPU 3 MIG-..."
}

// GPURow is one GPU as printed; unknown facts are "N/A".
type GPURow struct {
	Index, CUDA, Name, UUID, BusID, Memory, CC, NUMA, Affinity, Persistence, MIG, PCIe, PCIeMax string
}

// NICRow is one NIC as printed.
type NICRow struct {
	Name, Kind, Speed, BusID, State string
}

// NVLinkRow is a GPU's NVLinks to one remote device (NVSwitch, a GPU, a CPU).
type NVLinkRow struct {
	GPU        int
	Remote     string
	Links, Up  int
	Down       []int   // the numbers of the links that are down
	Version    string  // NVLink version, "-" when unknown
	PerLinkGBs float64 // nominal GB/s per link and direction; 0 when unknown
	TotalGBs   float64 // nominal GB/s of the links that are up, per direction; 0 when unknown
}

// FromTopology describes a topology (a simulator preset or a recorded file) the way Discover
// describes a real machine.
func FromTopology(t *gpu.Topology, p2pCap string) *Report {
	r := &Report{Source: "simulator", Topology: t, P2PCap: p2pCap}
	device := 0
	for ni := range t.Nodes {
		nr := fromNode(&t.Nodes[ni], t.P2P != "none", p2pCap)
		for i := range nr.GPUs {
			nr.GPUs[i].CUDA = strconv.Itoa(device)
			device++
		}
		r.Nodes = append(r.Nodes, nr)
	}
	return r
}

// fromNode describes one node from its parts and links alone. p2p says whether its GPUs may use
// peer-to-peer at all.
func fromNode(n *gpu.Node, p2p bool, p2pCap string) *NodeReport {
	g := newGraph(n)
	nr := &NodeReport{Hostname: n.Hostname}
	for i, x := range n.GPUs {
		gen, width := g.pcieFigures(x.ID)
		now, max := pcieText(x.PCIeGen, x.PCIeWidth), pcieText(x.PCIeGenMax, x.PCIeWidthMax)
		if x.PCIeGen == 0 && x.PCIeGenMax == 0 {
			now, max = pcieText(gen, width), pcieText(gen, width)
		}
		nr.GPUs = append(nr.GPUs, GPURow{
			Index: strconv.Itoa(i), CUDA: strconv.Itoa(i), Name: orNA(x.Name), UUID: orNA(x.UUID),
			BusID: orNA(x.PCIBusID), Memory: mib(x.MemoryBytes), CC: orNA(x.ComputeCapability),
			NUMA: numaText(x.NUMANode), Affinity: orNA(x.CPUAffinity),
			Persistence: onOff(x.Persistence), MIG: onOff(x.MIG), PCIe: now, PCIeMax: max,
		})
		nr.NVLinks = append(nr.NVLinks, g.nvlinkRows(i)...)
	}
	for _, c := range n.NICs {
		nr.NICs = append(nr.NICs, NICRow{Name: c.ID, Kind: c.Kind, Speed: gbpsText(c.Gbps), BusID: "N/A", State: "N/A"})
	}
	nr.Matrix = g.matrix()
	if p2pCap != "" {
		nr.P2P = g.p2pMatrix(p2p, p2pCap)
	}
	return nr
}

func orNA(s string) string {
	if s == "" {
		return "N/A"
	}
	return s
}

func mib(bytes int64) string {
	if bytes <= 0 {
		return "N/A"
	}
	return fmt.Sprintf("%d MiB", bytes>>20)
}

func numaText(n int) string {
	if n < 0 {
		return "N/A"
	}
	return strconv.Itoa(n)
}

func onOff(b *bool) string {
	switch {
	case b == nil:
		return "N/A"
	case *b:
		return "on"
	}
	return "off"
}

func pcieText(gen, width int) string {
	if gen <= 0 || width <= 0 {
		return "N/A"
	}
	return fmt.Sprintf("Gen%d x%d", gen, width)
}

func gbpsText(g float64) string {
	if g <= 0 {
		return "N/A"
	}
	return strconv.FormatFloat(g, 'f', -1, 64) + " Gb/s"
}

// gbsText formats a bandwidth in GB/s without trailing zeros.
func gbsText(g float64) string {
	return strconv.FormatFloat(g, 'f', -1, 64)
}

// joinInts writes 3, 7, 9 as "3,7,9".
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
