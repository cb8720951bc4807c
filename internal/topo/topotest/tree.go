// Package topotest builds the machines topo's tests read: sysfs and /proc fixture trees (this
// file), and go-nvml mock servers wired to match them (nvml.go, cgo only).
package topotest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Tree is a fake sysfs and /proc under Root.
type Tree struct {
	Root string
	t    testing.TB
}

// NewTree starts an empty tree in a temporary directory.
func NewTree(t testing.TB) *Tree {
	t.Helper()
	return &Tree{Root: t.TempDir(), t: t}
}

// Write writes a file under the root, making its directories.
func (tr *Tree) Write(path, content string) {
	tr.t.Helper()
	p := filepath.Join(tr.Root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *Tree) link(target, name string) {
	tr.t.Helper()
	p := filepath.Join(tr.Root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	rel, err := filepath.Rel(filepath.Dir(p), filepath.Join(tr.Root, target))
	if err != nil {
		tr.t.Fatal(err)
	}
	if err := os.Symlink(rel, p); err != nil {
		tr.t.Fatal(err)
	}
}

// Hostname sets /proc/sys/kernel/hostname.
func (tr *Tree) Hostname(h string) { tr.Write("proc/sys/kernel/hostname", h) }

// NUMANode adds /sys/devices/system/node/nodeID with its CPU list.
func (tr *Tree) NUMANode(id int, cpus string) {
	tr.Write(fmt.Sprintf("sys/devices/system/node/node%d/cpulist", id), cpus)
}

// CPUInfo writes /proc/cpuinfo for processors 0 to n-1 of one model.
func (tr *Tree) CPUInfo(model string, n int) {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "processor\t: %d\nvendor_id\t: x\nmodel name\t: %s\ncpu MHz\t\t: 2000.000\n\n", i, model)
	}
	tr.Write("proc/cpuinfo", strings.TrimRight(b.String(), "\n"))
}

// Dev is what sysfs shows of a PCI function. Speeds are sysfs's words ("32.0 GT/s PCIe").
type Dev struct {
	NUMA                int
	LocalCPUs           string
	Speed, MaxSpeed     string
	Width, MaxWidth     int
	VirtualFunctionOf   string // an SR-IOV virtual function of this physical function
	UnknownLinkFeatures bool   // no link speed and width files at all
}

// PCI adds a PCI function at path below /sys/devices ("pci0000:17/0000:17:01.0/0000:18:00.0"):
// its directory, attributes and /sys/bus/pci/devices link.
func (tr *Tree) PCI(path string, d Dev) {
	tr.t.Helper()
	dir := "sys/devices/" + path
	bus := filepath.Base(path)
	tr.Write(dir+"/numa_node", fmt.Sprint(d.NUMA))
	if d.LocalCPUs != "" {
		tr.Write(dir+"/local_cpulist", d.LocalCPUs)
	}
	if !d.UnknownLinkFeatures {
		tr.Write(dir+"/current_link_speed", d.Speed)
		tr.Write(dir+"/max_link_speed", d.MaxSpeed)
		tr.Write(dir+"/current_link_width", fmt.Sprint(d.Width))
		tr.Write(dir+"/max_link_width", fmt.Sprint(d.MaxWidth))
	}
	if d.VirtualFunctionOf != "" {
		tr.link("sys/devices/"+filepath.Dir(path)+"/"+d.VirtualFunctionOf, dir+"/physfn")
	}
	tr.link(dir, "sys/bus/pci/devices/"+bus)
}

// IB adds an RDMA device on the PCI function bus: /sys/class/infiniband/NAME with port 1.
func (tr *Tree) IB(name, bus, linkLayer, state, rate string) {
	tr.t.Helper()
	dev := "sys/class/infiniband_devices/" + name
	tr.Write(dev+"/ports/1/link_layer", linkLayer)
	tr.Write(dev+"/ports/1/state", state)
	tr.Write(dev+"/ports/1/rate", rate)
	tr.link(dev, "sys/class/infiniband/"+name)
	tr.link("sys/bus/pci/devices/"+bus, dev+"/device")
}

// Net adds a network interface: on the PCI function bus, or virtual when bus is "".
func (tr *Tree) Net(name, bus, operstate, speed string) {
	tr.t.Helper()
	dev := "sys/devices/virtual/net/" + name
	if bus != "" {
		dev = "sys/class/net_devices/" + name
		tr.link("sys/bus/pci/devices/"+bus, dev+"/device")
	}
	tr.Write(dev+"/operstate", operstate)
	tr.Write(dev+"/speed", speed)
	tr.link(dev, "sys/class/net/"+name)
}

// Gen5 is a PCIe Gen5 x16 link at full speed.
func Gen5(numa int, cpus string) Dev {
	return Dev{NUMA: numa, LocalCPUs: cpus, Speed: "32.0 GT/s PCIe", MaxSpeed: "32.0 GT/s PCIe", Width: 16, MaxWidth: 16}
}

// Gen4 is a PCIe Gen4 x16 link at full speed.
func Gen4(numa int, cpus string) Dev {
	return Dev{NUMA: numa, LocalCPUs: cpus, Speed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", Width: 16, MaxWidth: 16}
}

// DGXGPUs are the PCI bus ids of the DGX tree's GPUs, in NVML order.
var DGXGPUs = []string{"0000:18:00.0", "0000:19:00.0", "0000:3a:00.0", "0000:3b:00.0", "0000:9a:00.0", "0000:9b:00.0", "0000:ba:00.0", "0000:bb:00.0"}

// DGXNVSwitches are the PCI bus ids of the DGX's four NVSwitch chips.
var DGXNVSwitches = []string{"0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"}

// DGX builds the sysfs of a two-socket machine shaped like a DGX H100: NUMA nodes 0 and 1, four
// host bridges (two a socket), each with a root port, a PCIe Gen5 switch and below it two GPUs and
// two 400G InfiniBand NICs (mlx5_0 to mlx5_7, whose IPoIB interfaces share their functions); an
// onboard 10G Ethernet port eno1 on a host bridge of its own; docker0 and lo, which are virtual;
// and an SR-IOV virtual function of mlx5_0, which is not a NIC of its own.
func DGX(t testing.TB) *Tree {
	tr := NewTree(t)
	tr.Hostname("dgx01")
	tr.NUMANode(0, "0-55,112-167")
	tr.NUMANode(1, "56-111,168-223")
	tr.CPUInfo("Intel(R) Xeon(R) Platinum 8480C", 224)
	nic := 0
	for i, hb := range []int{0x15, 0x37, 0x97, 0xb7} {
		numa, cpus := i/2, []string{"0-55,112-167", "56-111,168-223"}[i/2]
		rp := fmt.Sprintf("pci0000:%02x/0000:%02x:01.0", hb, hb)
		usp := fmt.Sprintf("%s/0000:%02x:00.0", rp, hb+1)
		tr.PCI(rp, Gen5(numa, cpus))
		tr.PCI(usp, Gen5(numa, cpus))
		for port := 0; port < 4; port++ {
			dsp := fmt.Sprintf("%s/0000:%02x:%02x.0", usp, hb+2, port)
			end := fmt.Sprintf("%s/0000:%02x:00.0", dsp, hb+3+port)
			tr.PCI(dsp, Gen5(numa, cpus))
			tr.PCI(end, Gen5(numa, cpus))
			if port >= 2 {
				name, bus := fmt.Sprintf("mlx5_%d", nic), fmt.Sprintf("0000:%02x:00.0", hb+3+port)
				tr.IB(name, bus, "InfiniBand", "4: ACTIVE", "400 Gb/sec (4X NDR)")
				tr.Net(fmt.Sprintf("ibp%ds0", hb+3+port), bus, "up", "400000")
				nic++
			}
		}
	}
	vf := Gen5(0, "0-55,112-167")
	vf.VirtualFunctionOf = "0000:1a:00.0"
	tr.PCI("pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:02.0/0000:1a:00.1", vf)
	tr.IB("mlx5_8", "0000:1a:00.1", "InfiniBand", "4: ACTIVE", "400 Gb/sec (4X NDR)")
	tr.PCI("pci0000:00/0000:00:1c.0", Gen4(0, "0-55,112-167"))
	tr.PCI("pci0000:00/0000:00:1c.0/0000:01:00.0", Dev{NUMA: 0, Speed: "8.0 GT/s PCIe", MaxSpeed: "8.0 GT/s PCIe", Width: 4, MaxWidth: 4})
	tr.Net("eno1", "0000:01:00.0", "up", "10000")
	tr.Net("docker0", "", "up", "10000")
	tr.Net("lo", "", "unknown", "")
	return tr
}

// PCIeBoxGPUs are the PCI bus ids of the PCIe box's GPUs, in NVML order.
var PCIeBoxGPUs = []string{"0000:03:00.0", "0000:04:00.0", "0000:05:00.0", "0000:81:00.0"}

// PCIeBox builds the sysfs of a two-socket PCIe machine with four GPUs: GPU0 and GPU1 behind a
// PCIe switch and GPU2 on a root port of the same host bridge (NUMA node 0); a 200G RoCE NIC
// (mlx5_0, with its Ethernet interface) on another host bridge of node 0; GPU3 on node 1; and an
// Ethernet port eno1 on node 1 whose link is down.
func PCIeBox(t testing.TB) *Tree {
	tr := NewTree(t)
	tr.Hostname("pcie-box")
	tr.NUMANode(0, "0-31")
	tr.NUMANode(1, "32-63")
	tr.CPUInfo("AMD EPYC 7543 32-Core Processor", 64)
	tr.PCI("pci0000:00/0000:00:01.1", Gen4(0, "0-31"))
	tr.PCI("pci0000:00/0000:00:01.1/0000:01:00.0", Gen4(0, "0-31"))
	tr.PCI("pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0", Gen4(0, "0-31"))
	tr.PCI("pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:01.0", Gen4(0, "0-31"))
	tr.PCI("pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0", Gen4(0, "0-31"))
	tr.PCI("pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:01.0/0000:04:00.0", Gen4(0, "0-31"))
	tr.PCI("pci0000:00/0000:00:03.1", Gen4(0, "0-31"))
	tr.PCI("pci0000:00/0000:00:03.1/0000:05:00.0", Gen4(0, "0-31"))
	tr.PCI("pci0000:40/0000:40:01.1", Gen4(0, "0-31"))
	tr.PCI("pci0000:40/0000:40:01.1/0000:41:00.0", Gen4(0, "0-31"))
	tr.IB("mlx5_0", "0000:41:00.0", "Ethernet", "4: ACTIVE", "200 Gb/sec (4X HDR)")
	tr.Net("enp65s0f0np0", "0000:41:00.0", "up", "200000")
	tr.PCI("pci0000:80/0000:80:01.1", Gen4(1, "32-63"))
	tr.PCI("pci0000:80/0000:80:01.1/0000:81:00.0", Gen4(1, "32-63"))
	tr.PCI("pci0000:80/0000:80:03.1", Gen4(1, "32-63"))
	tr.PCI("pci0000:80/0000:80:03.1/0000:82:00.0", Dev{NUMA: 1, Speed: "5.0 GT/s PCIe", MaxSpeed: "8.0 GT/s PCIe", Width: 1, MaxWidth: 1})
	tr.Net("eno1", "0000:82:00.0", "down", "-1")
	return tr
}
