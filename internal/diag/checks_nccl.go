package diag

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpubench/gpubench/internal/sim"
)

// knownNCCL are the NCCL_* variables gpubench knows: NCCL's docs/userguide/source/env.rst at
// 2.30.7 (with NCCL_IB_GDR_LEVEL, the name of NCCL_NET_GDR_LEVEL before 2.4), NCCL_COMM_ID
// (src/bootstrap.cc), NCCL_MULTI_RANK_GPU_ENABLE (src/init.cc, 2.30), and NCCL_MIN_NRINGS and
// NCCL_MAX_NRINGS, the older names of the channel bounds, which NCCL still reads (src/graph/connect.cc),
// and the point-to-point channel variables the simulator reads (src/init.cc, src/graph/paths.cc);
// NCCL_GRAPH_MIXING_SUPPORT is what gpubench's own -G sets. NCCL has more variables than these, so
// a name missing here is flagged only when it is one typo away from a known one.
var knownNCCL = []string{
	"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL",
	"NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NCCL_NET_GDR_LEVEL",
	"NCCL_IB_GDR_LEVEL", "NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
	"NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_BUFFSIZE", "NCCL_NVLS_ENABLE", "NCCL_CUMEM_ENABLE",
	"NCCL_TOPO_DUMP_FILE", "NCCL_COMM_BLOCKING", "NCCL_MULTI_RANK_GPU_ENABLE", "NCCL_RAS_ENABLE",
	"NCCL_SET_THREAD_NAME", "NCCL_COMM_ID", "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_MIN_NRINGS", "NCCL_MAX_NRINGS",
	"NCCL_NCHANNELS_PER_NET_PEER", "NCCL_MIN_P2P_NCHANNELS", "NCCL_MAX_P2P_NCHANNELS",
}

// osaDistance is the optimal string alignment distance: insertions, deletions, substitutions and
// transpositions of neighbours each cost 1, so NCCL_DEUBG is one edit from NCCL_DEBUG.
func osaDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// closestNCCL is the known name nearest to name, if it is near enough to be a typo: one edit for
// names of up to 7 characters after NCCL_, two for longer ones (so NCCL_IB_TC, a real variable
// two edits from NCCL_IB_HCA, is not taken for it).
func closestNCCL(name string) (string, bool) {
	up := strings.ToUpper(name)
	best, bestD := "", 1<<30
	longest := 0
	for _, k := range knownNCCL {
		longest = max(longest, len(k))
	}
	if len(up) > longest+2 { // more than two edits from every known name: no need to measure
		return "", false
	}
	for _, k := range knownNCCL {
		if d := osaDistance(up, k); d < bestD {
			best, bestD = k, d
		}
	}
	limit := 1
	if len(strings.TrimPrefix(up, "NCCL_")) >= 8 {
		limit = 2
	}
	return best, bestD <= limit
}

func isKnownNCCL(name string) bool { return slices.Contains(knownNCCL, name) }

// checkNCCLNames: every NCCL_* variable is one NCCL reads (NCCL ignores names it does not know,
// silently), and those gpubench's model reads hold values it can read: gpubench's simulator,
// explain and plan refuse the others (sim.CheckEnv), so they fail here with its message.
func checkNCCLNames(f *Facts) Result {
	var typos, unchecked, known []string
	for _, name := range f.envNames("NCCL_") {
		switch {
		case isKnownNCCL(name):
			known = append(known, name)
		case strings.HasPrefix(name, "NCCL_TESTS_"): // nccl-tests' own (nccl-tests.md)
			known = append(known, name)
		default:
			if best, near := closestNCCL(name); near {
				typos = append(typos, name+" (did you mean "+best+"?)")
			} else {
				unchecked = append(unchecked, name)
			}
		}
	}
	bad := badNCCLValues(f.env)
	if len(bad) == 0 && f.opt.SimEnvErr != nil {
		bad = []string{strings.TrimPrefix(f.opt.SimEnvErr.Error(), "sim: ")}
	}
	if len(bad) > 0 {
		// On the simulator nothing runs with them; on real GPUs NCCL may clamp or ignore what
		// gpubench's model refuses, so there it is a warning.
		judge := warn
		remedy := "correct or unset them (docs/model.md, \"Environment\"): gpubench's simulator, explain and plan refuse them, and NCCL may clamp or ignore them"
		if f.sim {
			judge, remedy = fail, "correct or unset them (docs/model.md, \"Environment\"): the simulator, explain and plan refuse them"
		}
		r := judge(remedy, "NCCL values gpubench cannot read: "+strings.Join(bad, "; ")).with("bad_values", bad)
		if len(typos) > 0 {
			r.Finding += "; unknown NCCL variables: " + list(typos)
			r.Remedy += ", and rename the unknown variables"
			r = r.with("unknown", typos)
		}
		return r
	}
	if len(typos) > 0 {
		return warn("rename the variables: NCCL ignores names it does not know, without a word",
			"unknown NCCL variables: "+list(typos)).with("unknown", typos)
	}
	finding := fmt.Sprintf("%d NCCL %s set, all known", len(known), plural(len(known), "variable", "variables"))
	if len(known) == 0 {
		finding = "no NCCL variable set"
	}
	if len(unchecked) > 0 {
		finding += "; not in gpubench's list, so not checked: " + strings.Join(unchecked, ", ")
	}
	return pass(finding).with("set", append(known, unchecked...))
}

// badNCCLValues is sim.CheckEnv's refusal of each variable it reads that holds a bad value, or,
// when each alone is good, of them together (NCCL_MIN_NCHANNELS over NCCL_MAX_NCHANNELS).
func badNCCLValues(env map[string]string) []string {
	var bad []string
	for _, name := range sim.EnvVars {
		if v, ok := env[name]; ok {
			if err := sim.CheckEnv(map[string]string{name: v}); err != nil {
				bad = append(bad, err.Error())
			}
		}
	}
	if len(bad) == 0 {
		if err := sim.CheckEnv(env); err != nil {
			bad = append(bad, err.Error())
		}
	}
	return bad
}

// checkNCCLTransports: no variable turns off one of NCCL's transports (cuda-nccl-abi.md §2.5):
// NCCL_P2P_DISABLE sends GPU-to-GPU traffic through host memory, NCCL_SHM_DISABLE sends what
// would go through host memory over the network, NCCL_IB_DISABLE sends network traffic over TCP
// sockets instead of InfiniBand or RoCE.
func checkNCCLTransports(f *Facts) Result {
	var off []string
	effects := map[string]string{
		"NCCL_P2P_DISABLE": "GPU-to-GPU traffic goes through host memory instead of NVLink or PCIe P2P",
		"NCCL_SHM_DISABLE": "traffic that would go through shared host memory goes over the network",
		"NCCL_IB_DISABLE":  "traffic between nodes goes over TCP sockets instead of InfiniBand or RoCE",
	}
	for _, name := range []string{"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE"} {
		if v, ok := f.lookup(name); ok && strings.TrimSpace(v) == "1" {
			off = append(off, name+"=1: "+effects[name])
		}
	}
	if v, ok := f.lookup("NCCL_P2P_LEVEL"); ok && strings.EqualFold(strings.TrimSpace(v), "LOC") {
		off = append(off, "NCCL_P2P_LEVEL=LOC: P2P is never used between GPUs")
	}
	if len(off) > 0 {
		return warn("unset these unless they work around a fault you know of (the p2p-topology, acs and rdma checks say whether the paths work)",
			strings.Join(off, "; ")).with("disabled", off)
	}
	return pass("no NCCL transport is turned off")
}

// checkSocketIfname: NCCL_SOCKET_IFNAME names an interface this machine has. Its value is a list
// of name prefixes, "^" in front excludes them, "=" in front makes the names exact
// (cuda-nccl-abi.md §2.5); when it selects nothing, NCCL fails to start ("no socket interface
// found").
func checkSocketIfname(f *Facts) Result {
	value, set := f.lookup("NCCL_SOCKET_IFNAME")
	ifaces := f.fs.names("sys", "class", "net")
	if !set {
		return pass("unset: NCCL picks an interface itself, lo and docker* last")
	}
	if len(ifaces) == 0 {
		return skip("NCCL_SOCKET_IFNAME="+value+", but "+f.fs.path("sys", "class", "net")+" lists no interface", "")
	}
	selected, unmatched := selectIfaces(value, ifaces)
	have := "interfaces: " + strings.Join(ifaces, ", ")
	const remedy = "set NCCL_SOCKET_IFNAME to an interface the nodes reach each other on (ip -br addr), e.g. NCCL_SOCKET_IFNAME=ib0 or =eth0"
	switch {
	case len(selected) == 0:
		return fail(remedy, fmt.Sprintf("NCCL_SOCKET_IFNAME=%s selects no interface, so NCCL fails to start; %s", value, have)).with("interfaces", ifaces)
	case len(unmatched) > 0:
		return warn(remedy, fmt.Sprintf("NCCL_SOCKET_IFNAME=%s: %s %s no interface; it selects %s", value, list(unmatched), plural(len(unmatched), "matches", "match"), strings.Join(selected, ", ")))
	}
	return pass(fmt.Sprintf("NCCL_SOCKET_IFNAME=%s selects %s", value, strings.Join(selected, ", ")))
}

// selectIfaces applies an NCCL_SOCKET_IFNAME value to the interfaces: those it selects, and the
// entries that match none.
func selectIfaces(value string, ifaces []string) (selected, unmatched []string) {
	v := strings.TrimSpace(value)
	exclude := strings.HasPrefix(v, "^")
	v = strings.TrimPrefix(v, "^")
	exact := strings.HasPrefix(v, "=")
	v = strings.TrimPrefix(v, "=")
	var entries []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			entries = append(entries, e)
		}
	}
	match := func(e, iface string) bool {
		if exact {
			return iface == e
		}
		return strings.HasPrefix(iface, e)
	}
	hit := map[string]bool{}
	for _, iface := range ifaces {
		any := false
		for _, e := range entries {
			if match(e, iface) {
				any, hit[e] = true, true
			}
		}
		if any != exclude {
			selected = append(selected, iface)
		}
	}
	for _, e := range entries {
		if !hit[e] {
			unmatched = append(unmatched, e)
		}
	}
	return selected, unmatched
}

// checkNCCLDebug: NCCL_DEBUG is one of NCCL's levels, and not TRACE for a measurement
// (cuda-nccl-abi.md §2.5: VERSION, WARN, INFO, TRACE).
func checkNCCLDebug(f *Facts) Result {
	v, set := f.lookup("NCCL_DEBUG")
	if !set {
		return pass("unset: when NCCL fails, run again with NCCL_DEBUG=WARN to see why")
	}
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "VERSION", "WARN":
		return pass("NCCL_DEBUG=" + v)
	case "INFO":
		return pass("NCCL_DEBUG=INFO: NCCL logs its setup (topology, channels, transports) on stderr")
	case "TRACE":
		return warn("use NCCL_DEBUG=INFO or WARN for measurements", "NCCL_DEBUG=TRACE logs every call, which slows every collective")
	}
	return warn("set NCCL_DEBUG to VERSION, WARN, INFO or TRACE", "NCCL_DEBUG="+v+" is not a level NCCL knows")
}
