package coll

import (
	"bytes"
	"slices"

	"github.com/gpubench/gpubench/internal/gpu"
)

// Crafted inputs whose reduction is exact in any order, so that a result can be compared bit for
// bit (docs/model.md, "Checking"):
//
//   - sum: every rank's element i is m·2^e with the same exponent e (per element) and integer
//     mantissas small enough that any partial sum of n of them fits the type's precision; rank
//     r's mantissa is h(r) - h(r+1) for random h, so that the sum of all ranks' is h(0) - h(n)
//     and needs no other rank's input (integers the same, wrapping);
//   - avg: the same, but only two ranks (chosen per element) contribute, so that the division's
//     rounding stays within the 2-unit tolerance however the backend divides; integers are kept
//     non-negative and small enough not to wrap;
//   - prod: one rank (per element) gives a random value, the others ±1;
//   - max, min and integer prod: random values; the result is exact anyway;
//   - data-movement collectives: random bit patterns.
//
// Every element is a function of the seed, the rank and its index alone, so a process makes only
// what its own ranks load and check (Row).

// mix is splitmix64's finaliser: a fast, well-mixed hash.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// inputBase is the hash rank's random words start from; rank n (one past the last) is used too,
// by sum's last rank.
func inputBase(seed uint64, rank int, dt gpu.DType, op gpu.RedOp) uint64 {
	return mix(seed<<20 ^ uint64(rank)<<1 ^ uint64(dt)<<8 ^ uint64(op)<<12)
}

// word is the random word of element i, from a rank's base.
func word(base uint64, i int) uint64 { return mix(base ^ uint64(i)*0x2545f4914f6cdd1d) }

// sharedWord is element i's random word that every rank shares: its exponent, and the ranks
// picked to contribute.
func sharedWord(seed uint64, i int) uint64 {
	return mix(seed ^ uint64(i)*0x9e3779b97f4a7c15 ^ 0x5bd1e995)
}

// precision is the number of significand bits of a floating type.
func precision(dt gpu.DType) uint {
	switch dt {
	case gpu.Half:
		return 11
	case gpu.BFloat16:
		return 8
	case gpu.Float:
		return 24
	}
	return 53
}

// fillInput writes elements from, from+1, ... of rank's input into b, for a reduction with op
// over n ranks (reduce true) or for data movement.
func fillInput(b []byte, dt gpu.DType, reduce bool, op gpu.RedOp, n, rank int, seed uint64, from int) {
	count := len(b) / dt.Size()
	base := inputBase(seed, rank, dt, op)
	next := inputBase(seed, rank+1, dt, op) // sum's h(rank+1)
	for j := 0; j < count; j++ {
		i := from + j
		r := word(base, i)
		switch {
		case !reduce:
			gpu.SetBits(dt, b, j, r)
		case op == gpu.Sum:
			gpu.SetBits(dt, b, j, sumInput(dt, n, seed, i, r, word(next, i)))
		default:
			gpu.SetBits(dt, b, j, reductionInput(dt, op, n, rank, seed, i, r))
		}
	}
}

// sumInput is element i of a sum's input, h - hNext, from the words of this rank (h) and the
// next (hNext); with the words of rank 0 and rank n it is the sum of every rank's element i.
func sumInput(dt gpu.DType, n int, seed uint64, i int, h, hNext uint64) uint64 {
	if !dt.IsFloat() {
		return h - hNext // wraps as the sum does
	}
	limit := (uint64(1)<<precision(dt) - 1) / uint64(n) // |h - hNext| <= limit
	m := float64(h%(limit+1)) - float64(hNext%(limit+1))
	return gpu.FloatBits(dt, m*pow2[sharedWord(seed, i)>>8%9])
}

// pow2[e+4] is 2^e: scaling by it is exact, as math.Ldexp, and much faster.
var pow2 = [9]float64{1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 1, 2, 4, 8, 16}

// picked returns the rank that gives element's "interesting" value and, for avg, the second
// rank that contributes; shared is the element's random word, the same on every rank.
func picked(shared uint64, n int) (chosen, second int) {
	chosen = int(shared % uint64(n))
	return chosen, (chosen + 1 + int(shared>>32)%max(n-1, 1)) % n
}

// reductionInput is element i of rank's input for ops other than sum; r is a random word for this
// rank and element. It works out only what op needs: it runs for every element of every input.
func reductionInput(dt gpu.DType, op gpu.RedOp, n, rank int, seed uint64, i int, r uint64) uint64 {
	shared := sharedWord(seed, i)
	if !dt.IsFloat() {
		if op != gpu.Avg {
			return r
		}
		if chosen, second := picked(shared, n); rank != chosen && rank != second {
			return 0
		}
		limit := uint64(1) << (8*dt.Size() - 2) // non-negative, and two of them cannot wrap
		return r % limit
	}
	scale := pow2[shared>>8%9] // 2^e, the element's exponent e in [-4, 4], shared by all ranks
	switch op {
	case gpu.Avg:
		if chosen, second := picked(shared, n); rank != chosen && rank != second {
			return gpu.FloatBits(dt, 0)
		}
		limit := (uint64(1)<<precision(dt) - 1) / 2
		m := float64(r % (limit + 1))
		if r>>63 == 1 && m != 0 {
			m = -m
		}
		return gpu.FloatBits(dt, m*scale)
	case gpu.Prod:
		if chosen, _ := picked(shared, n); rank != chosen {
			if r&1 == 1 {
				return gpu.FloatBits(dt, -1)
			}
			return gpu.FloatBits(dt, 1)
		}
		m := 1 + float64(r>>11&(1<<(precision(dt)-1)-1))/float64(uint64(1)<<(precision(dt)-1))
		return gpu.FloatBits(dt, m*scale)
	default: // max, min: any finite values
		m := float64(r>>11) / float64(uint64(1)<<53)
		if r&1 == 1 {
			m = -m
		}
		return gpu.FloatBits(dt, m*scale)
	}
}

// Row is one row's crafted inputs, made as they are asked for: a process makes its own ranks'
// inputs, another rank's (or part of it) only when its own ranks' expected outputs hold it, and
// the reduction of sum and avg from the one or two ranks' words that decide each element.
type Row struct {
	dt     gpu.DType
	op     gpu.RedOp
	reduce bool
	n      int
	bytes  int64 // each rank's input
	seed   uint64
	in     [][]byte
	red    []byte
	all    []byte // every rank's input, in rank order (Gathered)
}

func newRow(c *Collective, n int, bytes int64, a Args, seed uint64) *Row {
	return &Row{dt: a.DType, op: a.Op, reduce: c.Reduces, n: n, bytes: bytes, seed: seed, in: make([][]byte, n)}
}

// Input is rank's whole input.
func (x *Row) Input(rank int) []byte {
	if x.in[rank] == nil {
		x.in[rank] = x.AppendPart(nil, rank, 0, x.bytes/int64(x.dt.Size()))
	}
	return x.in[rank]
}

// AppendPart appends count elements of rank's input from element from to dst: made alone,
// in dst, unless the whole input is already made.
func (x *Row) AppendPart(dst []byte, rank int, from, count int64) []byte {
	if x.in[rank] != nil {
		return append(dst, elems(x.in[rank], x.dt, from, count)...)
	}
	n := len(dst)
	dst = slices.Grow(dst, int(count)*x.dt.Size())[:n+int(count)*x.dt.Size()]
	fillInput(dst[n:], x.dt, x.reduce, x.op, x.n, rank, x.seed, int(from))
	return dst
}

// Gathered is every rank's input, in rank order, as an all-gather leaves it on every rank. The
// inputs then live in it, so that the row holds them once.
func (x *Row) Gathered() []byte {
	if x.all == nil {
		all := make([]byte, 0, int64(x.n)*x.bytes)
		for rank := range x.n {
			all = append(all, x.Input(rank)...)
		}
		for rank := range x.n {
			x.in[rank] = all[int64(rank)*x.bytes : int64(rank+1)*x.bytes : int64(rank+1)*x.bytes]
		}
		x.all = all
	}
	return x.all
}

// Reduction is the exact reduction of every rank's input, as every rank must see it.
func (x *Row) Reduction() []byte {
	if x.red != nil {
		return x.red
	}
	x.red = make([]byte, x.bytes)
	count := int(x.bytes) / x.dt.Size()
	switch x.op {
	case gpu.Sum: // h(0) - h(n): the ranks' terms telescope
		first, past := inputBase(x.seed, 0, x.dt, x.op), inputBase(x.seed, x.n, x.dt, x.op)
		for i := 0; i < count; i++ {
			gpu.SetBits(x.dt, x.red, i, sumInput(x.dt, x.n, x.seed, i, word(first, i), word(past, i)))
		}
	case gpu.Avg: // only the two picked ranks are not zero
		bases := make([]uint64, x.n)
		for rank := range bases {
			bases[rank] = inputBase(x.seed, rank, x.dt, x.op)
		}
		for i := 0; i < count; i++ {
			chosen, second := picked(sharedWord(x.seed, i), x.n)
			v := reductionInput(x.dt, x.op, x.n, chosen, x.seed, i, word(bases[chosen], i))
			if second != chosen {
				w := reductionInput(x.dt, x.op, x.n, second, x.seed, i, word(bases[second], i))
				if x.dt.IsFloat() {
					v = gpu.FloatBits(x.dt, gpu.FloatValue(x.dt, v)+gpu.FloatValue(x.dt, w)) // exact
				} else {
					v += w // cannot wrap
				}
			}
			gpu.SetBits(x.dt, x.red, i, v)
		}
		gpu.DivideBy(x.dt, x.red, x.n)
	default:
		in := make([][]byte, x.n)
		for rank := range in {
			in[rank] = x.Input(rank)
		}
		gpu.ReduceAll(x.dt, x.op, x.red, in)
	}
	return x.red
}

// Inputs keeps rows' crafted inputs from one run to the next, up to InputsLimit bytes (the
// first rows kept stay), and the host memory checks use. A nil *Inputs keeps nothing. It is not
// safe for concurrent use.
type Inputs struct {
	rows  map[inputKey]*Row
	bytes int64
	mem   hostMem
}

// hostMem is host memory a check reuses from row to row, and through Inputs from run to run
// (hostBuf): zeros, each local rank's receive buffer as loaded in place, what a receive buffer
// holds after the call, and what it should hold. A burn-in checks thousands of buffers, and fresh
// memory for each costs page faults.
type hostMem struct {
	zero, got, want []byte
	whole           [][]byte // by local rank
}

// hostBuf returns n bytes of *b, which it replaces by n fresh bytes when they do not fit; they
// hold what they last held. (Sweeps grow by a factor, burn-ins keep one size: growing by more
// would only hold memory no row uses.)
func hostBuf(b *[]byte, n int64) []byte {
	if int64(len(*b)) < n {
		*b = make([]byte, n)
	}
	return (*b)[:n:n]
}

// host is the host memory checks reuse: p's, or new memory for one run when p is nil.
func (p *Inputs) host() *hostMem {
	if p == nil {
		return &hostMem{}
	}
	return &p.mem
}

// InputsLimit bounds the host memory an Inputs holds.
const InputsLimit = 256 << 20

type inputKey struct {
	coll       string
	ranks      int
	bytes      int64
	dtype      gpu.DType
	op         gpu.RedOp
	root, seed uint64
}

// row returns the row's inputs for collective c, kept from an earlier run or new (and kept when
// all of it fits what is left).
func (p *Inputs) row(c *Collective, n int, bytes int64, a Args, seed uint64) *Row {
	if p == nil {
		return newRow(c, n, bytes, a, seed)
	}
	key := inputKey{c.Name, n, bytes, a.DType, a.Op, uint64(a.Root), seed}
	if x, ok := p.rows[key]; ok {
		return x
	}
	x := newRow(c, n, bytes, a, seed)
	if size := int64(n+1) * bytes; p.bytes+size <= InputsLimit {
		if p.rows == nil {
			p.rows = map[inputKey]*Row{}
		}
		p.rows[key], p.bytes = x, p.bytes+size
	}
	return x
}

// countWrong compares got with want element by element as unsigned bit patterns: an element is
// wrong when they differ by more than the tolerance (2 for floating-point avg, else 0), as
// nccl-tests compares.
func countWrong(got, want []byte, dt gpu.DType, op gpu.RedOp, reduces bool) int64 {
	var tol uint64
	if reduces && op == gpu.Avg && dt.IsFloat() {
		tol = 2
	}
	if tol == 0 && bytes.Equal(got[:len(want)], want) {
		return 0 // the usual case, at memory speed
	}
	var wrong int64
	for i := 0; i < len(want)/dt.Size(); i++ {
		a, b := gpu.Bits(dt, got, i), gpu.Bits(dt, want, i)
		d := a - b
		if b > a {
			d = b - a
		}
		if d > tol {
			wrong++
		}
	}
	return wrong
}
