package plan

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpubench/gpubench/internal/gpu"
)

// Machine is what planning needs of a topology: its GPUs, how they group into nodes and NVLink
// domains, and one GPU's memory and throughput.
type Machine struct {
	Topo        *gpu.Topology `json:"-"`
	Name        string        `json:"topology"`
	GPUs        int           `json:"gpus"`
	Nodes       int           `json:"nodes"`
	GPUsPerNode int           `json:"gpus_per_node"`
	// DomainGPUs is the GPUs of one NVLink domain: a node, or a rack of nodes on one NVLink
	// fabric (GB200 NVL72). A PCIe machine's domain is its node.
	DomainGPUs  int     `json:"nvlink_domain_gpus"`
	GPUName     string  `json:"gpu"`
	MemoryBytes int64   `json:"memory_bytes"` // the least of any GPU
	MemoryGBs   float64 `json:"memory_bandwidth_gbs"`
	PeakTFLOPS  float64 `json:"peak_tflops"` // dense, at the setup's precision
	PeakSource  string  `json:"peak_source"`
	// Fabric is what joins a node's GPUs: nvlink, pcie (with P2P), pcie-host (without), or none
	// for one GPU.
	Fabric string `json:"fabric"`
	// Joinable: the node has a NIC, so more of them can form a larger machine.
	Joinable bool `json:"joinable"`

	spans map[group][2]int // span's answers
}

// NewMachine describes topology t for a setup's precision. A GPU whose throughput the table does
// not hold needs s.PeakTFLOPS; FP8 on a GPU without FP8 tensor cores is refused.
func NewMachine(t *gpu.Topology, s Setup) (*Machine, error) {
	n := t.NumGPUs()
	if n == 0 {
		return nil, fmt.Errorf("topology %s has no GPU", t.Name)
	}
	g, node := t.GPU(0)
	m := &Machine{Topo: t, Name: t.Name, GPUs: n, Nodes: t.NodeOf(n-1) + 1, GPUName: g.Name,
		MemoryBytes: g.MemoryBytes, MemoryGBs: g.MemoryGBs, Joinable: len(node.NICs) > 0}
	for i := range n {
		gi, _ := t.GPU(i)
		m.MemoryBytes = min(m.MemoryBytes, gi.MemoryBytes)
		if t.NodeOf(i) == 0 {
			m.GPUsPerNode++
		}
		if t.DomainOf(i) == t.DomainOf(0) {
			m.DomainGPUs++
		}
	}
	m.Fabric = m.link(line(0, 1, m.GPUsPerNode))
	if m.MemoryBytes <= 0 {
		return nil, fmt.Errorf("topology %s: GPU %s states no memory_bytes", t.Name, g.Name)
	}
	peak, known := PeakOf(g.Name)
	switch {
	case s.PeakTFLOPS > 0:
		m.PeakTFLOPS, m.PeakSource = s.PeakTFLOPS, "--peak-tflops"
	case !known:
		return nil, fmt.Errorf("no published throughput for %s in gpubench's table: give --peak-tflops (dense, %s)", g.Name, s.Precision)
	case s.Precision == "fp8" && peak.FP8 == 0:
		return nil, fmt.Errorf("precision fp8: %s has no FP8 tensor cores; use bf16", g.Name)
	case s.Precision == "fp8":
		m.PeakTFLOPS, m.PeakSource = peak.FP8, peak.Source
	default:
		m.PeakTFLOPS, m.PeakSource = peak.BF16, peak.Source
	}
	return m, nil
}

// group is a communicator's GPUs: n GPUs first, first+stride, ..., and, when outer is above 1,
// that run repeated outer times, outerStride apart. Megatron numbers ranks TP fastest, then CP,
// then DP (with EP a block of consecutive DP ranks), then PP; GPUs are numbered node by node, so a
// TP group is consecutive GPUs of a node and a DP group is strided across nodes.
type group struct{ first, stride, n, outerStride, outer int }

// line is a group of n GPUs stride apart.
func line(first, stride, n int) group { return group{first, stride, n, 0, 1} }

// size is the group's GPUs.
func (g group) size() int { return g.n * g.outer }

func (g group) devs() []int {
	d := make([]int, 0, g.size())
	for o := range g.outer {
		for i := range g.n {
			d = append(d, g.first+o*g.outerStride+i*g.stride)
		}
	}
	return d
}

// text writes the group's GPUs short: "0-7", "0,8", "0,8,...,248".
func (g group) text() string {
	d := g.devs()
	switch {
	case len(d) == 1:
		return strconv.Itoa(d[0])
	case g.outer == 1 && g.stride == 1:
		return fmt.Sprintf("%d-%d", d[0], d[len(d)-1])
	case len(d) <= 3:
		var parts []string
		for _, x := range d {
			parts = append(parts, strconv.Itoa(x))
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprintf("%d,%d,...,%d", d[0], d[1], d[len(d)-1])
}

// span is how many nodes and NVLink domains a group's GPUs are on.
func (m *Machine) span(g group) (nodes, domains int) {
	if s, ok := m.spans[g]; ok {
		return s[0], s[1]
	}
	seenN, seenD := map[int]bool{}, map[int]bool{}
	for _, d := range g.devs() {
		seenN[m.Topo.NodeOf(d)] = true
		seenD[m.Topo.DomainOf(d)] = true
	}
	if m.spans == nil {
		m.spans = map[group][2]int{}
	}
	m.spans[g] = [2]int{len(seenN), len(seenD)}
	return len(seenN), len(seenD)
}

// link names what a group's traffic crosses: the network's kind when it spans NVLink domains,
// else nvlink, pcie, or pcie-host (through host memory: no P2P).
func (m *Machine) link(g group) string {
	if g.size() < 2 {
		return "none"
	}
	if _, domains := m.span(g); domains > 1 {
		if m.Topo.Network != nil && m.Topo.Network.Kind != "" {
			return m.Topo.Network.Kind
		}
		return "net"
	}
	d := g.devs()
	switch m.Topo.Route(d[0], d[1]).Type {
	case gpu.PathNVL:
		return "nvlink"
	case gpu.PathSHM:
		return "pcie-host"
	}
	return "pcie"
}
