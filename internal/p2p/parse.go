package p2p

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Pair is an unordered pair of devices; both directions are measured.
type Pair struct{ A, B int }

// ParseDevices reads a device list: "0,2,5" or ranges "0-3,6". Devices must be below n.
func ParseDevices(s string, n int) ([]int, error) {
	seen := map[int]bool{}
	var devs []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if strings.TrimSpace(lo) == "" && isRange {
			return nil, fmt.Errorf("%q: device numbers are 0 or more (a range is A-B)", part)
		}
		a, err := device(lo, n)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = device(hi, n); err != nil {
				return nil, err
			}
			if b < a {
				return nil, fmt.Errorf("range %q runs backwards", part)
			}
		}
		for d := a; d <= b; d++ {
			if seen[d] {
				return nil, fmt.Errorf("device %d is listed twice", d)
			}
			seen[d] = true
			devs = append(devs, d)
		}
	}
	sort.Ints(devs)
	return devs, nil
}

// ParsePairs reads pairs "0-1,2-3": each pair names two different devices below n.
func ParsePairs(s string, n int) ([]Pair, error) {
	seen := map[Pair]bool{}
	var pairs []Pair
	for _, part := range strings.Split(s, ",") {
		x, y, ok := strings.Cut(part, "-")
		if !ok {
			return nil, fmt.Errorf("pair %q is not A-B", part)
		}
		a, err := device(x, n)
		if err != nil {
			return nil, err
		}
		b, err := device(y, n)
		if err != nil {
			return nil, err
		}
		if a == b {
			return nil, fmt.Errorf("pair %q names one device twice", part)
		}
		p := Pair{min(a, b), max(a, b)}
		if seen[p] {
			return nil, fmt.Errorf("pair %d-%d is listed twice", p.A, p.B)
		}
		seen[p] = true
		pairs = append(pairs, p)
	}
	return pairs, nil
}

func device(s string, n int) (int, error) {
	d, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || strings.HasPrefix(strings.TrimSpace(s), "+") {
		return 0, fmt.Errorf("%q is not a device number", s)
	}
	if d < 0 || d >= n {
		return 0, fmt.Errorf("device %d is out of range: this machine has devices 0-%d", d, n-1)
	}
	return d, nil
}

func (p Pair) String() string { return fmt.Sprintf("%d-%d", p.A, p.B) }
