package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
)

// Fault is a problem the simulator injects, for tests and demonstrations.
type Fault struct {
	Kind   string  // "hang", "corrupt", "slow-link", "slow-nic", "slow-node", "flaky-link" or "xid"
	Device int     // hang, corrupt, xid: the device
	After  int     // hang, corrupt: collectives on the device that run normally first
	A, B   string  // slow-link, flaky-link: the parts the link joins ("id", or "host/id"); slow-nic: A is the NIC ("host/id"); slow-node: A is the host
	Factor float64 // slow-link, slow-nic, slow-node: bandwidth multiplier, [gpu.MinSlowFactor, 1]
	Every  int     // flaky-link: one call in Every that crosses the link fails
	// At is when, on the simulator's clock, an xid event is raised or a slow-link starts (0: from
	// the start). A timed slow link starts at the first collective launched at or after At, and
	// slows the communicators made and the copies started from then on.
	At   time.Duration
	Code int // xid: the XID number (DefaultXID when not given)
}

// DefaultXID is the XID an xid fault raises when it names none: 79, "GPU has fallen off the bus".
const DefaultXID = 79

// maxXID bounds the XID numbers a fault may name.
const maxXID = 1 << 16

const faultUsage = "use hang=DEVICE[@N], corrupt=DEVICE[@N], slow-link=PART,PART,FACTOR[@TIME], slow-nic=HOST/NIC,FACTOR, slow-node=HOST,FACTOR, flaky-link=PART,PART,N or xid=DEVICE[@TIME][:CODE]"

// maxEvery bounds a flaky link's period.
const maxEvery = 1 << 20

// ParseFault reads a fault spec:
//
//	hang=3          device 3 never finishes its work (hang=3@100: after 100 collectives)
//	corrupt=2       device 2 flips a bit in every result it receives (corrupt=2@5: from the 6th)
//	slow-link=gpu0,nvswitch,0.25   the link between two parts runs at a quarter of its bandwidth
//	                (slow-link=gpu0,nvswitch,0.25@10m: from 10 minutes on the simulator's clock)
//	slow-nic=node-3/mlx5_3,0.4     that NIC's link to the network runs at 40% of its bandwidth
//	slow-node=node-7,0.5           every link of that node runs at half its bandwidth
//	flaky-link=node-2/gpu1,node-2/nvswitch,3   one call in three that crosses the link fails
//	xid=1@90s:48    device 1 reports XID 48 at 90 s (xid=1: XID 79 at the start)
func ParseFault(s string) (Fault, error) {
	kind, arg, ok := strings.Cut(s, "=")
	if !ok || arg == "" {
		return Fault{}, fmt.Errorf("bad fault %q: %s", s, faultUsage)
	}
	f := Fault{Kind: kind}
	switch kind {
	case "hang", "corrupt":
		dev, after, hasAfter := strings.Cut(arg, "@")
		d, err := parseDevice(dev)
		if err != nil {
			return Fault{}, fmt.Errorf("bad fault %q: %v; %s", s, err, faultUsage)
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
		factorText, at, hasAt := strings.Cut(parts[2], "@")
		factor, err := strconv.ParseFloat(factorText, 64)
		if err != nil || !(factor >= gpu.MinSlowFactor && factor <= 1) {
			return Fault{}, fmt.Errorf("bad fault %q: factor %q must be a number from %g to 1", s, factorText, gpu.MinSlowFactor)
		}
		if hasAt {
			if f.At, err = parseTime(at); err != nil {
				return Fault{}, fmt.Errorf("bad fault %q: %v; %s", s, err, faultUsage)
			}
		}
		f.A, f.B, f.Factor = parts[0], parts[1], factor
	case "slow-nic", "slow-node":
		what, factorText, ok := strings.Cut(arg, ",")
		factor, err := strconv.ParseFloat(factorText, 64)
		switch {
		case !ok || what == "" || strings.Contains(factorText, ","):
			return Fault{}, fmt.Errorf("bad fault %q: %s", s, faultUsage)
		case strings.Contains(factorText, "@"):
			return Fault{}, fmt.Errorf("bad fault %q: a start time (@TIME) is for slow-link only; %s starts slow", s, kind)
		case err != nil || !(factor >= gpu.MinSlowFactor && factor <= 1):
			return Fault{}, fmt.Errorf("bad fault %q: factor %q must be a number from %g to 1", s, factorText, gpu.MinSlowFactor)
		case kind == "slow-nic" && !strings.Contains(what, "/"):
			return Fault{}, fmt.Errorf("bad fault %q: name the NIC as HOST/NIC, e.g. node-3/mlx5_3", s)
		}
		f.A, f.Factor = what, factor
	case "flaky-link":
		parts := strings.Split(arg, ",")
		if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
			return Fault{}, fmt.Errorf("bad fault %q: %s", s, faultUsage)
		}
		n, err := strconv.Atoi(parts[2])
		if err != nil || n < 1 || n > maxEvery {
			return Fault{}, fmt.Errorf("bad fault %q: %q is not a period (one call in N fails, N from 1 to %d)", s, parts[2], maxEvery)
		}
		f.A, f.B, f.Every = parts[0], parts[1], n
	case "xid":
		rest, code, hasCode := strings.Cut(arg, ":")
		dev, at, hasAt := strings.Cut(rest, "@")
		d, err := parseDevice(dev)
		if err != nil {
			return Fault{}, fmt.Errorf("bad fault %q: %v; %s", s, err, faultUsage)
		}
		f.Device, f.Code = d, DefaultXID
		if hasAt {
			if f.At, err = parseTime(at); err != nil {
				return Fault{}, fmt.Errorf("bad fault %q: %v; %s", s, err, faultUsage)
			}
		}
		if hasCode {
			c, err := strconv.Atoi(code)
			if err != nil || c < 1 || c > maxXID {
				return Fault{}, fmt.Errorf("bad fault %q: %q is not an XID number (1-%d); %s", s, code, maxXID, faultUsage)
			}
			f.Code = c
		}
	default:
		return Fault{}, fmt.Errorf("unknown fault %q: %s", kind, faultUsage)
	}
	return f, nil
}

func parseDevice(s string) (int, error) {
	d, err := strconv.Atoi(s)
	if err != nil || d < 0 || d > 1<<20 {
		return 0, fmt.Errorf("%q is not a device number", s)
	}
	return d, nil
}

// parseTime reads a time on the simulator's clock: a Go duration such as 90s or 1h30m.
func parseTime(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a time (a duration such as 90s or 1h30m)", s)
	}
	return d, nil
}

func (f Fault) String() string {
	at := ""
	if f.At > 0 {
		at = "@" + f.At.String()
	}
	switch f.Kind {
	case "slow-link":
		return fmt.Sprintf("slow-link=%s,%s,%g%s", f.A, f.B, f.Factor, at)
	case "slow-nic", "slow-node":
		return fmt.Sprintf("%s=%s,%g", f.Kind, f.A, f.Factor)
	case "flaky-link":
		return fmt.Sprintf("flaky-link=%s,%s,%d", f.A, f.B, f.Every)
	case "xid":
		return fmt.Sprintf("xid=%d%s:%d", f.Device, at, f.Code)
	default:
		if f.After > 0 {
			return fmt.Sprintf("%s=%d@%d", f.Kind, f.Device, f.After)
		}
		return fmt.Sprintf("%s=%d", f.Kind, f.Device)
	}
}

// startFactor is the bandwidth factor a slow-link fault applies when the backend is made: its
// factor when it starts at once, else 1 (which still checks that the link exists).
func (f Fault) startFactor() float64 {
	if f.At > 0 {
		return 1
	}
	return f.Factor
}

// applyTimedFaults starts the slow links whose time has come. Call it with b.mu held.
func (b *Backend) applyTimedFaults() {
	now := time.Duration(b.hostUS * 1e3)
	for i := range b.opt.Faults {
		f := &b.opt.Faults[i]
		if f.Kind != "slow-link" || f.At <= 0 || f.At > now {
			continue
		}
		// New checked the link exists; the fault's start time is cleared so that it applies once.
		_ = b.topo.SlowLink(f.A, f.B, f.Factor)
		f.At = -f.At
	}
}
