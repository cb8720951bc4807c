package diag

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gpubench/gpubench/internal/input"
	"github.com/gpubench/gpubench/internal/topo"
)

var interconnectChecks = []Check{
	{Name: "nvlink", Group: "interconnect", Run: checkNVLink},
	{Name: "p2p-topology", Group: "interconnect", Run: checkP2PTopology},
	{Name: "acs", Group: "interconnect", Run: checkACS},
	{Name: "iommu", Group: "interconnect", Run: checkIOMMU},
}

var rdmaChecks = []Check{
	{Name: "rdma-ports", Group: "rdma", Run: checkRDMAPorts},
	{Name: "gpudirect-rdma", Group: "rdma", Run: checkPeerMem},
	{Name: "gpu-nic-affinity", Group: "rdma", Run: checkGPUNICAffinity},
}

// checkNVLink: no NVLink down that is up on the other GPUs (a GPU's links are numbered alike on
// every GPU of a board, so a link up elsewhere should be up here too).
func checkNVLink(f *Facts) Result {
	if r, ok := f.nvmlSkip("NVLink"); ok {
		return r
	}
	upSomewhere := map[int]bool{}
	for _, g := range f.Devs.GPUs {
		for l, up := range g.NVLinks {
			upSomewhere[l] = upSomewhere[l] || up
		}
	}
	if len(upSomewhere) == 0 {
		return skip("no GPU reports NVLink", "")
	}
	var down []string
	up := 0
	for _, g := range f.Devs.GPUs {
		var links []int
		for l, isUp := range g.NVLinks {
			if isUp {
				up++
			} else if upSomewhere[l] {
				links = append(links, l)
			}
		}
		sort.Ints(links)
		if len(links) > 0 {
			down = append(down, fmt.Sprintf("GPU %d %s %s", g.Index, plural(len(links), "link", "links"), joinInts(links)))
		}
	}
	switch {
	case len(down) > 0:
		return fail("reset the GPU (sudo nvidia-smi -r -i N); on NVSwitch systems check that nvidia-fabricmanager runs; a link that stays down is a hardware fault (reseat or replace the GPU or baseboard)",
			"NVLinks down that are up on the other GPUs: "+list(down)).with("down", down)
	case up == 0:
		return skip("the GPUs have NVLink ports but none is connected (no bridge, or a PCIe board)", "on an NVSwitch system, start nvidia-fabricmanager")
	}
	return pass(fmt.Sprintf("%d %s up, none down", up, plural(up, "link", "links")))
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// checkP2PTopology: P2P reads possible between every pair of GPUs whose path should carry them:
// NVLink, or one PCIe switch or several (nvidia-smi topo's NV#, PIX and PXB) must; through a host
// bridge (PHB, NODE) the chipset decides, so a refusal there warns; across CPU sockets (SYS) it is
// not expected (p2p-tools.md, the nvidia-smi topo legends).
func checkP2PTopology(f *Facts) Result {
	if r, ok := f.nvmlSkip("GPUs"); ok {
		return r
	}
	rep := f.Devs.Topo
	if rep == nil || len(rep.Nodes) == 0 || rep.Nodes[0].P2P == nil {
		why := "gpubench topo could not read the machine"
		if f.Devs.TopoErr != nil {
			why += ": " + f.Devs.TopoErr.Error()
		}
		return skip(why, "")
	}
	n := rep.Nodes[0]
	var bad, poor []string
	pairs, ok := 0, 0
	for i := range n.GPUs {
		for j := range n.GPUs {
			if i == j || i >= len(n.P2P) || j >= len(n.P2P[i]) {
				continue
			}
			class, st := n.Matrix[i][j], n.P2P[i][j]
			pairs++
			if st == "OK" {
				ok++
				continue
			}
			pair := fmt.Sprintf("GPU%s-GPU%s %s over %s", n.GPUs[i].Index, n.GPUs[j].Index, st, class)
			switch {
			case strings.HasPrefix(class, "NV") || class == "PIX" || class == "PXB":
				bad = append(bad, pair)
			case class == "PHB" || class == "NODE":
				poor = append(poor, pair)
			}
		}
	}
	const remedy = "turn ACS off on the PCIe switches (BIOS, or setpci) and the IOMMU off or to pass-through (see the acs and iommu checks); on consumer GPUs the driver may not allow P2P at all"
	switch {
	case len(bad) > 0:
		return fail(remedy, fmt.Sprintf("P2P refused where the path should carry it (%d of %d ordered pairs): %s", len(bad), pairs, firstFew(bad))).with("refused", bad)
	case len(poor) > 0:
		return warn(remedy, fmt.Sprintf("P2P refused through a host bridge (%d of %d ordered pairs): %s; traffic goes through host memory", len(poor), pairs, firstFew(poor))).with("refused", poor)
	case pairs == 0:
		return skip("one GPU: no pair to check", "")
	}
	if ok < pairs {
		return pass(fmt.Sprintf("P2P possible for %d of %d ordered pairs; the others cross CPU sockets, where it is not expected", ok, pairs))
	}
	return pass(fmt.Sprintf("P2P reads possible between all %d ordered pairs", pairs))
}

func firstFew(items []string) string {
	if len(items) <= 4 {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:4], ", ") + fmt.Sprintf(" and %d more", len(items)-4)
}

// checkACS: no PCIe Access Control Services redirection on the bridges above the GPUs. ACS's
// request and completion redirect (and egress control) send P2P traffic up to the root complex,
// which makes it slow or, with the IOMMU translating, broken; NVIDIA "recommends that the system
// BIOS disables ACS to ensure maximum P2P bandwidth between GPUs" (p2p-tools.md, the ACS
// reports). On a PCIe switch's ports it fails; on a root port, where GPUs under different root
// ports go through the root complex anyway, it warns.
func checkACS(f *Facts) Result {
	if r, ok := f.simSkip("PCIe bridges"); ok {
		return r
	}
	gpus := f.gpuBuses()
	if len(gpus) == 0 {
		return skip("no NVIDIA GPU in "+f.fs.path("sys", "bus", "pci", "devices"), "")
	}
	bridges, missing := f.bridgesAbove(gpus)
	if len(bridges) == 0 {
		return skip("the GPUs' PCIe bridges are not in sysfs ("+list(missing)+")", "")
	}
	rootPorts := map[string]bool{}
	for _, g := range gpus {
		if chain, ok := topo.PCIChain(f.fs.root, g); ok && len(chain) > 1 {
			rootPorts[chain[0]] = true
		}
	}
	var onSwitch, onRoot []string
	withACS, unreadable := 0, 0
	for _, b := range bridges {
		config, err := input.ReadFile(f.fs.path("sys", "bus", "pci", "devices", b, "config"), input.SysfsLimit)
		if err != nil {
			unreadable++
			continue
		}
		ctl, found, readable := parseACSControl(config)
		switch {
		case !readable:
			unreadable++
			continue
		case !found:
			continue
		}
		withACS++
		if ctl&(acsReqRedir|acsCmpltRedir|acsEgressCtrl) == 0 {
			continue
		}
		what := b + " " + strings.Join(acsNames(ctl), "+")
		if rootPorts[b] {
			onRoot = append(onRoot, what)
		} else {
			onSwitch = append(onSwitch, what)
		}
	}
	const remedy = "disable ACS in the BIOS (often \"PCIe ACS\" or \"ACS Control\"), or at each boot with setpci -s BUS ECAP_ACS+0x6.w=0000 on the bridges named; keep it only if you pass GPUs to VMs"
	switch {
	case len(onSwitch) > 0:
		return fail(remedy, "ACS redirects P2P traffic on PCIe switch ports above the GPUs: "+list(onSwitch)).with("bridges", onSwitch)
	case len(onRoot) > 0:
		return warn(remedy, "ACS redirects P2P traffic on root ports above the GPUs: "+list(onRoot)).with("bridges", onRoot)
	case unreadable == len(bridges):
		return skip("the bridges' extended PCIe configuration space is readable only by root", "run diag as root (sudo) to check ACS")
	}
	finding := fmt.Sprintf("no redirection on the %d %s above the GPUs (%d with ACS)", len(bridges), plural(len(bridges), "bridge", "bridges"), withACS)
	if unreadable > 0 {
		finding += fmt.Sprintf("; %d could not be read", unreadable)
	}
	return pass(finding)
}

// checkIOMMU: the IOMMU off, or in pass-through. Translating every DMA, it slows P2P and can break
// it (NVIDIA/nccl #257: all-reduce hangs until the kernel boots with intel_iommu=off;
// p2p-tools.md). The IOMMU groups' type in sysfs says what the kernel does ("identity" is
// pass-through, "DMA" and "DMA-FQ" translate); /proc/cmdline says how it was asked.
func checkIOMMU(f *Facts) Result {
	if r, ok := f.simSkip("IOMMU"); ok {
		return r
	}
	cmdline, haveCmdline := f.fs.read("proc", "cmdline")
	flags := cmdlineFlags(cmdline)
	var asked []string
	for _, k := range []string{"iommu", "intel_iommu", "amd_iommu", "iommu.passthrough"} {
		if v, ok := flags[k]; ok {
			asked = append(asked, k+"="+v)
		}
	}
	boot := "the kernel command line sets nothing for the IOMMU"
	if len(asked) > 0 {
		boot = "the kernel command line has " + strings.Join(asked, " ")
	}
	if !haveCmdline {
		boot = f.fs.path("proc", "cmdline") + " cannot be read"
	}
	groups := f.fs.names("sys", "kernel", "iommu_groups")
	if len(groups) == 0 {
		return pass("off (no IOMMU groups in sysfs); " + boot)
	}
	types := map[string]bool{}
	// The GPUs' own groups when sysfs links them, else every group.
	var gpuGroups []string
	for _, b := range f.gpuBuses() {
		if link, err := os.Readlink(f.fs.path("sys", "bus", "pci", "devices", b, "iommu_group")); err == nil {
			gpuGroups = append(gpuGroups, filepath.Base(link))
		}
	}
	if len(gpuGroups) == 0 {
		gpuGroups = groups
	}
	for _, g := range gpuGroups {
		if t, ok := f.fs.read("sys", "kernel", "iommu_groups", g, "type"); ok {
			types[t] = true
		}
	}
	translating := types["DMA"] || types["DMA-FQ"]
	switch {
	case translating:
		return warn("boot with iommu=pt (pass-through), or intel_iommu=off / amd_iommu=off, unless you need DMA translation (VMs, vfio); P2P and GPUDirect RDMA need ACS off too",
			"on and translating the GPUs' DMA; "+boot).with("group_types", keys(types))
	case types["identity"]:
		return pass("on, in pass-through mode for the GPUs; " + boot)
	case len(types) == 0:
		return skip(fmt.Sprintf("on (%d IOMMU groups), but sysfs does not say whether it translates; %s", len(groups), boot), "check dmesg for the IOMMU's default domain type")
	}
	return pass(fmt.Sprintf("on, domain type %s; %s", strings.Join(keys(types), ","), boot))
}

func keys(m map[string]bool) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

// checkRDMAPorts: every InfiniBand or RoCE port ACTIVE. None active fails (multi-node NCCL falls
// back to TCP sockets); some down warns (a dual-port card may leave its second port unused).
func checkRDMAPorts(f *Facts) Result {
	if r, ok := f.simSkip("RDMA devices"); ok {
		return r
	}
	ports := f.fs.ibPorts()
	if len(ports) == 0 {
		return skip("no InfiniBand or RoCE device in "+f.fs.path("sys", "class", "infiniband"), "needed only across nodes: install the NIC's driver (mlx5_core, mlx5_ib) if there should be one")
	}
	var down, up []string
	for _, p := range ports {
		name := p.dev + "/" + p.port
		if strings.HasSuffix(p.state, "ACTIVE") {
			up = append(up, name+" "+strings.ToLower(p.layer)+" "+p.rate)
		} else {
			down = append(down, name+" "+orUnknown(p.state))
		}
	}
	const remedy = "check the cable and the switch port (ibstat, ibv_devinfo); on InfiniBand a subnet manager (opensm or the switch's) must run"
	switch {
	case len(up) == 0:
		return fail(remedy, "no RDMA port is active: "+list(down)).with("down", down)
	case len(down) > 0:
		return warn(remedy, fmt.Sprintf("%d of %d RDMA ports down: %s", len(down), len(ports), list(down))).with("down", down).with("up", up)
	}
	return pass(fmt.Sprintf("%d RDMA %s active: %s", len(up), plural(len(up), "port", "ports"), firstFew(up)))
}

// checkPeerMem: with RDMA devices, nvidia-peermem (or the older nv_peer_mem) loaded, so that the
// NIC reads and writes GPU memory directly (GPUDirect RDMA).
func checkPeerMem(f *Facts) Result {
	if r, ok := f.simSkip("kernel modules"); ok {
		return r
	}
	if len(f.fs.ibPorts()) == 0 {
		return skip("no InfiniBand or RoCE device, so no GPUDirect RDMA to check", "")
	}
	mods, ok := f.fs.read("proc", "modules")
	if !ok {
		return skip(f.fs.path("proc", "modules")+" cannot be read", "")
	}
	m := parseModules(mods)
	switch {
	case m["nvidia_peermem"]:
		return pass("nvidia_peermem loaded")
	case m["nv_peer_mem"]:
		return pass("nv_peer_mem loaded")
	}
	return warn("sudo modprobe nvidia_peermem (it comes with the driver from 470 on), and load it at boot",
		"neither nvidia_peermem nor nv_peer_mem is loaded: unless NCCL uses DMA-BUF (NCCL 2.19+, open kernel modules), network traffic is staged through host memory")
}

// checkGPUNICAffinity: each GPU has an RDMA NIC under the same PCIe switch (PIX or PXB), the
// path on which GPUDirect RDMA is fast; NCCL_NET_GDR_LEVEL names these levels
// (cuda-nccl-abi.md §2.5).
func checkGPUNICAffinity(f *Facts) Result {
	if r, ok := f.nvmlSkip("PCIe tree"); ok {
		return r
	}
	rdma := map[string]bool{}
	for _, p := range f.fs.ibPorts() {
		rdma[p.dev] = true
	}
	if len(rdma) == 0 {
		return skip("no InfiniBand or RoCE device", "")
	}
	rep := f.Devs.Topo
	if rep == nil || len(rep.Nodes) == 0 {
		return skip("gpubench topo could not read the machine", "")
	}
	n := rep.Nodes[0]
	var far, near []string
	for i, g := range n.GPUs {
		best, bestNIC := "", ""
		for k, nic := range n.NICs {
			if !rdma[nic.Name] {
				continue
			}
			class := n.Matrix[i][len(n.GPUs)+k]
			if best == "" || pathRank(class) < pathRank(best) {
				best, bestNIC = class, nic.Name
			}
		}
		if best == "" {
			continue
		}
		item := fmt.Sprintf("GPU %s %s %s", g.Index, best, bestNIC)
		if best == "PIX" || best == "PXB" {
			near = append(near, item)
		} else {
			far = append(far, item)
		}
	}
	switch {
	case len(far) > 0:
		return warn("put each GPU and its NIC under one PCIe switch (move cards between slots); otherwise NCCL reaches the NIC through the CPU",
			"GPUs without an RDMA NIC under their PCIe switch (nearest path shown): "+list(far)).with("far", far)
	case len(near) == 0:
		return skip("sysfs does not place the RDMA NICs in the GPUs' PCIe tree", "")
	}
	return pass("every GPU has an RDMA NIC under its PCIe switch: " + firstFew(near))
}

// pathRank orders nvidia-smi topo's path classes from nearest to farthest; unknown is farthest.
func pathRank(class string) int {
	for i, c := range []string{"PIX", "PXB", "PHB", "NODE", "SYS"} {
		if c == class {
			return i
		}
	}
	return 9
}
