// Package coll is the collective benchmark engine: nccl-tests' method (byte counts, bus
// bandwidth factors, warm-up, timing, crafted inputs and exact checks) over any gpu.Backend.
package coll

import (
	"github.com/gpubench/gpubench/internal/gpu"
)

// Counts is how one requested size maps onto a collective's buffers, as nccl-tests computes it.
type Counts struct {
	Send, Recv int64 // elements in each rank's send and receive buffers
	Param      int64 // the count passed to the call: the table's count column
	Bytes      int64 // the table's size column, and the bytes algbw is computed from
}

// Args are the per-row parameters of a collective.
type Args struct {
	DType gpu.DType
	Op    gpu.RedOp
	Root  int
	Ranks int
}

// Collective is one collective's definition.
type Collective struct {
	Name string // command name, e.g. "allreduce"
	Perf string // the nccl-tests binary it matches, e.g. "all_reduce_perf"
	// Reduces: the collective reduces its inputs with the row's op.
	Reduces bool
	// TakesOp: the collective runs once per -o op and its rows name the op (otherwise the op
	// column says "none"): the reducing collectives, and send/recv, which nccl-tests'
	// sendrecv_perf runs per op though it reduces nothing.
	TakesOp bool
	// Rooted: the collective takes a root (otherwise the root column says -1).
	Rooted bool
	// InPlaceUnchecked: nccl-tests does not verify the in-place result.
	InPlaceUnchecked bool
	// Factor is busbw / algbw for n ranks.
	Factor func(n int) float64
	// Counts maps count = size / element size onto the buffers, for n ranks.
	Counts func(count int64, elt, n int) Counts
	// InPlace gives, in elements, where rank's send and receive views start inside its one
	// in-place buffer of max(Send, Recv) elements.
	InPlace func(k Counts, rank int) (send, recv int64)
	// Expected is what rank's receive buffer must hold afterwards, given the row's inputs (and
	// their exact reduction, for collectives that reduce) and what the buffer held before. One
	// that must build its answer may build it in dst's memory (as append does).
	Expected func(dst []byte, in *Row, before []byte, rank int, k Counts, a Args) []byte
	// Call enqueues the collective on every rank.
	Call func(c gpu.Comm, send, recv []gpu.Buffer, k Counts, a Args) error
}

// Collectives lists every collective, in the order the CLI shows them.
var Collectives = []*Collective{AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, SendRecv, Gather, Scatter}

func twoNm1n(n int) float64 { return 2 * float64(n-1) / float64(n) }
func nm1n(n int) float64    { return float64(n-1) / float64(n) }
func one(int) float64       { return 1 }

// same is the count rule of collectives whose buffers are all count elements.
func same(c int64, elt, _ int) Counts {
	return Counts{Send: c, Recv: c, Param: c, Bytes: c * int64(elt)}
}

// chunk is nccl-tests' per-rank count: count / n, rounded down to a multiple of 16 bytes.
func chunk(c int64, elt, n int) int64 { return (c / int64(n)) &^ int64(16/elt-1) }

func noOffset(Counts, int) (int64, int64) { return 0, 0 }

func elems(b []byte, dt gpu.DType, from, n int64) []byte {
	s := int64(dt.Size())
	return b[from*s : (from+n)*s]
}

// AllReduce: every rank ends with the reduction of all inputs.
var AllReduce = &Collective{
	Name: "allreduce", Perf: "all_reduce_perf", Reduces: true, TakesOp: true,
	Factor: twoNm1n, Counts: same, InPlace: noOffset,
	Expected: func(_ []byte, in *Row, _ []byte, _ int, _ Counts, _ Args) []byte {
		return in.Reduction()
	},
	Call: func(c gpu.Comm, s, r []gpu.Buffer, k Counts, a Args) error {
		return c.AllReduce(s, r, k.Param, a.DType, a.Op)
	},
}

// AllGather: every rank ends with all ranks' chunks, in rank order.
var AllGather = &Collective{
	Name: "allgather", Perf: "all_gather_perf",
	Factor: nm1n,
	Counts: func(c int64, elt, n int) Counts {
		b := chunk(c, elt, n)
		return Counts{Send: b, Recv: b * int64(n), Param: b, Bytes: b * int64(n*elt)}
	},
	InPlace: func(k Counts, rank int) (int64, int64) { return int64(rank) * k.Send, 0 },
	Expected: func(_ []byte, in *Row, _ []byte, _ int, _ Counts, _ Args) []byte {
		return in.Gathered()
	},
	Call: func(c gpu.Comm, s, r []gpu.Buffer, k Counts, a Args) error {
		return c.AllGather(s, r, k.Param, a.DType)
	},
}

// ReduceScatter: rank r ends with chunk r of the reduction.
var ReduceScatter = &Collective{
	Name: "reducescatter", Perf: "reduce_scatter_perf", Reduces: true, TakesOp: true,
	Factor: nm1n,
	Counts: func(c int64, elt, n int) Counts {
		b := chunk(c, elt, n)
		return Counts{Send: b * int64(n), Recv: b, Param: b, Bytes: b * int64(n*elt)}
	},
	InPlace: func(k Counts, rank int) (int64, int64) { return 0, int64(rank) * k.Recv },
	Expected: func(_ []byte, in *Row, _ []byte, rank int, k Counts, a Args) []byte {
		return elems(in.Reduction(), a.DType, int64(rank)*k.Recv, k.Recv)
	},
	Call: func(c gpu.Comm, s, r []gpu.Buffer, k Counts, a Args) error {
		return c.ReduceScatter(s, r, k.Param, a.DType, a.Op)
	},
}

// Broadcast: every rank ends with the root's input.
var Broadcast = &Collective{
	Name: "broadcast", Perf: "broadcast_perf", Rooted: true,
	Factor: one, Counts: same, InPlace: noOffset,
	Expected: func(_ []byte, in *Row, _ []byte, _ int, _ Counts, a Args) []byte {
		return in.Input(a.Root)
	},
	Call: func(c gpu.Comm, s, r []gpu.Buffer, k Counts, a Args) error {
		return c.Broadcast(s, r, k.Param, a.DType, a.Root)
	},
}

// Reduce: the root ends with the reduction; other ranks' receive buffers are left alone.
var Reduce = &Collective{
	Name: "reduce", Perf: "reduce_perf", Reduces: true, TakesOp: true, Rooted: true,
	Factor: one, Counts: same, InPlace: noOffset,
	Expected: func(_ []byte, in *Row, before []byte, rank int, _ Counts, a Args) []byte {
		if rank != a.Root {
			return before
		}
		return in.Reduction()
	},
	Call: func(c gpu.Comm, s, r []gpu.Buffer, k Counts, a Args) error {
		return c.Reduce(s, r, k.Param, a.DType, a.Op, a.Root)
	},
}

// AllToAll: rank r's chunk j goes to rank j's chunk r.
var AllToAll = &Collective{
	Name: "alltoall", Perf: "alltoall_perf", InPlaceUnchecked: true,
	Factor: nm1n,
	Counts: func(c int64, elt, n int) Counts {
		b := chunk(c, elt, n)
		return Counts{Send: b * int64(n), Recv: b * int64(n), Param: b, Bytes: b * int64(n*elt)}
	},
	InPlace: noOffset,
	Expected: func(dst []byte, in *Row, _ []byte, rank int, k Counts, a Args) []byte {
		out := dst[:0]
		for peer := range a.Ranks {
			out = in.AppendPart(out, peer, int64(rank)*k.Param, k.Param)
		}
		return out
	},
	Call: func(c gpu.Comm, s, r []gpu.Buffer, k Counts, a Args) error {
		return c.AllToAll(s, r, k.Param, a.DType)
	},
}

// SendRecv: a ring; every rank sends to the next and receives from the previous one.
var SendRecv = &Collective{
	Name: "sendrecv", Perf: "sendrecv_perf", TakesOp: true, InPlaceUnchecked: true,
	Factor: one, Counts: same, InPlace: noOffset,
	Expected: func(_ []byte, in *Row, _ []byte, rank int, _ Counts, a Args) []byte {
		return in.Input((rank - 1 + a.Ranks) % a.Ranks)
	},
	Call: func(c gpu.Comm, s, r []gpu.Buffer, k Counts, a Args) error {
		n := a.Ranks
		ops := make([]gpu.P2POp, 0, 2*n)
		for rank := 0; rank < n; rank++ {
			if s[rank] == nil {
				continue // driven by another process
			}
			ops = append(ops,
				gpu.P2POp{Rank: rank, Peer: (rank + 1) % n, Send: true, Buf: s[rank]},
				gpu.P2POp{Rank: rank, Peer: (rank - 1 + n) % n, Buf: r[rank]})
		}
		return c.SendRecv(ops, k.Param, a.DType)
	},
}

// Gather: the root ends with every rank's chunk, in rank order; the other ranks' receive buffers
// are left alone. As nccl-tests runs it before NCCL's ncclGather (2.28): each rank sends to the
// root, which receives from every rank, itself too, in one group.
var Gather = &Collective{
	Name: "gather", Perf: "gather_perf", Rooted: true,
	Factor: nm1n,
	Counts: AllGather.Counts,
	// In place, a rank's chunk starts in its own place of the receive buffer.
	InPlace: func(k Counts, rank int) (int64, int64) { return int64(rank) * k.Send, 0 },
	Expected: func(_ []byte, in *Row, before []byte, rank int, k Counts, a Args) []byte {
		if rank != a.Root {
			return before
		}
		return AllGather.Expected(nil, in, before, rank, k, a)
	},
	Call: func(c gpu.Comm, s, r []gpu.Buffer, k Counts, a Args) error {
		chunk := k.Param * int64(a.DType.Size())
		var ops []gpu.P2POp
		for rank := range a.Ranks {
			if s[rank] == nil {
				continue // driven by another process
			}
			ops = append(ops, gpu.P2POp{Rank: rank, Peer: a.Root, Send: true, Buf: s[rank]})
			if rank == a.Root {
				for peer := range a.Ranks {
					ops = append(ops, gpu.P2POp{Rank: rank, Peer: peer, Buf: r[rank].Slice(int64(peer)*chunk, chunk)})
				}
			}
		}
		return c.SendRecv(ops, k.Param, a.DType)
	},
}

// Scatter: rank r ends with chunk r of the root's input. As nccl-tests runs it before NCCL's
// ncclScatter (2.28): the root sends every rank its chunk, itself too, in one group.
var Scatter = &Collective{
	Name: "scatter", Perf: "scatter_perf", Rooted: true,
	Factor: nm1n,
	Counts: ReduceScatter.Counts,
	// In place, a rank receives into its own place of the root's send buffer's shape.
	InPlace: func(k Counts, rank int) (int64, int64) { return 0, int64(rank) * k.Recv },
	Expected: func(_ []byte, in *Row, _ []byte, rank int, k Counts, a Args) []byte {
		return elems(in.Input(a.Root), a.DType, int64(rank)*k.Recv, k.Recv)
	},
	Call: func(c gpu.Comm, s, r []gpu.Buffer, k Counts, a Args) error {
		chunk := k.Param * int64(a.DType.Size())
		var ops []gpu.P2POp
		for rank := range a.Ranks {
			if s[rank] == nil {
				continue // driven by another process
			}
			if rank == a.Root {
				for peer := range a.Ranks {
					ops = append(ops, gpu.P2POp{Rank: rank, Peer: peer, Send: true, Buf: s[rank].Slice(int64(peer)*chunk, chunk)})
				}
			}
			ops = append(ops, gpu.P2POp{Rank: rank, Peer: a.Root, Buf: r[rank]})
		}
		return c.SendRecv(ops, k.Param, a.DType)
	},
}

// Find returns the collective with the given name, or nil.
func Find(name string) *Collective {
	for _, c := range Collectives {
		if c.Name == name {
			return c
		}
	}
	return nil
}
