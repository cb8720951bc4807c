package gpu

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Device describes one GPU as a backend presents it.
type Device struct {
	Ordinal     int    // the backend's device index (the CUDA ordinal on real GPUs)
	Name        string // marketing name, e.g. "NVIDIA H100 80GB HBM3"
	PCIBusID    string // domain:bus:device.function, e.g. "0000:18:00.0"
	MemoryBytes int64  // total device memory
	Host        string // host name the device lives on
}

// Buffer is device memory, or a view into it.
type Buffer interface {
	Device() int
	Len() int64
	// Slice returns the view [off, off+n) of the buffer.
	Slice(off, n int64) Buffer
	// HasData reports whether the buffer holds real data. Simulated buffers past the simulator's
	// data cap carry timing only; copies to and from them fail with ErrNoData.
	HasData() bool
}

// Backend is a set of devices and the operations gpubench needs on them.
type Backend interface {
	// Name is the backend's flag value: "sim", or a real one.
	Name() string
	Devices() []Device
	Topology() *Topology
	// Now is the host clock that benchmarks time with: the wall clock on real GPUs, virtual time
	// on the simulator.
	Now() time.Duration
	Alloc(dev int, n int64) (Buffer, error)
	Free(b Buffer) error
	CopyIn(dst Buffer, src []byte) error
	CopyOut(dst []byte, src Buffer) error
	Memset(dst Buffer, v byte) error
	// NewComm makes a communicator with one rank per listed device, in order.
	NewComm(devices []int) (Comm, error)
	Close() error
}

// P2POp is one side of a point-to-point transfer inside a SendRecv group.
type P2POp struct {
	Rank, Peer int
	Send       bool // send Buf to Peer, or receive Buf from Peer
	Buf        Buffer
}

// Comm is a communicator over a backend's devices. Every call enqueues the collective on every
// rank this process drives and returns without waiting; Synchronize waits. Buffer slices are
// indexed by rank and have Size() entries; in a communicator that spans processes (Joiner), the
// entries of ranks that other processes drive are nil, and SendRecv takes only this process's
// ranks' operations. Counts are in elements: per rank for AllGather's send and ReduceScatter's
// receive side, per peer for AllToAll.
type Comm interface {
	// Size is the number of ranks, in every process together.
	Size() int
	AllReduce(send, recv []Buffer, count int64, dt DType, op RedOp) error
	AllGather(send, recv []Buffer, sendCount int64, dt DType) error
	ReduceScatter(send, recv []Buffer, recvCount int64, dt DType, op RedOp) error
	Broadcast(send, recv []Buffer, count int64, dt DType, root int) error
	Reduce(send, recv []Buffer, count int64, dt DType, op RedOp, root int) error
	AllToAll(send, recv []Buffer, count int64, dt DType) error
	// SendRecv runs a group of point-to-point transfers; every send must match a receive.
	SendRecv(ops []P2POp, count int64, dt DType) error
	// Synchronize waits until every rank's queued work is done, or ctx ends. A rank that never
	// finishes makes it return a *HangError once ctx ends.
	Synchronize(ctx context.Context) error
	Close() error
}

// Joiner is a Backend whose communicators can span processes, one rank per process, as
// ncclGetUniqueId and ncclCommInitRank make them.
type Joiner interface {
	// NewUniqueID makes the id that rank 0 hands to every process. Rank 0 must keep the backend
	// open until every rank has joined.
	NewUniqueID() ([]byte, error)
	// JoinComm makes this process's rank of a communicator of size ranks, on device dev. Every
	// process calls it with the same id and size and its own rank; it returns once all have, or
	// with ctx's cause once ctx ends.
	JoinComm(ctx context.Context, id []byte, size, rank, dev int) (Comm, error)
}

// StreamTimer is a Comm that times its own streams, as CUDA events do.
type StreamTimer interface {
	// Reserve readies n marks, so that within the timed loop a Mark only records.
	Reserve(n int) error
	// Mark records, on the stream of every rank this process drives, the moment the work queued
	// so far ends.
	Mark() error
	// Intervals returns, once the streams are synchronized, the time between consecutive marks
	// (the longest over this process's ranks), and forgets the marks.
	Intervals() ([]time.Duration, error)
}

// GraphComm is a Comm that can record its calls as a graph and replay them (CUDA graphs, as
// nccl-tests' -G uses them).
type GraphComm interface {
	Comm
	// BeginCapture starts recording: calls until EndCapture are recorded, not run.
	BeginCapture() error
	EndCapture() (Graph, error)
}

// Graph is a recorded sequence of calls.
type Graph interface {
	// Launch enqueues the whole graph once on every rank.
	Launch() error
	Destroy() error
}

// DataSkipper is a Comm whose data movement costs host CPU rather than device time (the
// simulator). While skipping, its calls take the time they would and leave the buffers as they
// were: the engine skips the warm-up and the timed loop, whose results nobody reads, since every
// check reloads its inputs first.
type DataSkipper interface {
	SkipData(skip bool)
}

// Explainer is a Comm that can say how it runs a collective of a size: the algorithm, protocol
// and channels NCCL's tuner picks (the simulator; real NCCL does not say). coll is the engine's
// name (allreduce, alltoall, ...), bytes the whole buffer as nccl-tests counts it, and dt and op
// the type and reduction (NCCL serves some, such as an average, by fewer algorithms).
type Explainer interface {
	Explain(coll string, bytes int64, dt DType, op RedOp) (algo, proto string, channels int)
}

// TypeChecker is a Backend that supports only some types and ops (an older NCCL).
type TypeChecker interface {
	CheckTypes(dts []DType, ops []RedOp) error
}

// Errors every backend reports in the same way.
var (
	ErrNoData      = errors.New("buffer holds no data (timing-only)")
	ErrOutOfMemory = errors.New("out of device memory")
	ErrInvalid     = errors.New("invalid argument")
)

// HangError says which ranks (or, for copies, devices) had not finished when a wait was
// abandoned.
type HangError struct {
	Ranks   []int
	Err     error // why the wait ended (the context's error)
	Devices bool  // Ranks are device ordinals: copies hang on devices, not communicator ranks
}

func (e *HangError) Error() string {
	if len(e.Ranks) == 0 { // a process waiting on ranks it cannot see
		return "the other ranks did not arrive: " + e.Err.Error()
	}
	what := "rank"
	if e.Devices {
		what = "device"
	}
	if len(e.Ranks) > 1 {
		what += "s"
	}
	return what + " " + intList(e.Ranks) + " did not finish: " + e.Err.Error()
}

func (e *HangError) Unwrap() error { return e.Err }

func intList(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
