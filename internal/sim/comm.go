package sim

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
)

// comm is a simulated communicator. Each call does the data movement at once (when every buffer
// has data) and advances the virtual clocks by the cost model's duration.
type comm struct {
	b        *Backend
	devs     []int
	m        *model
	recorded *[]func() // non-nil while capturing a graph
	// host is the devices whose launches this process pays for: all of devs, or in a
	// communicator that spans processes (world.go) this process's own.
	host     []int
	hostMost int // the most of host on one node: the GPUs a thread launches a call for in turn
	// replaying: the calls belong to a graph launch that has paid the host's launch cost.
	replaying bool
	marks     []float64 // stream times recorded by Mark, µs
	skipData  bool      // gpu.DataSkipper: time the calls, move nothing
	// p2pUS memoizes the point-to-point model's times by call: its flows cost a route per pair
	// of ranks, and a timed loop asks the same question every iteration. The links of a
	// communicator do not change while it lives (a timed slow link applies to later ones).
	p2pUS map[string]float64
	// picked memoizes the time of the tuner's pick by call, for the same reason: a timed loop
	// asks it again at every iteration, and across processes every process asks it.
	picked map[collCall]float64
	a2a    []gpu.Flow   // the all-to-all's flows of one unit per pair (gpu.Topology.AllToAllFlows)
	flaky  []*flakyLink // flaky-link faults its rings cross
	// remote, while set, stands in for the data movement of the call being run: in a
	// communicator across processes (world.go) the exchange has moved the data, and the other
	// ranks' buffers here are stand-ins that hold none.
	remote *remoteData
	tmp    *scratch // the copies of a call's inputs that its data movement makes, reset at each call (nil: none yet)
}

// remoteData is a call's data as the exchange of a communicator across processes moved it.
type remoteData struct {
	moved bool   // every rank's buffers held data, so the exchange ran the call's data movement
	write func() // writes this process's rank's outputs
}

// p2pCost is the time of a point-to-point call, computed once per key from flows().
func (c *comm) p2pCost(key string, n int64, peers, remoteOps int, flows func() ([]gpu.Flow, error)) (float64, error) {
	if us, ok := c.p2pUS[key]; ok {
		return us, nil
	}
	if c.p2pUS == nil {
		c.p2pUS = map[string]float64{}
	}
	fs, err := flows()
	if err != nil {
		return 0, err
	}
	us := c.m.p2pTime(fs, n, peers, remoteOps)
	c.p2pUS[key] = us
	return us, nil
}

// collKinds maps the engine's collective names to the tuner's.
var collKinds = map[string]collKind{"allreduce": collAllReduce, "allgather": collAllGather, "reducescatter": collReduceScatter,
	"broadcast": collBroadcast, "reduce": collReduce}

// Explain says what the tuner runs for a collective of bytes (gpu.Explainer); all-to-all and
// send/recv are NCCL's point-to-point operations, which its tuner does not choose: their
// channels are those one operation to a peer is split over.
func (c *comm) Explain(coll string, bytes int64, dt gpu.DType, op gpu.RedOp) (algo, proto string, channels int) {
	kind, ok := collKinds[coll]
	if !ok {
		if coll == "alltoall" {
			bytes = rankShare(bytes, c.m.n)
		}
		return "P2P", "Simple", c.m.p2pOpChannels(bytes)
	}
	ch := c.m.decideOp(kind, bytes, dt, op).Chosen()
	return ch.Algo, ch.Proto, ch.Channels
}

// SkipData makes the calls from now on move no data (gpu.DataSkipper).
func (c *comm) SkipData(skip bool) { c.skipData = skip }

// Reserve has nothing to ready: a simulated mark is a number.
func (c *comm) Reserve(int) error { return nil }

// Mark records when the work queued so far on the host's devices ends.
func (c *comm) Mark() error {
	c.marks = append(c.marks, c.b.streamEnd(c.host))
	return nil
}

// Intervals returns the times between consecutive marks.
func (c *comm) Intervals() ([]time.Duration, error) {
	out := intervals(c.marks)
	c.marks = nil
	return out, nil
}

func intervals(marks []float64) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(marks); i++ {
		out = append(out, time.Duration((marks[i]-marks[i-1])*1e3))
	}
	return out
}

var _ gpu.GraphComm = (*comm)(nil)

func (c *comm) Size() int { return len(c.devs) }

// Close gives the communicator's scratch memory back to the backend, for the next one.
func (c *comm) Close() error {
	c.b.mu.Lock()
	if c.tmp != nil && (c.b.tmp == nil || len(c.b.tmp.buf) < len(c.tmp.buf)) {
		c.b.tmp = c.tmp
	}
	c.b.mu.Unlock()
	c.tmp = nil
	return nil
}

func (c *comm) Synchronize(ctx context.Context) error { return c.b.synchronize(ctx, c.devs) }

// BeginCapture starts recording calls instead of running them.
func (c *comm) BeginCapture() error {
	if c.recorded != nil {
		return fmt.Errorf("sim: already capturing: %w", gpu.ErrInvalid)
	}
	c.recorded = &[]func(){}
	return nil
}

// EndCapture returns the recorded calls as a graph.
func (c *comm) EndCapture() (gpu.Graph, error) {
	if c.recorded == nil {
		return nil, fmt.Errorf("sim: not capturing: %w", gpu.ErrInvalid)
	}
	g := &graph{c: c, calls: *c.recorded}
	c.recorded = nil
	return g, nil
}

// graph replays recorded calls; a launch costs the host one call's launch, whatever it holds.
type graph struct {
	c     *comm
	calls []func()
}

func (g *graph) Launch() error {
	g.c.b.hostLaunch(g.c.hostMost)
	for _, call := range g.calls {
		call()
	}
	return nil
}

func (g *graph) Destroy() error { return nil }

// args checks that every rank passes a buffer on its own device, of at least the given size.
func (c *comm) args(op string, sets ...bufSet) error {
	for _, s := range sets {
		if len(s.bufs) != len(c.devs) {
			return fmt.Errorf("sim %s: %d %s buffers for %d ranks: %w", op, len(s.bufs), s.name, len(c.devs), gpu.ErrInvalid)
		}
		for r, x := range s.bufs {
			if s.only >= 0 && r != s.only {
				continue
			}
			if x == nil || x.Device() != c.devs[r] {
				return fmt.Errorf("sim %s: rank %d's %s buffer is not on its device %d: %w", op, r, s.name, c.devs[r], gpu.ErrInvalid)
			}
			if x.Len() < s.bytes {
				return fmt.Errorf("sim %s: rank %d's %s buffer has %d bytes, needs %d: %w", op, r, s.name, x.Len(), s.bytes, gpu.ErrInvalid)
			}
		}
	}
	return nil
}

type bufSet struct {
	name  string
	bufs  []gpu.Buffer
	bytes int64
	only  int // check only this rank (-1: all)
}

func all(name string, bufs []gpu.Buffer, bytes int64) bufSet {
	return bufSet{name: name, bufs: bufs, bytes: bytes, only: -1}
}

func hasData(sets ...[]gpu.Buffer) bool {
	for _, s := range sets {
		for _, x := range s {
			if x != nil && !x.HasData() {
				return false
			}
		}
	}
	return true
}

// run advances the clocks by us, then, when the buffers hold data, moves it and applies corrupt
// faults to each rank's output. A call that moves no bytes does nothing, as in NCCL.
func (c *comm) run(bytes int64, us float64, dt gpu.DType, data bool, out []gpu.Buffer, move func()) error {
	if bytes == 0 {
		return nil
	}
	if len(c.flaky) > 0 && c.recorded == nil {
		if err := c.b.flakyCall(c.flaky, fmt.Sprintf("call of %d bytes", bytes)); err != nil {
			return err
		}
	}
	if !(us >= 0 && us <= maxCallUS) { // NaN, negative or absurd: never a time to report
		return fmt.Errorf("sim: the cost model gives %g µs for %d bytes on %s: the topology's links cannot carry this call: %w", us, bytes, c.m.topo.Name, gpu.ErrInvalid)
	}
	data = data && !c.skipData
	if c.remote != nil {
		data, move = c.remote.moved, c.remote.write
	}
	if c.recorded != nil {
		*c.recorded = append(*c.recorded, func() { c.exec(us, dt, data, out, move, false) })
		return nil
	}
	c.exec(us, dt, data, out, move, !c.replaying)
	return nil
}

// maxCallUS bounds the time one simulated call may take: a day. The topology's ranges (link
// bandwidths of at least 1 MB/s, slow-link factors of at least 0.001) keep every real question
// far inside it.
const maxCallUS = 86400e6

// exec does one call: host launch cost (unless a graph launch already paid it), clocks, data.
func (c *comm) exec(us float64, dt gpu.DType, data bool, out []gpu.Buffer, move func(), launchCost bool) {
	switch {
	case launchCost && us == 0: // nothing queued (collUS): the host pays NCCL's call alone
		c.b.hostNoop()
	case launchCost:
		c.b.hostLaunch(c.hostMost)
	}
	corrupt := c.b.launch(c.devs, us)
	if !data {
		return
	}
	if c.tmp == nil {
		c.tmp = new(scratch)
	}
	c.tmp.reset()
	move()
	for r, bad := range corrupt {
		if bad && out[r] != nil && out[r].HasData() && out[r].Len() >= int64(dt.Size()) {
			x := out[r].(*buffer).bytes()
			x[dt.Size()-1] ^= 0x40
		}
	}
}

// collUS is a collective's device time: the model's, except that with one rank in place NCCL
// has nothing to move and queues no work (seen on an H200, docs/validation.md: 0.7-1 µs at 8 B
// and at 1 GiB, against 5-500 µs out of place).
func (c *comm) collUS(kind collKind, n int64, dt gpu.DType, op gpu.RedOp, send, recv []gpu.Buffer) float64 {
	if len(c.devs) == 1 && sameStart(send[0], recv[0]) {
		return 0
	}
	k := collCall{kind, n, dt, op}
	if us, ok := c.picked[k]; ok {
		return us
	}
	if c.picked == nil {
		c.picked = map[collCall]float64{}
	}
	us := c.m.decideOp(kind, n, dt, op).Chosen().SimUS
	c.picked[k] = us
	return us
}

// collCall is what the tuner's pick for a collective depends on, in a communicator.
type collCall struct {
	kind collKind
	n    int64
	dt   gpu.DType
	op   gpu.RedOp
}

// sameStart reports whether two buffers start at the same byte of the same allocation.
func sameStart(a, b gpu.Buffer) bool {
	x, okA := a.(*buffer)
	y, okB := b.(*buffer)
	return okA && okB && x.base != nil && x.base == y.base && x.off == y.off
}

func bytesOf(x gpu.Buffer, n int64) []byte { return x.(*buffer).bytes()[:n] }

// reduceAll returns the reduction of the first n bytes of every buffer.
func reduceAll(bufs []gpu.Buffer, n int64, dt gpu.DType, op gpu.RedOp, tmp *scratch) []byte {
	srcs := make([][]byte, len(bufs))
	for i, x := range bufs {
		srcs[i] = bytesOf(x, n)
	}
	out := tmp.take(n)
	gpu.ReduceAll(dt, op, out, srcs)
	return out
}

func (c *comm) AllReduce(send, recv []gpu.Buffer, count int64, dt gpu.DType, op gpu.RedOp) error {
	n := count * int64(dt.Size())
	if err := c.args("allreduce", all("send", send, n), all("recv", recv, n)); err != nil {
		return err
	}
	return c.run(n, c.collUS(collAllReduce, n, dt, op, send, recv), dt, hasData(send, recv), recv, func() {
		allReduceData(send, recv, n, dt, op, c.tmp)
	})
}

func (c *comm) AllGather(send, recv []gpu.Buffer, sendCount int64, dt gpu.DType) error {
	n := sendCount * int64(dt.Size())
	ranks := int64(len(c.devs))
	if err := c.args("allgather", all("send", send, n), all("recv", recv, n*ranks)); err != nil {
		return err
	}
	return c.run(n, c.collUS(collAllGather, n*ranks, dt, gpu.Sum, send, recv), dt, hasData(send, recv), recv, func() {
		allGatherData(send, recv, n, c.tmp)
	})
}

func (c *comm) ReduceScatter(send, recv []gpu.Buffer, recvCount int64, dt gpu.DType, op gpu.RedOp) error {
	n := recvCount * int64(dt.Size())
	ranks := int64(len(c.devs))
	if err := c.args("reducescatter", all("send", send, n*ranks), all("recv", recv, n)); err != nil {
		return err
	}
	return c.run(n, c.collUS(collReduceScatter, n*ranks, dt, op, send, recv), dt, hasData(send, recv), recv, func() {
		reduceScatterData(send, recv, n, dt, op, c.tmp)
	})
}

func (c *comm) Broadcast(send, recv []gpu.Buffer, count int64, dt gpu.DType, root int) error {
	n := count * int64(dt.Size())
	if root < 0 || root >= len(c.devs) {
		return fmt.Errorf("sim broadcast: root %d of %d ranks: %w", root, len(c.devs), gpu.ErrInvalid)
	}
	if err := c.args("broadcast", bufSet{"send", send, n, root}, all("recv", recv, n)); err != nil {
		return err
	}
	return c.run(n, c.collUS(collBroadcast, n, dt, gpu.Sum, send, recv), dt, hasData([]gpu.Buffer{send[root]}, recv), recv, func() {
		broadcastData(send, recv, n, root, c.tmp)
	})
}

func (c *comm) Reduce(send, recv []gpu.Buffer, count int64, dt gpu.DType, op gpu.RedOp, root int) error {
	n := count * int64(dt.Size())
	if root < 0 || root >= len(c.devs) {
		return fmt.Errorf("sim reduce: root %d of %d ranks: %w", root, len(c.devs), gpu.ErrInvalid)
	}
	if err := c.args("reduce", all("send", send, n), bufSet{"recv", recv, n, root}); err != nil {
		return err
	}
	return c.run(n, c.collUS(collReduce, n, dt, op, send, recv), dt, hasData(send, []gpu.Buffer{recv[root]}), recv, func() {
		reduceData(send, recv, n, dt, op, root, c.tmp)
	})
}

func (c *comm) AllToAll(send, recv []gpu.Buffer, count int64, dt gpu.DType) error {
	n := count * int64(dt.Size())
	ranks := len(c.devs)
	if err := c.args("alltoall", all("send", send, n*int64(ranks)), all("recv", recv, n*int64(ranks))); err != nil {
		return err
	}
	us, err := c.p2pCost(fmt.Sprintf("alltoall %d", n), n, ranks-1, c.m.allToAllRemoteOps(), func() ([]gpu.Flow, error) {
		// Summed by link, in time and memory that grow with the GPUs rather than the pairs,
		// once per communicator.
		if c.a2a == nil {
			flows, err := c.m.topo.AllToAllFlows(c.devs)
			if err != nil {
				return nil, err
			}
			c.a2a = flows
		}
		flows := slices.Clone(c.a2a)
		for i := range flows {
			flows[i].Bytes = float64(n)
		}
		return flows, nil
	})
	if err != nil {
		return fmt.Errorf("sim alltoall: %v: %w", err, gpu.ErrInvalid)
	}
	return c.run(n, us, dt, hasData(send, recv), recv, func() {
		allToAllData(send, recv, n, c.tmp)
	})
}

func (c *comm) SendRecv(ops []gpu.P2POp, count int64, dt gpu.DType) error {
	n := count * int64(dt.Size())
	ranks := len(c.devs)
	sends, recvs := map[pair]gpu.Buffer{}, map[pair]gpu.Buffer{}
	for _, o := range ops {
		if o.Rank < 0 || o.Rank >= ranks || o.Peer < 0 || o.Peer >= ranks {
			return fmt.Errorf("sim sendrecv: rank %d or peer %d outside 0-%d: %w", o.Rank, o.Peer, ranks-1, gpu.ErrInvalid)
		}
		if o.Buf == nil || o.Buf.Device() != c.devs[o.Rank] || o.Buf.Len() < n {
			return fmt.Errorf("sim sendrecv: rank %d's buffer is not %d bytes on its device %d: %w", o.Rank, n, c.devs[o.Rank], gpu.ErrInvalid)
		}
		if o.Send {
			sends[pair{o.Rank, o.Peer}] = o.Buf
		} else {
			recvs[pair{o.Peer, o.Rank}] = o.Buf
		}
	}
	if len(sends) != len(recvs) || len(sends) != len(ops)/2 || len(ops)%2 != 0 {
		return fmt.Errorf("sim sendrecv: every send needs exactly one matching receive: %w", gpu.ErrInvalid)
	}
	var pairs []pair
	var bufs []gpu.Buffer
	out := make([]gpu.Buffer, ranks)
	for p, s := range sends {
		r, ok := recvs[p]
		if !ok {
			return fmt.Errorf("sim sendrecv: rank %d sends to %d, which does not receive from it: %w", p.from, p.to, gpu.ErrInvalid)
		}
		pairs = append(pairs, p)
		bufs = append(bufs, s, r)
		out[p.to] = r
	}
	slices.SortFunc(pairs, func(a, b pair) int { return cmp.Or(a.from-b.from, a.to-b.to) })
	byRank := map[int]int{} // a rank's sends run on its channels together
	peers := 0
	for _, p := range pairs {
		byRank[p.from]++
		peers = max(peers, byRank[p.from])
	}
	us, _ := c.p2pCost(fmt.Sprintf("sendrecv %d %v", n, pairs), n, peers, c.m.remoteOps(pairs), func() ([]gpu.Flow, error) {
		var flows []gpu.Flow
		lanes := c.m.topo.LaneCount(c.devs)
		for _, p := range pairs {
			flows = append(flows, c.m.topo.RouteFlows(c.devs[p.from], c.devs[p.to], float64(n), lanes)...)
		}
		return flows, nil
	})
	return c.run(n, us, dt, hasData(bufs), out, func() {
		sendRecvData(sends, recvs, n, c.tmp)
	})
}

// pair is a send from one rank to another.
type pair struct{ from, to int }

// The calls' data movement over every rank's buffers, all holding data: in the simulator's own
// communicator, and in the exchange of one across processes (world.go). n is a rank's share in
// bytes, as each call's method counts it; inputs are read before any output is written, so that
// buffers may overlap (in place), and the copies of them that this needs are taken from tmp,
// which the caller resets between calls.

func allReduceData(send, recv []gpu.Buffer, n int64, dt gpu.DType, op gpu.RedOp, tmp *scratch) {
	res := reduceAll(send, n, dt, op, tmp)
	for _, x := range recv {
		copy(bytesOf(x, n), res)
	}
}

func allGatherData(send, recv []gpu.Buffer, n int64, tmp *scratch) {
	ranks := int64(len(send))
	chunks, all := make([][]byte, len(send)), tmp.take(ranks*n)
	for r, x := range send {
		chunks[r] = all[int64(r)*n : int64(r+1)*n]
		copy(chunks[r], bytesOf(x, n))
	}
	for _, x := range recv {
		out := bytesOf(x, n*ranks)
		for r, chunk := range chunks {
			copy(out[int64(r)*n:], chunk)
		}
	}
}

func reduceScatterData(send, recv []gpu.Buffer, n int64, dt gpu.DType, op gpu.RedOp, tmp *scratch) {
	res := reduceAll(send, n*int64(len(send)), dt, op, tmp)
	for r, x := range recv {
		copy(bytesOf(x, n), res[int64(r)*n:])
	}
}

func broadcastData(send, recv []gpu.Buffer, n int64, root int, tmp *scratch) {
	data := tmp.take(n)
	copy(data, bytesOf(send[root], n))
	for _, x := range recv {
		copy(bytesOf(x, n), data)
	}
}

// reduceData writes only the root's output.
func reduceData(send, recv []gpu.Buffer, n int64, dt gpu.DType, op gpu.RedOp, root int, tmp *scratch) {
	copy(bytesOf(recv[root], n), reduceAll(send, n, dt, op, tmp))
}

func allToAllData(send, recv []gpu.Buffer, n int64, tmp *scratch) {
	ranks := len(send)
	m := n * int64(ranks) // a rank's input
	in, all := make([][]byte, ranks), tmp.take(int64(ranks)*m)
	for r, x := range send {
		in[r] = all[int64(r)*m : int64(r+1)*m]
		copy(in[r], bytesOf(x, m))
	}
	for j, x := range recv {
		out := bytesOf(x, n*int64(ranks))
		for i := range ranks {
			copy(out[int64(i)*n:], in[i][int64(j)*n:int64(j+1)*n])
		}
	}
}

// sendRecvData moves each send to its matching receive.
func sendRecvData(sends, recvs map[pair]gpu.Buffer, n int64, tmp *scratch) {
	data, all := map[pair][]byte{}, tmp.take(int64(len(sends))*n)
	for p, s := range sends {
		data[p], all = all[:n], all[n:]
		copy(data[p], bytesOf(s, n))
	}
	for p, r := range recvs {
		if d, ok := data[p]; ok {
			copy(bytesOf(r, n), d)
		}
	}
}
