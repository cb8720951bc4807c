package gpu_test

import (
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/gpu"
)

func TestParseDType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want gpu.DType
	}{
		// nccl-tests' names.
		{"int8", gpu.Int8},
		{"uint8", gpu.Uint8},
		{"int32", gpu.Int32},
		{"uint32", gpu.Uint32},
		{"int64", gpu.Int64},
		{"uint64", gpu.Uint64},
		{"half", gpu.Half},
		{"float", gpu.Float},
		{"double", gpu.Double},
		{"bfloat16", gpu.BFloat16},
		// Aliases.
		{"char", gpu.Int8},
		{"int", gpu.Int32},
		{"fp16", gpu.Half},
		{"float16", gpu.Half},
		{"float32", gpu.Float},
		{"fp32", gpu.Float},
		{"float64", gpu.Double},
		{"fp64", gpu.Double},
		{"bf16", gpu.BFloat16},
		// Case and surrounding space are ignored, for names and aliases alike.
		{"FLOAT", gpu.Float},
		{"BFloat16", gpu.BFloat16},
		{"  half\t", gpu.Half},
		{"\nBF16 ", gpu.BFloat16},
		{" Fp32", gpu.Float},
		{"UINT64", gpu.Uint64},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := gpu.ParseDType(tc.in)
			if err != nil {
				t.Fatalf("ParseDType(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Errorf("ParseDType(%q) = %v; want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseDTypeRoundTripsString(t *testing.T) {
	t.Parallel()
	if len(gpu.DTypes) != 10 {
		t.Fatalf("len(DTypes) = %d; want 10", len(gpu.DTypes))
	}
	for i, d := range gpu.DTypes {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			if int(d) != i {
				t.Errorf("DTypes[%d] = %d; want nccl-tests' order", i, int(d))
			}
			got, err := gpu.ParseDType(d.String())
			if err != nil || got != d {
				t.Errorf("ParseDType(%q) = %v, %v; want %v", d.String(), got, err, d)
			}
		})
	}
}

func TestParseDTypeErrors(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", " ", "all", "int16", "float8", "bfloat", "fp 32", "int8x", "f32"} {
		t.Run(in, func(t *testing.T) {
			t.Parallel()
			_, err := gpu.ParseDType(in)
			if err == nil {
				t.Fatalf("ParseDType(%q) succeeded; want an error", in)
			}
			msg := err.Error()
			if !strings.Contains(msg, "unknown data type") {
				t.Errorf("error %q does not say the type is unknown", msg)
			}
			for _, name := range []string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16"} {
				if !strings.Contains(msg, name) {
					t.Errorf("error %q does not list %q", msg, name)
				}
			}
			if !strings.Contains(msg, "int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16") {
				t.Errorf("error %q does not list the names in order", msg)
			}
		})
	}
}

func TestParseRedOp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want gpu.RedOp
	}{
		{"sum", gpu.Sum},
		{"prod", gpu.Prod},
		{"max", gpu.Max},
		{"min", gpu.Min},
		{"avg", gpu.Avg},
		{"SUM", gpu.Sum},
		{" Prod ", gpu.Prod},
		{"\tMaX\n", gpu.Max},
		{"Min", gpu.Min},
		{"AVG ", gpu.Avg},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := gpu.ParseRedOp(tc.in)
			if err != nil {
				t.Fatalf("ParseRedOp(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Errorf("ParseRedOp(%q) = %v; want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseRedOpRoundTripsString(t *testing.T) {
	t.Parallel()
	want := []string{"sum", "prod", "max", "min", "avg"}
	if len(gpu.RedOps) != len(want) {
		t.Fatalf("len(RedOps) = %d; want %d", len(gpu.RedOps), len(want))
	}
	for i, o := range gpu.RedOps {
		t.Run(want[i], func(t *testing.T) {
			t.Parallel()
			if o.String() != want[i] {
				t.Errorf("RedOps[%d].String() = %q; want %q", i, o.String(), want[i])
			}
			got, err := gpu.ParseRedOp(o.String())
			if err != nil || got != o {
				t.Errorf("ParseRedOp(%q) = %v, %v; want %v", o.String(), got, err, o)
			}
		})
	}
}

func TestParseRedOpErrors(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "all", "add", "mean", "product", "maximum", "s um", "+"} {
		t.Run(in, func(t *testing.T) {
			t.Parallel()
			_, err := gpu.ParseRedOp(in)
			if err == nil {
				t.Fatalf("ParseRedOp(%q) succeeded; want an error", in)
			}
			msg := err.Error()
			if !strings.Contains(msg, "unknown reduction op") {
				t.Errorf("error %q does not say the op is unknown", msg)
			}
			if !strings.Contains(msg, "sum, prod, max, min, avg") {
				t.Errorf("error %q does not list the valid ops", msg)
			}
		})
	}
}

func TestDTypeProperties(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dt             gpu.DType
		name           string
		size           int
		isFloat, isSig bool
	}{
		{gpu.Int8, "int8", 1, false, true},
		{gpu.Uint8, "uint8", 1, false, false},
		{gpu.Int32, "int32", 4, false, true},
		{gpu.Uint32, "uint32", 4, false, false},
		{gpu.Int64, "int64", 8, false, true},
		{gpu.Uint64, "uint64", 8, false, false},
		{gpu.Half, "half", 2, true, false},
		{gpu.Float, "float", 4, true, false},
		{gpu.Double, "double", 8, true, false},
		{gpu.BFloat16, "bfloat16", 2, true, false},
	}
	if len(tests) != len(gpu.DTypes) {
		t.Fatalf("table covers %d types; DTypes has %d", len(tests), len(gpu.DTypes))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.dt.String(); got != tc.name {
				t.Errorf("String() = %q; want %q", got, tc.name)
			}
			if got := tc.dt.Size(); got != tc.size {
				t.Errorf("Size() = %d; want %d", got, tc.size)
			}
			if got := tc.dt.IsFloat(); got != tc.isFloat {
				t.Errorf("IsFloat() = %v; want %v", got, tc.isFloat)
			}
			if got := tc.dt.IsSigned(); got != tc.isSig {
				t.Errorf("IsSigned() = %v; want %v", got, tc.isSig)
			}
		})
	}
}

func TestOutOfRangeStrings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"dtype -1", gpu.DType(-1).String(), "dtype(-1)"},
		{"dtype 10", gpu.DType(10).String(), "dtype(10)"},
		{"dtype 42", gpu.DType(42).String(), "dtype(42)"},
		{"redop -1", gpu.RedOp(-1).String(), "redop(-1)"},
		{"redop 5", gpu.RedOp(5).String(), "redop(5)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.got != tc.want {
				t.Errorf("String() = %q; want %q", tc.got, tc.want)
			}
		})
	}
}
