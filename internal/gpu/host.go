package gpu

import (
	"encoding/binary"
	"math"
)

// Host-side element arithmetic on little-endian byte slices, as a GPU stores them. The simulator
// uses it to do a collective's real work, and the checker to compute expected results.

var le = binary.LittleEndian

// Bits returns element i of b as its raw bit pattern, zero-extended.
func Bits(dt DType, b []byte, i int) uint64 {
	switch dt.Size() {
	case 1:
		return uint64(b[i])
	case 2:
		return uint64(le.Uint16(b[2*i:]))
	case 4:
		return uint64(le.Uint32(b[4*i:]))
	default:
		return le.Uint64(b[8*i:])
	}
}

// SetBits stores the low bits of v as element i of b.
func SetBits(dt DType, b []byte, i int, v uint64) {
	switch dt.Size() {
	case 1:
		b[i] = byte(v)
	case 2:
		le.PutUint16(b[2*i:], uint16(v))
	case 4:
		le.PutUint32(b[4*i:], uint32(v))
	default:
		le.PutUint64(b[8*i:], v)
	}
}

// FloatValue decodes a floating-point element's bit pattern.
func FloatValue(dt DType, bits uint64) float64 {
	switch dt {
	case Half:
		return decodeSmallFloat(bits, 5, 10)
	case BFloat16:
		return decodeSmallFloat(bits, 8, 7)
	case Float:
		return float64(math.Float32frombits(uint32(bits)))
	default:
		return math.Float64frombits(bits)
	}
}

// FloatBits encodes v as a floating-point element, rounding to nearest even.
func FloatBits(dt DType, v float64) uint64 {
	switch dt {
	case Half:
		return roundSmallFloat(v, 5, 10)
	case BFloat16:
		return roundSmallFloat(v, 8, 7)
	case Float:
		return uint64(math.Float32bits(float32(v)))
	default:
		return math.Float64bits(v)
	}
}

// IntValue decodes an integer element's bit pattern, sign-extending signed types.
func IntValue(dt DType, bits uint64) int64 {
	switch dt {
	case Int8:
		return int64(int8(bits))
	case Int32:
		return int64(int32(bits))
	default:
		return int64(bits)
	}
}

// roundSmallFloat rounds v to a binary float with the given exponent and mantissa widths (half,
// bfloat16), to nearest even, with subnormals, infinities and NaN.
func roundSmallFloat(v float64, expBits, mantBits uint) uint64 {
	b := math.Float64bits(v)
	sign := (b >> 63) << (expBits + mantBits)
	e := int((b >> 52) & 0x7ff)
	m := b & (1<<52 - 1)
	maxE := 1<<expBits - 1
	if e == 0x7ff {
		if m != 0 {
			return sign | uint64(maxE)<<mantBits | 1<<(mantBits-1)
		}
		return sign | uint64(maxE)<<mantBits
	}
	if e == 0 {
		return sign // float64 subnormals are far below either format's range
	}
	e2 := e - 1023 + (1<<(expBits-1) - 1)
	if e2 >= maxE {
		return sign | uint64(maxE)<<mantBits
	}
	shift := 52 - mantBits
	if e2 <= 0 {
		m |= 1 << 52
		shift += uint(1 - e2)
		if shift > 63 {
			return sign
		}
		e2 = 0
	}
	h := m >> shift
	rem := m & (1<<shift - 1)
	half := uint64(1) << (shift - 1)
	if rem > half || (rem == half && h&1 == 1) {
		h++
	}
	return sign | (uint64(e2)<<mantBits + h)
}

func decodeSmallFloat(bits uint64, expBits, mantBits uint) float64 {
	sign := 1.0
	if bits>>(expBits+mantBits)&1 == 1 {
		sign = -1
	}
	e := int(bits>>mantBits) & (1<<expBits - 1)
	m := float64(bits & (1<<mantBits - 1))
	bias := 1<<(expBits-1) - 1
	switch e {
	case 0:
		return sign * math.Ldexp(m, 1-bias-int(mantBits))
	case 1<<expBits - 1:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(m+float64(uint64(1)<<mantBits), e-bias-int(mantBits))
}

// ReduceAll writes the reduction of every src into dst, in src order, rounding as Reduce does;
// Avg divides the sum by len(srcs). Each src and dst hold the same number of bytes; dst may be
// one of the srcs.
func ReduceAll(dt DType, op RedOp, dst []byte, srcs [][]byte) {
	if dt == Float && (op == Sum || op == Avg) {
		// One pass over the inputs, for the common case.
		for i := 0; i+4 <= len(dst); i += 4 {
			acc := math.Float32frombits(le.Uint32(srcs[0][i:]))
			for _, s := range srcs[1:] {
				acc += math.Float32frombits(le.Uint32(s[i:]))
			}
			le.PutUint32(dst[i:], math.Float32bits(acc))
		}
	} else {
		acc := append([]byte(nil), srcs[0]...)
		for _, s := range srcs[1:] {
			Reduce(dt, op, acc, s)
		}
		copy(dst, acc)
	}
	if op == Avg {
		DivideBy(dt, dst, len(srcs))
	}
}

// Reduce folds src into dst element-wise: dst[i] = dst[i] op src[i]. Avg folds as Sum; finish it
// with DivideBy. Integer arithmetic wraps around; floating-point results are rounded to the type
// after every step, as a GPU does.
func Reduce(dt DType, op RedOp, dst, src []byte) {
	n := len(dst) / dt.Size()
	if op == Avg {
		op = Sum
	}
	switch {
	case dt == Float && op == Sum:
		for i := 0; i < n; i++ {
			a := math.Float32frombits(le.Uint32(dst[4*i:]))
			b := math.Float32frombits(le.Uint32(src[4*i:]))
			le.PutUint32(dst[4*i:], math.Float32bits(a+b))
		}
	case dt == Double && op == Sum:
		for i := 0; i < n; i++ {
			a := math.Float64frombits(le.Uint64(dst[8*i:]))
			b := math.Float64frombits(le.Uint64(src[8*i:]))
			le.PutUint64(dst[8*i:], math.Float64bits(a+b))
		}
	case dt.IsFloat():
		for i := 0; i < n; i++ {
			a, b := FloatValue(dt, Bits(dt, dst, i)), FloatValue(dt, Bits(dt, src, i))
			SetBits(dt, dst, i, FloatBits(dt, applyFloat(op, a, b)))
		}
	case dt.IsSigned():
		for i := 0; i < n; i++ {
			a, b := IntValue(dt, Bits(dt, dst, i)), IntValue(dt, Bits(dt, src, i))
			SetBits(dt, dst, i, uint64(applySigned(op, a, b)))
		}
	default:
		for i := 0; i < n; i++ {
			SetBits(dt, dst, i, applyUnsigned(op, Bits(dt, dst, i), Bits(dt, src, i)))
		}
	}
}

func applyFloat(op RedOp, a, b float64) float64 {
	switch op {
	case Prod:
		return a * b
	case Max:
		return math.Max(a, b)
	case Min:
		return math.Min(a, b)
	default:
		return a + b
	}
}

func applySigned(op RedOp, a, b int64) int64 {
	switch op {
	case Prod:
		return a * b
	case Max:
		return max(a, b)
	case Min:
		return min(a, b)
	default:
		return a + b
	}
}

func applyUnsigned(op RedOp, a, b uint64) uint64 {
	switch op {
	case Prod:
		return a * b
	case Max:
		return max(a, b)
	case Min:
		return min(a, b)
	default:
		return a + b
	}
}

// DivideBy divides every element of b by n: the last step of Avg. Integers divide truncating
// toward zero after the wrapped-around sum.
func DivideBy(dt DType, b []byte, n int) {
	count := len(b) / dt.Size()
	for i := 0; i < count; i++ {
		v := Bits(dt, b, i)
		switch {
		case dt.IsFloat():
			v = FloatBits(dt, FloatValue(dt, v)/float64(n))
		case dt.IsSigned():
			v = uint64(IntValue(dt, v) / int64(n))
		default:
			v = (v & sizeMask(dt)) / uint64(n)
		}
		SetBits(dt, b, i, v)
	}
}

func sizeMask(dt DType) uint64 {
	if dt.Size() == 8 {
		return math.MaxUint64
	}
	return 1<<(8*dt.Size()) - 1
}
