package burnin

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Verdicts, from best to worst as they combine.
const (
	Skip = "skip"
	Pass = "pass"
	Warn = "warn"
	Fail = "fail"
)

// Overall verdicts of a burn-in that stopped early without a failed check (Report.Verdict).
const (
	Interrupted = "interrupted"
	Incomplete  = "incomplete"
)

func rank(v string) int {
	switch v {
	case Pass:
		return 1
	case Warn:
		return 2
	case Fail:
		return 3
	}
	return 0
}

// Check is one check's verdict for one subject: a GPU ("0"), an ordered GPU pair ("0-3": copies
// from 0 to 3), or "all" (what only the whole set of GPUs shows, such as a collective).
type Check struct {
	Subject   string `json:"subject"`
	Check     string `json:"check"`
	Verdict   string `json:"verdict"`
	Reason    string `json:"reason"`
	Threshold string `json:"threshold,omitempty"`
	// Failures counts the measurements or samples that failed or warned.
	Failures int `json:"failures"`
}

// Check names, in report order.
const (
	CheckHang         = "hang"
	CheckCalls        = "calls"
	CheckData         = "data"
	CheckBandwidth    = "bandwidth"
	CheckP2PBandwidth = "p2p_bandwidth"
	CheckXID          = "xid"
	CheckECC          = "ecc"
	CheckPCIeReplay   = "pcie_replay"
	CheckNVLink       = "nvlink_errors"
	CheckThrottle     = "throttle"
	CheckClocks       = "clocks"
)

var checkOrder = []string{CheckHang, CheckCalls, CheckData, CheckBandwidth, CheckP2PBandwidth, CheckXID, CheckECC, CheckPCIeReplay, CheckNVLink, CheckThrottle, CheckClocks}

// verdicts holds every check's verdict so far. The worst verdict a check reached stays, with the
// reason of the first time it got there.
type verdicts struct {
	mu     sync.Mutex
	checks map[[2]string]*Check
	notify func(Check)
}

func newVerdicts(notify func(Check)) *verdicts {
	return &verdicts{checks: map[[2]string]*Check{}, notify: notify}
}

// set records a verdict: a worse one replaces the current, an equal one counts.
func (v *verdicts) set(subject, check, verdict, threshold, format string, a ...any) {
	v.mu.Lock()
	k := [2]string{subject, check}
	c, ok := v.checks[k]
	if !ok {
		c = &Check{Subject: subject, Check: check, Verdict: Skip}
		v.checks[k] = c
	}
	changed := !ok
	switch {
	case rank(verdict) > rank(c.Verdict):
		c.Verdict, c.Reason, changed = verdict, fmt.Sprintf(format, a...), true
		if threshold != "" {
			c.Threshold = threshold
		}
	case rank(verdict) == rank(c.Verdict) && c.Reason == "":
		c.Reason = fmt.Sprintf(format, a...)
	}
	if threshold != "" && c.Threshold == "" {
		c.Threshold = threshold
	}
	if verdict == Fail || verdict == Warn {
		c.Failures++
	}
	out := *c
	v.mu.Unlock()
	if changed && v.notify != nil {
		v.notify(out)
	}
}

// explain replaces the reason of a check that stands at verdict, for a reason that grows with
// what is seen (every distinct XID, not only the first).
func (v *verdicts) explain(subject, check, verdict, reason string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if c, ok := v.checks[[2]string{subject, check}]; ok && c.Verdict == verdict {
		c.Reason = reason
	}
}

func (v *verdicts) get(subject, check string) (Check, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.checks[[2]string{subject, check}]
	if !ok {
		return Check{}, false
	}
	return *c, true
}

// list returns every check, by check then subject (all, GPUs in order, then pairs).
func (v *verdicts) list() []Check {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []Check
	for _, c := range v.checks {
		out = append(out, *c)
	}
	order := map[string]int{}
	for i, c := range checkOrder {
		order[c] = i
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Check != b.Check {
			return order[a.Check] < order[b.Check]
		}
		return subjectLess(a.Subject, b.Subject)
	})
	return out
}

func subjectLess(a, b string) bool {
	key := func(s string) (int, int, int) {
		if s == "all" {
			return 0, 0, 0
		}
		x, y, pair := strings.Cut(s, "-")
		i, _ := strconv.Atoi(x)
		if !pair {
			return 1, i, 0
		}
		j, _ := strconv.Atoi(y)
		return 2, i, j
	}
	a0, a1, a2 := key(a)
	b0, b1, b2 := key(b)
	if a0 != b0 {
		return a0 < b0
	}
	if a1 != b1 {
		return a1 < b1
	}
	return a2 < b2
}

// Overall is the worst verdict of checks (skip when there are none).
func Overall(checks []Check) string {
	worst := Skip
	for _, c := range checks {
		if rank(c.Verdict) > rank(worst) {
			worst = c.Verdict
		}
	}
	return worst
}
