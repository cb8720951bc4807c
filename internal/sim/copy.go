package sim

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
)

// The copy model behind TimedCopies (docs/model.md, "Copies"). Figures come from published
// p2pBandwidthLatencyTest and nvbandwidth runs (shared reference p2p-tools.md §6-7).
const (
	// copyPCIeEfficiency: copy engines reach about 80% of a PCIe Gen4 link's nominal rate (RTX
	// A6000 P2P 21.8-26.4 GB/s on Gen4 x16; RTX 4090 H2D 23.9-26.4). Gen5 hosts have shown more
	// (H100 H2D 55-57 GB/s of 63, about 0.9), so the simulator errs low there.
	copyPCIeEfficiency = 0.8
	// stagedEfficiency: a copy staged through host memory (P2P disabled) reaches about 73% of that
	// again (8x H100: 36.3-38.1 GB/s P2P=Disabled over Gen5 x16).
	stagedEfficiency = 0.73
	// localCopyEfficiency: a copy inside one GPU reads and writes its memory at about 75% of the
	// nominal bandwidth (8x H100 diagonal 2474-2578 GB/s counting read and write, of 3350).
	localCopyEfficiency = 0.75
	// Latencies of one small copy, µs: a local copy (RTX 5090 diagonal 2.07 µs), and a copy
	// staged through host memory (RTX 5090 P2P=Disabled 13-14.5 µs). A direct copy's latency is
	// its path's link latencies (RTX 5090 P2P=Enabled 0.37-0.44 µs over PCIe).
	localCopyUS  = 2.0
	stagedCopyUS = 13.5
)

// PeerInfo reports P2P as the topology file says: with "p2p": "all", every pair of GPUs on one
// node has access (what gpubench topo records only when every pair reported it); NVLink pairs rank
// 0 and have native atomics, PCIe pairs rank by how far apart they are.
func (b *Backend) PeerInfo(dev, peer int) (gpu.PeerInfo, error) {
	if !b.validDevice(dev) || !b.validDevice(peer) || dev == peer {
		return gpu.PeerInfo{}, fmt.Errorf("sim peer info %d-%d: %w", dev, peer, gpu.ErrInvalid)
	}
	if b.topo.P2P != "all" || b.topo.NodeOf(dev) != b.topo.NodeOf(peer) {
		return gpu.PeerInfo{}, nil
	}
	switch b.route(routeDirect, dev, peer).Type {
	case gpu.PathNVL:
		return gpu.PeerInfo{Access: true, PerfRank: 0, NativeAtomics: true}, nil
	case gpu.PathPIX:
		return gpu.PeerInfo{Access: true, PerfRank: 1}, nil
	case gpu.PathPXB:
		return gpu.PeerInfo{Access: true, PerfRank: 2}, nil
	case gpu.PathPHB:
		return gpu.PeerInfo{Access: true, PerfRank: 3}, nil
	case gpu.PathSYS:
		return gpu.PeerInfo{Access: true, PerfRank: 4}, nil
	}
	return gpu.PeerInfo{}, nil
}

func (b *Backend) EnablePeer(dev, peer int) error {
	info, err := b.PeerInfo(dev, peer)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !info.Access:
		return fmt.Errorf("sim enable peer %d->%d: %w", dev, peer, gpu.ErrPeerUnsupported)
	case b.peers[[2]int{dev, peer}]:
		return fmt.Errorf("sim enable peer %d->%d: %w", dev, peer, gpu.ErrPeerEnabled)
	}
	b.peers[[2]int{dev, peer}] = true
	return nil
}

func (b *Backend) DisablePeer(dev, peer int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.peers[[2]int{dev, peer}] {
		return fmt.Errorf("sim disable peer %d->%d: %w", dev, peer, gpu.ErrPeerNotEnabled)
	}
	delete(b.peers, [2]int{dev, peer})
	return nil
}

// AllocHost allocates simulated pinned memory; host copies always use the GPU's nearest socket.
func (b *Backend) AllocHost(_ int, n int64) (gpu.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("sim host alloc %d bytes: %w", n, gpu.ErrInvalid)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	x := &buffer{dev: gpu.HostDevice, n: n, root: true}
	x.base = x
	return b.back(x), nil
}

func (b *Backend) FreeMemory(dev int) (int64, error) {
	if !b.validDevice(dev) {
		return 0, fmt.Errorf("sim: no device %d: %w", dev, gpu.ErrInvalid)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.devices[dev].MemoryBytes - b.used[dev], nil
}

// resource is what copies share: a link in one direction, or a device's memory.
type resource struct {
	hop gpu.Hop
	mem int // device+1 for memory, 0 for a link
}

// TimedCopies models the copies running together: each takes its repeats' latency plus the time
// the busiest resource on its way needs for everything that crosses it. Copies into a device with
// a corrupt fault get a flipped bit, and copies touching a hung device never finish, from the
// first copy on (a fault's @N counts collectives only).
func (b *Backend) TimedCopies(ctx context.Context, copies []gpu.Copy) ([]time.Duration, error) {
	type plan struct {
		uses  []resource
		latUS float64
		bytes float64
	}
	b.mu.Lock()
	b.applyTimedFaults() // a slow link due by now slows these copies, as it does a collective
	b.mu.Unlock()
	plans := make([]plan, len(copies))
	load := map[resource]float64{}
	capacity := map[resource]float64{}
	for i, c := range copies {
		src, dst, ok := bufPair(c)
		if !ok || c.Repeat < 1 || !b.validDevice(c.Issuer) || dst.n < src.n {
			return nil, fmt.Errorf("sim copy %d: bad buffers, issuer %d or repeat %d: %w", i, c.Issuer, c.Repeat, gpu.ErrInvalid)
		}
		p := plan{bytes: float64(src.n) * float64(c.Repeat)}
		cc := b.computeCapability(src.dev, dst.dev)
		addPath := func(path gpu.Path, eff float64) {
			for _, h := range path.Hops {
				r := resource{hop: h}
				p.uses = append(p.uses, r)
				c := b.topo.LinkGBs(h.Edge) * eff * copyEfficiency(b.topo.LinkKind(h.Edge), cc)
				if old, ok := capacity[r]; ok {
					c = math.Min(c, old) // copies that see the link differently: the slower view
				}
				capacity[r] = c
			}
			p.latUS += path.LatencyUS
		}
		switch {
		case src.dev == gpu.HostDevice && dst.dev == gpu.HostDevice:
			return nil, fmt.Errorf("sim copy %d: host to host: %w", i, gpu.ErrInvalid)
		case src.dev == gpu.HostDevice:
			addPath(b.route(routeToGPU, 0, dst.dev), 1)
		case dst.dev == gpu.HostDevice:
			addPath(b.route(routeToHost, src.dev, 0), 1)
		case src.dev == dst.dev:
			r := resource{mem: src.dev + 1}
			g, _ := b.topo.GPU(src.dev)
			p.uses, p.latUS = append(p.uses, r), localCopyUS
			eff := localCopyEfficiency
			if cal := b.topo.Calibration; cal != nil && cal.LocalCopyEfficiency > 0 {
				eff = cal.LocalCopyEfficiency
			}
			capacity[r] = g.MemoryGBs * eff / 2 // every byte is read and written
		case b.direct(src.dev, dst.dev):
			addPath(b.route(routeDirect, src.dev, dst.dev), 1)
		default:
			path := b.route(routeStaged, src.dev, dst.dev)
			if b.topo.NodeOf(src.dev) != b.topo.NodeOf(dst.dev) {
				path = b.route(routeDirect, src.dev, dst.dev)
			}
			addPath(path, stagedEfficiency)
			p.latUS = stagedCopyUS
		}
		if len(p.uses) == 0 {
			return nil, fmt.Errorf("sim copy %d: the topology has no route from %s to %s (a GPU with no link to a CPU has no host memory to copy through): %w", i, devName(src.dev), devName(dst.dev), gpu.ErrInvalid)
		}
		for _, r := range p.uses {
			load[r] += p.bytes
		}
		p.latUS *= float64(c.Repeat)
		plans[i] = p
	}
	out := make([]time.Duration, len(copies))
	longest := 0.0
	for i, p := range plans {
		us := p.latUS
		for _, r := range p.uses {
			us = math.Max(us, p.latUS+load[r]/(1e3*capacity[r]))
		}
		out[i] = time.Duration(b.jitter(us) * 1e3)
		longest = math.Max(longest, float64(out[i]))
	}
	if hung := b.hungIn(copies); hung != nil {
		<-ctx.Done()
		return nil, &gpu.HangError{Ranks: hung, Err: ctx.Err(), Devices: true}
	}
	busy := map[int]float64{} // a device works as long as its longest copy
	for i, c := range copies {
		src, dst, _ := bufPair(c)
		for _, d := range []int{src.dev, dst.dev} {
			if d != gpu.HostDevice {
				busy[d] = math.Max(busy[d], float64(out[i])/1e3)
			}
		}
	}
	b.mu.Lock()
	b.hostUS += longest / 1e3
	for d, us := range busy {
		b.copyUS[d] += us
	}
	b.mu.Unlock()
	for _, c := range copies {
		src, dst, _ := bufPair(c)
		if !src.HasData() || !dst.HasData() {
			continue
		}
		copy(dst.bytes(), src.bytes())
		if b.corrupts(dst.dev) && dst.n > 0 {
			dst.bytes()[0] ^= 0x40
		}
	}
	return out, nil
}

// Kinds of copy routes.
const (
	routeDirect = iota
	routeStaged
	routeToGPU
	routeToHost
)

// route is the topology's route of a copy between devices a and c (one is unused for host
// copies), searched once: a route never changes (a slow link changes its bandwidth, not the way),
// and benchmarks and burn-ins copy between the same pairs over and over.
func (b *Backend) route(kind, a, c int) gpu.Path {
	key := [3]int{kind, a, c}
	b.mu.Lock()
	p, ok := b.routes[key]
	b.mu.Unlock()
	if ok {
		return p
	}
	switch kind {
	case routeDirect:
		p = b.topo.Route(a, c)
	case routeStaged:
		p = b.topo.StagedRoute(a, c)
	case routeToGPU:
		p = b.topo.HostPath(c, true)
	default:
		p = b.topo.HostPath(a, false)
	}
	b.mu.Lock()
	b.routes[key] = p
	b.mu.Unlock()
	return p
}

func bufPair(c gpu.Copy) (src, dst *buffer, ok bool) {
	src, ok1 := c.Src.(*buffer)
	dst, ok2 := c.Dst.(*buffer)
	return src, dst, ok1 && ok2
}

// direct reports whether a copy between two GPUs goes peer to peer: access is enabled either way.
func (b *Backend) direct(a, c int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peers[[2]int{a, c}] || b.peers[[2]int{c, a}]
}

// copyEfficiency derates a link for copy engines: NVLink as NCCL models it (8x H100 P2P writes
// reach 371-377 GB/s of 450), PCIe as measured copies reach it.
func copyEfficiency(kind gpu.LinkKind, cc float64) float64 {
	switch kind {
	case gpu.LinkNVLink:
		return nvlinkEfficiency(cc)
	case gpu.LinkPCIe:
		return copyPCIeEfficiency
	}
	return 1
}

// computeCapability is the lowest compute capability among the GPUs given (host memory ignored).
func (b *Backend) computeCapability(devs ...int) float64 {
	cc := math.Inf(1)
	for _, d := range devs {
		if d == gpu.HostDevice {
			continue
		}
		g, _ := b.topo.GPU(d)
		v, _ := strconv.ParseFloat(g.ComputeCapability, 64)
		cc = math.Min(cc, v)
	}
	return cc
}

// hungIn lists the devices with an active hang fault that the copies touch.
func (b *Backend) hungIn(copies []gpu.Copy) []int {
	var hung []int
	for _, f := range b.opt.Faults {
		if f.Kind != "hang" {
			continue
		}
		for _, c := range copies {
			src, dst, _ := bufPair(c)
			if src.dev == f.Device || dst.dev == f.Device || c.Issuer == f.Device {
				hung = append(hung, f.Device)
				break
			}
		}
	}
	return hung
}

func (b *Backend) corrupts(dev int) bool {
	for _, f := range b.opt.Faults {
		if f.Kind == "corrupt" && f.Device == dev {
			return true
		}
	}
	return false
}

// devName names a device of a copy: a GPU's index, or the host.
func devName(d int) string {
	if d == gpu.HostDevice {
		return "host memory"
	}
	return fmt.Sprintf("GPU %d", d)
}
