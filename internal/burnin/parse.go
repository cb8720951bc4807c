package burnin

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpubench/gpubench/internal/coll"
)

// MaxXID is the largest XID number --ignore-xid takes, as --sim-fault xid= does: NVIDIA's
// catalog numbers them in the low hundreds, so anything past it is a typo.
const MaxXID = 1 << 16

// ParseCollectives reads --collectives: names of coll.Collectives, comma-separated, each once,
// or "none" for none.
func ParseCollectives(s string) ([]*coll.Collective, error) {
	if s == "none" {
		return nil, nil
	}
	var out []*coll.Collective
	for _, name := range strings.Split(s, ",") {
		c := coll.Find(strings.TrimSpace(name))
		if c == nil {
			var names []string
			for _, c := range coll.Collectives {
				names = append(names, c.Name)
			}
			return nil, fmt.Errorf("unknown collective %q; use names from %s, or none", name, strings.Join(names, ", "))
		}
		if slices.Contains(out, c) {
			return nil, fmt.Errorf("%s is named twice", c.Name)
		}
		out = append(out, c)
	}
	return out, nil
}

// ParseIgnoredXIDs reads --ignore-xid: XID numbers (1 to MaxXID), comma-separated, each once, or
// "none" (or nothing) for none.
func ParseIgnoredXIDs(s string) ([]int, error) {
	if s == "none" || s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		x, err := strconv.Atoi(f)
		switch {
		case err != nil || f == "" || f[0] < '0' || f[0] > '9': // no sign: "+13" is no XID either
			return nil, fmt.Errorf("%q is not an XID number; give a list such as 13,31,43, or none", f)
		case x < 1 || x > MaxXID:
			return nil, fmt.Errorf("XID %d is out of range; XIDs are 1 to %d", x, MaxXID)
		case slices.Contains(out, x):
			return nil, fmt.Errorf("XID %d is named twice", x)
		}
		out = append(out, x)
	}
	return out, nil
}
