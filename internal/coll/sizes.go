package coll

import (
	"fmt"
	"math/big"
	"regexp"
	"strings"
)

// MaxSize bounds every size gpubench accepts: 1 PiB is more than any GPU holds.
const MaxSize = int64(1) << 50

// MaxSizes bounds the number of sizes in one sweep.
const MaxSizes = 10000

// Sweep is a size sweep, as nccl-tests walks it: from Min to Max (inclusive), multiplying by
// Factor when it is above 1, else adding Step.
type Sweep struct {
	Min, Max int64
	Factor   int64
	Step     int64
}

var unitShift = map[string]uint{
	"": 0, "b": 0,
	"k": 10, "kb": 10, "kib": 10,
	"m": 20, "mb": 20, "mib": 20,
	"g": 30, "gb": 30, "gib": 30,
	"t": 40, "tb": 40, "tib": 40,
}

var sizePattern = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)$`)

// ParseSize reads a byte count: a number, optionally with a fraction, and a binary unit as
// nccl-tests reads them (K, M, G, T = 2^10..2^40; KB, KiB and the like mean the same; B or none
// means bytes).
func ParseSize(s string) (int64, error) {
	m := sizePattern.FindStringSubmatch(s)
	if m == nil {
		if s == "" {
			return 0, fmt.Errorf("empty size")
		}
		return 0, fmt.Errorf("%q is not a size (write a number and a unit, e.g. 8B, 64K, 1.5MiB, 8GB)", s)
	}
	shift, ok := unitShift[strings.ToLower(m[2])]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q in %q: use B, K, M, G or T (or KiB, MiB, GiB, TiB)", m[2], s)
	}
	v, ok := new(big.Rat).SetString(m[1])
	if !ok {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	v.Mul(v, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), shift)))
	if !v.IsInt() {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	if v.Cmp(new(big.Rat).SetInt64(MaxSize)) > 0 {
		return 0, fmt.Errorf("%q is too large: at most 1TiB x 1024 (1 PiB)", s)
	}
	return v.Num().Int64(), nil
}

// ParseSizes reads MIN:MAX[:xFACTOR|:+STEP], or a single size. The default step multiplies by 2.
func ParseSizes(s string) (Sweep, error) {
	parts := strings.Split(s, ":")
	if len(parts) > 3 {
		return Sweep{}, fmt.Errorf("too many fields")
	}
	w := Sweep{Factor: 2}
	var err error
	if w.Min, err = ParseSize(parts[0]); err != nil {
		return Sweep{}, err
	}
	w.Max = w.Min
	if len(parts) > 1 {
		if w.Max, err = ParseSize(parts[1]); err != nil {
			return Sweep{}, err
		}
	}
	if len(parts) == 3 {
		step := parts[2]
		switch {
		case strings.HasPrefix(step, "x"):
			f, ok := new(big.Int).SetString(step[1:], 10)
			if !ok || step[1:] == "" || step[1] == '+' || step[1] == '-' {
				return Sweep{}, fmt.Errorf("factor %q is not a whole number (write x2, x4, ...)", step)
			}
			if f.Cmp(big.NewInt(2)) < 0 || f.Cmp(big.NewInt(MaxSize)) > 0 {
				return Sweep{}, fmt.Errorf("factor %q must be at least x2", step)
			}
			w.Factor = f.Int64()
		case strings.HasPrefix(step, "+"):
			if w.Step, err = ParseSize(step[1:]); err != nil {
				return Sweep{}, fmt.Errorf("step %q: %v", step, err)
			}
			if w.Step == 0 {
				return Sweep{}, fmt.Errorf("the step must be at least 1 byte")
			}
			w.Factor = 1
		default:
			return Sweep{}, fmt.Errorf("step %q must start with x (a factor, e.g. x2) or + (an increment, e.g. +1M)", step)
		}
	}
	return w, w.Validate()
}

// Validate checks a sweep, however it was made.
func (w Sweep) Validate() error {
	switch {
	case w.Min <= 0:
		return fmt.Errorf("the smallest size must be at least 1 byte")
	case w.Max > MaxSize:
		return fmt.Errorf("the largest size must be at most 1 PiB")
	case w.Min > w.Max:
		return fmt.Errorf("the smallest size (%s) is larger than the largest (%s)", FormatSize(w.Min), FormatSize(w.Max))
	case w.Factor <= 1 && w.Step <= 0 && w.Min != w.Max:
		return fmt.Errorf("the step must be at least 1 byte, or the factor at least 2")
	}
	if n := w.count(); n > MaxSizes {
		return fmt.Errorf("the sweep has %d sizes; at most %d: use a larger step", n, MaxSizes)
	}
	return nil
}

func (w Sweep) count() int64 {
	if w.Min == w.Max {
		return 1
	}
	if w.Factor > 1 {
		n := int64(1)
		for s := w.Min; s <= w.Max/w.Factor; s *= w.Factor {
			n++
		}
		return n
	}
	return (w.Max-w.Min)/w.Step + 1
}

// Sizes lists the sweep's sizes in order.
func (w Sweep) Sizes() []int64 {
	sizes := []int64{w.Min}
	for s := w.Min; ; {
		if w.Factor > 1 {
			if s > w.Max/w.Factor {
				break
			}
			s *= w.Factor
		} else {
			if w.Step <= 0 || s > w.Max-w.Step {
				break
			}
			s += w.Step
		}
		sizes = append(sizes, s)
	}
	return sizes
}

// String writes the sweep back in --sizes form.
func (w Sweep) String() string {
	s := FormatSize(w.Min) + ":" + FormatSize(w.Max)
	if w.Factor > 1 {
		return s + fmt.Sprintf(":x%d", w.Factor)
	}
	return s + ":+" + FormatSize(w.Step)
}

// FormatSize writes a byte count in the largest binary unit that divides it.
func FormatSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for i < len(units)-1 && n != 0 && n%1024 == 0 {
		n /= 1024
		i++
	}
	return fmt.Sprintf("%d%s", n, units[i])
}
