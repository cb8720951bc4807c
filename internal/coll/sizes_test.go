package coll

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	good := map[string]int64{
		"8": 8, "8B": 8, "8b": 8, "1K": 1024, "1k": 1024, "1KB": 1024, "1KiB": 1024, "1kib": 1024,
		"32M": 32 << 20, "32MiB": 32 << 20, "8G": 8 << 30, "8GB": 8 << 30, "8GiB": 8 << 30,
		"1T": 1 << 40, "1TiB": 1 << 40, "1.5K": 1536, "0.5M": 512 << 10, "1024T": 1 << 50,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                         "empty",
		"-8":                       "not a size",
		"1XB":                      "unknown unit",
		"1E":                       "unknown unit",
		"0.3K":                     "whole number",
		"0.1":                      "whole number",
		"1025T":                    "too large",
		"99999999999999999999999T": "too large",
		"8 B":                      "not a size",
		"1e3":                      "not a size",
		"K":                        "not a size",
	}
	for in, want := range bad {
		if _, err := ParseSize(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSize(%q) error = %v; want it to mention %q", in, err, want)
		}
	}
}

func TestParseSizes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want []int64
	}{
		{"8B:64B", []int64{8, 16, 32, 64}},
		{"8:100", []int64{8, 16, 32, 64}},
		{"1K:4K:x4", []int64{1024, 4096}},
		{"8:40:+16", []int64{8, 24, 40}},
		{"8:41:+16", []int64{8, 24, 40}},
		{"1M", []int64{1 << 20}},
		{"1M:1M", []int64{1 << 20}},
		{"8B:8GB", nil}, // checked by length below
	}
	for _, c := range cases {
		w, err := ParseSizes(c.in)
		if err != nil {
			t.Fatalf("ParseSizes(%q): %v", c.in, err)
		}
		got := w.Sizes()
		if c.want == nil {
			if len(got) != 31 || got[0] != 8 || got[30] != 8<<30 {
				t.Errorf("ParseSizes(%q).Sizes() = %d sizes from %d to %d; want 31 from 8 to 8GiB", c.in, len(got), got[0], got[len(got)-1])
			}
			continue
		}
		if len(got) != len(c.want) {
			t.Fatalf("ParseSizes(%q).Sizes() = %v; want %v", c.in, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("ParseSizes(%q).Sizes() = %v; want %v", c.in, got, c.want)
			}
		}
	}
}

// The bad inputs the CLI must reject (the CLI test checks exit code and output; this checks the
// reason).
func TestParseSizesRejects(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"8GB:8B":                       "larger than the largest",
		"0:1K":                         "at least 1 byte",
		"1XB:2GB":                      "unknown unit",
		"8B:8GB:x1":                    "at least x2",
		"8B:8GB:x0":                    "at least x2",
		"8B:8GB:x-2":                   "not a whole number",
		"8B:8GB:x1.5":                  "not a whole number",
		"8B:8GB:x":                     "not a whole number",
		"8B:8GB:+0":                    "at least 1 byte",
		"8B:8GB:+1B":                   "at most 10000",
		"8B:8GB:2":                     "must start with x",
		"-8:8":                         "not a size",
		"1E:2E":                        "unknown unit",
		"":                             "empty",
		"1:2:x2:3":                     "too many fields",
		"8:":                           "empty",
		":8":                           "empty",
		"2000T:4000T":                  "too large",
		"8B:8GB:x99999999999999999999": "at least x2",
	}
	for in, want := range bad {
		if _, err := ParseSizes(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSizes(%q) error = %v; want it to mention %q", in, err, want)
		}
	}
}

func FuzzParseSizes(f *testing.F) {
	for _, s := range []string{"8B:8GB", "1K:4K:x4", "8:40:+16", "1M", "0:1K", "8GB:8B", "1.5K:3K:+0.5K", "1T:1024T:x1024", "x", ":::", "8:8:+1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ParseSizes(s)
		if err != nil {
			if err.Error() == "" || strings.Contains(err.Error(), "\n") {
				t.Fatalf("ParseSizes(%q): error is not one line: %q", s, err)
			}
			return
		}
		sizes := w.Sizes()
		if len(sizes) == 0 || len(sizes) > MaxSizes {
			t.Fatalf("ParseSizes(%q): %d sizes", s, len(sizes))
		}
		if sizes[0] != w.Min || sizes[len(sizes)-1] > w.Max {
			t.Fatalf("ParseSizes(%q): sizes %d..%d outside %d..%d", s, sizes[0], sizes[len(sizes)-1], w.Min, w.Max)
		}
		for i := 1; i < len(sizes); i++ {
			if sizes[i] <= sizes[i-1] {
				t.Fatalf("ParseSizes(%q): sizes not ascending at %d: %d then %d", s, i, sizes[i-1], sizes[i])
			}
		}
		again, err := ParseSizes(w.String())
		if err != nil {
			t.Fatalf("ParseSizes(%q).String() = %q does not parse: %v", s, w.String(), err)
		}
		if got := again.Sizes(); len(got) != len(sizes) || got[len(got)-1] != sizes[len(sizes)-1] {
			t.Fatalf("ParseSizes(%q) round trip through %q changed the sweep", s, w.String())
		}
	})
}
