package gpu_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gpubench/gpubench/internal/gpu"
)

// isNaNBits reports whether bits is a NaN pattern of the 16-bit type dt.
func isNaNBits(dt gpu.DType, bits uint64) bool {
	expMask, mantMask := uint64(0x7c00), uint64(0x03ff)
	if dt == gpu.BFloat16 {
		expMask, mantMask = 0x7f80, 0x007f
	}
	return bits&expMask == expMask && bits&mantMask != 0
}

func TestFloatBits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		dt   gpu.DType
		in   float64
		want uint64
	}{
		// half (binary16): 1 sign, 5 exponent, 10 mantissa bits.
		{"half 0", gpu.Half, 0, 0x0000},
		{"half -0", gpu.Half, math.Copysign(0, -1), 0x8000},
		{"half 1", gpu.Half, 1, 0x3c00},
		{"half -2", gpu.Half, -2, 0xc000},
		{"half 0.5", gpu.Half, 0.5, 0x3800},
		{"half 1/3", gpu.Half, 1.0 / 3, 0x3555},
		{"half 0.1", gpu.Half, 0.1, 0x2e66},
		{"half max 65504", gpu.Half, 65504, 0x7bff},
		{"half -65504", gpu.Half, -65504, 0xfbff},
		{"half 65519 rounds down to max", gpu.Half, 65519, 0x7bff},
		{"half 65520 ties to even: inf", gpu.Half, 65520, 0x7c00},
		{"half 1e6 overflows", gpu.Half, 1e6, 0x7c00},
		{"half -1e6 overflows", gpu.Half, -1e6, 0xfc00},
		{"half max float64 overflows", gpu.Half, math.MaxFloat64, 0x7c00},
		{"half +inf", gpu.Half, math.Inf(1), 0x7c00},
		{"half -inf", gpu.Half, math.Inf(-1), 0xfc00},
		{"half smallest normal 2^-14", gpu.Half, math.Ldexp(1, -14), 0x0400},
		{"half largest subnormal", gpu.Half, math.Ldexp(1023, -24), 0x03ff},
		{"half smallest subnormal 2^-24", gpu.Half, math.Ldexp(1, -24), 0x0001},
		{"half -2^-24", gpu.Half, -math.Ldexp(1, -24), 0x8001},
		{"half 2^-25 ties to even: 0", gpu.Half, math.Ldexp(1, -25), 0x0000},
		{"half 1.5*2^-25 rounds up", gpu.Half, math.Ldexp(3, -26), 0x0001},
		{"half 3*2^-25 ties to even: 2", gpu.Half, math.Ldexp(3, -25), 0x0002},
		{"half 2^-30 underflows", gpu.Half, math.Ldexp(1, -30), 0x0000},
		{"half float64 subnormal underflows", gpu.Half, 5e-324, 0x0000},
		{"half -tiny underflows to -0", gpu.Half, -1e-300, 0x8000},
		{"half subnormal rounds up to normal", gpu.Half, math.Ldexp(1, -14) - math.Ldexp(1, -26), 0x0400},
		{"half 2049 ties to even: 2048", gpu.Half, 2049, 0x6800},
		{"half 2050 exact", gpu.Half, 2050, 0x6801},
		{"half 2051 ties to even: 2052", gpu.Half, 2051, 0x6802},
		{"half 2049.5 rounds up", gpu.Half, 2049.5, 0x6801},
		{"half 1+2^-11 ties to even: 1", gpu.Half, 1 + math.Ldexp(1, -11), 0x3c00},
		{"half 1+3*2^-11 ties to even", gpu.Half, 1 + math.Ldexp(3, -11), 0x3c02},
		{"half mantissa carry into exponent", gpu.Half, 2 - math.Ldexp(1, -12), 0x4000},

		// bfloat16: 1 sign, 8 exponent, 7 mantissa bits.
		{"bf16 0", gpu.BFloat16, 0, 0x0000},
		{"bf16 -0", gpu.BFloat16, math.Copysign(0, -1), 0x8000},
		{"bf16 1", gpu.BFloat16, 1, 0x3f80},
		{"bf16 -2", gpu.BFloat16, -2, 0xc000},
		{"bf16 1/3", gpu.BFloat16, 1.0 / 3, 0x3eab},
		{"bf16 0.1", gpu.BFloat16, 0.1, 0x3dcd},
		{"bf16 1+2^-8 ties to even: 1", gpu.BFloat16, 1 + math.Ldexp(1, -8), 0x3f80},
		{"bf16 1+3*2^-8 ties to even", gpu.BFloat16, 1 + math.Ldexp(3, -8), 0x3f82},
		{"bf16 1+2^-8+2^-20 rounds up", gpu.BFloat16, 1 + math.Ldexp(1, -8) + math.Ldexp(1, -20), 0x3f81},
		{"bf16 257 ties to even: 256", gpu.BFloat16, 257, 0x4380},
		{"bf16 max", gpu.BFloat16, math.Ldexp(255, 120), 0x7f7f},
		{"bf16 max float32 overflows", gpu.BFloat16, math.MaxFloat32, 0x7f80},
		{"bf16 1e39 overflows", gpu.BFloat16, 1e39, 0x7f80},
		{"bf16 -1e39 overflows", gpu.BFloat16, -1e39, 0xff80},
		{"bf16 +inf", gpu.BFloat16, math.Inf(1), 0x7f80},
		{"bf16 -inf", gpu.BFloat16, math.Inf(-1), 0xff80},
		{"bf16 smallest normal 2^-126", gpu.BFloat16, math.Ldexp(1, -126), 0x0080},
		{"bf16 smallest subnormal 2^-133", gpu.BFloat16, math.Ldexp(1, -133), 0x0001},
		{"bf16 2^-134 ties to even: 0", gpu.BFloat16, math.Ldexp(1, -134), 0x0000},
		{"bf16 3*2^-134 ties to even: 2", gpu.BFloat16, math.Ldexp(3, -134), 0x0002},

		// float and double are Go's own conversions.
		{"float 1", gpu.Float, 1, 0x3f800000},
		{"float -2", gpu.Float, -2, 0xc0000000},
		{"float 0.1", gpu.Float, 0.1, 0x3dcccccd},
		{"float 1+2^-24 ties to even", gpu.Float, 1 + math.Ldexp(1, -24), 0x3f800000},
		{"float overflow", gpu.Float, 1e39, 0x7f800000},
		{"double 1", gpu.Double, 1, 0x3ff0000000000000},
		{"double -2", gpu.Double, -2, 0xc000000000000000},
		{"double 0.1", gpu.Double, 0.1, 0x3fb999999999999a},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := gpu.FloatBits(tc.dt, tc.in); got != tc.want {
				t.Errorf("FloatBits(%v, %v) = %#04x; want %#04x", tc.dt, tc.in, got, tc.want)
			}
		})
	}
}

func TestFloatBitsNaN(t *testing.T) {
	t.Parallel()
	for _, dt := range []gpu.DType{gpu.Half, gpu.BFloat16} {
		for _, nan := range []float64{math.NaN(), -math.NaN(), math.Float64frombits(0x7ff0000000000001)} {
			t.Run(fmt.Sprintf("%v/%#x", dt, math.Float64bits(nan)), func(t *testing.T) {
				t.Parallel()
				bits := gpu.FloatBits(dt, nan)
				if bits>>16 != 0 {
					t.Errorf("FloatBits(%v, NaN) = %#x has bits above the type's 16", dt, bits)
				}
				if !isNaNBits(dt, bits) {
					t.Errorf("FloatBits(%v, NaN) = %#04x is not a NaN pattern", dt, bits)
				}
				if v := gpu.FloatValue(dt, bits); !math.IsNaN(v) {
					t.Errorf("FloatValue(%v, %#04x) = %v; want NaN", dt, bits, v)
				}
			})
		}
	}
	if got := gpu.FloatBits(gpu.Half, math.NaN()); got != 0x7e00 {
		t.Errorf("FloatBits(half, NaN) = %#04x; want the quiet NaN 0x7e00", got)
	}
	if got := gpu.FloatBits(gpu.BFloat16, math.NaN()); got != 0x7fc0 {
		t.Errorf("FloatBits(bfloat16, NaN) = %#04x; want the quiet NaN 0x7fc0", got)
	}
}

func TestFloatValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		dt   gpu.DType
		bits uint64
		want float64
	}{
		{"half 0x3c00", gpu.Half, 0x3c00, 1},
		{"half 0xc000", gpu.Half, 0xc000, -2},
		{"half 0x7bff", gpu.Half, 0x7bff, 65504},
		{"half 0x0400", gpu.Half, 0x0400, math.Ldexp(1, -14)},
		{"half 0x03ff", gpu.Half, 0x03ff, math.Ldexp(1023, -24)},
		{"half 0x0001", gpu.Half, 0x0001, math.Ldexp(1, -24)},
		{"half 0x8001", gpu.Half, 0x8001, -math.Ldexp(1, -24)},
		{"half 0x3555", gpu.Half, 0x3555, 0.333251953125},
		{"half 0x7c00", gpu.Half, 0x7c00, math.Inf(1)},
		{"half 0xfc00", gpu.Half, 0xfc00, math.Inf(-1)},
		{"bf16 0x3f80", gpu.BFloat16, 0x3f80, 1},
		{"bf16 0xc000", gpu.BFloat16, 0xc000, -2},
		{"bf16 0x7f7f", gpu.BFloat16, 0x7f7f, math.Ldexp(255, 120)},
		{"bf16 0x0080", gpu.BFloat16, 0x0080, math.Ldexp(1, -126)},
		{"bf16 0x0001", gpu.BFloat16, 0x0001, math.Ldexp(1, -133)},
		{"bf16 0x3eab", gpu.BFloat16, 0x3eab, 0.333984375},
		{"bf16 0x7f80", gpu.BFloat16, 0x7f80, math.Inf(1)},
		{"bf16 0xff80", gpu.BFloat16, 0xff80, math.Inf(-1)},
		{"float 0x3f800000", gpu.Float, 0x3f800000, 1},
		{"float 0x3dcccccd", gpu.Float, 0x3dcccccd, float64(float32(0.1))},
		{"double 0x3fb999999999999a", gpu.Double, 0x3fb999999999999a, 0.1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := gpu.FloatValue(tc.dt, tc.bits); got != tc.want {
				t.Errorf("FloatValue(%v, %#x) = %v; want %v", tc.dt, tc.bits, got, tc.want)
			}
		})
	}
	t.Run("negative zero", func(t *testing.T) {
		t.Parallel()
		for _, dt := range []gpu.DType{gpu.Half, gpu.BFloat16} {
			if v := gpu.FloatValue(dt, 0x8000); v != 0 || !math.Signbit(v) {
				t.Errorf("FloatValue(%v, 0x8000) = %v; want -0", dt, v)
			}
		}
	})
	t.Run("NaN", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			dt   gpu.DType
			bits uint64
		}{{gpu.Half, 0x7e00}, {gpu.Half, 0x7c01}, {gpu.Half, 0xffff}, {gpu.BFloat16, 0x7fc0}, {gpu.BFloat16, 0x7f81}, {gpu.BFloat16, 0xffff}} {
			if v := gpu.FloatValue(c.dt, c.bits); !math.IsNaN(v) {
				t.Errorf("FloatValue(%v, %#04x) = %v; want NaN", c.dt, c.bits, v)
			}
		}
	})
}

// Every 16-bit pattern that is not a NaN decodes to a float64 that encodes back to it.
func TestSmallFloatRoundTripAllPatterns(t *testing.T) {
	t.Parallel()
	for _, dt := range []gpu.DType{gpu.Half, gpu.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			t.Parallel()
			nans, failures := 0, 0
			for b := uint64(0); b < 1<<16; b++ {
				v := gpu.FloatValue(dt, b)
				if isNaNBits(dt, b) {
					nans++
					if !math.IsNaN(v) {
						t.Errorf("FloatValue(%v, %#04x) = %v; want NaN", dt, b, v)
					}
					continue
				}
				if math.IsNaN(v) {
					t.Errorf("FloatValue(%v, %#04x) = NaN for a non-NaN pattern", dt, b)
					continue
				}
				if got := gpu.FloatBits(dt, v); got != b {
					if failures++; failures <= 10 {
						t.Errorf("FloatBits(%v, FloatValue(%#04x) = %v) = %#04x; want %#04x", dt, b, v, got, b)
					}
				}
			}
			if failures > 10 {
				t.Errorf("%d patterns in all fail to round-trip", failures)
			}
			wantNaNs := 2 * (1<<10 - 1)
			if dt == gpu.BFloat16 {
				wantNaNs = 2 * (1<<7 - 1)
			}
			if nans != wantNaNs {
				t.Errorf("counted %d NaN patterns; want %d", nans, wantNaNs)
			}
		})
	}
}

// Between two neighbouring finite 16-bit values, the midpoint rounds to the one with an even
// mantissa, and anything nearer to one neighbour rounds to it.
func TestSmallFloatMidpoints(t *testing.T) {
	t.Parallel()
	for _, dt := range []gpu.DType{gpu.Half, gpu.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			t.Parallel()
			failures := 0
			check := func(v float64, want uint64) {
				if got := gpu.FloatBits(dt, v); got != want {
					if failures++; failures <= 10 {
						t.Errorf("FloatBits(%v, %v) = %#04x; want %#04x", dt, v, got, want)
					}
				}
			}
			// Positive finite patterns 0 .. max-1, and their neighbours one up.
			maxFinite := uint64(0x7bff)
			if dt == gpu.BFloat16 {
				maxFinite = 0x7f7f
			}
			for b := uint64(0); b < maxFinite; b++ {
				lo, hi := gpu.FloatValue(dt, b), gpu.FloatValue(dt, b+1)
				mid := lo + (hi-lo)/2 // exact in float64
				even := b
				if b&1 == 1 {
					even = b + 1
				}
				check(mid, even)
				check(-mid, even|0x8000)
				check(lo+(hi-lo)/4, b)
				check(lo+3*(hi-lo)/4, b+1)
			}
			if failures > 10 {
				t.Errorf("%d checks in all failed", failures)
			}
		})
	}
}

// vals encodes values as a little-endian buffer of dt: floats through FloatBits, integers by
// their two's complement bits.
func vals(dt gpu.DType, xs ...float64) []byte {
	b := make([]byte, len(xs)*dt.Size())
	for i, x := range xs {
		if dt.IsFloat() {
			gpu.SetBits(dt, b, i, gpu.FloatBits(dt, x))
		} else {
			gpu.SetBits(dt, b, i, uint64(int64(x)))
		}
	}
	return b
}

// raw encodes bit patterns as a little-endian buffer of dt.
func raw(dt gpu.DType, xs ...uint64) []byte {
	b := make([]byte, len(xs)*dt.Size())
	for i, x := range xs {
		gpu.SetBits(dt, b, i, x)
	}
	return b
}

// describe renders a buffer of dt for failure messages.
func describe(dt gpu.DType, b []byte) string {
	n := len(b) / dt.Size()
	out := make([]any, n)
	for i := range n {
		bits := gpu.Bits(dt, b, i)
		switch {
		case dt.IsFloat():
			out[i] = gpu.FloatValue(dt, bits)
		case dt.IsSigned():
			out[i] = gpu.IntValue(dt, bits)
		default:
			out[i] = bits
		}
	}
	return fmt.Sprint(out)
}

func TestReduce(t *testing.T) {
	t.Parallel()
	const (
		maxI32 = math.MaxInt32
		minI32 = math.MinInt32
		maxI64 = math.MaxInt64
		minI64 = math.MinInt64
	)
	inf := math.Inf(1)
	tenth, fifth := 0.1, 0.2 // variables, so that their sum is rounded as at run time
	tests := []struct {
		name           string
		dt             gpu.DType
		op             gpu.RedOp
		dst, src, want []byte
	}{
		// int8: wrap-around, signed comparisons.
		{"int8 sum wraps", gpu.Int8, gpu.Sum, vals(gpu.Int8, 127, -128, -1, 5), vals(gpu.Int8, 1, -1, -1, -10), vals(gpu.Int8, -128, 127, -2, -5)},
		{"int8 avg folds as sum", gpu.Int8, gpu.Avg, vals(gpu.Int8, 127, 3), vals(gpu.Int8, 1, 4), vals(gpu.Int8, -128, 7)},
		{"int8 prod wraps", gpu.Int8, gpu.Prod, vals(gpu.Int8, 16, -3, 64, 127), vals(gpu.Int8, 16, 5, 2, -1), vals(gpu.Int8, 0, -15, -128, -127)},
		{"int8 max is signed", gpu.Int8, gpu.Max, vals(gpu.Int8, -1, -128, 5), vals(gpu.Int8, 1, 127, -5), vals(gpu.Int8, 1, 127, 5)},
		{"int8 min is signed", gpu.Int8, gpu.Min, vals(gpu.Int8, -1, -128, 5), vals(gpu.Int8, 1, 127, -5), vals(gpu.Int8, -1, -128, -5)},
		// uint8.
		{"uint8 sum wraps", gpu.Uint8, gpu.Sum, raw(gpu.Uint8, 255, 200, 7), raw(gpu.Uint8, 1, 100, 8), raw(gpu.Uint8, 0, 44, 15)},
		{"uint8 avg folds as sum", gpu.Uint8, gpu.Avg, raw(gpu.Uint8, 255), raw(gpu.Uint8, 2), raw(gpu.Uint8, 1)},
		{"uint8 prod wraps", gpu.Uint8, gpu.Prod, raw(gpu.Uint8, 16, 15, 255), raw(gpu.Uint8, 16, 17, 255), raw(gpu.Uint8, 0, 255, 1)},
		{"uint8 max is unsigned", gpu.Uint8, gpu.Max, raw(gpu.Uint8, 255, 0, 128), raw(gpu.Uint8, 1, 1, 127), raw(gpu.Uint8, 255, 1, 128)},
		{"uint8 min is unsigned", gpu.Uint8, gpu.Min, raw(gpu.Uint8, 255, 0, 128), raw(gpu.Uint8, 1, 1, 127), raw(gpu.Uint8, 1, 0, 127)},
		// int32.
		{"int32 sum wraps", gpu.Int32, gpu.Sum, vals(gpu.Int32, maxI32, minI32, -7), vals(gpu.Int32, 1, -1, 3), vals(gpu.Int32, minI32, maxI32, -4)},
		{"int32 prod wraps", gpu.Int32, gpu.Prod, vals(gpu.Int32, 65536, -3, 46341), vals(gpu.Int32, 65536, 7, 46341), vals(gpu.Int32, 0, -21, -2147479015)},
		{"int32 max is signed", gpu.Int32, gpu.Max, vals(gpu.Int32, -1, minI32), vals(gpu.Int32, 1, maxI32), vals(gpu.Int32, 1, maxI32)},
		{"int32 min is signed", gpu.Int32, gpu.Min, vals(gpu.Int32, -1, minI32), vals(gpu.Int32, 1, maxI32), vals(gpu.Int32, -1, minI32)},
		// uint32.
		{"uint32 sum wraps", gpu.Uint32, gpu.Sum, raw(gpu.Uint32, math.MaxUint32, 3e9), raw(gpu.Uint32, 1, 2e9), raw(gpu.Uint32, 0, 5e9-(1<<32))},
		{"uint32 prod wraps", gpu.Uint32, gpu.Prod, raw(gpu.Uint32, 65536, math.MaxUint32), raw(gpu.Uint32, 65536, math.MaxUint32), raw(gpu.Uint32, 0, 1)},
		{"uint32 max is unsigned", gpu.Uint32, gpu.Max, raw(gpu.Uint32, math.MaxUint32, 0), raw(gpu.Uint32, 1, 1), raw(gpu.Uint32, math.MaxUint32, 1)},
		{"uint32 min is unsigned", gpu.Uint32, gpu.Min, raw(gpu.Uint32, math.MaxUint32, 0), raw(gpu.Uint32, 1, 1), raw(gpu.Uint32, 1, 0)},
		// int64.
		{"int64 sum wraps", gpu.Int64, gpu.Sum, raw(gpu.Int64, maxI64, 1<<63, 1<<40), raw(gpu.Int64, 1, math.MaxUint64, 1<<40), raw(gpu.Int64, 1<<63, maxI64, 1<<41)},
		{"int64 prod wraps", gpu.Int64, gpu.Prod, raw(gpu.Int64, 1<<32, 0x8000000000000001), raw(gpu.Int64, 1<<32, math.MaxUint64), raw(gpu.Int64, 0, maxI64)},
		{"int64 max is signed", gpu.Int64, gpu.Max, raw(gpu.Int64, math.MaxUint64, 1<<63), raw(gpu.Int64, 1, maxI64), raw(gpu.Int64, 1, maxI64)},
		{"int64 min is signed", gpu.Int64, gpu.Min, raw(gpu.Int64, math.MaxUint64, 1<<63), raw(gpu.Int64, 1, maxI64), raw(gpu.Int64, math.MaxUint64, 1<<63)},
		// uint64.
		{"uint64 sum wraps", gpu.Uint64, gpu.Sum, raw(gpu.Uint64, math.MaxUint64, 1<<63), raw(gpu.Uint64, 1, 1<<63), raw(gpu.Uint64, 0, 0)},
		{"uint64 prod wraps", gpu.Uint64, gpu.Prod, raw(gpu.Uint64, 1<<32, math.MaxUint64, 6), raw(gpu.Uint64, 1<<32, math.MaxUint64, 7), raw(gpu.Uint64, 0, 1, 42)},
		{"uint64 max is unsigned", gpu.Uint64, gpu.Max, raw(gpu.Uint64, math.MaxUint64, 0), raw(gpu.Uint64, 1, 1), raw(gpu.Uint64, math.MaxUint64, 1)},
		{"uint64 min is unsigned", gpu.Uint64, gpu.Min, raw(gpu.Uint64, math.MaxUint64, 0), raw(gpu.Uint64, 1, 1), raw(gpu.Uint64, 1, 0)},
		// half: every step rounds to half.
		{"half sum", gpu.Half, gpu.Sum, vals(gpu.Half, 1, 2048, 0.5, 65504, -3), vals(gpu.Half, 2, 1, 0.25, 65504, 1), vals(gpu.Half, 3, 2048, 0.75, inf, -2)},
		{"half avg folds as sum", gpu.Half, gpu.Avg, vals(gpu.Half, 1.5), vals(gpu.Half, 2.5), vals(gpu.Half, 4)},
		{"half prod", gpu.Half, gpu.Prod, vals(gpu.Half, 3, -2, 1000, 1025), vals(gpu.Half, 0.5, 4, 1000, 3), vals(gpu.Half, 1.5, -8, inf, 3076)},
		{"half max", gpu.Half, gpu.Max, vals(gpu.Half, -1, -65504, 0.5), vals(gpu.Half, 1, 2, -inf), vals(gpu.Half, 1, 2, 0.5)},
		{"half min", gpu.Half, gpu.Min, vals(gpu.Half, -1, -65504, 0.5), vals(gpu.Half, 1, 2, -inf), vals(gpu.Half, -1, -65504, -inf)},
		// float: float32 arithmetic.
		{"float sum", gpu.Float, gpu.Sum, vals(gpu.Float, 1, 16777216, 0.1, -1.5), vals(gpu.Float, 2, 1, 0.2, 1.5), raw(gpu.Float, 0x40400000, 0x4b800000, uint64(math.Float32bits(float32(0.1)+float32(0.2))), 0)},
		{"float sum rounds", gpu.Float, gpu.Sum, vals(gpu.Float, 1), vals(gpu.Float, math.Ldexp(1, -24)), vals(gpu.Float, 1)},
		{"float avg folds as sum", gpu.Float, gpu.Avg, vals(gpu.Float, 1.5), vals(gpu.Float, 2.5), vals(gpu.Float, 4)},
		{"float prod", gpu.Float, gpu.Prod, vals(gpu.Float, 3, -2, 1e30, 0.1), vals(gpu.Float, 0.5, 4, 1e30, 3), vals(gpu.Float, 1.5, -8, inf, float64(float32(0.1)*3))},
		{"float max", gpu.Float, gpu.Max, vals(gpu.Float, -1, -3.5, 7), vals(gpu.Float, 1, 2, -inf), vals(gpu.Float, 1, 2, 7)},
		{"float min", gpu.Float, gpu.Min, vals(gpu.Float, -1, -3.5, 7), vals(gpu.Float, 1, 2, -inf), vals(gpu.Float, -1, -3.5, -inf)},
		// double.
		{"double sum", gpu.Double, gpu.Sum, vals(gpu.Double, 1, 1, 0.1), vals(gpu.Double, 2, math.Ldexp(1, -53), 0.2), vals(gpu.Double, 3, 1, tenth+fifth)},
		{"double avg folds as sum", gpu.Double, gpu.Avg, vals(gpu.Double, 1.5), vals(gpu.Double, 2.5), vals(gpu.Double, 4)},
		{"double prod", gpu.Double, gpu.Prod, vals(gpu.Double, 3, -2, 1e200), vals(gpu.Double, 0.5, 4, 1e200), vals(gpu.Double, 1.5, -8, inf)},
		{"double max", gpu.Double, gpu.Max, vals(gpu.Double, -1, -3.5, 1e300), vals(gpu.Double, 1, 2, -1e300), vals(gpu.Double, 1, 2, 1e300)},
		{"double min", gpu.Double, gpu.Min, vals(gpu.Double, -1, -3.5, 1e300), vals(gpu.Double, 1, 2, -1e300), vals(gpu.Double, -1, -3.5, -1e300)},
		// bfloat16: 8 significant bits.
		{"bf16 sum", gpu.BFloat16, gpu.Sum, vals(gpu.BFloat16, 1, 256, 1, 3), vals(gpu.BFloat16, 2, 1, math.Ldexp(1, -8), -4), vals(gpu.BFloat16, 3, 256, 1, -1)},
		{"bf16 avg folds as sum", gpu.BFloat16, gpu.Avg, vals(gpu.BFloat16, 1.5), vals(gpu.BFloat16, 2.5), vals(gpu.BFloat16, 4)},
		{"bf16 prod", gpu.BFloat16, gpu.Prod, vals(gpu.BFloat16, 3, -2, 17, 1e30), vals(gpu.BFloat16, 0.5, 4, 17, 1e30), vals(gpu.BFloat16, 1.5, -8, 288, inf)},
		{"bf16 max", gpu.BFloat16, gpu.Max, vals(gpu.BFloat16, -1, -3.5, 7), vals(gpu.BFloat16, 1, 2, -inf), vals(gpu.BFloat16, 1, 2, 7)},
		{"bf16 min", gpu.BFloat16, gpu.Min, vals(gpu.BFloat16, -1, -3.5, 7), vals(gpu.BFloat16, 1, 2, -inf), vals(gpu.BFloat16, -1, -3.5, -inf)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if len(tc.dst) != len(tc.src) || len(tc.dst) != len(tc.want) {
				t.Fatalf("bad case: lengths %d, %d, %d", len(tc.dst), len(tc.src), len(tc.want))
			}
			dst := bytes.Clone(tc.dst)
			src := bytes.Clone(tc.src)
			gpu.Reduce(tc.dt, tc.op, dst, src)
			if !bytes.Equal(dst, tc.want) {
				t.Errorf("Reduce(%v, %v, %s, %s) = %s; want %s", tc.dt, tc.op,
					describe(tc.dt, tc.dst), describe(tc.dt, tc.src), describe(tc.dt, dst), describe(tc.dt, tc.want))
			}
			if !bytes.Equal(src, tc.src) {
				t.Errorf("Reduce changed src")
			}
		})
	}
}

// Every dtype and op has a hand-computed case above.
func TestReduceCoversEveryTypeAndOp(t *testing.T) {
	t.Parallel()
	// Prod is the most type-specific op; check one element of it for every type, so that a
	// type missing from the table above is caught.
	for _, dt := range gpu.DTypes {
		for _, op := range gpu.RedOps {
			t.Run(dt.String()+"/"+op.String(), func(t *testing.T) {
				t.Parallel()
				dst, src := vals(dt, 6, 1, 5), vals(dt, 2, 1, 5)
				gpu.Reduce(dt, op, dst, src)
				want := map[gpu.RedOp][]float64{
					gpu.Sum: {8, 2, 10}, gpu.Avg: {8, 2, 10}, gpu.Prod: {12, 1, 25},
					gpu.Max: {6, 1, 5}, gpu.Min: {2, 1, 5},
				}[op]
				if !bytes.Equal(dst, vals(dt, want...)) {
					t.Errorf("Reduce(%v, %v, [6 1 5], [2 1 5]) = %s; want %v", dt, op, describe(dt, dst), want)
				}
			})
		}
	}
}

// randomBuf fills n elements of dt: random bits for integers, random finite values for floats.
func randomBuf(r *rand.Rand, dt gpu.DType, n int) []byte {
	b := make([]byte, n*dt.Size())
	for i := range n {
		if dt.IsFloat() {
			v := (r.Float64()*2 - 1) * math.Ldexp(1, r.IntN(12)-4)
			gpu.SetBits(dt, b, i, gpu.FloatBits(dt, v))
		} else {
			gpu.SetBits(dt, b, i, r.Uint64())
		}
	}
	return b
}

func TestReduceAllMatchesRepeatedReduce(t *testing.T) {
	t.Parallel()
	for _, dt := range gpu.DTypes {
		for _, op := range gpu.RedOps {
			for _, nsrc := range []int{1, 2, 3, 5} {
				t.Run(fmt.Sprintf("%v/%v/%d", dt, op, nsrc), func(t *testing.T) {
					t.Parallel()
					r := rand.New(rand.NewPCG(uint64(dt), uint64(op)*100+uint64(nsrc)))
					const n = 37
					srcs := make([][]byte, nsrc)
					for i := range srcs {
						srcs[i] = randomBuf(r, dt, n)
					}
					orig := make([][]byte, nsrc)
					for i := range srcs {
						orig[i] = bytes.Clone(srcs[i])
					}

					want := bytes.Clone(srcs[0])
					for _, s := range srcs[1:] {
						gpu.Reduce(dt, op, want, s)
					}
					if op == gpu.Avg {
						gpu.DivideBy(dt, want, nsrc)
					}

					got := make([]byte, len(want))
					gpu.ReduceAll(dt, op, got, srcs)
					if !bytes.Equal(got, want) {
						t.Errorf("ReduceAll = %s;\nrepeated Reduce = %s", describe(dt, got), describe(dt, want))
					}
					for i := range srcs {
						if !bytes.Equal(srcs[i], orig[i]) {
							t.Fatalf("ReduceAll changed src %d", i)
						}
					}

					// dst may be one of the srcs.
					for _, into := range []int{0, nsrc - 1} {
						aliased := make([][]byte, nsrc)
						for i := range srcs {
							aliased[i] = bytes.Clone(srcs[i])
						}
						gpu.ReduceAll(dt, op, aliased[into], aliased)
						if !bytes.Equal(aliased[into], want) {
							t.Errorf("ReduceAll into src %d = %s; want %s", into, describe(dt, aliased[into]), describe(dt, want))
						}
					}
				})
			}
		}
	}
}

func TestReduceAllHandComputed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		dt   gpu.DType
		op   gpu.RedOp
		srcs [][]byte
		want []byte
	}{
		{"int8 avg divides the wrapped sum", gpu.Int8, gpu.Avg, [][]byte{vals(gpu.Int8, 100, -7), vals(gpu.Int8, 100, 0)}, vals(gpu.Int8, -28, -3)},
		{"int32 avg truncates toward zero", gpu.Int32, gpu.Avg, [][]byte{vals(gpu.Int32, -3, 3, 10), vals(gpu.Int32, -2, 2, 0), vals(gpu.Int32, -2, 2, 1)}, vals(gpu.Int32, -2, 2, 3)},
		{"uint8 avg of wrapped sum", gpu.Uint8, gpu.Avg, [][]byte{raw(gpu.Uint8, 255, 9), raw(gpu.Uint8, 3, 0)}, raw(gpu.Uint8, 1, 4)},
		{"uint64 avg", gpu.Uint64, gpu.Avg, [][]byte{raw(gpu.Uint64, math.MaxUint64), raw(gpu.Uint64, 0), raw(gpu.Uint64, 0)}, raw(gpu.Uint64, math.MaxUint64/3)},
		{"float sum rounds each step", gpu.Float, gpu.Sum, [][]byte{vals(gpu.Float, 16777216), vals(gpu.Float, 1), vals(gpu.Float, 1)}, vals(gpu.Float, 16777216)},
		{"float avg", gpu.Float, gpu.Avg, [][]byte{vals(gpu.Float, 1, -7), vals(gpu.Float, 2, 0)}, vals(gpu.Float, 1.5, -3.5)},
		{"half sum rounds each step", gpu.Half, gpu.Sum, [][]byte{vals(gpu.Half, 2048), vals(gpu.Half, 1), vals(gpu.Half, 1)}, vals(gpu.Half, 2048)},
		{"half avg", gpu.Half, gpu.Avg, [][]byte{vals(gpu.Half, 1), vals(gpu.Half, 0), vals(gpu.Half, 0)}, raw(gpu.Half, 0x3555)},
		{"bf16 max", gpu.BFloat16, gpu.Max, [][]byte{vals(gpu.BFloat16, 1, -5), vals(gpu.BFloat16, -2, -4), vals(gpu.BFloat16, 0.5, -6)}, vals(gpu.BFloat16, 1, -4)},
		{"double prod", gpu.Double, gpu.Prod, [][]byte{vals(gpu.Double, 2), vals(gpu.Double, -3), vals(gpu.Double, 0.25)}, vals(gpu.Double, -1.5)},
		{"single src is copied", gpu.Int64, gpu.Min, [][]byte{raw(gpu.Int64, 1<<63, 5)}, raw(gpu.Int64, 1<<63, 5)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := make([]byte, len(tc.want))
			gpu.ReduceAll(tc.dt, tc.op, got, tc.srcs)
			if !bytes.Equal(got, tc.want) {
				t.Errorf("ReduceAll = %s; want %s", describe(tc.dt, got), describe(tc.dt, tc.want))
			}
		})
	}
}

func TestDivideBy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		dt       gpu.DType
		in, want []byte
		n        int
	}{
		{"int8 truncates toward zero", gpu.Int8, vals(gpu.Int8, -7, 7, -128, 127, -1), vals(gpu.Int8, -3, 3, -64, 63, 0), 2},
		{"int8 by 3", gpu.Int8, vals(gpu.Int8, -128, 100), vals(gpu.Int8, -42, 33), 3},
		{"uint8", gpu.Uint8, raw(gpu.Uint8, 255, 7, 1), raw(gpu.Uint8, 127, 3, 0), 2},
		{"int32", gpu.Int32, vals(gpu.Int32, -7, 7, math.MinInt32), vals(gpu.Int32, -3, 3, math.MinInt32/2), 2},
		{"uint32", gpu.Uint32, raw(gpu.Uint32, math.MaxUint32, 7), raw(gpu.Uint32, math.MaxUint32/2, 3), 2},
		{"int64", gpu.Int64, raw(gpu.Int64, uint64(math.MaxUint64-6), 1<<63), raw(gpu.Int64, uint64(math.MaxUint64-2), 0xc000000000000000), 2},
		{"uint64", gpu.Uint64, raw(gpu.Uint64, math.MaxUint64, 7), raw(gpu.Uint64, math.MaxUint64/2, 3), 2},
		{"by one", gpu.Int32, vals(gpu.Int32, -7, 7), vals(gpu.Int32, -7, 7), 1},
		{"half", gpu.Half, vals(gpu.Half, -7, 1, 65504), vals(gpu.Half, -3.5, 0.5, 32752), 2},
		{"half rounds", gpu.Half, vals(gpu.Half, 1), raw(gpu.Half, 0x3555), 3},
		{"float", gpu.Float, vals(gpu.Float, -7, 1), vals(gpu.Float, -3.5, 0.5), 2},
		{"float rounds", gpu.Float, vals(gpu.Float, 1), raw(gpu.Float, uint64(math.Float32bits(float32(1.0/3)))), 3},
		{"double", gpu.Double, vals(gpu.Double, -7, 1), vals(gpu.Double, -3.5, 0.5), 2},
		{"double by 3", gpu.Double, vals(gpu.Double, 1), vals(gpu.Double, 1.0/3), 3},
		{"bf16", gpu.BFloat16, vals(gpu.BFloat16, -7, 1), vals(gpu.BFloat16, -3.5, 0.5), 2},
		{"bf16 rounds", gpu.BFloat16, vals(gpu.BFloat16, 1), raw(gpu.BFloat16, 0x3eab), 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := bytes.Clone(tc.in)
			gpu.DivideBy(tc.dt, got, tc.n)
			if !bytes.Equal(got, tc.want) {
				t.Errorf("DivideBy(%v, %s, %d) = %s; want %s", tc.dt, describe(tc.dt, tc.in), tc.n, describe(tc.dt, got), describe(tc.dt, tc.want))
			}
		})
	}
}

func TestBitsAndIntValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		dt   gpu.DType
		bits uint64
		want int64
	}{
		{"int8 -1", gpu.Int8, 0xff, -1},
		{"int8 -128", gpu.Int8, 0x80, -128},
		{"uint8 255", gpu.Uint8, 0xff, 255},
		{"int32 -1", gpu.Int32, 0xffffffff, -1},
		{"uint32 max", gpu.Uint32, 0xffffffff, math.MaxUint32},
		{"int64 -1", gpu.Int64, math.MaxUint64, -1},
		{"int64 min", gpu.Int64, 1 << 63, math.MinInt64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := make([]byte, 3*tc.dt.Size())
			high := uint64(0) // bits above the type's size, which SetBits must drop
			if tc.dt.Size() < 8 {
				high = ^uint64(0) << (8 * tc.dt.Size())
			}
			gpu.SetBits(tc.dt, b, 1, tc.bits|high)
			if got := gpu.Bits(tc.dt, b, 1); got != tc.bits {
				t.Errorf("Bits after SetBits = %#x; want %#x", got, tc.bits)
			}
			if got := gpu.IntValue(tc.dt, tc.bits); got != tc.want {
				t.Errorf("IntValue(%v, %#x) = %d; want %d", tc.dt, tc.bits, got, tc.want)
			}
			if gpu.Bits(tc.dt, b, 0) != 0 || gpu.Bits(tc.dt, b, 2) != 0 {
				t.Errorf("SetBits touched a neighbouring element: % x", b)
			}
		})
	}
}
