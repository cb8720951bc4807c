package topo

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gpubench/gpubench/internal/input"
)

// sysReader reads sysfs and /proc under a root directory: "/" on a real machine, a fixture tree
// in tests. Whatever it cannot read is left unknown.
type sysReader struct{ root string }

func (r sysReader) path(p ...string) string {
	return filepath.Join(append([]string{r.root}, p...)...)
}

func (r sysReader) read(p ...string) (string, bool) {
	b, err := input.ReadFile(r.path(p...), input.SysfsLimit)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// hostname is the machine's name as a topology id (letters, digits and _.:-).
func (r sysReader) hostname() string {
	h, _ := r.read("proc", "sys", "kernel", "hostname")
	h = strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_.:-", c) {
			return c
		}
		return '-'
	}, h)
	if h == "" {
		return "host"
	}
	return h
}

// numaNode is one NUMA node: its CPUs (a Linux CPU list) and their model name.
type numaNode struct {
	id    int
	cpus  string
	model string
}

// numaNodes lists /sys/devices/system/node/node*, with each node's CPU model from /proc/cpuinfo.
func (r sysReader) numaNodes() []numaNode {
	entries, _ := os.ReadDir(r.path("sys", "devices", "system", "node"))
	info, _ := r.read("proc", "cpuinfo")
	models := parseCPUInfo(info)
	var nodes []numaNode
	for _, e := range entries {
		id, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "node"))
		if err != nil || !strings.HasPrefix(e.Name(), "node") || id < 0 {
			continue
		}
		n := numaNode{id: id}
		n.cpus, _ = r.read("sys", "devices", "system", "node", e.Name(), "cpulist")
		if c, ok := firstCPU(n.cpus); ok {
			n.model = models[c]
		}
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(a, b int) bool { return nodes[a].id < nodes[b].id })
	return nodes
}

// pciDevice is where a PCI function sits in the PCIe tree.
type pciDevice struct {
	bus        string   // its bus id, 0000:18:00.0
	hostBridge string   // the host bridge above it, as /sys/devices names it: pci0000:17
	chain      []string // bus ids from the root port down to the function itself
	numa       int      // NUMA node, -1 when unknown
	localCPUs  string   // CPUs local to it, a Linux CPU list
}

// device finds a PCI function in the sysfs tree: /sys/bus/pci/devices/BUS links to
// /sys/devices/pciDDDD:BB/ROOTPORT/.../BUS.
func (r sysReader) device(bus string) (pciDevice, bool) {
	d := pciDevice{bus: bus, numa: -1}
	target, err := filepath.EvalSymlinks(r.path("sys", "bus", "pci", "devices", bus))
	if err != nil {
		return d, false
	}
	top, err := filepath.EvalSymlinks(r.path("sys", "devices"))
	if err != nil {
		return d, false
	}
	rel, err := filepath.Rel(top, target)
	if err != nil {
		return d, false
	}
	for _, c := range strings.Split(filepath.ToSlash(rel), "/") {
		if strings.HasPrefix(c, "pci") {
			d.hostBridge, d.chain = c, nil // a host bridge, or one behind a device (Intel VMD)
		} else if b, ok := parseBusID(c); ok {
			d.chain = append(d.chain, b)
		}
	}
	if d.hostBridge == "" || len(d.chain) == 0 || d.chain[len(d.chain)-1] != bus {
		return d, false
	}
	if s, ok := r.read("sys", "bus", "pci", "devices", bus, "numa_node"); ok {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			d.numa = n
		}
	}
	d.localCPUs, _ = r.read("sys", "bus", "pci", "devices", bus, "local_cpulist")
	return d, true
}

// PCIChain is where a PCI function sits in the PCIe tree under root (a directory holding sys/):
// the bus ids from its root port down to the function itself; false when sysfs does not show it.
func PCIChain(root, bus string) ([]string, bool) {
	d, ok := sysReader{root: root}.device(bus)
	return d.chain, ok
}

// ParseBusID writes a PCI address, in NVML's form or sysfs's, as sysfs does: 0000:18:00.0.
func ParseBusID(s string) (string, bool) { return parseBusID(s) }

// linkFigures are a PCIe link's generation and width, now and at most (0: unknown).
type linkFigures struct{ gen, width, genMax, widthMax int }

// link reads the figures of the link above a PCI function.
func (r sysReader) link(bus string) linkFigures {
	attr := func(name string) string {
		s, _ := r.read("sys", "bus", "pci", "devices", bus, name)
		return s
	}
	return linkFigures{
		gen:      parseLinkSpeed(attr("current_link_speed")),
		width:    parseLinkWidth(attr("current_link_width")),
		genMax:   parseLinkSpeed(attr("max_link_speed")),
		widthMax: parseLinkWidth(attr("max_link_width")),
	}
}

// nicFacts is a physical network adapter port: an RDMA device from /sys/class/infiniband
// (InfiniBand, or Ethernet for RoCE), or a network interface from /sys/class/net on a PCI function
// that has no RDMA device.
type nicFacts struct {
	name  string
	kind  string  // infiniband or ethernet
	gbps  float64 // line rate; 0 when unknown (the link is down)
	state string  // up, down, or "" when unknown
	bus   string  // its PCI function
	rdma  bool    // an RDMA device (InfiniBand or RoCE)
}

// nics lists the machine's NICs: RDMA devices first, then other interfaces, each in name order.
// Virtual interfaces (no PCI device) and SR-IOV virtual functions are left out.
func (r sysReader) nics() []nicFacts {
	var out []nicFacts
	taken := map[string]bool{}
	for _, name := range r.classMembers("infiniband") {
		bus, ok := r.pciFunction("infiniband", name)
		if !ok {
			continue
		}
		ports, _ := os.ReadDir(r.path("sys", "class", "infiniband", name, "ports"))
		if len(ports) == 0 {
			continue
		}
		port := ports[0].Name()
		layer, _ := r.read("sys", "class", "infiniband", name, "ports", port, "link_layer")
		state, _ := r.read("sys", "class", "infiniband", name, "ports", port, "state")
		rate, _ := r.read("sys", "class", "infiniband", name, "ports", port, "rate")
		n := nicFacts{name: name, kind: "infiniband", bus: bus, rdma: true}
		if strings.EqualFold(layer, "Ethernet") {
			n.kind = "ethernet"
		}
		switch {
		case strings.HasSuffix(state, "ACTIVE"):
			n.state, n.gbps = "up", parseIBRate(rate)
		case state != "":
			n.state = "down"
		}
		taken[bus] = true
		out = append(out, n)
	}
	for _, name := range r.classMembers("net") {
		bus, ok := r.pciFunction("net", name)
		if !ok || taken[bus] {
			continue
		}
		n := nicFacts{name: name, kind: "ethernet", bus: bus}
		switch s, _ := r.read("sys", "class", "net", name, "operstate"); s {
		case "up":
			n.state = "up"
		case "down", "lowerlayerdown", "notpresent":
			n.state = "down"
		}
		if n.state != "down" { // some drivers leave operstate "unknown" on a working link
			speed, _ := r.read("sys", "class", "net", name, "speed")
			n.gbps = parseNetSpeed(speed)
		}
		taken[bus] = true
		out = append(out, n)
	}
	return out
}

// classMembers lists /sys/class/CLASS in natural name order (mlx5_2 before mlx5_10).
func (r sysReader) classMembers(class string) []string {
	entries, _ := os.ReadDir(r.path("sys", "class", class))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Slice(names, func(a, b int) bool { return naturalLess(names[a], names[b]) })
	return names
}

// pciFunction is the PCI function behind /sys/class/CLASS/NAME/device, unless it is an SR-IOV
// virtual function or not on PCI.
func (r sysReader) pciFunction(class, name string) (string, bool) {
	dev, err := filepath.EvalSymlinks(r.path("sys", "class", class, name, "device"))
	if err != nil {
		return "", false
	}
	if _, err := os.Lstat(filepath.Join(dev, "physfn")); err == nil {
		return "", false
	}
	return parseBusID(filepath.Base(dev))
}

// naturalLess orders names that differ only in a trailing number by that number (mlx5_2 before
// mlx5_10), and other names as strings.
func naturalLess(a, b string) bool {
	pa, na := trailingNumber(a)
	pb, nb := trailingNumber(b)
	if pa != pb || na == nb {
		return a < b
	}
	return na < nb
}

// trailingNumber splits "mlx5_10" into "mlx5_" and 10 (-1 when there is no number).
func trailingNumber(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' && len(s)-i < 9 {
		i--
	}
	n, err := strconv.Atoi(s[i:])
	if err != nil {
		return s, -1
	}
	return s[:i], n
}

func digitRun(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// parseBusID reads a PCI address, DOMAIN:BUS:DEVICE.FUNCTION in hex (NVML writes an 8-digit
// domain, sysfs a 4-digit one; BUS:DEVICE.FUNCTION alone is domain 0), and writes it as sysfs
// does: 0000:18:00.0.
func parseBusID(s string) (string, bool) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return "", false
	}
	devFn := strings.Split(parts[2], ".")
	if len(devFn) != 2 {
		return "", false
	}
	var v [4]uint64
	for i, f := range []struct {
		s   string
		max uint64
	}{{parts[0], 0xffffffff}, {parts[1], 0xff}, {devFn[0], 0x1f}, {devFn[1], 7}} {
		if f.s == "" || len(f.s) > 8 || strings.Trim(f.s, "0123456789abcdefABCDEF") != "" {
			return "", false
		}
		x, err := strconv.ParseUint(f.s, 16, 64)
		if err != nil || x > f.max {
			return "", false
		}
		v[i] = x
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", v[0], v[1], v[2], v[3]), true
}

// pcieGenByRate maps a link's transfer rate (GT/s) to its PCIe generation.
var pcieGenByRate = map[string]int{"2.5": 1, "5": 2, "5.0": 2, "8": 3, "8.0": 3, "16": 4, "16.0": 4, "32": 5, "32.0": 5, "64": 6, "64.0": 6}

// parseLinkSpeed reads sysfs's current_link_speed or max_link_speed ("16.0 GT/s PCIe", or
// "8 GT/s" from older kernels) as a PCIe generation; 0 when unknown.
func parseLinkSpeed(s string) int {
	f := strings.Fields(s)
	if len(f) < 2 || f[1] != "GT/s" {
		return 0
	}
	return pcieGenByRate[f[0]]
}

// parseLinkWidth reads sysfs's current_link_width or max_link_width; 0 when unknown.
func parseLinkWidth(s string) int {
	w, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || w < 1 || w > 32 {
		return 0
	}
	return w
}

// parseIBRate reads an RDMA port's rate ("400 Gb/sec (4X NDR)") in Gb/s; 0 when unknown.
func parseIBRate(s string) float64 {
	f := strings.Fields(s)
	if len(f) < 2 || f[1] != "Gb/sec" {
		return 0
	}
	return rateInRange(strconv.ParseFloat(f[0], 64))
}

// parseNetSpeed reads a network interface's speed (Mb/s; -1 or empty when down) in Gb/s.
func parseNetSpeed(s string) float64 {
	mbps, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	return rateInRange(mbps/1000, err)
}

func rateInRange(gbps float64, err error) float64 {
	if err != nil || !(gbps > 0 && gbps < 1e6) {
		return 0
	}
	return gbps
}

// parseCPUInfo maps each processor in /proc/cpuinfo to its model name.
func parseCPUInfo(s string) map[int]string {
	models := map[int]string{}
	cpu := -1
	for _, line := range strings.Split(s, "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(key) {
		case "processor":
			n, err := strconv.Atoi(strings.TrimSpace(value))
			if err != nil || n < 0 {
				n = -1
			}
			cpu = n
		case "model name":
			if cpu >= 0 {
				models[cpu] = strings.TrimSpace(value)
			}
		}
	}
	return models
}

// firstCPU is the first CPU of a Linux CPU list ("0-55,112-167" gives 0).
func firstCPU(list string) (int, bool) {
	n := digitRun(list)
	if n == 0 || n > 9 {
		return 0, false
	}
	c, err := strconv.Atoi(list[:n])
	return c, err == nil
}
