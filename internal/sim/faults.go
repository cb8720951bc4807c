package sim

import (
	"fmt"
	"strconv"
	"strings"
)

// Fault is a problem the simulator injects, for tests and demonstrations.
type Fault struct {
	Kind   string  // "hang", "corrupt" or "slow-link"
	Device int     // hang, corrupt: the device
	After  int     // hang, corrupt: collectives on the device that run normally first
	A, B   string  // slow-link: the parts the link joins ("id", or "host/id")
	Factor float64 // slow-link: bandwidth multiplier, (0, 1]
}

const faultUsage = "use hang=DEVICE[@N], corrupt=DEVICE[@N] or slow-link=PART,PART,FACTOR"

// ParseFault reads a fault spec:
//
//	hang=3          device 3 never finishes its work (hang=3@100: after 100 collectives)
//	corrupt=2       device 2 flips a bit in every result it receives (corrupt=2@5: from the 6th)
//	slow-link=gpu0,nvswitch,0.25   the link between two parts runs at a quarter of its bandwidth
func ParseFault(s string) (Fault, error) {
	kind, arg, ok := strings.Cut(s, "=")
	if !ok || arg == "" {
		return Fault{}, fmt.Errorf("bad fault %q: %s", s, faultUsage)
	}
	f := Fault{Kind: kind}
	switch kind {
	case "hang", "corrupt":
		dev, after, hasAfter := strings.Cut(arg, "@")
		d, err := strconv.Atoi(dev)
		if err != nil || d < 0 || d > 1<<20 {
			return Fault{}, fmt.Errorf("bad fault %q: %q is not a device number; %s", s, dev, faultUsage)
		}
		f.Device = d
		if hasAfter {
			n, err := strconv.Atoi(after)
			if err != nil || n < 0 {
				return Fault{}, fmt.Errorf("bad fault %q: %q is not a count of collectives; %s", s, after, faultUsage)
			}
			f.After = n
		}
	case "slow-link":
		parts := strings.Split(arg, ",")
		if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
			return Fault{}, fmt.Errorf("bad fault %q: %s", s, faultUsage)
		}
		factor, err := strconv.ParseFloat(parts[2], 64)
		if err != nil || !(factor > 0 && factor <= 1) {
			return Fault{}, fmt.Errorf("bad fault %q: factor %q must be a number in (0, 1]", s, parts[2])
		}
		f.A, f.B, f.Factor = parts[0], parts[1], factor
	default:
		return Fault{}, fmt.Errorf("unknown fault %q: %s", kind, faultUsage)
	}
	return f, nil
}

func (f Fault) String() string {
	switch f.Kind {
	case "slow-link":
		return fmt.Sprintf("slow-link=%s,%s,%g", f.A, f.B, f.Factor)
	default:
		if f.After > 0 {
			return fmt.Sprintf("%s=%d@%d", f.Kind, f.Device, f.After)
		}
		return fmt.Sprintf("%s=%d", f.Kind, f.Device)
	}
}
