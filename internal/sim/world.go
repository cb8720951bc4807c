package sim

import (
	"bufio"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gpubench/gpubench/internal/gpu"
)

// A communicator that spans processes: each process is one rank, on a device of the topology
// (the topology is the whole world; a communicator may use any of its devices, as
// ncclCommInitRank may join any GPUs), and simulates every device's clock itself, so that
// all processes agree on every time without talking about time. Data is real: at each call every
// process sends its own rank's inputs to an exchange (in the process that made the communicator's
// id), which runs the call's data movement once, with the single-process simulator's code, and
// sends each rank only its own outputs; each process then runs the call on timing-only stand-ins
// for the other ranks' buffers and writes its rank's outputs. So a process holds its own rank's
// data and no other's; the exchange's process holds one synchronization's inputs and outputs
// while it serves it. Every call that moves data is thus also a meeting of all ranks, as an NCCL
// collective is: a process that is gone is seen there, and named. Calls that move no data (timed
// iterations, rows past the data cap) need no meeting, since every process knows every time:
// they go to the exchange with the next meeting, which checks that every rank made them.

var _ gpu.Joiner = (*Backend)(nil)

const idPrefix = "gpubench-sim "

// joinWait bounds how long the ranks take to reach the exchange once they have met at the
// rendezvous (internal/launch), which they all did just before.
const joinWait = 2 * time.Minute

// NewUniqueID starts this process's exchange for a new communicator and returns its address.
func (b *Backend) NewUniqueID() ([]byte, error) {
	host := b.opt.HubHost
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("sim: starting the exchange for a communicator across processes: %w", err)
	}
	w := &hubWait{}
	b.mu.Lock()
	b.hubs = append(b.hubs, ln)
	if b.awaits == nil {
		b.awaits = map[string]*hubWait{}
	}
	b.awaits[ln.Addr().String()] = w
	b.mu.Unlock()
	go serveHub(ln.(*net.TCPListener), w)
	return []byte(idPrefix + ln.Addr().String()), nil
}

// hubWait is the rank an exchange is waiting for at a meeting, plus one (0: none), so that the
// rank in the exchange's process, which times out first (coll's gatherGrace), names it.
type hubWait struct{ rank atomic.Int64 }

// Close stops the exchanges this process serves.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ln := range b.hubs {
		ln.Close()
	}
	b.hubs = nil
	return nil
}

// JoinComm joins the communicator whose id a process made with NewUniqueID, as rank on device dev
// of the topology; every rank names its own device, and no two the same.
func (b *Backend) JoinComm(ctx context.Context, id []byte, size, rank, dev int) (gpu.Comm, error) {
	addr, ok := strings.CutPrefix(string(id), idPrefix)
	switch {
	case !ok:
		return nil, fmt.Errorf("sim: %q is not a simulator communicator's id: %w", id, gpu.ErrInvalid)
	case size < 1 || size > len(b.devices):
		return nil, fmt.Errorf("sim: a world of %d ranks needs a topology with that many GPUs; %s has %d: %w", size, b.topo.Name, len(b.devices), gpu.ErrInvalid)
	case rank < 0 || rank >= size:
		return nil, fmt.Errorf("sim: rank %d of a world of %d: %w", rank, size, gpu.ErrInvalid)
	case dev < 0 || dev >= len(b.devices):
		return nil, fmt.Errorf("sim: rank %d on device %d; %s has devices 0 to %d: %w", rank, dev, b.topo.Name, len(b.devices)-1, gpu.ErrInvalid)
	}
	d := net.Dialer{Timeout: joinWait}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sim: joining the exchange at %s: %w", addr, err)
	}
	j := &joined{rank: rank, conn: conn, enc: gob.NewEncoder(conn)}
	b.mu.Lock()
	j.await = b.awaits[addr] // nil unless this process serves the exchange
	b.mu.Unlock()
	j.in = bufio.NewReader(countReader{conn, &j.received})
	j.dec = gob.NewDecoder(j.in)
	conn.SetDeadline(time.Now().Add(joinWait))
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var ready wireReply
	err = j.enc.Encode(wireHello{Size: size, Rank: rank, Dev: dev})
	if err == nil {
		err = j.dec.Decode(&ready)
	}
	if err == nil && ready.Err != "" {
		err = errors.New(ready.Err)
	}
	if err == nil && (len(ready.Devs) != size || ready.Devs[rank] != dev) {
		err = fmt.Errorf("the exchange answered with devices %v for rank %d on device %d", ready.Devs, rank, dev)
	}
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("sim: joining the exchange at %s: %w", addr, err)
	}
	if !stop() {
		conn.Close()
		return nil, context.Cause(ctx)
	}
	conn.SetDeadline(time.Time{})
	b.mu.Lock()
	b.world = max(b.world, size)
	b.mu.Unlock()
	devs := ready.Devs
	j.c = &comm{b: b, devs: devs, host: []int{dev}, hostMost: 1, m: newModel(b.topo, devs, b.opt.Env)}
	j.c.flaky = b.flakyOn(j.c.m.flows) // every process counts the calls, and all make the same ones
	return j, nil
}

// Wire messages, in gob. A rank says hello once, then at each synchronization sends the calls it
// queued since the last one, as one batch, and gets back one wireReply holding its own outputs of
// each: a timed loop meets the other ranks once, not once per call. The data travels after its
// message, raw, in the order of the message's parts, each as many bytes as the message says: gob
// would copy every byte twice more on each side and allocate it afresh at every meeting.
type wireHello struct{ Size, Rank, Dev int }

type wireBatch struct {
	Calls []wireCall
	in    *scratch // the exchange's: where the batch's data was read
}

// readData reads the data that follows the batch's message from r, into b.in. No part brings
// more than the largest input any call of a world of size ranks has.
func (b *wireBatch) readData(r io.Reader, size int) error {
	for _, c := range b.Calls {
		most := int64(0)
		if s := int64(c.DT.Size()) * int64(size); c.Count > 0 && s > 0 && c.Count <= math.MaxInt64/s {
			most = c.Count * s
		}
		for i := range c.Parts {
			p := &c.Parts[i]
			if p.Bytes < 0 || p.Bytes > most {
				return fmt.Errorf("sim: %d bytes brought to %s", p.Bytes, c)
			}
			if p.Bytes > 0 {
				p.data = b.in.take(p.Bytes)
				if _, err := io.ReadFull(r, p.data); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// wireCall is one call and this rank's parts of it.
type wireCall struct {
	Coll  string // allreduce, allgather, reducescatter, broadcast, reduce, alltoall or sendrecv
	Count int64  // as the call's method takes it
	DT    gpu.DType
	Op    gpu.RedOp
	Root  int
	Parts []wirePart
}

// String is the call and the arguments every rank must agree on, as errors name it.
func (c wireCall) String() string {
	switch c.Coll {
	case "allreduce", "reducescatter":
		return fmt.Sprintf("%s(%d %s %s)", c.Coll, c.Count, c.DT, c.Op)
	case "broadcast":
		return fmt.Sprintf("broadcast(%d %s root %d)", c.Count, c.DT, c.Root)
	case "reduce":
		return fmt.Sprintf("reduce(%d %s %s root %d)", c.Count, c.DT, c.Op, c.Root)
	}
	return fmt.Sprintf("%s(%d %s)", c.Coll, c.Count, c.DT)
}

// wirePart is one buffer a rank brings to a call: a collective's input (whose output goes to the
// rank's receive buffer), or one operation of a send/receive group (a receive brings no data).
type wirePart struct {
	Peer    int
	Send    bool
	HasData bool  // false: timing-only buffers (the data cap), or data skipped
	Bytes   int64 // of data, which follows the message
	data    []byte
}

// wireOp is a send/receive group's operation, as every rank learns the others'.
type wireOp struct {
	Peer int
	Send bool
}

type wireReply struct {
	Err  string
	Devs []int     // the first reply: every rank's device, in rank order
	Out  []wireOut // by call of the batch: this rank's outputs
}

// wireOut is what a call wrote to one rank's buffers.
type wireOut struct {
	Peers [][]wireOp // a send/receive group's: every rank's operations, by rank, to time it
	Moved bool       // every rank brought data, and the exchange moved it; false: timing only
	// Bytes holds, by part of the rank's, the length of the data its output buffer then holds
	// (a collective's receive buffer, a group's receive), which follows the message; 0 for a
	// buffer the call does not write (a reduce's ranks other than the root, a group's sends).
	Bytes []int64
	data  [][]byte
}

// joined is one process's rank of a communicator across processes.
type joined struct {
	c    *comm // over every rank's device
	rank int

	conn     net.Conn
	enc      *gob.Encoder
	in       *bufio.Reader // the exchange's messages and the data after them
	dec      *gob.Decoder
	sent     scratch    // this rank's inputs of the calls queued for the next meeting
	got      scratch    // this rank's outputs of the last meeting
	received int64      // bytes read from the exchange
	broken   error      // the exchange failed; nothing more can run
	pending  []*call    // enqueued, run at Synchronize
	deferred []wireCall // timing-only calls run since the last meeting, for the exchange to check
	recorded *[]*call   // non-nil while capturing a graph
	await    *hubWait   // the exchange's, when this process serves it
	stand    [2]struct {
		bufs []buffer
		set  []gpu.Buffer
	} // standIns
}

// call is one enqueued call: what the exchange gets of it, and how to run it once the exchange
// has sent this rank's outputs.
type call struct {
	wire  wireCall
	outN  int64 // the most bytes of each output the exchange may send this rank
	run   func(out wireOut) error
	local func() // instead of run: this process's own step, with no exchange (a mark)
	graph bool   // part of a graph launch, which paid the host's launch cost
	start bool   // the first call of a graph launch: it pays
}

var _ gpu.GraphComm = (*joined)(nil)

func (j *joined) Size() int { return len(j.c.devs) }

// Explain says what the tuner runs for a collective (gpu.Explainer).
func (j *joined) Explain(coll string, bytes int64, dt gpu.DType, op gpu.RedOp) (string, string, int) {
	return j.c.Explain(coll, bytes, dt, op)
}

// SkipData makes the calls from now on move no data, and send none to the exchange.
func (j *joined) SkipData(skip bool) { j.c.SkipData(skip) }

func (j *joined) Close() error { return j.conn.Close() }

func (j *joined) enqueue(c *call) error {
	if j.broken != nil {
		return j.broken
	}
	if j.recorded != nil {
		*j.recorded = append(*j.recorded, c)
	} else {
		j.pending = append(j.pending, c)
	}
	return nil
}

// Synchronize runs the enqueued calls, meeting the other ranks at each, then waits for the
// simulated devices.
func (j *joined) Synchronize(ctx context.Context) error {
	if j.broken != nil {
		return j.broken
	}
	calls := j.pending
	j.pending = nil
	var batch []*call
	timingOnly := true
	for _, c := range calls {
		if c.local == nil {
			batch = append(batch, c)
			timingOnly = timingOnly && c.timingOnly()
		}
	}
	var outs []wireOut
	if timingOnly && len(j.deferred)+len(batch) <= maxDeferred {
		// Every process knows every time, so calls that move no data need not meet: they go
		// to the exchange with the next calls that do, which checks that every rank made them.
		for _, c := range batch {
			j.deferred = append(j.deferred, c.wire)
		}
		outs = make([]wireOut, len(batch))
	} else {
		var err error
		if outs, err = j.meet(ctx, batch); err != nil {
			j.broken = err
			return err
		}
	}
	for _, c := range calls {
		if c.local != nil {
			c.local()
			continue
		}
		out := outs[0]
		outs = outs[1:]
		if c.start {
			j.c.b.hostLaunch(j.c.hostMost)
		}
		j.c.replaying = c.graph
		err := c.run(out)
		j.c.replaying = false
		if err != nil {
			return err
		}
	}
	return j.c.Synchronize(ctx)
}

// meet exchanges a batch of calls (exchange); ending ctx unblocks its wait, and its error then
// says which rank the exchange still awaits, when this process serves it.
func (j *joined) meet(ctx context.Context, batch []*call) ([]wireOut, error) {
	// A deadline that ending ctx left behind is cleared once it has been set.
	j.conn.SetDeadline(time.Time{})
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		j.conn.SetDeadline(time.Unix(1, 0))
		close(fired)
	})
	defer func() {
		if !stop() {
			<-fired
			j.conn.SetDeadline(time.Time{})
		}
	}()
	outs, err := j.exchange(batch)
	if err != nil && ctx.Err() != nil {
		hang := &gpu.HangError{Err: ctx.Err()}
		if j.await != nil {
			if r := j.await.rank.Load(); r > 0 {
				hang.Ranks = []int{int(r - 1)} // the rank the exchange still awaits
			}
		}
		err = hang
	}
	return outs, err
}

// maxDeferred bounds the timing-only calls a rank keeps for the exchange to check: past it they
// meet anyway (a long run with no data to move, a burn-in, still meets every few thousand calls,
// and sees a process that is gone).
const maxDeferred = 4096

// timingOnly reports whether c moves no data and needs nothing from the other ranks to be timed
// (a send/receive group needs their operations).
func (c *call) timingOnly() bool {
	return c.wire.Coll != "sendrecv" && !slices.ContainsFunc(c.wire.Parts, func(p wirePart) bool { return p.HasData })
}

// exchange sends this rank's parts of a batch of calls, after the timing-only calls it deferred,
// and returns its outputs, by call of the batch.
func (j *joined) exchange(calls []*call) ([]wireOut, error) {
	ran := len(j.deferred)
	b := wireBatch{Calls: j.deferred}
	j.deferred = nil
	for _, c := range calls {
		b.Calls = append(b.Calls, c.wire)
	}
	what := calls[0].wire.String()
	if len(calls) > 1 {
		what = fmt.Sprintf("%d calls from %s on", len(calls), what)
	}
	err := j.enc.Encode(b)
	if err == nil {
		err = writeData(j.conn, partData(b.Calls))
	}
	j.sent.reset() // sent: the queued inputs are the exchange's now
	if err != nil {
		if why := j.closedWhy(err); why != nil {
			return nil, why
		}
		return nil, fmt.Errorf("sim: rank %d sending %s to the exchange: %w", j.rank, what, err)
	}
	var r wireReply
	if err := j.dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("sim: rank %d waiting at the exchange for %s: %w", j.rank, what, err)
	}
	if r.Err != "" {
		return nil, errors.New(r.Err)
	}
	if len(r.Out) != len(b.Calls) {
		return nil, fmt.Errorf("sim: rank %d sent %d calls to the exchange and got %d back", j.rank, len(b.Calls), len(r.Out))
	}
	j.got.reset() // the last meeting's outputs are in place
	for i := range r.Out {
		o := &r.Out[i]
		o.data = make([][]byte, len(o.Bytes))
		for k, n := range o.Bytes {
			most := int64(0) // a deferred call moved no data
			if i >= ran {
				most = calls[i-ran].outN
			}
			if n < 0 || n > most {
				return nil, fmt.Errorf("sim: the exchange sent rank %d %d bytes of an output of %s", j.rank, n, b.Calls[i])
			}
			if n > 0 {
				o.data[k] = j.got.take(n)
				if _, err := io.ReadFull(j.in, o.data[k]); err != nil {
					return nil, fmt.Errorf("sim: rank %d reading its output of %s from the exchange: %w", j.rank, b.Calls[i], err)
				}
			}
		}
	}
	return r.Out[ran:], nil
}

// closedWhy is what the exchange said before it closed the connection that a send failed on
// (err: the connection was closed or reset), such as which rank left; nil when it said nothing.
// The exchange writes its failure to every rank, then closes, and what it wrote can still be
// read after a send has found the connection gone.
func (j *joined) closedWhy(err error) error {
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		return nil
	}
	j.conn.SetReadDeadline(time.Now().Add(time.Second))
	var r wireReply
	if j.dec.Decode(&r) != nil || r.Err == "" {
		return nil
	}
	return errors.New(r.Err)
}

// partData is the data of every part of calls, in order, as it follows their message.
func partData(calls []wireCall) net.Buffers {
	var bufs net.Buffers
	for _, c := range calls {
		for _, p := range c.Parts {
			if len(p.data) > 0 {
				bufs = append(bufs, p.data)
			}
		}
	}
	return bufs
}

// writeData writes bufs to conn, in one system call where it can.
func writeData(conn net.Conn, bufs net.Buffers) error {
	if len(bufs) == 0 {
		return nil
	}
	_, err := bufs.WriteTo(conn)
	return err
}

// Mark records, in order with the queued calls, when this rank's stream ends its work.
func (j *joined) Mark() error {
	return j.enqueue(&call{local: func() { j.c.marks = append(j.c.marks, j.c.b.streamEnd(j.c.host)) }})
}

func (j *joined) Reserve(int) error { return nil }

func (j *joined) Intervals() ([]time.Duration, error) { return j.c.Intervals() }

func (j *joined) BeginCapture() error {
	if j.recorded != nil {
		return fmt.Errorf("sim: already capturing: %w", gpu.ErrInvalid)
	}
	j.recorded = &[]*call{}
	return nil
}

func (j *joined) EndCapture() (gpu.Graph, error) {
	if j.recorded == nil {
		return nil, fmt.Errorf("sim: not capturing: %w", gpu.ErrInvalid)
	}
	g := &joinedGraph{j: j, calls: *j.recorded}
	j.recorded = nil
	return g, nil
}

type joinedGraph struct {
	j     *joined
	calls []*call
}

// Launch enqueues the recorded calls; the host pays one launch for all of them.
func (g *joinedGraph) Launch() error {
	if g.j.broken != nil {
		return g.j.broken
	}
	for i, c := range g.calls {
		cc := *c
		cc.graph, cc.start = true, i == 0
		g.j.pending = append(g.j.pending, &cc)
	}
	return nil
}

func (g *joinedGraph) Destroy() error { return nil }

// part is what this rank brings of buffer x: the first n bytes as they are now, or a
// timing-only marker. The bytes wait for the next meeting in the rank's scratch, or, in a graph
// being captured, which sends them at each launch, in memory of their own.
func (j *joined) part(x gpu.Buffer, n int64, peer int, send bool) wirePart {
	p := wirePart{Peer: peer, Send: send, HasData: x.HasData() && !j.c.skipData}
	if p.HasData && send {
		if j.recorded != nil {
			p.data = make([]byte, n)
		} else {
			p.data = j.sent.take(n)
		}
		copy(p.data, bytesOf(x, n))
		p.Bytes = n
	}
	return p
}

// standIns are timing-only buffers of n bytes on every rank's device, but for this rank's, which
// the caller sets: the other ranks' buffers, whose data lives in their own processes. Set k (0
// or 1: a call's inputs and outputs) is the same memory at every call, as a call does not keep
// its buffers once it has run.
func (j *joined) standIns(k int, n int64) []gpu.Buffer {
	st := &j.stand[k]
	if st.bufs == nil {
		st.bufs, st.set = make([]buffer, j.Size()), make([]gpu.Buffer, j.Size())
	}
	for rank, dev := range j.c.devs {
		st.bufs[rank] = buffer{dev: dev, n: n}
		st.set[rank] = &st.bufs[rank]
	}
	return st.set
}

// runRemote runs a call of the communicator over every rank's devices with the exchange's data
// movement standing in for its own: write puts this rank's outputs in place when data moved.
func (j *joined) runRemote(out wireOut, write func(), run func() error) error {
	j.c.remote = &remoteData{moved: out.Moved, write: write}
	defer func() { j.c.remote = nil }()
	return run()
}

// output is the part-th output of out, which must be n bytes or none.
func output(out wireOut, part int, n int64) ([]byte, error) {
	if part >= len(out.data) || len(out.data[part]) == 0 {
		return nil, nil
	}
	if d := out.data[part]; int64(len(d)) != n {
		return nil, fmt.Errorf("sim: the exchange sent %d bytes of an output of %d", len(d), n)
	}
	return out.data[part], nil
}

// collective enqueues a call that every rank makes with one input of sendN bytes and one output
// of recvN bytes; run gets every rank's buffers: this rank's own, the others' stand-ins.
func (j *joined) collective(w wireCall, send, recv []gpu.Buffer, sendN, recvN int64, run func(send, recv []gpu.Buffer) error) error {
	if len(send) != j.Size() || len(recv) != j.Size() || send[j.rank] == nil || recv[j.rank] == nil {
		return fmt.Errorf("sim %s: rank %d needs its send and receive buffers among %d: %w", w, j.rank, j.Size(), gpu.ErrInvalid)
	}
	if send[j.rank].Len() < sendN || recv[j.rank].Len() < recvN {
		return fmt.Errorf("sim %s: rank %d's buffers are smaller than %d and %d bytes: %w", w, j.rank, sendN, recvN, gpu.ErrInvalid)
	}
	mine := j.part(send[j.rank], sendN, -1, true)
	mine.HasData = mine.HasData && recv[j.rank].HasData()
	if !mine.HasData || w.Coll == "broadcast" && w.Root != j.rank { // a broadcast reads the root's alone
		mine.data, mine.Bytes = nil, 0
	}
	w.Parts = []wirePart{mine}
	return j.enqueue(&call{wire: w, outN: recvN, run: func(out wireOut) error {
		data, err := output(out, 0, recvN)
		if err != nil {
			return err
		}
		s, r := j.standIns(0, sendN), j.standIns(1, recvN)
		s[j.rank], r[j.rank] = send[j.rank], recv[j.rank]
		write := func() {
			if data != nil { // a reduce writes the root's output alone
				copy(bytesOf(recv[j.rank], recvN), data)
			}
		}
		return j.runRemote(out, write, func() error { return run(s, r) })
	}})
}

func (j *joined) AllReduce(send, recv []gpu.Buffer, count int64, dt gpu.DType, op gpu.RedOp) error {
	n := count * int64(dt.Size())
	return j.collective(wireCall{Coll: "allreduce", Count: count, DT: dt, Op: op}, send, recv, n, n, func(s, r []gpu.Buffer) error {
		return j.c.AllReduce(s, r, count, dt, op)
	})
}

func (j *joined) AllGather(send, recv []gpu.Buffer, sendCount int64, dt gpu.DType) error {
	n := sendCount * int64(dt.Size())
	return j.collective(wireCall{Coll: "allgather", Count: sendCount, DT: dt}, send, recv, n, n*int64(j.Size()), func(s, r []gpu.Buffer) error {
		return j.c.AllGather(s, r, sendCount, dt)
	})
}

func (j *joined) ReduceScatter(send, recv []gpu.Buffer, recvCount int64, dt gpu.DType, op gpu.RedOp) error {
	n := recvCount * int64(dt.Size())
	return j.collective(wireCall{Coll: "reducescatter", Count: recvCount, DT: dt, Op: op}, send, recv, n*int64(j.Size()), n, func(s, r []gpu.Buffer) error {
		return j.c.ReduceScatter(s, r, recvCount, dt, op)
	})
}

func (j *joined) Broadcast(send, recv []gpu.Buffer, count int64, dt gpu.DType, root int) error {
	n := count * int64(dt.Size())
	return j.collective(wireCall{Coll: "broadcast", Count: count, DT: dt, Root: root}, send, recv, n, n, func(s, r []gpu.Buffer) error {
		return j.c.Broadcast(s, r, count, dt, root)
	})
}

func (j *joined) Reduce(send, recv []gpu.Buffer, count int64, dt gpu.DType, op gpu.RedOp, root int) error {
	n := count * int64(dt.Size())
	return j.collective(wireCall{Coll: "reduce", Count: count, DT: dt, Op: op, Root: root}, send, recv, n, n, func(s, r []gpu.Buffer) error {
		return j.c.Reduce(s, r, count, dt, op, root)
	})
}

func (j *joined) AllToAll(send, recv []gpu.Buffer, count int64, dt gpu.DType) error {
	n := count * int64(dt.Size()) * int64(j.Size())
	return j.collective(wireCall{Coll: "alltoall", Count: count, DT: dt}, send, recv, n, n, func(s, r []gpu.Buffer) error {
		return j.c.AllToAll(s, r, count, dt)
	})
}

// SendRecv takes this rank's operations; the other ranks bring theirs, and each process knows
// every rank's (without data) to time the group.
func (j *joined) SendRecv(ops []gpu.P2POp, count int64, dt gpu.DType) error {
	n := count * int64(dt.Size())
	var parts []wirePart
	for _, o := range ops {
		if o.Rank != j.rank {
			return fmt.Errorf("sim sendrecv: rank %d's process was given rank %d's operation: %w", j.rank, o.Rank, gpu.ErrInvalid)
		}
		if o.Buf == nil || o.Buf.Len() < n {
			return fmt.Errorf("sim sendrecv: rank %d's buffer is not %d bytes: %w", j.rank, n, gpu.ErrInvalid)
		}
		parts = append(parts, j.part(o.Buf, n, o.Peer, o.Send))
	}
	mine := slices.Clone(ops)
	w := wireCall{Coll: "sendrecv", Count: count, DT: dt, Parts: parts}
	return j.enqueue(&call{wire: w, outN: n, run: func(out wireOut) error {
		data := make([][]byte, len(mine))
		for i := range mine {
			var err error
			if data[i], err = output(out, i, n); err != nil {
				return err
			}
		}
		full := slices.Clone(mine)
		for rank, ps := range out.Peers {
			if rank == j.rank {
				continue
			}
			for _, p := range ps {
				full = append(full, gpu.P2POp{Rank: rank, Peer: p.Peer, Send: p.Send, Buf: &buffer{dev: j.c.devs[rank], n: n}})
			}
		}
		return j.runRemote(out, func() {
			for i, o := range mine {
				if !o.Send && data[i] != nil {
					copy(bytesOf(o.Buf, n), data[i])
				}
			}
		}, func() error { return j.c.SendRecv(full, count, dt) })
	}})
}

// serveHub is the exchange: it waits for every rank's hello, then, at each synchronization, for
// every rank's batch of calls; it runs each call's data movement and hands every rank its own
// outputs. A rank that leaves or disagrees ends it, with an error naming that rank sent to the
// others.
func serveHub(ln *net.TCPListener, await *hubWait) {
	defer ln.Close()
	ln.SetDeadline(time.Now().Add(joinWait))
	var members []*member
	done := make(chan struct{})
	defer func() {
		close(done)
		for _, m := range members {
			m.conn.Close()
		}
	}()
	size := 0
	for size == 0 || len(members) < size {
		conn, err := ln.Accept()
		if err != nil {
			fail(members, fmt.Sprintf("sim: only %d of %d ranks reached the exchange: %v", len(members), size, err))
			return
		}
		m := &member{conn: conn, enc: gob.NewEncoder(conn), in: bufio.NewReader(conn), spare: make(chan *scratch, 1)}
		m.dec = gob.NewDecoder(m.in)
		var hi wireHello
		conn.SetDeadline(time.Now().Add(joinWait))
		err = m.dec.Decode(&hi)
		conn.SetDeadline(time.Time{})
		switch {
		case err != nil:
			conn.Close()
			continue
		case size != 0 && hi.Size != size:
			err = fmt.Errorf("sim: rank %d joined a world of %d ranks, others a world of %d", hi.Rank, hi.Size, size)
		case slices.ContainsFunc(members, func(o *member) bool { return o.rank == hi.Rank }):
			err = fmt.Errorf("sim: two processes joined as rank %d", hi.Rank)
		case slices.ContainsFunc(members, func(o *member) bool { return o.dev == hi.Dev }):
			err = fmt.Errorf("sim: rank %d joined on device %d, which another rank has", hi.Rank, hi.Dev)
		}
		if err != nil {
			fail(append(members, m), err.Error())
			return
		}
		size, m.rank, m.dev = hi.Size, hi.Rank, hi.Dev
		members = append(members, m)
	}
	slices.SortFunc(members, func(a, b *member) int { return a.rank - b.rank })
	devs := make([]int, size)
	for i, m := range members {
		devs[i] = m.dev
	}
	for _, m := range members {
		if m.enc.Encode(wireReply{Devs: devs}) != nil {
			fail(members, fmt.Sprintf("sim: rank %d left the exchange as it started", m.rank))
			return
		}
		m.calls = make(chan wireBatch)
		go m.read(done, size)
	}
	var out, tmp scratch // the outputs of one meeting; the copies one call's data movement makes
	for {
		batches := make([]wireBatch, size)
		for _, m := range members {
			await.rank.Store(int64(m.rank) + 1)
			b, ok := <-m.calls
			if !ok {
				// At the end every rank closes the communicator after its last reply, and none
				// reads again; a rank still running hears who left.
				why := m.err.Error()
				if errors.Is(m.err, io.EOF) || errors.Is(m.err, io.ErrUnexpectedEOF) {
					why = "its process exited or closed the communicator"
				}
				fail(members, fmt.Sprintf("sim: rank %d left the communicator: %s", m.rank, why))
				return
			}
			if why := mismatch(batches[0], b, m.rank); why != "" {
				fail(members, why)
				return
			}
			batches[m.rank] = b
		}
		await.rank.Store(0)
		out.reset()
		replies, err := outputs(batches, &out, &tmp)
		if err != nil {
			fail(members, err.Error())
			return
		}
		for _, m := range members {
			select {
			case m.spare <- batches[m.rank].in: // the inputs are spent: the next batch reads into them
			default:
			}
		}
		tag := ""
		if len(batches[0].Calls) > 0 {
			tag = batches[0].Calls[0].String()
		}
		// Every rank gets its reply at once; one that cannot be reached ends the run for all,
		// named, rather than leaving the others waiting on a call it never finishes.
		var g errgroup.Group
		for _, m := range members {
			g.Go(func() error {
				r := replies[m.rank]
				err := m.enc.Encode(r)
				if err == nil {
					var bufs net.Buffers
					for _, o := range r.Out {
						bufs = append(bufs, o.data...)
					}
					err = writeData(m.conn, bufs)
				}
				if err != nil {
					return fmt.Errorf("rank %d: %w", m.rank, err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			fail(members, fmt.Sprintf("sim: the exchange could not send %s's data to %v", tag, err))
			return
		}
	}
}

// outputs runs every call of one synchronization, given every rank's batch, and returns each
// rank's reply, its data in out.
func outputs(batches []wireBatch, out, tmp *scratch) ([]wireReply, error) {
	replies := make([]wireReply, len(batches))
	for rank := range replies {
		replies[rank].Out = make([]wireOut, len(batches[0].Calls))
	}
	for i, c := range batches[0].Calls {
		parts := make([][]wirePart, len(batches))
		for rank, b := range batches {
			parts[rank] = b.Calls[i].Parts
			b.Calls[i].Parts = nil // the inputs go once this call is done
		}
		tmp.reset()
		data, err := callData(c, parts, out, tmp)
		if err != nil {
			return nil, err
		}
		var peers [][]wireOp
		if c.Coll == "sendrecv" {
			peers = make([][]wireOp, len(parts))
			for rank, ps := range parts {
				for _, p := range ps {
					peers[rank] = append(peers[rank], wireOp{Peer: p.Peer, Send: p.Send})
				}
			}
		}
		for rank := range replies {
			o := wireOut{Moved: data != nil, Peers: peers}
			if data != nil {
				o.data = data[rank]
				o.Bytes = make([]int64, len(o.data))
				for k, d := range o.data {
					o.Bytes[k] = int64(len(d))
				}
			}
			replies[rank].Out[i] = o
		}
	}
	return replies, nil
}

// callData runs one call's data movement over every rank's parts with the simulator's own code
// (comm.go), and returns each rank's outputs, by part, in out; nil when some rank's buffers carry
// timing only, as then the call moves no data (as in one process).
func callData(c wireCall, parts [][]wirePart, out, tmp *scratch) ([][][]byte, error) {
	for _, ps := range parts {
		for _, p := range ps {
			if !p.HasData {
				return nil, nil
			}
		}
	}
	ranks := int64(len(parts))
	n := c.Count * int64(c.DT.Size())
	if c.Coll == "sendrecv" {
		return sendRecvOutputs(parts, n, out, tmp)
	}
	if c.Root < 0 || c.Root >= int(ranks) {
		return nil, nil // each rank's process refuses the call
	}
	sendN, recvN := n, n
	switch c.Coll {
	case "allgather":
		recvN = n * ranks
	case "reducescatter":
		sendN = n * ranks
	case "alltoall":
		sendN, recvN = n*ranks, n*ranks
	}
	send, recv := make([]gpu.Buffer, ranks), make([]gpu.Buffer, ranks)
	for rank, ps := range parts {
		if len(ps) != 1 {
			return nil, fmt.Errorf("sim %s: rank %d brought %d buffers: %w", c, rank, len(ps), gpu.ErrInvalid)
		}
		if int64(len(ps[0].data)) != sendN && (c.Coll != "broadcast" || rank == c.Root) {
			return nil, fmt.Errorf("sim %s: rank %d brought %d bytes of %d: %w", c, rank, len(ps[0].data), sendN, gpu.ErrInvalid)
		}
		send[rank] = &buffer{data: ps[0].data, n: sendN}
	}
	// Every rank's output of an all-reduce, all-gather or broadcast is the same: it is made once
	// and sent to each, rather than copied for each rank into memory of its own.
	same := c.Coll == "allreduce" || c.Coll == "allgather" || c.Coll == "broadcast"
	if same {
		recv = recv[:1]
	}
	for rank := range recv {
		recv[rank] = &buffer{data: out.take(recvN), n: recvN}
	}
	switch c.Coll {
	case "allreduce":
		allReduceData(send, recv, n, c.DT, c.Op, tmp)
	case "allgather":
		allGatherData(send, recv, n, tmp)
	case "reducescatter":
		reduceScatterData(send, recv, n, c.DT, c.Op, tmp)
	case "broadcast":
		broadcastData(send, recv, n, c.Root, tmp)
	case "reduce":
		reduceData(send, recv, n, c.DT, c.Op, c.Root, tmp)
	case "alltoall":
		allToAllData(send, recv, n, tmp)
	default:
		return nil, fmt.Errorf("sim: the exchange got an unknown call %s: %w", c, gpu.ErrInvalid)
	}
	data := make([][][]byte, ranks)
	for rank := range data {
		x := recv[0]
		if !same {
			x = recv[rank]
		}
		if c.Coll != "reduce" || rank == c.Root {
			data[rank] = [][]byte{x.(*buffer).data}
		}
	}
	return data, nil
}

// sendRecvOutputs moves a send/receive group's data: each receive gets its matching send's.
func sendRecvOutputs(parts [][]wirePart, n int64, out, tmp *scratch) ([][][]byte, error) {
	sends, recvs := map[pair]gpu.Buffer{}, map[pair]gpu.Buffer{}
	for rank, ps := range parts {
		for _, p := range ps {
			switch {
			case p.Send && int64(len(p.data)) != n:
				return nil, fmt.Errorf("sim sendrecv: rank %d brought %d bytes of %d: %w", rank, len(p.data), n, gpu.ErrInvalid)
			case p.Send:
				sends[pair{rank, p.Peer}] = &buffer{data: p.data, n: n}
			default:
				recvs[pair{p.Peer, rank}] = &buffer{data: out.take(n), n: n}
			}
		}
	}
	sendRecvData(sends, recvs, n, tmp)
	data := make([][][]byte, len(parts))
	for rank, ps := range parts {
		data[rank] = make([][]byte, len(ps))
		for i, p := range ps {
			if _, sent := sends[pair{p.Peer, rank}]; !p.Send && sent {
				data[rank][i] = recvs[pair{p.Peer, rank}].(*buffer).data
			}
		}
	}
	return data, nil
}

type member struct {
	rank  int
	dev   int
	conn  net.Conn
	enc   *gob.Encoder
	in    *bufio.Reader // the rank's messages and the data after them
	dec   *gob.Decoder
	calls chan wireBatch
	spare chan *scratch // the memory of the rank's last batch, once the exchange is done with it
	err   error         // why calls was closed
}

// mismatch says how rank's batch differs from rank 0's, or "" when every call is the same.
func mismatch(first, b wireBatch, rank int) string {
	if rank == 0 {
		return ""
	}
	for i := range min(len(first.Calls), len(b.Calls)) {
		x, y := &b.Calls[i], &first.Calls[i]
		if x.Coll == y.Coll && x.Count == y.Count && x.DT == y.DT && x.Op == y.Op && x.Root == y.Root {
			continue // String is made of these alone: a timed loop's thousands of calls format nothing
		}
		if x, y := x.String(), y.String(); x != y {
			return fmt.Sprintf("sim: rank %d called %s while rank 0 called %s", rank, x, y)
		}
	}
	if len(b.Calls) != len(first.Calls) {
		return fmt.Sprintf("sim: rank %d made %d calls since the ranks last met at the exchange, rank 0 made %d", rank, len(b.Calls), len(first.Calls))
	}
	return ""
}

// read passes on the rank's batches, each with its data, until the rank leaves or done is closed.
func (m *member) read(done <-chan struct{}, size int) {
	defer close(m.calls)
	for {
		var c wireBatch
		if m.err = m.dec.Decode(&c); m.err != nil {
			return
		}
		select {
		case c.in = <-m.spare:
			c.in.reset()
		default:
			c.in = &scratch{}
		}
		if m.err = c.readData(m.in, size); m.err != nil {
			return
		}
		select {
		case m.calls <- c:
		case <-done:
			return
		}
	}
}

// fail tells every member why the exchange ends.
func fail(members []*member, why string) {
	for _, m := range members {
		m.conn.SetWriteDeadline(time.Now().Add(time.Second))
		m.enc.Encode(wireReply{Err: why})
	}
}

// scratch is memory that one side of the exchange reuses from one meeting to the next: fresh
// memory costs the kernel a page fault a page, which for a meeting's data costs more than moving
// it. When a meeting takes more than the scratch holds, the scratch doubles (or more), and the
// memory it held stays with the slices taken from it until they are dropped.
type scratch struct {
	buf  []byte
	used int64
}

// take returns n bytes of the scratch, which hold what they last held.
func (s *scratch) take(n int64) []byte {
	if s.used+n > int64(len(s.buf)) {
		s.buf, s.used = make([]byte, max(n, 2*int64(len(s.buf)))), 0
	}
	b := s.buf[s.used : s.used+n : s.used+n]
	s.used += n
	return b
}

// reset makes all of the scratch free again: the caller is done with what it took.
func (s *scratch) reset() { s.used = 0 }

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n *int64
}

func (c countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}
