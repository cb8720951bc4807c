package topo

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseVisibleDevices(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value string
		set   bool
		want  VisibleDevices
	}{
		{"", false, VisibleDevices{}},
		{"", true, VisibleDevices{Set: true}},
		{" ", true, VisibleDevices{Set: true}},
		{"0,1,2", true, VisibleDevices{Set: true, Kind: "index", Entries: []string{"0", "1", "2"}}},
		{" 3 , 1 ", true, VisibleDevices{Set: true, Kind: "index", Entries: []string{"3", "1"}}},
		{"007,+2", true, VisibleDevices{Set: true, Kind: "index", Entries: []string{"7", "2"}}},
		{"1gpu2,2ampere", true, VisibleDevices{Set: true, Kind: "index", Entries: []string{"1", "2"}}},
		{"0,2,-1,1", true, VisibleDevices{Set: true, Kind: "index", Entries: []string{"0", "2"}, Stopped: true, Stop: "-1"}},
		{"0,,1", true, VisibleDevices{Set: true, Kind: "index", Entries: []string{"0"}, Stopped: true, Stop: ""}},
		{"0,GPU-abc", true, VisibleDevices{Set: true, Kind: "index", Entries: []string{"0"}, Stopped: true, Stop: "GPU-abc"}},
		{"abc", true, VisibleDevices{Set: true, Stopped: true, Stop: "abc"}},
		{"0,1,0", true, VisibleDevices{Set: true, Kind: "index", Repeated: "0"}},
		{"1,01", true, VisibleDevices{Set: true, Kind: "index", Repeated: "1"}},
		{"GPU-8932f937,GPU-12", true, VisibleDevices{Set: true, Kind: "gpu", Entries: []string{"GPU-8932f937", "GPU-12"}}},
		{"GPU-a,1,GPU-b", true, VisibleDevices{Set: true, Kind: "gpu", Entries: []string{"GPU-a"}, Stopped: true, Stop: "1"}},
		{"GPU-a,GPU-a", true, VisibleDevices{Set: true, Kind: "gpu", Repeated: "GPU-a"}},
		{"MIG-5c3a,MIG-GPU-8932/1/0", true, VisibleDevices{Set: true, Kind: "mig", Entries: []string{"MIG-5c3a", "MIG-GPU-8932/1/0"}}},
		{"MIG-5c3a,GPU-1", true, VisibleDevices{Set: true, Kind: "mig", Entries: []string{"MIG-5c3a"}, Stopped: true, Stop: "GPU-1"}},
	}
	for _, tc := range tests {
		if got := ParseVisibleDevices(tc.value, tc.set); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseVisibleDevices(%q, %v) = %+v; want %+v", tc.value, tc.set, got, tc.want)
		}
	}
}

// eightGPUs are NVML's facts for eight GPUs of one model, listed in NVML order but with bus ids
// that are not in that order, so that PCI order and NVML order differ.
func eightGPUs() []gpuFacts {
	buses := []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:07:00.0"}
	var g []gpuFacts
	for i, b := range buses {
		g = append(g, gpuFacts{index: i, name: "NVIDIA H100 80GB HBM3", uuid: "GPU-" + strings.Repeat(string(rune('a'+i)), 8) + "-0000", busID: b})
	}
	return g
}

func TestCUDAOrdinals(t *testing.T) {
	t.Parallel()
	on := true
	mixed := eightGPUs()
	mixed[2].name = "NVIDIA L40S"
	mig := eightGPUs()
	mig[2].mig = &on
	mig[2].migUUIDs = []string{"MIG-1111aaaa", "MIG-2222bbbb"}
	mig[5].mig = &on
	mig[5].migUUIDs = []string{"MIG-3333cccc"}
	tests := []struct {
		name     string
		value    string
		set      bool
		order    string
		gpus     []gpuFacts
		want     string // the CUDA column, space-separated
		migLines []string
		warning  string // a part of the only warning, or "" for none
	}{
		{"unset: PCI order", "", false, "", eightGPUs(), "1 2 3 4 5 6 7 0", nil, ""},
		{"indices follow PCI order", "7,0", true, "PCI_BUS_ID", eightGPUs(), "- - - - - - 0 1", nil, ""},
		{"indices on one model without an order", "0,1", true, "", eightGPUs(), "1 - - - - - - 0", nil, ""},
		{"GPU UUID prefixes in list order", "GPU-ccc,GPU-a", true, "", eightGPUs(), "1 - 0 - - - - -", nil, ""},
		{"index past the end", "3,8,1", true, "", eightGPUs(), "- - 0 - - - - -", nil, `entry "8" matches no device, so CUDA ignores it and every entry after it`},
		{"negative index", "2,-1,1", true, "", eightGPUs(), "- 0 - - - - - -", nil, `entry "-1" matches no device`},
		{"ambiguous UUID prefix", "GPU-", true, "", eightGPUs(), "- - - - - - - -", nil, `entry "GPU-" matches no device`},
		{"unknown UUID", "GPU-b,GPU-zz", true, "", eightGPUs(), "- 0 - - - - - -", nil, `entry "GPU-zz" matches no device`},
		{"repeated entry", "1,2,1", true, "", eightGPUs(), "- - - - - - - -", nil, `names "1" twice, so CUDA sees no device at all`},
		{"two prefixes of one GPU", "GPU-bb,GPU-bbbb", true, "", eightGPUs(), "- - - - - - - -", nil, "names GPU 1 twice"},
		{"empty", "", true, "", eightGPUs(), "- - - - - - - -", nil, "set but empty, so CUDA sees no device"},
		{"mixed models without an order", "", false, "", mixed, "? ? ? ? ? ? ? ?", nil, "not all one model and CUDA_DEVICE_ORDER is not PCI_BUS_ID"},
		{"mixed models by PCI bus id", "", false, "PCI_BUS_ID", mixed, "1 2 3 4 5 6 7 0", nil, ""},
		{"mixed models by UUID", "GPU-ccc", true, "", mixed, "- - 0 - - - - -", nil, ""},
		{"unknown device order", "", false, "SLOWEST_FIRST", eightGPUs(), "1 2 3 4 5 6 7 0", nil, `CUDA_DEVICE_ORDER="SLOWEST_FIRST" is neither FASTEST_FIRST nor PCI_BUS_ID`},
		{"MIG devices by UUID", "MIG-2222,MIG-3333cccc", true, "", mig, "- - 0_(MIG) - - 1_(MIG) - -",
			[]string{"CUDA 0 = GPU 2 MIG-2222bbbb", "CUDA 1 = GPU 5 MIG-3333cccc"}, ""},
		{"legacy MIG form", "MIG-GPU-cccccccc-0000/1/0", true, "", mig, "- - 0_(MIG) - - - - -",
			[]string{"CUDA 0 = GPU 2 MIG-GPU-cccccccc-0000/1/0"}, ""},
		{"malformed legacy MIG form", "MIG-GPU-cccccccc-0000/1", true, "", mig, "- - - - - - - -", nil, `entry "MIG-GPU-cccccccc-0000/1" matches no device`},
		{"a GPU in MIG mode named whole", "1,3,4", true, "", mig, "0 - ? ? - - - -", nil, `GPU 2 is in MIG mode: CUDA sees its MIG devices rather than the GPU`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			col, migLines, warns := cudaOrdinals(ParseVisibleDevices(tc.value, tc.set), tc.order, tc.gpus)
			if got := strings.ReplaceAll(strings.Join(col, " "), " (MIG)", "_(MIG)"); got != tc.want {
				t.Errorf("CUDA column %q; want %q", got, tc.want)
			}
			if !reflect.DeepEqual(migLines, tc.migLines) {
				t.Errorf("MIG lines %q; want %q", migLines, tc.migLines)
			}
			switch {
			case tc.warning == "" && len(warns) > 0:
				t.Errorf("warnings %q; want none", warns)
			case tc.warning != "" && (len(warns) != 1 || !strings.Contains(warns[0], tc.warning)):
				t.Errorf("warnings %q; want one containing %q", warns, tc.warning)
			}
		})
	}
}

// FuzzParseVisibleDevices checks that any value parses without panicking into entries of one
// kind, each as CUDA would read it, none repeated, and that the entries read back the same.
func FuzzParseVisibleDevices(f *testing.F) {
	for _, s := range []string{"", "0", "0,1,2,3", " 3 , 1 ", "1gpu2,2ampere", "0,2,-1,1", "0,1,0", "+5,007",
		"GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", "GPU-89,GPU-12", "MIG-5c3a2d1e-0000-1111-2222-333344445555",
		"MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/1/0", "MIG-a,0", ",", "99999999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := ParseVisibleDevices(s, true)
		if v.Repeated != "" && len(v.Entries) > 0 {
			t.Fatalf("%q: repeated %q but entries %q", s, v.Repeated, v.Entries)
		}
		seen := map[string]bool{}
		for _, e := range v.Entries {
			ok := false
			switch v.Kind {
			case "index":
				ok = e != "" && strings.Trim(e, "0123456789") == "" && (e == "0" || e[0] != '0')
			case "gpu":
				ok = strings.HasPrefix(e, "GPU-")
			case "mig":
				ok = strings.HasPrefix(e, "MIG-")
			}
			if !ok || seen[e] || e != strings.TrimSpace(e) {
				t.Fatalf("%q: entry %q is not a %s entry, or is repeated or untrimmed", s, e, v.Kind)
			}
			seen[e] = true
		}
		if len(v.Entries) == 0 && v.Repeated == "" && v.Kind != "" {
			t.Fatalf("%q: kind %q without entries", s, v.Kind)
		}
		again := ParseVisibleDevices(strings.Join(v.Entries, ","), true)
		if !reflect.DeepEqual(again.Entries, v.Entries) || again.Stopped || again.Repeated != "" {
			t.Fatalf("%q: entries %q read back as %+v", s, v.Entries, again)
		}
	})
}
