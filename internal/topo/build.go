package topo

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpubench/gpubench/internal/gpu"
)

// gpuFacts is what NVML says of one GPU; zero values are unknown.
type gpuFacts struct {
	index                        int
	pstate                       int // performance state: 0 busy ... 15 idle; -1 unknown
	name, uuid, busID, cc        string
	memoryBytes                  int64
	memGBs                       float64 // memory bandwidth, from the memory clock and bus width
	persistence, mig             *bool
	gen, width, genMax, widthMax int
	links                        []nvlinkFacts
	migUUIDs                     []string // its MIG devices, read only when CUDA_VISIBLE_DEVICES names MIG devices
}

// nvlinkFacts is one NVLink of a GPU.
type nvlinkFacts struct {
	link      int
	up        bool
	remote    string // gpu, switch or cpu; "" when NVML cannot tell
	remoteBus string
	version   int // NVML's nvmlNvlinkVersion_t; 0 when unknown
}

// machine is what NVML says of the machine.
type machine struct {
	driver string
	gpus   []gpuFacts
	level  [][]string            // NVML's PCIe class of each pair of GPUs; "" when NVML cannot tell
	p2p    map[string][][]string // P2P status of each pair of GPUs, by capability ("read" always)
	notes  []string              // what NVML could not answer
}

// nvlinkVersion names NVML's NVLink version codes (nvmlNvlinkVersion_t), and nvlinkGBs gives the
// nominal bandwidth of one link of each version in each direction: NVLink 1.0 20 GB/s (Pascal),
// 2.0 and 2.2 25 (Volta), 3.0 25 (A100), 3.1 14.0625 (the sm86 bridge), 4.0 25 (Hopper), 5.0 50
// (Blackwell), as docs/model.md lists them. A version missing here has no known figure.
var (
	nvlinkVersion = map[int]string{1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}
	nvlinkGBs     = map[int]float64{1: 20, 2: 25, 3: 25, 4: 25, 5: 14.0625, 6: 25, 7: 50}
)

// assumedSMPGBs is the bandwidth a recorded topology gives the links between CPU sockets, which
// sysfs does not tell; the AMD presets' figure, and below the Intel presets' 96 GB/s.
const assumedSMPGBs = 64

var cpuList = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)

// builder turns NVML's facts and sysfs into a report.
type builder struct {
	r        sysReader
	m        *machine
	node     gpu.Node
	cpus     map[int]string  // NUMA node: CPU part id
	parts    map[string]bool // ids taken
	links    map[[2]string]bool
	warnings []string
}

func (b *builder) warn(format string, a ...any) {
	b.warnings = append(b.warnings, fmt.Sprintf(format, a...))
}

// build describes the machine NVML and sysfs show.
func build(m *machine, r sysReader, opt Options) *Report {
	b := &builder{r: r, m: m, node: gpu.Node{Hostname: r.hostname()}, cpus: map[int]string{},
		parts: map[string]bool{}, links: map[[2]string]bool{}}
	b.warnings = append(b.warnings, m.notes...)
	b.linksToGPUs()
	b.addCPUs()
	nics := r.nics()
	b.addGPUs()
	b.addNICs(nics)
	b.addNVLinks()
	for i := range b.node.CPUs {
		for j := i + 1; j < len(b.node.CPUs); j++ {
			b.node.Links = append(b.node.Links, gpu.Link{A: b.node.CPUs[i].ID, B: b.node.CPUs[j].ID, Kind: gpu.LinkSMP, GBs: assumedSMPGBs})
		}
	}
	p2p := b.p2pAll()
	b.nvlinkWarnings()
	b.nicWarnings(nics)

	nr := fromNode(&b.node, p2p == "all", "")
	for i, g := range m.gpus {
		nr.GPUs[i].Index = strconv.Itoa(g.index)
	}
	b.nvmlMatrix(nr)
	nr.NVLinks = b.nvlinkRows()
	for i, c := range nics {
		nr.NICs[i].BusID, nr.NICs[i].State = c.bus, orNA(c.state)
	}
	if opt.P2P != "" {
		nr.P2P = diagonal(m.p2p[opt.P2P])
	}
	col, migs, cudaWarns := cudaOrdinals(opt.VisibleDevices, opt.DeviceOrder, m.gpus)
	for i := range col {
		nr.GPUs[i].CUDA = col[i]
	}
	nr.MIG = migs
	b.warnings = append(b.warnings, cudaWarns...)

	rep := &Report{Source: "NVML, driver " + orNA(m.driver), Nodes: []*NodeReport{nr}, P2PCap: opt.P2P,
		Warnings: b.warnings, nodes: []gpu.Node{b.node}}
	rep.Topology, rep.TopologyErr = b.topology(p2p)
	if rep.TopologyErr != nil {
		rep.Warnings = append(rep.Warnings, rep.TopologyErr.Error())
	}
	if len(b.node.CPUs) > 1 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the topology file's smp links between CPUs carry an assumed %d GB/s (sysfs does not tell the bandwidth between sockets); edit them if you know better", assumedSMPGBs))
	}
	return rep
}

// linksToGPUs marks the NVLinks whose far end has a GPU's bus id as leading to that GPU when NVML
// does not say what they lead to (older drivers lack nvmlDeviceGetNvLinkRemoteDeviceType).
func (b *builder) linksToGPUs() {
	for i := range b.m.gpus {
		for k := range b.m.gpus[i].links {
			l := &b.m.gpus[i].links[k]
			for _, g := range b.m.gpus {
				if l.remote == "" && l.remoteBus != "" && l.remoteBus == g.busID {
					l.remote = "gpu"
				}
			}
		}
	}
}

// addCPUs adds one CPU part per NUMA node that has CPUs (on a Grace Hopper machine, GPU memory
// makes NUMA nodes of its own), or one for the machine when sysfs shows none.
func (b *builder) addCPUs() {
	var nodes []numaNode
	for _, n := range b.r.numaNodes() {
		if n.cpus != "" {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		info, _ := b.r.read("proc", "cpuinfo")
		nodes = []numaNode{{id: 0, model: parseCPUInfo(info)[0]}}
	}
	for _, n := range nodes {
		id := fmt.Sprintf("cpu%d", n.id)
		b.node.CPUs = append(b.node.CPUs, gpu.CPU{ID: id, Name: n.model, NUMANode: n.id})
		b.cpus[n.id] = id
		b.parts[id] = true
	}
}

// cpuFor is the CPU part of a NUMA node; what names the part that needs it, for a warning when the
// node is unknown.
func (b *builder) cpuFor(numa int, what string) string {
	if id, ok := b.cpus[numa]; ok {
		return id
	}
	first := b.node.CPUs[0].ID
	if len(b.node.CPUs) > 1 {
		b.warn("%s: its NUMA node is unknown, so the topology file places it under %s", what, first)
	}
	return first
}

func (b *builder) addGPUs() {
	for _, f := range b.m.gpus {
		id := fmt.Sprintf("gpu%d", f.index)
		g := gpu.GPU{ID: id, Name: f.name, UUID: f.uuid, PCIBusID: f.busID, MemoryBytes: f.memoryBytes,
			MemoryGBs: f.memGBs, ComputeCapability: f.cc, NUMANode: -1, PCIeGen: f.gen, PCIeWidth: f.width,
			PCIeGenMax: f.genMax, PCIeWidthMax: f.widthMax, Persistence: f.persistence, MIG: f.mig}
		dev, found := b.r.device(f.busID)
		if found {
			g.NUMANode = dev.numa
			if cpuList.MatchString(dev.localCPUs) {
				g.CPUAffinity = dev.localCPUs
			}
		}
		b.node.GPUs = append(b.node.GPUs, g)
		b.parts[id] = true
		what := fmt.Sprintf("GPU %d (%s)", f.index, orNA(f.busID))
		if f.width > 0 && f.widthMax > 0 && f.width < f.widthMax {
			b.warn("%s: its PCIe link is x%d, below the x%d it allows: check the card's seating and slot", what, f.width, f.widthMax)
		}
		// An idle GPU (performance state above P0) lowers its link speed to save power.
		switch low := f.gen > 0 && f.genMax > 0 && f.gen < f.genMax; {
		case low && f.pstate == 0:
			b.warn("%s: its PCIe link runs at Gen%d, below the Gen%d it allows, while busy (P0)", what, f.gen, f.genMax)
		case low && f.pstate < 0:
			b.warn("%s: its PCIe link runs at Gen%d, below the Gen%d it allows (NVML gives no performance state, and idle GPUs lower the link speed)", what, f.gen, f.genMax)
		}
		figs := linkFigures{gen: firstKnown(f.genMax, f.gen), width: firstKnown(f.width, f.widthMax)}
		if !found {
			cpu := b.node.CPUs[0].ID
			b.warn("%s is not in sysfs (%s): its PCIe placement, NUMA node and CPU affinity are unknown, and the topology file links it straight to %s",
				what, b.r.path("sys", "bus", "pci", "devices"), cpu)
			b.addLink(gpu.Link{A: id, B: cpu, Kind: gpu.LinkPCIe, Gen: figs.gen, Width: figs.width})
			continue
		}
		b.attach(id, what, dev, figs)
	}
}

func firstKnown(v ...int) int {
	for _, x := range v {
		if x > 0 {
			return x
		}
	}
	return 0
}

// addNICs adds the NICs with their PCIe placement. A NIC whose line rate is unknown (its link is
// down) is shown but left out of the topology file.
func (b *builder) addNICs(nics []nicFacts) {
	for _, c := range nics {
		id := c.name
		if !idOK(id) || b.parts[id] {
			id = "nic-" + c.bus
		}
		b.node.NICs = append(b.node.NICs, gpu.NIC{ID: id, Kind: c.kind, Gbps: c.gbps})
		b.parts[id] = true
		dev, found := b.r.device(c.bus)
		if !found {
			b.warn("NIC %s (%s) is not in sysfs' PCI tree: its place in the matrix is unknown", c.name, c.bus)
			continue
		}
		l := b.r.link(c.bus)
		b.attach(id, "NIC "+c.name, dev, linkFigures{gen: firstKnown(l.gen, l.genMax), width: firstKnown(l.width, l.widthMax)})
		b.checkSysfsLink("NIC "+c.name, c.bus, dev.chain)
	}
}

func idOK(id string) bool {
	return id != "" && strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-") == ""
}

// attach links a GPU or NIC up its PCIe chain: through each PCIe switch above it (a switch is its
// upstream port: every second bridge below the root port) to the CPU of its NUMA node, entering
// it at its host bridge. The endpoint's own link has the given figures; a switch's uplink has the
// figures sysfs gives its upstream port. A link whose figures are unknown takes those of the
// nearest known link below it (or above it), and says so; with none known the endpoint stays
// unlinked.
func (b *builder) attach(id, what string, dev pciDevice, endpoint linkFigures) {
	chain := dev.chain
	type hop struct {
		lower, upper string
		figs         linkFigures
		bus          string // the lower end's function, for sysfs figures; "" for the endpoint
		from         int    // the hop whose figures it takes, when its own are unknown; else -1
	}
	var usps []string
	for k := 1; k < len(chain)-1; k += 2 {
		usps = append(usps, chain[k])
	}
	var hops []hop
	lower := id
	for k := len(usps) - 1; k >= 0; k-- {
		sw := "pcie-" + usps[k]
		hops = append(hops, hop{lower: lower, upper: sw})
		if !b.parts[sw] {
			b.node.Switches = append(b.node.Switches, gpu.Switch{ID: sw, Kind: "pcie"})
			b.parts[sw] = true
		}
		lower = sw
	}
	hops = append(hops, hop{lower: lower, upper: b.cpuFor(dev.numa, what)})
	// The endpoint's link, then each switch's uplink from sysfs.
	hops[0].figs = endpoint
	for i := 1; i < len(hops); i++ {
		bus := strings.TrimPrefix(hops[i].lower, "pcie-")
		l := b.r.link(bus)
		hops[i].figs = linkFigures{gen: firstKnown(l.gen, l.genMax), width: firstKnown(l.width, l.widthMax)}
		hops[i].bus = bus
	}
	known := -1
	for i := range hops {
		if hops[i].figs.gen > 0 && hops[i].figs.width > 0 {
			known = i
			break
		}
	}
	if known < 0 {
		b.warn("%s: sysfs gives no PCIe link speed or width on its way to the CPU, so the topology file leaves it unlinked", what)
		return
	}
	for i := range hops {
		hops[i].from = -1
		if hops[i].figs.gen > 0 && hops[i].figs.width > 0 {
			known = i
			continue
		}
		hops[i].figs, hops[i].from = hops[known].figs, known
	}
	for i, h := range hops {
		l := gpu.Link{A: h.lower, B: h.upper, Kind: gpu.LinkPCIe, Gen: h.figs.gen, Width: h.figs.width}
		if i == len(hops)-1 {
			l.HostBridge = dev.hostBridge
		}
		if !b.addLink(l) {
			continue
		}
		if h.from >= 0 {
			b.warn("PCIe link %s-%s: sysfs gives no speed or width, so the topology file gives it those of %s-%s (Gen%d x%d)",
				h.lower, h.upper, hops[h.from].lower, hops[h.from].upper, h.figs.gen, h.figs.width)
		}
		if h.bus != "" {
			b.checkSysfsLink("switch "+h.lower, h.bus, chain)
		}
	}
}

// addLink adds a link once; it reports whether the link is new.
func (b *builder) addLink(l gpu.Link) bool {
	key := [2]string{l.A, l.B}
	if b.links[key] {
		return false
	}
	b.links[key] = true
	b.node.Links = append(b.node.Links, l)
	return true
}

// checkSysfsLink warns when the link above a PCI function runs below what both its ends allow.
func (b *builder) checkSysfsLink(name, bus string, chain []string) {
	parent := ""
	for i, c := range chain {
		if c == bus && i > 0 {
			parent = chain[i-1]
		}
	}
	l := b.r.link(bus)
	if parent == "" || l.gen == 0 || l.width == 0 {
		return
	}
	p := b.r.link(parent)
	gen, width := minKnown(l.genMax, p.genMax), minKnown(l.widthMax, p.widthMax)
	if gen > 0 && width > 0 && (l.gen < gen || l.width < width) {
		b.warn("%s: its PCIe link runs at Gen%d x%d, below the Gen%d x%d both its ends allow", name, l.gen, l.width, gen, width)
	}
}

func minKnown(a, b int) int {
	if a == 0 || b == 0 {
		return max(a, b)
	}
	return min(a, b)
}

// addNVLinks adds the NVLinks that are up: to one "nvswitch" part when they go to NVSwitches
// (with NVLink SHARP when every GPU on it has compute capability 9.0 or more), else between GPUs.
func (b *builder) addNVLinks() {
	nvls, switched := true, false
	for i, f := range b.m.gpus {
		per, ok := b.perLink(f)
		if !ok {
			continue
		}
		if n := b.switchLinks(i); n > 0 {
			switched = true
			b.node.Links = append(b.node.Links, gpu.Link{A: b.node.GPUs[i].ID, B: "nvswitch", Kind: gpu.LinkNVLink, Lanes: n, GBs: float64(n) * per})
			major, _, _ := strings.Cut(f.cc, ".")
			m, _ := strconv.Atoi(major)
			nvls = nvls && m >= 9
		}
		for j := i + 1; j < len(b.m.gpus); j++ {
			if n := max(b.directLinks(i, j), b.directLinks(j, i)); n > 0 {
				b.node.Links = append(b.node.Links, gpu.Link{A: b.node.GPUs[i].ID, B: b.node.GPUs[j].ID, Kind: gpu.LinkNVLink, Lanes: n, GBs: float64(n) * per})
			}
		}
	}
	if switched {
		b.node.Switches = append(b.node.Switches, gpu.Switch{ID: "nvswitch", Kind: "nvswitch", NVLS: nvls})
	}
}

// perLink is the nominal bandwidth of one of a GPU's NVLinks, by the version of its first link
// that is up; ok is false when it has no link up, or a version with no known figure.
func (b *builder) perLink(f gpuFacts) (float64, bool) {
	for _, l := range f.links {
		if !l.up {
			continue
		}
		gbs, ok := nvlinkGBs[l.version]
		switch {
		case l.version == 0:
			b.warn("GPU %d: NVML does not give its NVLink version, so the topology file leaves its NVLinks out", f.index)
		case !ok:
			b.warn("GPU %d: NVLink version %s has no known bandwidth, so the topology file leaves its NVLinks out", f.index, versionText(l.version))
		}
		return gbs, ok
	}
	return 0, false
}

func versionText(v int) string {
	if s, ok := nvlinkVersion[v]; ok {
		return s
	}
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("code %d", v)
}

// directLinks counts the NVLinks of GPU i that are up and end at GPU j.
func (b *builder) directLinks(i, j int) int {
	n := 0
	for _, l := range b.m.gpus[i].links {
		if l.up && l.remote == "gpu" && l.remoteBus != "" && l.remoteBus == b.m.gpus[j].busID {
			n++
		}
	}
	return n
}

// nvlinkRows lists each GPU's NVLinks from NVML, grouped by what they lead to.
func (b *builder) nvlinkRows() []NVLinkRow {
	var rows []NVLinkRow
	for i, f := range b.m.gpus {
		byRemote := map[string]*NVLinkRow{}
		var order []string
		for _, l := range f.links {
			remote := b.remoteName(l)
			r, ok := byRemote[remote]
			if !ok {
				r = &NVLinkRow{GPU: i, Remote: remote, Version: versionText(l.version), PerLinkGBs: nvlinkGBs[l.version]}
				byRemote[remote] = r
				order = append(order, remote)
			}
			r.Links++
			if l.up {
				r.Up++
			} else {
				r.Down = append(r.Down, l.link)
			}
		}
		for _, remote := range order {
			r := byRemote[remote]
			r.TotalGBs = float64(r.Up) * r.PerLinkGBs
			rows = append(rows, *r)
		}
	}
	return rows
}

// remoteName is the part an NVLink leads to: nvswitch, gpuN, cpu (an IBM NPU), or unknown.
func (b *builder) remoteName(l nvlinkFacts) string {
	switch l.remote {
	case "switch":
		return "nvswitch"
	case "cpu":
		return "cpu"
	case "gpu":
		for _, g := range b.m.gpus {
			if g.busID == l.remoteBus {
				return fmt.Sprintf("gpu%d", g.index)
			}
		}
	}
	return "unknown"
}

// nvlinkWarnings flags each NVLink that is down on one GPU while other GPUs have that link up.
func (b *builder) nvlinkWarnings() {
	upSomewhere := map[int]bool{}
	for _, f := range b.m.gpus {
		for _, l := range f.links {
			upSomewhere[l.link] = upSomewhere[l.link] || l.up
		}
	}
	for _, f := range b.m.gpus {
		var down []int
		for _, l := range f.links {
			if !l.up && upSomewhere[l.link] {
				down = append(down, l.link)
			}
		}
		switch {
		case len(down) == 1:
			b.warn("GPU %d: NVLink %d is down while other GPUs have their link %d up", f.index, down[0], down[0])
		case len(down) > 1:
			b.warn("GPU %d: NVLinks %s are down while other GPUs have those links up", f.index, joinInts(down))
		}
	}
}

// nicWarnings flags an RDMA NIC that is down while other RDMA NICs of its kind are up (a plain
// Ethernet port being up says nothing about the fabric).
func (b *builder) nicWarnings(nics []nicFacts) {
	up := map[string]bool{}
	for _, c := range nics {
		up[c.kind] = up[c.kind] || c.rdma && c.state == "up"
	}
	for _, c := range nics {
		if c.state == "down" && up[c.kind] && c.rdma {
			b.warn("NIC %s (%s) is down while other %s NICs are up", c.name, c.bus, c.kind)
		}
	}
}

// p2pAll is the topology's p2p: all when NVML says every pair of GPUs can read from each other, or
// when it has no read matrix at all; a pair it could not answer for (U) counts as unable. Otherwise
// none, with a warning naming the pairs that cannot.
func (b *builder) p2pAll() string {
	read, ok := b.m.p2p["read"]
	if !ok {
		return "all"
	}
	var bad []string
	pairs := 0
	for i := range read {
		for j := range read[i] {
			if i == j {
				continue
			}
			pairs++
			if read[i][j] != "OK" {
				bad = append(bad, fmt.Sprintf("GPU%d-GPU%d %s", b.m.gpus[i].index, b.m.gpus[j].index, read[i][j]))
			}
		}
	}
	if len(bad) == 0 {
		return "all"
	}
	b.warn("P2P reads are not possible for %d of %d ordered GPU pairs (%s): their traffic goes through host memory, and the topology file says p2p none",
		len(bad), pairs, firstFew(bad))
	return "none"
}

// nvmlMatrix puts NVML's own view into the matrix between GPUs: NV# for the NVLinks that are up
// (also those the topology file leaves out for want of a bandwidth), else NVML's PCIe class,
// with a warning where it differs from the sysfs tree the topology file records.
func (b *builder) nvmlMatrix(nr *NodeReport) {
	var differ []string
	for i := range b.m.gpus {
		for j := i + 1; j < len(b.m.gpus); j++ {
			if n := b.nvlinkCount(i, j); n > 0 {
				nr.Matrix[i][j], nr.Matrix[j][i] = nvText(n, true), nvText(n, true)
				continue
			}
			nvml, fromTree := b.m.level[i][j], nr.Matrix[i][j]
			if nvml == "" || nvml == fromTree {
				continue
			}
			differ = append(differ, fmt.Sprintf("GPU%d-GPU%d NVML %s, sysfs %s", b.m.gpus[i].index, b.m.gpus[j].index, nvml, fromTree))
			nr.Matrix[i][j], nr.Matrix[j][i] = nvml, nvml
		}
	}
	if len(differ) > 0 {
		b.warn("NVML and the sysfs PCIe tree disagree on %d GPU pairs (%s): the matrix shows NVML's view, the topology file the tree's", len(differ), firstFew(differ))
	}
}

// nvlinkCount is NV# between GPUs i and j as NVML has it: the links that are up joining them, and,
// when both reach NVSwitches, the fewer of their links that are up to them.
func (b *builder) nvlinkCount(i, j int) int {
	return max(b.directLinks(i, j), b.directLinks(j, i)) + min(b.switchLinks(i), b.switchLinks(j))
}

// switchLinks counts the NVLinks of GPU i that are up and end at an NVSwitch.
func (b *builder) switchLinks(i int) int {
	n := 0
	for _, l := range b.m.gpus[i].links {
		if l.up && l.remote == "switch" {
			n++
		}
	}
	return n
}

// firstFew joins the first three items, and says when there are more.
func firstFew(items []string) string {
	if len(items) > 3 {
		return strings.Join(items[:3], ", ") + ", ..."
	}
	return strings.Join(items, ", ")
}

// topology is the machine as a topology file: NICs whose line rate is unknown are left out.
func (b *builder) topology(p2p string) (*gpu.Topology, error) {
	n := b.node
	n.NICs, n.Links = nil, nil
	dropped := map[string]bool{}
	for _, c := range b.node.NICs {
		if c.Gbps > 0 {
			n.NICs = append(n.NICs, c)
		} else {
			dropped[c.ID] = true
		}
	}
	for _, l := range b.node.Links {
		if !dropped[l.A] && !dropped[l.B] {
			n.Links = append(n.Links, l)
		}
	}
	desc := fmt.Sprintf("%s as gpubench topo read it through NVML (driver %s) and sysfs", n.Hostname, orNA(b.m.driver))
	if len(n.CPUs) > 1 {
		desc += fmt.Sprintf("; the %d GB/s of the smp links between CPUs is assumed (sysfs does not tell it)", assumedSMPGBs)
	}
	t := &gpu.Topology{
		Format:      gpu.TopologyFormat,
		Name:        n.Hostname,
		Description: desc,
		P2P:         p2p,
		Nodes:       []gpu.Node{n},
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("this machine cannot be written as a topology file: %w", err)
	}
	return t, nil
}

// diagonal returns a P2P matrix with X between a GPU and itself.
func diagonal(m [][]string) [][]string {
	out := make([][]string, len(m))
	for i := range m {
		out[i] = append([]string(nil), m[i]...)
		out[i][i] = "X"
	}
	return out
}
