package coll

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/gpubench/gpubench/internal/gpu"
)

// A row's reduction, worked out from one or two ranks' words for sum and avg, is the reduction
// of every rank's input bit for bit, in rank order and in reverse (the inputs make any order
// exact); a part of an input made alone is that part of the whole input.
func TestRowReductionIsTheInputsReduction(t *testing.T) {
	t.Parallel()
	for _, dt := range gpu.DTypes {
		for _, op := range gpu.RedOps {
			for _, n := range []int{1, 2, 3, 8, 17, 72} {
				t.Run(fmt.Sprintf("%s/%s/%d", dt, op, n), func(t *testing.T) {
					size := int64(301 * dt.Size())
					x := newRow(AllReduce, n, size, Args{DType: dt, Op: op, Ranks: n}, 7)
					in := make([][]byte, n)
					for rank := range in {
						in[rank] = x.Input(rank)
					}
					want := make([]byte, size)
					gpu.ReduceAll(dt, op, want, in)
					if got := x.Reduction(); !equalWithin(got, want, dt, op) {
						t.Fatalf("reduction differs from the inputs' reduction in rank order")
					}
					slices.Reverse(in)
					gpu.ReduceAll(dt, op, want, in)
					if got := x.Reduction(); !equalWithin(got, want, dt, op) {
						t.Fatalf("reduction differs from the inputs' reduction in reverse order")
					}
					fresh := newRow(AllReduce, n, size, Args{DType: dt, Op: op, Ranks: n}, 7)
					if part := fresh.AppendPart(nil, n-1, 100, 57); !bytes.Equal(part, x.Input(n - 1)[100*dt.Size():157*dt.Size()]) {
						t.Fatalf("a part made alone differs from the whole input's")
					}
					if fresh.in[n-1] != nil {
						t.Fatalf("Part made the whole input")
					}
				})
			}
		}
	}
}

// equalWithin is the check's own comparison: exact, but for floating-point avg's rounding.
func equalWithin(got, want []byte, dt gpu.DType, op gpu.RedOp) bool {
	return countWrong(got, want, dt, op, true) == 0
}

// A process checking one rank of an all-reduce makes that rank's input and the reduction, and
// no other rank's input; an all-gather needs them all.
func TestRowMakesOnlyWhatIsAskedFor(t *testing.T) {
	t.Parallel()
	a := Args{DType: gpu.Float, Op: gpu.Sum, Ranks: 16}
	k := AllReduce.Counts(1024, 4, 16)
	x := newRow(AllReduce, 16, k.Send*4, a, 1)
	x.Input(5)
	AllReduce.Expected(nil, x, nil, 5, k, a)
	for rank, in := range x.in {
		if (in != nil) != (rank == 5) {
			t.Errorf("rank %d's input made: %v", rank, in != nil)
		}
	}
	k = AllToAll.Counts(1024, 4, 16)
	x = newRow(AllToAll, 16, k.Send*4, a, 1)
	if got := AllToAll.Expected(nil, x, nil, 5, k, a); int64(len(got)) != k.Recv*4 {
		t.Fatalf("all-to-all expected %d bytes; want %d", len(got), k.Recv*4)
	}
	for rank, in := range x.in {
		if in != nil {
			t.Errorf("all-to-all's check made rank %d's whole input", rank)
		}
	}
	k = AllGather.Counts(1024, 4, 16)
	x = newRow(AllGather, 16, k.Send*4, a, 1)
	all := AllGather.Expected(nil, x, nil, 5, k, a)
	for rank, in := range x.in {
		if in == nil {
			t.Errorf("all-gather's check did not make rank %d's input", rank)
		} else if &in[0] != &all[int64(rank)*k.Send*4] {
			t.Errorf("rank %d's input is held apart from the gathered inputs: the row holds it twice", rank)
		}
	}
}
