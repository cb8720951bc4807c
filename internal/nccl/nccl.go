//go:build cgo

// Package nccl binds NCCL (libnccl.so.2) through dlopen and a small C shim, on top of the CUDA
// runtime binding: it turns a cuda.Backend into one whose communicators run every collective on
// the real GPUs. With internal/cuda it is the only place gpubench uses cgo and unsafe.
package nccl

/*
#cgo LDFLAGS: -ldl -lpthread
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/gpubench/gpubench/internal/cuda"
	"github.com/gpubench/gpubench/internal/gpu"
)

// Error is a failed NCCL call: the function, the ncclResult_t, its name, NCCL's message and the
// text of ncclGetLastError.
type Error struct {
	Func string
	Code int
	Name string
	Msg  string
	Last string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s (%d): %s", e.Func, e.Name, e.Code, e.Msg)
	if e.Last != "" {
		s += ": " + e.Last
	}
	return s
}

var resultNames = []string{"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
	"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress", "ncclTimeout"}

func check(fn string, rc C.int) error {
	switch {
	case rc == 0:
		return nil
	case rc < 0:
		return cuda.CodeError(fn, int(-rc))
	}
	name := fmt.Sprintf("ncclResult(%d)", int(rc))
	if int(rc) < len(resultNames) {
		name = resultNames[rc]
	}
	return &Error{Func: fn, Code: int(rc), Name: name, Msg: C.GoString(C.gn_nccl_error_string(rc)),
		Last: strings.TrimSpace(C.GoString(C.gn_last_error()))}
}

// ErrNotFound wraps the failure to load any libnccl.
var ErrNotFound = errors.New("no NCCL library could be loaded")

var loaded struct {
	sync.Mutex
	path string
}

// Candidates lists where gpubench looks for libnccl: the explicit path (flag or GPUBENCH_NCCL),
// the soname, then the usual CUDA folders and the NCCL Python wheel's nvidia/nccl/lib.
func Candidates(explicit string) []string {
	return cuda.LibraryCandidates(explicit, "GPUBENCH_NCCL", []string{"libnccl.so.2"}, []string{"nvidia/nccl/lib"})
}

// Backend is the real GPUs with NCCL: the CUDA backend, whose communicators are NCCL's.
type Backend struct {
	*cuda.Backend
	NCCLPath string
	Version  int // as ncclGetVersion reports it
}

var (
	_ gpu.Backend     = (*Backend)(nil)
	_ gpu.TypeChecker = (*Backend)(nil)
)

// Alloc allocates device memory as nccl-tests does: with ncclMemAlloc where NCCL has it (2.19+),
// memory NCCL can register for zero-copy (NVLS in CUDA graphs, which cudaMalloc's memory is not:
// NCCL's "User Buffer Registration" documentation), else as the CUDA backend does.
func (b *Backend) Alloc(dev int, n int64) (gpu.Buffer, error) {
	if C.gn_has(C.GN_HAS_MEMALLOC) == 0 {
		return b.Backend.Alloc(dev, n)
	}
	return b.Backend.AllocWith(dev, n, memAlloc, memFree)
}

func memAlloc(dev int, n int64) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := check("ncclMemAlloc", C.gn_mem_alloc(C.int(dev), C.size_t(n), &p))
	return p, err
}

func memFree(dev int, p unsafe.Pointer) error {
	return check("ncclMemFree", C.gn_mem_free(C.int(dev), p))
}

// Open loads NCCL for the given CUDA backend (whose libcudart NCCL's streams come from).
func Open(cb *cuda.Backend, explicit string) (*Backend, error) {
	loaded.Lock()
	defer loaded.Unlock()
	if loaded.path == "" {
		var tried []string
		buf := (*C.char)(C.malloc(1024))
		defer C.free(unsafe.Pointer(buf))
		crt := C.CString(cb.Path)
		defer C.free(unsafe.Pointer(crt))
		for _, p := range Candidates(explicit) {
			cp := C.CString(p)
			ok := C.gn_load(cp, crt, buf, 1024)
			C.free(unsafe.Pointer(cp))
			if ok == 1 {
				loaded.path = p
				break
			}
			tried = append(tried, C.GoString(buf))
		}
		if loaded.path == "" {
			return nil, fmt.Errorf("%w: tried %s; install NCCL (e.g. pip install nvidia-nccl-cu12) or point --nccl-lib or GPUBENCH_NCCL at libnccl.so.2, or use --backend sim",
				ErrNotFound, strings.Join(tried, "; "))
		}
	}
	var v C.int
	if err := check("ncclGetVersion", C.gn_version(&v)); err != nil {
		return nil, err
	}
	return &Backend{Backend: cb, NCCLPath: loaded.path, Version: int(v)}, nil
}

// Describe says which CUDA and NCCL versions run, and which libraries were loaded.
func (b *Backend) Describe() string {
	return fmt.Sprintf("%s, NCCL %s (%s)", b.Backend.Describe(), VersionString(b.Version), b.NCCLPath)
}

// VersionString decodes an NCCL version code, in either of its encodings (X*1000+Y*100+Z up to
// 2.8, X*10000+Y*100+Z from 2.9).
func VersionString(v int) string {
	if v < 10000 {
		return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
}

// atLeast compares a version code with major.minor, whatever the encoding.
func atLeast(v, major, minor int) bool {
	var maj, mn int
	if v < 10000 {
		maj, mn = v/1000, v%1000/100
	} else {
		maj, mn = v/10000, v%10000/100
	}
	return maj > major || maj == major && mn >= minor
}

// CheckTypes reports the types and ops the loaded NCCL lacks: bfloat16 and avg came in 2.10.
func (b *Backend) CheckTypes(dts []gpu.DType, ops []gpu.RedOp) error {
	if atLeast(b.Version, 2, 10) {
		return nil
	}
	for _, d := range dts {
		if d == gpu.BFloat16 {
			return fmt.Errorf("bfloat16 needs NCCL 2.10 or later; the loaded NCCL is %s", VersionString(b.Version))
		}
	}
	for _, o := range ops {
		if o == gpu.Avg {
			return fmt.Errorf("the avg op needs NCCL 2.10 or later; the loaded NCCL is %s", VersionString(b.Version))
		}
	}
	return nil
}

// NewComm makes one NCCL communicator per device, each with its own non-blocking stream. The
// communicators are blocking, as nccl-tests makes them: a non-blocking one costs every group end a
// thread, which shows in small-message times. A hang can still be aborted, since gpubench waits
// outside NCCL (Synchronize) and aborts only from there.
func (b *Backend) NewComm(devices []int) (gpu.Comm, error) {
	n := len(devices)
	if n == 0 {
		return nil, fmt.Errorf("nccl comm: no devices: %w", gpu.ErrInvalid)
	}
	c := &comm{b: b, devs: make([]C.int, n), comms: make([]unsafe.Pointer, n), streams: make([]unsafe.Pointer, n), world: n,
		sendPtrs: make([]unsafe.Pointer, n), recvPtrs: make([]unsafe.Pointer, n)}
	for i, d := range devices {
		c.devs[i] = C.int(d)
	}
	if err := check("ncclCommInitRankConfig", C.gn_comm_init(C.int(n), &c.devs[0], &c.comms[0], &c.streams[0])); err != nil {
		C.gn_comm_destroy(C.int(n), &c.devs[0], &c.comms[0], &c.streams[0], 1)
		return nil, err
	}
	return c, nil
}

var _ gpu.Joiner = (*Backend)(nil)

// NewUniqueID returns a new ncclUniqueId: NCCL's bootstrap root, listening in this process.
func (b *Backend) NewUniqueID() ([]byte, error) {
	id := make([]byte, uniqueIDBytes)
	if err := check("ncclGetUniqueId", C.gn_unique_id((*C.char)(unsafe.Pointer(&id[0])))); err != nil {
		return nil, err
	}
	return id, nil
}

// uniqueIDBytes is NCCL_UNIQUE_ID_BYTES.
const uniqueIDBytes = 128

// JoinComm makes this process's rank of a communicator across processes (ncclCommInitRank), on
// device dev, configured as NewComm's. The init blocks inside NCCL until every rank has called
// it; when ctx ends first (another rank failed), JoinComm returns ctx's cause and leaves the init
// to the process's exit, since a communicator NCCL has not yet returned cannot be aborted.
func (b *Backend) JoinComm(ctx context.Context, id []byte, size, rank, dev int) (gpu.Comm, error) {
	if len(id) != uniqueIDBytes || size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("nccl: joining as rank %d of %d with a %d-byte id: %w", rank, size, len(id), gpu.ErrInvalid)
	}
	c := &comm{b: b, devs: []C.int{C.int(dev)}, comms: make([]unsafe.Pointer, 1), streams: make([]unsafe.Pointer, 1), first: rank, world: size,
		sendPtrs: make([]unsafe.Pointer, 1), recvPtrs: make([]unsafe.Pointer, 1)}
	done := make(chan error, 1)
	go func() {
		cid := C.CBytes(id)
		defer C.free(cid)
		err := check("ncclCommInitRankConfig", C.gn_comm_init_rank(C.int(dev), C.int(size), (*C.char)(cid), C.int(rank), &c.comms[0], &c.streams[0]))
		if err != nil {
			C.gn_comm_destroy(1, &c.devs[0], &c.comms[0], &c.streams[0], 1)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

type comm struct {
	b              *Backend
	devs           []C.int            // this process's ranks' devices
	first, world   int                // the rank of devs[0], and the number of ranks in every process
	comms, streams []unsafe.Pointer   // C handles, one per rank of this process's
	marks          [][]unsafe.Pointer // events recorded by Mark, one per rank each
	spare          [][]unsafe.Pointer // events made and not recorded: Reserve's, and Intervals' used ones
	aborted        bool               // the communicators are gone
	failed         bool               // a call failed: close by aborting
	capturing      bool
	// sendPtrs and recvPtrs hold a collective's device addresses, one per rank of this process's,
	// made once so that a call allocates nothing (a comm is used by one goroutine at a time);
	// p2pRank, p2pPeer, p2pSend and p2pBufs are SendRecv's, grown to the most operations a call
	// has had.
	sendPtrs, recvPtrs        []unsafe.Pointer
	p2pRank, p2pPeer, p2pSend []C.int
	p2pBufs                   []unsafe.Pointer
}

var _ gpu.GraphComm = (*comm)(nil)

func (c *comm) Size() int { return c.world }

// local returns the index among this process's ranks of a rank, or false.
func (c *comm) local(rank int) (int, bool) {
	i := rank - c.first
	return i, i >= 0 && i < len(c.devs)
}

func (c *comm) Close() error {
	for _, ev := range append(c.marks, c.spare...) {
		C.gn_event_destroy(C.int(len(ev)), &ev[0])
	}
	c.marks, c.spare = nil, nil
	if c.aborted {
		return nil
	}
	abort := C.int(0)
	if c.failed {
		abort = 1
	}
	c.aborted = true
	return check("ncclCommDestroy", C.gn_comm_destroy(C.int(len(c.devs)), &c.devs[0], &c.comms[0], &c.streams[0], abort))
}

// failure marks the communicators for abort when err is an NCCL or CUDA failure.
func (c *comm) failure(err error) error {
	if err != nil {
		c.failed = true
	}
	return err
}

// ptrs puts the device addresses of this process's ranks' buffers into out, checking each is
// on its rank's device.
func (c *comm) ptrs(bufs []gpu.Buffer, out []unsafe.Pointer) error {
	if len(bufs) != c.world {
		return fmt.Errorf("nccl: %d buffers for %d ranks: %w", len(bufs), c.world, gpu.ErrInvalid)
	}
	for i, x := range bufs[c.first : c.first+len(c.devs)] {
		p, dev, err := cuda.Pointer(x)
		if err != nil {
			return err
		}
		if dev != int(c.devs[i]) {
			return fmt.Errorf("nccl: rank %d's buffer is on device %d, not %d: %w", c.first+i, dev, c.devs[i], gpu.ErrInvalid)
		}
		out[i] = p
	}
	return nil
}

func (c *comm) collective(name string, kind C.int, send, recv []gpu.Buffer, count int64, dt gpu.DType, op gpu.RedOp, root int) error {
	if c.aborted {
		return fmt.Errorf("nccl %s: the communicators were aborted: %w", name, gpu.ErrInvalid)
	}
	s, r := c.sendPtrs, c.recvPtrs
	if err := c.ptrs(send, s); err != nil {
		return err
	}
	if err := c.ptrs(recv, r); err != nil {
		return err
	}
	return c.failure(check(name, C.gn_collective(kind, C.int(len(c.devs)), &c.comms[0], &c.streams[0], &s[0], &r[0],
		C.size_t(count), C.int(dt), C.int(op), C.int(root))))
}

func (c *comm) AllReduce(send, recv []gpu.Buffer, count int64, dt gpu.DType, op gpu.RedOp) error {
	return c.collective("ncclAllReduce", C.GN_ALLREDUCE, send, recv, count, dt, op, 0)
}

func (c *comm) AllGather(send, recv []gpu.Buffer, sendCount int64, dt gpu.DType) error {
	return c.collective("ncclAllGather", C.GN_ALLGATHER, send, recv, sendCount, dt, 0, 0)
}

func (c *comm) ReduceScatter(send, recv []gpu.Buffer, recvCount int64, dt gpu.DType, op gpu.RedOp) error {
	return c.collective("ncclReduceScatter", C.GN_REDUCESCATTER, send, recv, recvCount, dt, op, 0)
}

func (c *comm) Broadcast(send, recv []gpu.Buffer, count int64, dt gpu.DType, root int) error {
	return c.collective("ncclBroadcast", C.GN_BROADCAST, send, recv, count, dt, 0, root)
}

func (c *comm) Reduce(send, recv []gpu.Buffer, count int64, dt gpu.DType, op gpu.RedOp, root int) error {
	return c.collective("ncclReduce", C.GN_REDUCE, send, recv, count, dt, op, root)
}

// AllToAll uses ncclAlltoAll where the loaded NCCL has it (2.28+), and otherwise, or in place
// (which ncclAlltoAll does not support), a group of sends and receives to and from every peer, as
// NCCL's documentation shows.
func (c *comm) AllToAll(send, recv []gpu.Buffer, count int64, dt gpu.DType) error {
	if len(send) != c.world || len(recv) != c.world {
		return fmt.Errorf("nccl alltoall: %d and %d buffers for %d ranks: %w", len(send), len(recv), c.world, gpu.ErrInvalid)
	}
	if C.gn_has(C.GN_HAS_ALLTOALL) == 1 && !sameStart(send[c.first], recv[c.first]) {
		return c.collective("ncclAlltoAll", C.GN_ALLTOALL, send, recv, count, dt, 0, 0)
	}
	chunk := count * int64(dt.Size())
	var ops []gpu.P2POp
	for r := c.first; r < c.first+len(c.devs); r++ {
		for p := 0; p < c.world; p++ {
			ops = append(ops,
				gpu.P2POp{Rank: r, Peer: p, Send: true, Buf: send[r].Slice(int64(p)*chunk, chunk)},
				gpu.P2POp{Rank: r, Peer: p, Buf: recv[r].Slice(int64(p)*chunk, chunk)})
		}
	}
	return c.SendRecv(ops, count, dt)
}

// sameStart reports whether two buffers start at the same address (an in-place call).
func sameStart(a, b gpu.Buffer) bool {
	pa, _, errA := cuda.Pointer(a)
	pb, _, errB := cuda.Pointer(b)
	return errA == nil && errB == nil && pa == pb
}

func (c *comm) SendRecv(ops []gpu.P2POp, count int64, dt gpu.DType) error {
	if c.aborted {
		return fmt.Errorf("nccl send/recv: the communicators were aborted: %w", gpu.ErrInvalid)
	}
	n := len(ops)
	if n == 0 {
		return nil
	}
	if len(c.p2pBufs) < n {
		c.p2pRank, c.p2pPeer, c.p2pSend, c.p2pBufs = make([]C.int, n), make([]C.int, n), make([]C.int, n), make([]unsafe.Pointer, n)
	}
	rank, peer, isSend, bufs := c.p2pRank[:n], c.p2pPeer[:n], c.p2pSend[:n], c.p2pBufs[:n]
	for i, o := range ops {
		l, ok := c.local(o.Rank)
		if !ok || o.Peer < 0 || o.Peer >= c.world {
			return fmt.Errorf("nccl send/recv: rank %d (this process has %d-%d) or peer %d (of %d): %w", o.Rank, c.first, c.first+len(c.devs)-1, o.Peer, c.world, gpu.ErrInvalid)
		}
		p, dev, err := cuda.Pointer(o.Buf)
		if err != nil {
			return err
		}
		if dev != int(c.devs[l]) {
			return fmt.Errorf("nccl send/recv: rank %d's buffer is on device %d: %w", o.Rank, dev, gpu.ErrInvalid)
		}
		rank[i], peer[i], bufs[i], isSend[i] = C.int(l), C.int(o.Peer), p, 0
		if o.Send {
			isSend[i] = 1
		}
	}
	return c.failure(check("ncclSend/ncclRecv", C.gn_sendrecv(C.int(len(c.devs)), C.int(n), &c.comms[0], &c.streams[0], &rank[0], &peer[0], &isSend[0], &bufs[0], C.size_t(count), C.int(dt))))
}

// Reserve makes events for n marks, one per rank each, beforehand.
func (c *comm) Reserve(n int) error {
	for len(c.spare) < n {
		ev := make([]unsafe.Pointer, len(c.devs))
		if err := check("cudaEventCreate", C.gn_event_create(C.int(len(c.devs)), &c.devs[0], &ev[0])); err != nil {
			C.gn_event_destroy(C.int(len(ev)), &ev[0])
			return err
		}
		c.spare = append(c.spare, ev)
	}
	return nil
}

// Mark records an event on every rank's stream.
func (c *comm) Mark() error {
	if err := c.Reserve(1); err != nil {
		return err
	}
	ev := c.spare[len(c.spare)-1]
	if err := check("cudaEventRecord", C.gn_record(C.int(len(c.devs)), &c.devs[0], &c.streams[0], &ev[0])); err != nil {
		return err
	}
	c.spare = c.spare[:len(c.spare)-1]
	c.marks = append(c.marks, ev)
	return nil
}

// Intervals returns the device time between consecutive marks, the longest over the ranks.
func (c *comm) Intervals() ([]time.Duration, error) {
	defer func() { // the events serve again
		c.spare = append(c.spare, c.marks...)
		c.marks = nil
	}()
	var out []time.Duration
	for i := 1; i < len(c.marks); i++ {
		var longest time.Duration
		for r := range c.devs {
			var ms C.float
			if err := check("cudaEventElapsedTime", C.gn_elapsed(c.marks[i-1][r], c.marks[i][r], &ms)); err != nil {
				return nil, err
			}
			longest = max(longest, time.Duration(float64(ms)*1e6))
		}
		out = append(out, longest)
	}
	return out, nil
}

// Synchronize polls every rank's stream and communicator, as NCCL's documentation prescribes for
// an application that must not hang: an asynchronous error, or ctx ending, aborts the
// communicators. It spins, yielding, as nccl-tests does, so that the end of the timed loop is
// seen at once.
func (c *comm) Synchronize(ctx context.Context) error {
	if c.aborted {
		return fmt.Errorf("nccl: the communicators were aborted: %w", gpu.ErrInvalid)
	}
	n := len(c.devs)
	busy, async := make([]C.int, n), make([]C.int, n)
	for {
		if err := check("cudaStreamQuery", C.gn_query(C.int(n), &c.comms[0], &c.streams[0], &busy[0], &async[0])); err != nil {
			c.abort()
			return err
		}
		idle := true
		for r := range busy {
			if async[r] != 0 {
				err := check(fmt.Sprintf("ncclCommGetAsyncError (rank %d)", c.first+r), async[r])
				c.abort()
				return err
			}
			idle = idle && busy[r] == 0
		}
		if idle {
			return nil
		}
		if err := ctx.Err(); err != nil {
			var ranks []int
			for r := range busy {
				if busy[r] != 0 {
					ranks = append(ranks, c.first+r)
				}
			}
			c.abort()
			return &gpu.HangError{Ranks: ranks, Err: err}
		}
		runtime.Gosched()
	}
}

// abort aborts every rank's communicator (NCCL needs all local ranks to abort together).
func (c *comm) abort() {
	if !c.aborted {
		C.gn_comm_abort(C.int(len(c.devs)), &c.comms[0])
		c.aborted = true
	}
}

// BeginCapture starts capturing every rank's stream into a CUDA graph. Captures are per OS thread
// (cudaStreamCaptureModeThreadLocal), so the goroutine stays on its thread until EndCapture.
func (c *comm) BeginCapture() error {
	if C.gn_has(C.GN_HAS_GRAPH) != 1 {
		return errors.New("graph mode (-G) needs CUDA graphs (cudaStreamBeginCapture, cudaGraphInstantiateWithFlags: CUDA 11.4 or later) and NCCL 2.9 or later, which the loaded libraries lack")
	}
	runtime.LockOSThread()
	if err := check("cudaStreamBeginCapture", C.gn_begin_capture(C.int(len(c.devs)), &c.devs[0], &c.streams[0])); err != nil {
		execs := make([]unsafe.Pointer, len(c.devs)) // end whatever did start capturing
		C.gn_end_capture(C.int(len(c.devs)), &c.devs[0], &c.streams[0], &execs[0])
		C.gn_graph_destroy(C.int(len(c.devs)), &execs[0])
		runtime.UnlockOSThread()
		return c.failure(err)
	}
	c.capturing = true
	return nil
}

func (c *comm) EndCapture() (gpu.Graph, error) {
	if !c.capturing {
		return nil, fmt.Errorf("nccl: not capturing: %w", gpu.ErrInvalid)
	}
	defer runtime.UnlockOSThread()
	c.capturing = false
	g := &graph{c: c, execs: make([]unsafe.Pointer, len(c.devs))}
	if err := check("cudaStreamEndCapture", C.gn_end_capture(C.int(len(c.devs)), &c.devs[0], &c.streams[0], &g.execs[0])); err != nil {
		C.gn_graph_destroy(C.int(len(c.devs)), &g.execs[0])
		return nil, c.failure(err)
	}
	return g, nil
}

type graph struct {
	c     *comm
	execs []unsafe.Pointer
}

func (g *graph) Launch() error {
	return check("cudaGraphLaunch", C.gn_graph_launch(C.int(len(g.execs)), &g.c.devs[0], &g.execs[0], &g.c.streams[0]))
}

func (g *graph) Destroy() error {
	return check("cudaGraphExecDestroy", C.gn_graph_destroy(C.int(len(g.execs)), &g.execs[0]))
}
