// Package gpu is gpubench's backend-neutral vocabulary: the data types, reduction operations,
// devices, buffers, communicators and topology that every backend (the simulator, CUDA/NCCL)
// implements and every benchmark engine uses. It is pure Go.
package gpu

import (
	"fmt"
	"strings"
)

// DType is an element type, named as nccl-tests names it.
type DType int

// The element types gpubench knows, in nccl-tests' order.
const (
	Int8 DType = iota
	Uint8
	Int32
	Uint32
	Int64
	Uint64
	Half
	Float
	Double
	BFloat16
)

// DTypes lists every type in nccl-tests' order (what `-d all` runs).
var DTypes = []DType{Int8, Uint8, Int32, Uint32, Int64, Uint64, Half, Float, Double, BFloat16}

var dtypeNames = [...]string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16"}

var dtypeSizes = [...]int{1, 1, 4, 4, 8, 8, 2, 4, 8, 2}

// Aliases accepted beside nccl-tests' names.
var dtypeAliases = map[string]DType{
	"char": Int8, "int": Int32, "fp16": Half, "float16": Half, "float32": Float, "fp32": Float,
	"float64": Double, "fp64": Double, "bf16": BFloat16,
}

func (d DType) String() string {
	if d < 0 || int(d) >= len(dtypeNames) {
		return fmt.Sprintf("dtype(%d)", int(d))
	}
	return dtypeNames[d]
}

// Size is the element size in bytes.
func (d DType) Size() int { return dtypeSizes[d] }

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == Half || d == Float || d == Double || d == BFloat16 }

// IsSigned reports whether d is a signed integer type.
func (d DType) IsSigned() bool { return d == Int8 || d == Int32 || d == Int64 }

// ParseDType reads a type name (nccl-tests' names, plus common aliases such as fp32 and bf16).
func ParseDType(s string) (DType, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for i, n := range dtypeNames {
		if n == name {
			return DType(i), nil
		}
	}
	if d, ok := dtypeAliases[name]; ok {
		return d, nil
	}
	return 0, fmt.Errorf("unknown data type %q: use one of %s (or all)", s, strings.Join(dtypeNames[:], ", "))
}

// RedOp is a reduction operation.
type RedOp int

// The reduction operations, in nccl-tests' order.
const (
	Sum RedOp = iota
	Prod
	Max
	Min
	Avg
)

// RedOps lists every operation (what `-o all` runs).
var RedOps = []RedOp{Sum, Prod, Max, Min, Avg}

var redOpNames = [...]string{"sum", "prod", "max", "min", "avg"}

func (o RedOp) String() string {
	if o < 0 || int(o) >= len(redOpNames) {
		return fmt.Sprintf("redop(%d)", int(o))
	}
	return redOpNames[o]
}

// ParseRedOp reads an operation name.
func ParseRedOp(s string) (RedOp, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for i, n := range redOpNames {
		if n == name {
			return RedOp(i), nil
		}
	}
	return 0, fmt.Errorf("unknown reduction op %q: use one of %s (or all)", s, strings.Join(redOpNames[:], ", "))
}
