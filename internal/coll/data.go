package coll

import (
	"bytes"

	"github.com/gpubench/gpubench/internal/gpu"
)

// Crafted inputs whose reduction is exact in any order, so that a result can be compared bit for
// bit (docs/model.md, "Checking"):
//
//   - sum: every rank's element i is m·2^e with the same exponent e (per element) and integer
//     mantissas small enough that any partial sum of n of them fits the type's precision;
//   - avg: the same, but only two ranks (chosen per element) contribute, so that the division's
//     rounding stays within the 2-unit tolerance however the backend divides; integers are kept
//     non-negative and small enough not to wrap;
//   - prod: one rank (per element) gives a random value, the others ±1;
//   - max, min and integer sum/prod: random values; the result is exact anyway;
//   - data-movement collectives: random bit patterns.

// mix is splitmix64's finaliser: a fast, well-mixed hash.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
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

// fillInput writes rank's input of count elements into b, for a reduction with op over n ranks
// (reduce true) or for data movement.
func fillInput(b []byte, dt gpu.DType, reduce bool, op gpu.RedOp, n, rank int, seed uint64) {
	count := len(b) / dt.Size()
	base := mix(seed<<20 ^ uint64(rank)<<1 ^ uint64(dt)<<8 ^ uint64(op)<<12)
	for i := 0; i < count; i++ {
		r := mix(base ^ uint64(i)*0x2545f4914f6cdd1d)
		if !reduce {
			gpu.SetBits(dt, b, i, r)
			continue
		}
		gpu.SetBits(dt, b, i, reductionInput(dt, op, n, rank, seed, i, r))
	}
}

// pow2[e+4] is 2^e: scaling by it is exact, as math.Ldexp, and much faster.
var pow2 = [9]float64{1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 1, 2, 4, 8, 16}

// picked returns the rank that gives element's "interesting" value and, for avg, the second
// rank that contributes; shared is the element's random word, the same on every rank.
func picked(shared uint64, n int) (chosen, second int) {
	chosen = int(shared % uint64(n))
	return chosen, (chosen + 1 + int(shared>>32)%max(n-1, 1)) % n
}

// reductionInput is element i of rank's input; r is a random word for this rank and element.
// It works out only what op needs: it runs for every element of every input.
func reductionInput(dt gpu.DType, op gpu.RedOp, n, rank int, seed uint64, i int, r uint64) uint64 {
	shared := mix(seed ^ uint64(i)*0x9e3779b97f4a7c15 ^ 0x5bd1e995)
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
	case gpu.Sum, gpu.Avg:
		limit := (uint64(1)<<precision(dt) - 1) / uint64(n)
		if op == gpu.Avg {
			if chosen, second := picked(shared, n); rank != chosen && rank != second {
				return gpu.FloatBits(dt, 0)
			}
			limit = (uint64(1)<<precision(dt) - 1) / 2
		}
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

// Inputs keeps rows' crafted inputs from one run to the next, up to InputsLimit bytes; the
// first rows kept stay. A nil *Inputs keeps nothing. It is not safe for concurrent use.
type Inputs struct {
	rows  map[inputKey]inputRow
	bytes int64
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

type inputRow struct {
	in  [][]byte
	red []byte
}

// row returns every rank's input of the given bytes for collective c, and their reduction when
// c reduces, made now or kept from an earlier run.
func (p *Inputs) row(c *Collective, n int, bytes int64, a Args, seed uint64) (in [][]byte, red []byte) {
	key := inputKey{c.Name, n, bytes, a.DType, a.Op, uint64(a.Root), seed}
	if p != nil {
		if row, ok := p.rows[key]; ok {
			return row.in, row.red
		}
	}
	in = make([][]byte, n)
	for rank := range in {
		in[rank] = make([]byte, bytes)
		fillInput(in[rank], a.DType, c.Reduces, a.Op, n, rank, seed)
	}
	size := int64(n) * bytes
	if c.Reduces {
		red = reduced(in, a.DType, a.Op)
		size += bytes
	}
	if p != nil && p.bytes+size <= InputsLimit {
		if p.rows == nil {
			p.rows = map[inputKey]inputRow{}
		}
		p.rows[key], p.bytes = inputRow{in, red}, p.bytes+size
	}
	return in, red
}

// reduced returns the exact reduction of the inputs, as every rank must see it.
func reduced(in [][]byte, dt gpu.DType, op gpu.RedOp) []byte {
	out := make([]byte, len(in[0]))
	gpu.ReduceAll(dt, op, out, in)
	return out
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
