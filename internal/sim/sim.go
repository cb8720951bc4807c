// Package sim is gpubench's simulated backend: a machine described by a topology, whose devices
// are host memory and whose clock is virtual. Collectives really move and reduce data up to a data
// cap, so results are checked honestly; past the cap they carry timing only. Durations come from
// the cost model in model.go (docs/model.md).
package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
)

// DefaultDataCap keeps a default run's host memory small (docs/model.md).
const DefaultDataCap = 8 << 20

// Options tune a simulated backend.
type Options struct {
	// DataCap is how many bytes of simulated device memory, over all devices at once, are backed
	// by host memory. Allocations past it carry timing only.
	DataCap int64
	// Jitter, when above 0, stretches every operation by a random fraction of up to about
	// 3×Jitter (half-normal), drawn from Seed.
	Jitter float64
	Seed   uint64
	Faults []Fault
	// HubHost is the address that a communicator spanning processes listens on in rank 0's
	// process (world.go): rank 0's host as the other processes reach it. Empty means loopback.
	HubHost string
	// Env holds the NCCL_* variables that steer the simulated NCCL as they steer NCCL:
	// NCCL_ALGO, NCCL_PROTO, NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, NCCL_NVLS_ENABLE,
	// NCCL_COLLNET_ENABLE, NCCL_P2P_DISABLE and NCCL_PXN_DISABLE (docs/model.md).
	Env map[string]string
	// LaunchThreads is how many host threads of a node launch its GPUs' work, as nccl-tests' -t
	// (or one process per GPU): 0 or 1 is one thread driving them all.
	LaunchThreads int
}

// Backend is the simulator. It is safe for use by one goroutine at a time.
type Backend struct {
	topo    *gpu.Topology
	opt     Options
	devices []gpu.Device
	rng     *rand.Rand

	mu     sync.Mutex
	hostUS float64         // virtual host clock
	free   []float64       // per device: when its stream is idle (+Inf: hung)
	used   []int64         // per device: bytes allocated
	backed int64           // bytes of buffers backed by host memory, taken or not yet
	held   int64           // bytes of host memory those buffers have taken
	calls  []int           // per device: collectives run
	peers  map[[2]int]bool // (dev, peer) pairs with peer access enabled
	hubs   []net.Listener  // exchanges this process serves for communicators spanning processes
	// awaits is, by exchange address, the rank each exchange this process serves awaits (hubWait).
	awaits map[string]*hubWait
	flaky  []*flakyLink // flaky-link faults and their count of calls
	// world is the most ranks of a communicator across processes this process joined (one rank
	// each), 0 before any: its share of the data cap is DataCap / world, so that a launcher's run
	// backs the same sizes with data as one process simulating every GPU does.
	world int

	// spare is host memory that freed buffers had, by size, kept for the next buffers of that
	// size (with the memory held, at most the data cap): benchmarks and burn-ins allocate the
	// same sizes over and over, and fresh memory costs page faults and zeroing every time.
	spare      map[int64][][]byte
	spareBytes int64
	// tmp is the memory a communicator's data movement copies inputs into, kept from one
	// communicator to the next (a burn-in opens one per collective per pass): taken by NewComm,
	// given back by Close. It holds at most twice the largest call's inputs, which the data cap
	// bounds.
	tmp *scratch
	// Per device: virtual time its stream has run collectives (kernels), and copies to or from
	// it have run, µs; the simulated telemetry turns them into utilization and power.
	kernelUS, copyUS []float64
	routes           map[[3]int]gpu.Path // copy routes by kind and devices (copy.go)
}

var (
	_ gpu.Backend = (*Backend)(nil)
	_ gpu.Copier  = (*Backend)(nil)
)

// New returns a simulated backend on topology t, which it takes over: slow-link faults change it,
// and so do the NCCL_* variables that change routes (routeEnv).
func New(t *gpu.Topology, opt Options) (*Backend, error) {
	if opt.DataCap < 0 {
		return nil, fmt.Errorf("data cap %d is negative", opt.DataCap)
	}
	if !(opt.Jitter >= 0 && opt.Jitter <= 1) {
		return nil, fmt.Errorf("jitter %v is out of range [0, 1]", opt.Jitter)
	}
	if err := CheckEnv(opt.Env); err != nil {
		return nil, err
	}
	if err := routeEnv(t, opt.Env); err != nil {
		return nil, err
	}
	b := &Backend{topo: t, opt: opt, rng: rand.New(rand.NewPCG(opt.Seed, 0x9e3779b97f4a7c15))}
	for i := 0; i < t.NumGPUs(); i++ {
		g, node := t.GPU(i)
		b.devices = append(b.devices, gpu.Device{Ordinal: i, Name: g.Name, PCIBusID: g.PCIBusID, MemoryBytes: g.MemoryBytes, Host: node.Hostname})
	}
	n := len(b.devices)
	b.free, b.used, b.calls = make([]float64, n), make([]int64, n), make([]int, n)
	b.kernelUS, b.copyUS = make([]float64, n), make([]float64, n)
	b.routes = map[[3]int]gpu.Path{}
	b.peers = map[[2]int]bool{}
	b.opt.Faults = append([]Fault(nil), opt.Faults...) // timed faults are marked as they start
	for _, f := range opt.Faults {
		var err error
		switch f.Kind {
		case "slow-link":
			err = t.SlowLink(f.A, f.B, f.startFactor())
		case "slow-nic":
			err = t.SlowNIC(f.A, f.Factor)
		case "slow-node":
			err = t.SlowNode(f.A, f.Factor)
		case "flaky-link":
			var edges []int
			if edges, err = t.LinkEdges(f.A, f.B); err == nil {
				b.flaky = append(b.flaky, &flakyLink{fault: f, edges: edges})
			}
		default:
			if f.Device >= n {
				err = fmt.Errorf("topology %s has devices 0-%d", t.Name, n-1)
			}
		}
		if err != nil {
			return nil, &FaultError{Fault: f, Err: err}
		}
	}
	return b, nil
}

// FaultError is a fault the topology cannot take: a device, part or link it does not have.
type FaultError struct {
	Fault Fault
	Err   error
}

func (e *FaultError) Error() string { return fmt.Sprintf("fault %s: %v", e.Fault, e.Err) }
func (e *FaultError) Unwrap() error { return e.Err }

func (b *Backend) Name() string            { return "sim" }
func (b *Backend) Devices() []gpu.Device   { return b.devices }
func (b *Backend) Topology() *gpu.Topology { return b.topo }
func (b *Backend) Now() time.Duration      { return time.Duration(b.hostUS * 1e3) }
func (b *Backend) DataCap() int64          { return b.opt.DataCap }
func (b *Backend) validDevice(i int) bool  { return i >= 0 && i < len(b.devices) }
func (b *Backend) jitter(us float64) float64 {
	return us * (1 + b.opt.Jitter*math.Abs(b.rng.NormFloat64()))
}

// buffer is simulated device memory: a host slice when backed, a length otherwise. An allocation
// within the data cap gets its host memory when first used (as an OS gives pages), so that
// buffers nobody touches, such as the ones of a call that is timing-only because the others'
// did not fit, cost nothing; like cudaMalloc's, that memory is not cleared when it is reused.
type buffer struct {
	dev    int
	data   []byte // nil when timing-only, or not used yet; in a view, see base
	off, n int64
	root   bool
	base   *buffer  // the allocation this is a view of (nil for world.go's stand-ins and exchange)
	lazy   *Backend // an allocation that has host memory to take on first use
}

func (x *buffer) Device() int { return x.dev }
func (x *buffer) Len() int64  { return x.n }
func (x *buffer) HasData() bool {
	if a := x.base; a != nil {
		return a.data != nil || a.lazy != nil
	}
	return x.data != nil
}

// store is the host memory of x's allocation, taken on first use; nil when timing-only.
func (x *buffer) store() []byte {
	a := x.base
	if a == nil {
		return x.data
	}
	if a.lazy != nil {
		a.data, a.lazy = a.lazy.take(a.n), nil
	}
	return a.data
}

func (x *buffer) Slice(off, n int64) gpu.Buffer {
	if off < 0 || n < 0 || off+n > x.n {
		panic(fmt.Sprintf("sim: slice [%d, %d) of a %d-byte buffer", off, off+n, x.n))
	}
	return &buffer{dev: x.dev, data: x.data, off: x.off + off, n: n, base: x.base}
}

func (x *buffer) bytes() []byte { return x.store()[x.off : x.off+x.n] }

// Alloc reserves n bytes on device dev, backed by host memory while the data cap allows.
func (b *Backend) Alloc(dev int, n int64) (gpu.Buffer, error) {
	if !b.validDevice(dev) || n < 0 {
		return nil, fmt.Errorf("sim alloc %d bytes on device %d: %w", n, dev, gpu.ErrInvalid)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used[dev]+n > b.devices[dev].MemoryBytes {
		return nil, fmt.Errorf("sim alloc %d bytes on device %d (%d in use of %d): %w", n, dev, b.used[dev], b.devices[dev].MemoryBytes, gpu.ErrOutOfMemory)
	}
	b.used[dev] += n
	x := &buffer{dev: dev, n: n, root: true}
	x.base = x
	return b.back(x), nil
}

// dataCap is what this process may back: DataCap, or its share of it in a world of processes.
// Call it with b.mu held.
func (b *Backend) dataCap() int64 {
	if b.world > 1 {
		return b.opt.DataCap / int64(b.world)
	}
	return b.opt.DataCap
}

// back gives a new buffer host memory while the data cap allows: memory it takes at its first
// use. Call it with b.mu held.
func (b *Backend) back(x *buffer) *buffer {
	if b.backed+x.n <= b.dataCap() {
		x.lazy = b
		b.backed += x.n
	}
	return x
}

// trimSpare drops spare memory until what buffers hold and what is spare together fit in the data
// cap, so that the cap bounds the host memory the simulated devices use. Memory is counted when
// a buffer takes it, not when the buffer is backed: buffers are backed before the memory freed by
// the last ones of their size is given back, and counting them then would drop the very memory
// they are about to take. Call it with b.mu held.
func (b *Backend) trimSpare() {
	for size, bufs := range b.spare {
		if b.held+b.spareBytes <= b.dataCap() {
			return
		}
		for len(bufs) > 0 && b.held+b.spareBytes > b.dataCap() {
			bufs = bufs[:len(bufs)-1]
			b.spareBytes -= size
		}
		if len(bufs) == 0 {
			delete(b.spare, size)
		} else {
			b.spare[size] = bufs
		}
	}
}

// take returns n bytes of host memory, spare if there is some.
func (b *Backend) take(n int64) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held += n
	if s := b.spare[n]; len(s) > 0 {
		b.spare[n] = s[:len(s)-1]
		b.spareBytes -= n
		return s[len(s)-1]
	}
	b.trimSpare()
	return make([]byte, n)
}

// Free releases a buffer from Alloc.
func (b *Backend) Free(buf gpu.Buffer) error {
	x, ok := buf.(*buffer)
	if !ok || !x.root {
		return fmt.Errorf("sim free: not a buffer from Alloc: %w", gpu.ErrInvalid)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if x.dev != gpu.HostDevice {
		b.used[x.dev] -= x.n
	}
	if x.data != nil || x.lazy != nil {
		b.backed -= x.n
	}
	if x.data != nil && x.n > 0 { // the memory it held is spare now
		if b.spare == nil {
			b.spare = map[int64][][]byte{}
		}
		b.spare[x.n] = append(b.spare[x.n], x.data)
		b.held -= x.n
		b.spareBytes += x.n
	}
	x.data, x.lazy, x.n = nil, nil, 0
	return nil
}

func (b *Backend) CopyIn(dst gpu.Buffer, src []byte) error {
	x, err := b.dataOf(dst, int64(len(src)))
	if err != nil {
		return fmt.Errorf("sim copy to device: %w", err)
	}
	copy(x, src)
	return nil
}

func (b *Backend) CopyOut(dst []byte, src gpu.Buffer) error {
	x, err := b.dataOf(src, int64(len(dst)))
	if err != nil {
		return fmt.Errorf("sim copy from device: %w", err)
	}
	copy(dst, x)
	return nil
}

func (b *Backend) Memset(dst gpu.Buffer, v byte) error {
	x, err := b.dataOf(dst, dst.Len())
	if err != nil {
		return fmt.Errorf("sim memset: %w", err)
	}
	if v == 0 {
		clear(x)
		return nil
	}
	for i := range x {
		x[i] = v
	}
	return nil
}

func (b *Backend) dataOf(buf gpu.Buffer, n int64) ([]byte, error) {
	x, ok := buf.(*buffer)
	switch {
	case !ok:
		return nil, gpu.ErrInvalid
	case !x.HasData():
		return nil, gpu.ErrNoData
	case n > x.n:
		return nil, fmt.Errorf("%d bytes into a %d-byte buffer: %w", n, x.n, gpu.ErrInvalid)
	}
	return x.bytes()[:n], nil
}

// NewComm makes a communicator with one rank per device.
func (b *Backend) NewComm(devices []int) (gpu.Comm, error) {
	seen := map[int]bool{}
	for _, d := range devices {
		if !b.validDevice(d) {
			return nil, fmt.Errorf("sim comm: no device %d: %w", d, gpu.ErrInvalid)
		}
		if seen[d] {
			return nil, fmt.Errorf("sim comm: device %d given twice (one rank per device): %w", d, gpu.ErrInvalid)
		}
		seen[d] = true
	}
	if len(devices) == 0 {
		return nil, fmt.Errorf("sim comm: no devices: %w", gpu.ErrInvalid)
	}
	devs := append([]int(nil), devices...)
	c := &comm{b: b, devs: devs, host: devs, hostMost: mostOnANode(b.topo, devs), m: newModel(b.topo, devices, b.opt.Env)}
	c.flaky = b.flakyOn(c.m.flows)
	b.mu.Lock()
	c.tmp, b.tmp = b.tmp, nil
	b.mu.Unlock()
	return c, nil
}

// flakyLink is a flaky-link fault: every Every-th call whose communicator's rings cross one of
// its edges fails.
type flakyLink struct {
	fault Fault
	edges []int
	calls int // calls that crossed it so far
}

// flakyOn lists the flaky links that flows, a communicator's rings (over the NICs NCCL_IB_HCA
// leaves, as its model routes them), cross.
func (b *Backend) flakyOn(flows []gpu.Flow) []*flakyLink {
	if len(b.flaky) == 0 {
		return nil
	}
	var out []*flakyLink
	for _, fl := range b.flaky {
	search:
		for _, f := range flows {
			for _, h := range f.Path.Hops {
				if slices.Contains(fl.edges, h.Edge) {
					out = append(out, fl)
					break search
				}
			}
		}
	}
	return out
}

// ErrLinkFailed is what a call returns when a flaky link drops it, as NCCL reports a network or
// NVLink error on the call.
var ErrLinkFailed = errors.New("a link failed during the call")

// flakyCall counts a call over the flaky links of a communicator, and fails every Every-th.
func (b *Backend) flakyCall(links []*flakyLink, what string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, fl := range links {
		fl.calls++
		if fl.calls%fl.fault.Every == 0 {
			return fmt.Errorf("sim %s: the link %s-%s dropped it (%s): %w", what, fl.fault.A, fl.fault.B, fl.fault, ErrLinkFailed)
		}
	}
	return nil
}

// Synchronize is Comm.Synchronize for the given devices.
func (b *Backend) synchronize(ctx context.Context, devs []int) error {
	b.mu.Lock()
	var hung []int
	end := b.hostUS
	for r, d := range devs {
		if math.IsInf(b.free[d], 1) {
			hung = append(hung, r)
		}
		end = math.Max(end, b.free[d])
	}
	if hung == nil {
		b.hostUS = end
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	<-ctx.Done()
	return &gpu.HangError{Ranks: hung, Err: ctx.Err()}
}

// streamEnd is when the work queued on the given devices ends (or the host's time, when idle).
func (b *Backend) streamEnd(devs []int) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	end := b.hostUS
	for _, d := range devs {
		end = math.Max(end, b.free[d])
	}
	return end
}

// hostLaunch advances the host clock by the cost of enqueueing one call on a communicator whose
// devices this host launches for are at most perNode on one node (comm.hostMost): each node's
// host enqueues for its own GPUs from LaunchThreads threads, in parallel with the other nodes.
func (b *Backend) hostLaunch(perNode int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.applyTimedFaults()
	b.hostUS += perNodeLaunchUS(b.topo, perNode, b.opt.LaunchThreads)
}

// launchCostUS is the host's time to launch one call on devs of t from threads threads a node:
// each enqueues for its share of the node's GPUs one after another, nodes in parallel.
func launchCostUS(t *gpu.Topology, devs []int, threads int) float64 {
	return perNodeLaunchUS(t, mostOnANode(t, devs), threads)
}

// perNodeLaunchUS is launchCostUS for a call whose devices are at most perNode on one node.
func perNodeLaunchUS(t *gpu.Topology, perNode, threads int) float64 {
	threads = max(threads, 1)
	return hostLaunchUS(t) * float64((perNode+threads-1)/threads)
}

// mostOnANode is the most of devs on any one node of t.
func mostOnANode(t *gpu.Topology, devs []int) int {
	perNode := map[int]int{}
	most := 0
	for _, d := range devs {
		perNode[t.NodeOf(d)]++
		most = max(most, perNode[t.NodeOf(d)])
	}
	return most
}

// routeEnv applies the NCCL_* variables that change routes to t: NCCL_PXN_DISABLE,
// NCCL_P2P_DISABLE, which sends every GPU-to-GPU byte through host memory, and NCCL_IB_HCA,
// which leaves GPUs only the NICs it names.
func routeEnv(t *gpu.Topology, env map[string]string) error {
	e := parseTunerEnv(env)
	t.NoPXN = e.noPXN
	if e.p2pDisable && t.P2P != "none" {
		t.P2P = "none"
		if err := t.Validate(); err != nil {
			return fmt.Errorf("NCCL_P2P_DISABLE=1: %v", err)
		}
	}
	if e.ibDisable && !t.OneDomain() && t.Network != nil && (t.Network.Kind == "infiniband" || t.Network.Kind == "roce") {
		return fmt.Errorf("NCCL_IB_DISABLE=%s on a network of kind %s: NCCL would fall back to sockets between NVLink domains, which the simulator models only on an ethernet network; unset it, or describe the network as ethernet in a topology file",
			strings.TrimSpace(env["NCCL_IB_DISABLE"]), t.Network.Kind)
	}
	if e.hca == nil && t.NICOK == nil {
		return nil
	}
	if e.hca != nil && len(t.Nodes) > 1 { // one node needs no NIC
		for _, n := range t.Nodes {
			if slices.ContainsFunc(n.NICs, func(c gpu.NIC) bool { return e.hca(c.ID) }) {
				continue
			}
			var ids []string
			for _, c := range n.NICs {
				ids = append(ids, c.ID)
			}
			return fmt.Errorf("NCCL_IB_HCA=%q leaves node %s none of its NICs (%s): NCCL would fall back to sockets, which the simulator does not model; name at least one of them",
				env["NCCL_IB_HCA"], n.Hostname, strings.Join(ids, ", "))
		}
	}
	t.NICOK = e.hca // GPUs whose own NIC it leaves out take the nearest it allows (nil: their own)
	if err := t.Validate(); err != nil {
		return fmt.Errorf("NCCL_IB_HCA=%q: %v", env["NCCL_IB_HCA"], err)
	}
	return nil
}

// CheckCollective refuses NCCL_* variables that leave a collective (its command's name) on the
// first n GPUs no algorithm and protocol, as NCCL fails its first call, before a run starts.
// Ring/Simple serves every collective on every machine, and only NCCL_ALGO and NCCL_PROTO can
// take it away: without them there is nothing to check, and no model to build (at 8,192 GPUs
// that is a third of a one-size run).
func (b *Backend) CheckCollective(coll string, n int) error {
	kind, ok := collKinds[coll]
	_, algo := b.opt.Env["NCCL_ALGO"]
	_, proto := b.opt.Env["NCCL_PROTO"]
	if !ok || n < 2 || n > len(b.devices) || !algo && !proto {
		return nil
	}
	devs := make([]int, n)
	for i := range devs {
		devs[i] = i
	}
	if newModel(b.topo, devs, b.opt.Env).decide(kind, 1<<20).Chosen().Algo != "none" {
		return nil
	}
	return noAlgorithm(b.topo, devs, b.opt.Env, coll, kind, 1<<20)
}

// hostLaunchUS is the host's time to launch a collective on one GPU of t: the topology's
// calibrated figure, else the model's.
func hostLaunchUS(t *gpu.Topology) float64 {
	if cal := t.Calibration; cal != nil && cal.LaunchUS > 0 {
		return cal.LaunchUS
	}
	return launchUS
}

// hostNoop advances the host clock by a call that queues no work: NCCL's own bookkeeping.
func (b *Backend) hostNoop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hostUS += noopUS
}

// SetLaunchThreads sets Options.LaunchThreads for the calls from now on.
func (b *Backend) SetLaunchThreads(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.opt.LaunchThreads = n
}

// launch advances the clocks for one operation of duration us on the given devices, which start
// it together, and reports per device whether a corrupt fault hits its result. The host's cost
// of launching it is the caller's (hostLaunch).
func (b *Backend) launch(devs []int, us float64) (corrupt []bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := b.hostUS
	for _, d := range devs {
		start = math.Max(start, b.free[d])
	}
	end := start + b.jitter(us)
	corrupt = make([]bool, len(devs))
	for r, d := range devs {
		b.free[d] = end
		b.kernelUS[d] += end - start
		for _, f := range b.opt.Faults {
			if f.Device != d || b.calls[d] < f.After {
				continue
			}
			switch f.Kind {
			case "hang":
				b.free[d] = math.Inf(1)
			case "corrupt":
				corrupt[r] = true
			}
		}
		b.calls[d]++
	}
	return corrupt
}
