package diag

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gpubench/gpubench/internal/input"
	"github.com/gpubench/gpubench/internal/topo"
)

// fsys reads sysfs and /proc under a root directory: "/" on a real machine, a fixture tree in
// tests.
type fsys struct{ root string }

func (s fsys) path(p ...string) string { return filepath.Join(append([]string{s.root}, p...)...) }

// read returns a file's text, trimmed, and whether it could be read.
func (s fsys) read(p ...string) (string, bool) {
	b, err := input.ReadFile(s.path(p...), input.SysfsLimit)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// names lists a directory's entries, sorted; nil when it cannot be read.
func (s fsys) names(p ...string) []string {
	entries, err := os.ReadDir(s.path(p...))
	if err != nil {
		return nil
	}
	var n []string
	for _, e := range entries {
		n = append(n, e.Name())
	}
	sort.Strings(n)
	return n
}

func (s fsys) hostname() string {
	if h, ok := s.read("proc", "sys", "kernel", "hostname"); ok && h != "" {
		return h
	}
	return "host"
}

// parseDriverVersion reads /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel
// Module  550.54.15  Tue Mar  5 ...", or "... Open Kernel Module for x86_64  570.86.15 ...").
func parseDriverVersion(s string) (string, bool) {
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "NVRM version:") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if isDriverVersion(f) {
				return f, true
			}
		}
	}
	return "", false
}

// isDriverVersion says whether s looks like a driver version: 550.54.15, 535.104.05, 470.82.
func isDriverVersion(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || len(p) > 4 || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

// driverBranch is a driver version's major number (550 for 550.54.15); 0 when unknown.
func driverBranch(v string) int {
	n, err := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	if err != nil {
		return 0
	}
	return n
}

// modules lists the loaded kernel modules from /proc/modules.
func parseModules(s string) map[string]bool {
	m := map[string]bool{}
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			m[f[0]] = true
		}
	}
	return m
}

// parseMountSize finds the tmpfs mounted on mountpoint in /proc/self/mounts and its size= option
// in bytes: size -1 when the mount gives none (tmpfs then defaults to half of RAM), found false
// when nothing is mounted there.
func parseMountSize(mounts, mountpoint string) (size int64, fstype string, found bool) {
	for _, line := range strings.Split(mounts, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[1] != mountpoint {
			continue
		}
		size, fstype, found = -1, f[2], true // the last mount on a point is the one in effect
		for _, o := range strings.Split(f[3], ",") {
			if v, ok := strings.CutPrefix(o, "size="); ok {
				if n, ok := parseKernelSize(v); ok {
					size = n
				}
			}
		}
	}
	return size, fstype, found
}

// parseKernelSize reads a tmpfs size as the kernel writes it: bytes, or with a k, m or g suffix.
func parseKernelSize(v string) (int64, bool) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(v, "k"):
		mult, v = 1<<10, strings.TrimSuffix(v, "k")
	case strings.HasSuffix(v, "m"):
		mult, v = 1<<20, strings.TrimSuffix(v, "m")
	case strings.HasSuffix(v, "g"):
		mult, v = 1<<30, strings.TrimSuffix(v, "g")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, false
	}
	return n * mult, true
}

// parseMemTotal reads MemTotal from /proc/meminfo in bytes.
func parseMemTotal(s string) (int64, bool) {
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil && n >= 0 && n < 1<<52 {
					return n << 10, true
				}
			}
		}
	}
	return 0, false
}

// parseMemlock reads the soft "Max locked memory" limit from /proc/self/limits: bytes, or -1 for
// unlimited.
func parseMemlock(s string) (int64, bool) {
	for _, line := range strings.Split(s, "\n") {
		v, ok := strings.CutPrefix(line, "Max locked memory")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) < 2 {
			return 0, false
		}
		if f[0] == "unlimited" {
			return -1, true
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n < 0 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// cmdlineFlags splits /proc/cmdline into its parameters.
func cmdlineFlags(s string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

// PCI configuration space: the extended capabilities start at 0x100, each with a 32-bit header
// (ID in bits 0-15, version 16-19, next offset 20-31). ACS is extended capability 0x000D; its
// control register is the 16-bit word at offset 6 (PCI Express Base Specification, "ACS Extended
// Capability", as lspci's ACSCtl decodes it).
const (
	extCapStart = 0x100
	acsCapID    = 0x000d
	// ACS control bits, as lspci names them.
	acsSrcValid    = 1 << 0
	acsTransBlk    = 1 << 1
	acsReqRedir    = 1 << 2
	acsCmpltRedir  = 1 << 3
	acsUpstreamFwd = 1 << 4
	acsEgressCtrl  = 1 << 5
	acsDirectTrans = 1 << 6
)

// acsNames names the ACS control bits that are set, as lspci's ACSCtl line does.
func acsNames(ctl uint16) []string {
	var n []string
	for i, name := range []string{"SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans"} {
		if ctl&(1<<i) != 0 {
			n = append(n, name)
		}
	}
	return n
}

// parseACSControl walks a function's extended capabilities in its config space and returns its
// ACS control register. readable is false when the file stops before the extended space (sysfs
// shows unprivileged readers only the first 64 bytes); found is false when there is no ACS
// capability.
func parseACSControl(config []byte) (ctl uint16, found, readable bool) {
	if len(config) < extCapStart+4 {
		return 0, false, false
	}
	off := extCapStart
	for seen := 0; seen < 64; seen++ { // the list is short; a loop in it must not spin
		if off < extCapStart || off+4 > len(config) || off%4 != 0 {
			return 0, false, true
		}
		h := binary.LittleEndian.Uint32(config[off:])
		if h == 0 || h == 0xffffffff {
			return 0, false, true
		}
		if h&0xffff == acsCapID {
			if off+8 > len(config) {
				return 0, false, true
			}
			return binary.LittleEndian.Uint16(config[off+6:]), true, true
		}
		off = int(h >> 20)
		if off == 0 {
			return 0, false, true
		}
	}
	return 0, false, true
}

// nvidiaGPUs lists the PCI functions in sysfs that are NVIDIA GPUs (vendor 0x10de, display
// class 0x03), for the checks that read sysfs when NVML is not there.
func (s fsys) nvidiaGPUs() []string {
	var gpus []string
	for _, bus := range s.names("sys", "bus", "pci", "devices") {
		vendor, _ := s.read("sys", "bus", "pci", "devices", bus, "vendor")
		class, _ := s.read("sys", "bus", "pci", "devices", bus, "class")
		if vendor == "0x10de" && strings.HasPrefix(class, "0x03") {
			gpus = append(gpus, bus)
		}
	}
	return gpus
}

// gpuBuses are the GPUs' PCI bus ids: NVML's when it answered, else sysfs's NVIDIA GPUs.
func (f *Facts) gpuBuses() []string {
	if f.Devs != nil {
		var b []string
		for _, g := range f.Devs.GPUs {
			if g.BusID != "" {
				b = append(b, g.BusID)
			}
		}
		if len(b) > 0 {
			return b
		}
	}
	return f.fs.nvidiaGPUs()
}

// bridgesAbove lists the PCI functions above the given ones (root ports, switch ports), each once,
// in the order first met.
func (f *Facts) bridgesAbove(buses []string) (bridges []string, missing []string) {
	seen := map[string]bool{}
	for _, b := range buses {
		chain, ok := topo.PCIChain(f.fs.root, b)
		if !ok {
			missing = append(missing, b)
			continue
		}
		for _, c := range chain[:len(chain)-1] {
			if !seen[c] {
				seen[c] = true
				bridges = append(bridges, c)
			}
		}
	}
	return bridges, missing
}

// ibPort is one port of an RDMA device.
type ibPort struct {
	dev, port, state, layer, rate string
}

// ibPorts lists every port of every RDMA device under /sys/class/infiniband.
func (s fsys) ibPorts() []ibPort {
	var ports []ibPort
	for _, dev := range s.names("sys", "class", "infiniband") {
		for _, p := range s.names("sys", "class", "infiniband", dev, "ports") {
			x := ibPort{dev: dev, port: p}
			x.state, _ = s.read("sys", "class", "infiniband", dev, "ports", p, "state")
			x.layer, _ = s.read("sys", "class", "infiniband", dev, "ports", p, "link_layer")
			x.rate, _ = s.read("sys", "class", "infiniband", dev, "ports", p, "rate")
			ports = append(ports, x)
		}
	}
	return ports
}
