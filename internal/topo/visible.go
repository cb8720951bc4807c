package topo

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// VisibleDevices is CUDA_VISIBLE_DEVICES as the CUDA driver reads it (the rules PyTorch's
// _parse_visible_devices reproduces): a comma-separated list of device indices, of GPU UUIDs
// ("GPU-" and enough of the rest to name one GPU) or of MIG devices ("MIG-<uuid>", or before
// driver R470 "MIG-GPU-<uuid>/<gi>/<ci>"). The first entry sets the kind; the list ends at the
// first entry that is not of that kind, and an entry given twice leaves CUDA no device at all. An
// index is read as C's strtoul reads it, so "1gpu2" is 1.
type VisibleDevices struct {
	Set      bool     // the variable is set; unset, every device is visible
	Kind     string   // "index", "gpu" or "mig"; "" when CUDA reads no entry and none repeats
	Entries  []string // the entries CUDA reads, trimmed; indices in decimal without leading zeros
	Stopped  bool     // an entry ended the list early
	Stop     string   // that entry
	Repeated string   // an entry given twice: CUDA then sees no device
}

// ParseVisibleDevices reads the value of CUDA_VISIBLE_DEVICES; set says whether it is set at all.
func ParseVisibleDevices(value string, set bool) VisibleDevices {
	v := VisibleDevices{Set: set}
	if !set || strings.TrimSpace(value) == "" {
		return v
	}
	fields := strings.Split(value, ",")
	switch first := strings.TrimSpace(fields[0]); {
	case strings.HasPrefix(first, "GPU-"):
		v.Kind = "gpu"
	case strings.HasPrefix(first, "MIG-"):
		v.Kind = "mig"
	default:
		v.Kind = "index"
	}
	seen := map[string]bool{}
	for _, f := range fields {
		f = strings.TrimSpace(f)
		entry, ok := f, false
		switch v.Kind {
		case "gpu":
			ok = strings.HasPrefix(f, "GPU-")
		case "mig":
			ok = strings.HasPrefix(f, "MIG-")
		default:
			entry, ok = leadingIndex(f)
		}
		if !ok {
			v.Stopped, v.Stop = true, f
			break
		}
		if seen[entry] {
			v.Repeated, v.Entries = entry, nil
			return v
		}
		seen[entry] = true
		v.Entries = append(v.Entries, entry)
	}
	if len(v.Entries) == 0 {
		v.Kind = ""
	}
	return v
}

// leadingIndex reads a device index as strtoul does: an optional '+', then the leading digits;
// anything after them is ignored. A '-' or no digit is not an index.
func leadingIndex(s string) (string, bool) {
	s = strings.TrimPrefix(s, "+")
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n == 0 {
		return "", false
	}
	d := strings.TrimLeft(s[:n], "0")
	if d == "" {
		d = "0"
	}
	return d, true
}

// cudaDevice is one device CUDA enumerates: a GPU (index into the discovered GPUs) or one of its
// MIG devices.
type cudaDevice struct {
	gpu int
	mig string // the MIG device's UUID, or "" for the whole GPU
}

// cudaOrdinals works out which CUDA ordinal each GPU gets under CUDA_VISIBLE_DEVICES and
// CUDA_DEVICE_ORDER (order; "" is CUDA's default, FASTEST_FIRST). It returns the CUDA column of
// each GPU ("-" when CUDA does not see it, "?" when its ordinal cannot be known), the MIG devices
// CUDA sees as "CUDA n = ..." lines, and warnings.
func cudaOrdinals(v VisibleDevices, order string, gpus []gpuFacts) (col, migLines, warns []string) {
	col = make([]string, len(gpus))
	for i := range col {
		col[i] = "-"
	}
	if order != "" && order != "FASTEST_FIRST" && order != "PCI_BUS_ID" {
		warns = append(warns, fmt.Sprintf("CUDA_DEVICE_ORDER=%q is neither FASTEST_FIRST nor PCI_BUS_ID", order))
		order = ""
	}
	// CUDA numbers devices by PCI bus id when asked to, and otherwise fastest first by a heuristic
	// of its own, which for GPUs of one model is PCI bus order too.
	enum := make([]int, len(gpus))
	sameModel := true
	for i := range gpus {
		enum[i] = i
		sameModel = sameModel && gpus[i].name == gpus[0].name
	}
	sort.SliceStable(enum, func(a, b int) bool { return gpus[enum[a]].busID < gpus[enum[b]].busID })
	orderKnown := order == "PCI_BUS_ID" || sameModel
	unknownOrder := func() []string {
		for i := range col {
			col[i] = "?"
		}
		return append(warns, `the GPUs are not all one model and CUDA_DEVICE_ORDER is not PCI_BUS_ID, so CUDA orders them by its own speed heuristic and their ordinals are shown as "?"; set CUDA_DEVICE_ORDER=PCI_BUS_ID`)
	}

	var vis []cudaDevice
	switch {
	case !v.Set:
		if !orderKnown {
			return col, nil, unknownOrder()
		}
		for _, g := range enum {
			vis = append(vis, cudaDevice{gpu: g})
		}
	case v.Repeated != "":
		return col, nil, append(warns, fmt.Sprintf("CUDA_VISIBLE_DEVICES names %q twice, so CUDA sees no device at all", v.Repeated))
	case len(v.Entries) == 0 && !v.Stopped:
		return col, nil, append(warns, "CUDA_VISIBLE_DEVICES is set but empty, so CUDA sees no device")
	case v.Kind == "index" && !orderKnown:
		return col, nil, unknownOrder()
	}
	stop, stopped := v.Stop, v.Stopped
	for _, e := range v.Entries {
		d, ok := resolveEntry(v.Kind, e, enum, gpus)
		if !ok {
			stop, stopped = e, true
			break
		}
		for _, prev := range vis {
			if prev == d {
				return col, nil, append(warns, fmt.Sprintf("CUDA_VISIBLE_DEVICES names GPU %d twice (as %q and before), so CUDA sees no device at all", gpus[d.gpu].index, e))
			}
		}
		vis = append(vis, d)
	}
	if stopped {
		warns = append(warns, fmt.Sprintf("CUDA_VISIBLE_DEVICES entry %q matches no device, so CUDA ignores it and every entry after it", stop))
	}
	known := true
	for ordinal, d := range vis {
		g := gpus[d.gpu]
		if d.mig == "" && g.mig != nil && *g.mig && known {
			known = false
			warns = append(warns, fmt.Sprintf(`GPU %d is in MIG mode: CUDA sees its MIG devices rather than the GPU, so ordinals from it on are shown as "?"; name MIG devices with CUDA_VISIBLE_DEVICES=MIG-<uuid>`, g.index))
		}
		label := "?"
		if known {
			label = strconv.Itoa(ordinal)
			if d.mig != "" {
				label += " (MIG)"
				migLines = append(migLines, fmt.Sprintf("CUDA %d = GPU %d %s", ordinal, g.index, d.mig))
			}
		}
		if col[d.gpu] == "-" || col[d.gpu] == "?" {
			col[d.gpu] = label
		} else {
			col[d.gpu] += "," + label
		}
	}
	return col, migLines, warns
}

// resolveEntry finds the device an entry of the given kind names.
func resolveEntry(kind, e string, enum []int, gpus []gpuFacts) (cudaDevice, bool) {
	switch kind {
	case "index":
		k, err := strconv.Atoi(e)
		if err != nil || k >= len(enum) {
			return cudaDevice{}, false
		}
		return cudaDevice{gpu: enum[k]}, true
	case "gpu":
		g, ok := uniquePrefix(e, gpuUUIDs(gpus))
		return cudaDevice{gpu: g}, ok
	}
	// MIG-GPU-<uuid>/<gi>/<ci> names a GPU instance and compute instance of a GPU by its UUID.
	if rest, ok := strings.CutPrefix(e, "MIG-GPU-"); ok {
		parts := strings.Split(rest, "/")
		if len(parts) != 3 || !isNumber(parts[1]) || !isNumber(parts[2]) {
			return cudaDevice{}, false
		}
		g, ok := uniquePrefix("GPU-"+parts[0], gpuUUIDs(gpus))
		return cudaDevice{gpu: g, mig: e}, ok
	}
	var owner []int
	var uuids []string
	for i, g := range gpus {
		for _, u := range g.migUUIDs {
			owner, uuids = append(owner, i), append(uuids, u)
		}
	}
	k, ok := uniquePrefix(e, uuids)
	if !ok {
		return cudaDevice{}, false
	}
	return cudaDevice{gpu: owner[k], mig: uuids[k]}, true
}

// uniquePrefix returns the index of the one name that starts with p; none or several is no match.
func uniquePrefix(p string, names []string) (int, bool) {
	found := -1
	for i, name := range names {
		if strings.HasPrefix(name, p) {
			if found >= 0 {
				return -1, false
			}
			found = i
		}
	}
	return found, found >= 0
}

func gpuUUIDs(gpus []gpuFacts) []string {
	u := make([]string, len(gpus))
	for i, g := range gpus {
		u[i] = g.uuid
	}
	return u
}

func isNumber(s string) bool {
	_, ok := leadingIndex(s)
	return ok && strings.Trim(s, "0123456789") == ""
}
