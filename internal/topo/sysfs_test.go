package topo

import (
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/topo/topotest"
)

func TestParseBusID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"00000000:18:00.0", "0000:18:00.0"}, // NVML
		{"0000:18:00.0", "0000:18:00.0"},     // sysfs
		{"0000:DB:1F.7", "0000:db:1f.7"},
		{"18:00.0", "0000:18:00.0"},
		{"10000:e0:06.0", "10000:e0:06.0"}, // a VMD domain
		{" 0001:02:03.4\n", "0001:02:03.4"},
		{"0000:18:00", ""},
		{"0000:100:00.0", ""},
		{"0000:18:20.0", ""},
		{"0000:18:00.8", ""},
		{"0000:18:00.0.0", ""},
		{"x:18:00.0", ""},
		{"123456789:18:00.0", ""},
		{"pci0000:17", ""},
		{"", ""},
	}
	for _, tc := range tests {
		got, ok := parseBusID(tc.in)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("parseBusID(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
}

func TestParseSysfsValues(t *testing.T) {
	t.Parallel()
	speeds := map[string]int{"2.5 GT/s PCIe": 1, "5.0 GT/s PCIe": 2, "8.0 GT/s PCIe": 3, "16.0 GT/s PCIe": 4,
		"32.0 GT/s PCIe": 5, "64.0 GT/s PCIe": 6, "8 GT/s": 3, "5 GT/s": 2, "Unknown": 0, "Unknown speed": 0, "": 0, "16.0 GB/s": 0, "20.0 GT/s PCIe": 0}
	for in, want := range speeds {
		if got := parseLinkSpeed(in); got != want {
			t.Errorf("parseLinkSpeed(%q) = %d; want %d", in, got, want)
		}
	}
	widths := map[string]int{"16": 16, "8\n": 8, "1": 1, "0": 0, "33": 0, "x16": 0, "": 0}
	for in, want := range widths {
		if got := parseLinkWidth(in); got != want {
			t.Errorf("parseLinkWidth(%q) = %d; want %d", in, got, want)
		}
	}
	rates := map[string]float64{"400 Gb/sec (4X NDR)": 400, "2.5 Gb/sec (1X SDR)": 2.5, "100 Gb/sec": 100, "0 Gb/sec": 0, "400": 0, "NaN Gb/sec": 0, "1e9 Gb/sec": 0, "": 0}
	for in, want := range rates {
		if got := parseIBRate(in); got != want {
			t.Errorf("parseIBRate(%q) = %v; want %v", in, got, want)
		}
	}
	netSpeeds := map[string]float64{"10000": 10, "400000\n": 400, "-1": 0, "": 0, "fast": 0, "100": 0.1}
	for in, want := range netSpeeds {
		if got := parseNetSpeed(in); got != want {
			t.Errorf("parseNetSpeed(%q) = %v; want %v", in, got, want)
		}
	}
	for in, want := range map[string]int{"0-55,112-167": 0, "56-111": 56, "3": 3, "": -1, "x": -1, "1234567890": -1} {
		got, ok := firstCPU(in)
		if want < 0 && ok || want >= 0 && (!ok || got != want) {
			t.Errorf("firstCPU(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
	info := "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7543\nflags\t\t: a:b\n\nprocessor : x\nmodel name : ignored\n"
	if got, want := parseCPUInfo(info), map[int]string{0: "Intel(R) Xeon(R) Platinum 8480C", 1: "AMD EPYC 7543"}; !reflect.DeepEqual(got, want) {
		t.Errorf("parseCPUInfo = %v; want %v", got, want)
	}
	names := []string{"mlx5_10", "mlx5_2", "eth1", "mlx5_1", "eno1", "mlx4_0"}
	sort.Slice(names, func(a, b int) bool { return naturalLess(names[a], names[b]) })
	if want := []string{"eno1", "eth1", "mlx4_0", "mlx5_1", "mlx5_2", "mlx5_10"}; !slices.Equal(names, want) {
		t.Errorf("natural order %q; want %q", names, want)
	}
}

// The DGX tree: eight InfiniBand NICs in name order, the onboard Ethernet port, and nothing for
// the IPoIB interfaces (they share the RDMA devices' functions), the SR-IOV virtual function and
// the virtual interfaces.
func TestSysfsDGX(t *testing.T) {
	t.Parallel()
	r := sysReader{root: topotest.DGX(t).Root}
	if h := r.hostname(); h != "dgx01" {
		t.Errorf("hostname %q", h)
	}
	nodes := r.numaNodes()
	if want := []numaNode{{0, "0-55,112-167", "Intel(R) Xeon(R) Platinum 8480C"}, {1, "56-111,168-223", "Intel(R) Xeon(R) Platinum 8480C"}}; !reflect.DeepEqual(nodes, want) {
		t.Errorf("NUMA nodes %+v; want %+v", nodes, want)
	}
	var got []string
	for _, n := range r.nics() {
		got = append(got, strings.Join([]string{n.name, n.kind, gbpsText(n.gbps), n.state, n.bus}, " "))
	}
	want := []string{
		"mlx5_0 infiniband 400 Gb/s up 0000:1a:00.0", "mlx5_1 infiniband 400 Gb/s up 0000:1b:00.0",
		"mlx5_2 infiniband 400 Gb/s up 0000:3c:00.0", "mlx5_3 infiniband 400 Gb/s up 0000:3d:00.0",
		"mlx5_4 infiniband 400 Gb/s up 0000:9c:00.0", "mlx5_5 infiniband 400 Gb/s up 0000:9d:00.0",
		"mlx5_6 infiniband 400 Gb/s up 0000:bc:00.0", "mlx5_7 infiniband 400 Gb/s up 0000:bd:00.0",
		"eno1 ethernet 10 Gb/s up 0000:01:00.0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("NICs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	d, ok := r.device("0000:3b:00.0")
	wantDev := pciDevice{bus: "0000:3b:00.0", hostBridge: "pci0000:37", chain: []string{"0000:37:01.0", "0000:38:00.0", "0000:39:01.0", "0000:3b:00.0"},
		numa: 0, localCPUs: "0-55,112-167"}
	if !ok || !reflect.DeepEqual(d, wantDev) {
		t.Errorf("device(0000:3b:00.0) = %+v, %v; want %+v", d, ok, wantDev)
	}
	if _, ok := r.device("0000:ff:00.0"); ok {
		t.Error("device(0000:ff:00.0) found a device the tree does not have")
	}
	if l := r.link("0000:38:00.0"); l != (linkFigures{5, 16, 5, 16}) {
		t.Errorf("link of the switch 0000:38:00.0 = %+v; want Gen5 x16 now and at most", l)
	}
}

// The PCIe box: the RoCE device is an Ethernet NIC and hides its interface; eno1 is down.
func TestSysfsPCIeBox(t *testing.T) {
	t.Parallel()
	r := sysReader{root: topotest.PCIeBox(t).Root}
	got := r.nics()
	want := []nicFacts{
		{name: "mlx5_0", kind: "ethernet", gbps: 200, state: "up", bus: "0000:41:00.0", rdma: true},
		{name: "eno1", kind: "ethernet", state: "down", bus: "0000:82:00.0"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NICs %+v; want %+v", got, want)
	}
	if l := r.link("0000:82:00.0"); l != (linkFigures{2, 1, 3, 1}) {
		t.Errorf("eno1's link %+v; want Gen2 x1 of Gen3 x1", l)
	}
}

// An empty root: nothing is known, and nothing fails.
func TestSysfsEmpty(t *testing.T) {
	t.Parallel()
	r := sysReader{root: t.TempDir()}
	if r.hostname() != "host" || r.numaNodes() != nil || r.nics() != nil {
		t.Errorf("hostname %q, nodes %v, NICs %v; want host and nothing else", r.hostname(), r.numaNodes(), r.nics())
	}
	if _, ok := r.device("0000:18:00.0"); ok {
		t.Error("found a device in an empty tree")
	}
	if l := r.link("0000:18:00.0"); l != (linkFigures{}) {
		t.Errorf("link %+v; want all unknown", l)
	}
}

// FuzzParseBusID checks that parseBusID never panics and that what it accepts is written in
// sysfs's form and reads back the same.
func FuzzParseBusID(f *testing.F) {
	for _, s := range []string{"00000000:18:00.0", "0000:db:1f.7", "18:00.0", "10000:e0:06.0", "0000:18:00", "ffffffff:ff:1f.7", ":::", "0:0:0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, ok := parseBusID(s)
		if !ok {
			if b != "" {
				t.Fatalf("%q: rejected but returned %q", s, b)
			}
			return
		}
		again, ok := parseBusID(b)
		if !ok || again != b || b != strings.ToLower(b) || len(b) < len("0000:00:00.0") {
			t.Fatalf("%q: accepted as %q, which reads back as %q, %v", s, b, again, ok)
		}
	})
}

// FuzzSysfsValues checks that the readers of sysfs and /proc values never panic and keep their
// results in range.
func FuzzSysfsValues(f *testing.F) {
	for _, s := range []string{"32.0 GT/s PCIe", "8 GT/s", "Unknown", "16", "400 Gb/sec (4X NDR)", "100000", "-1", "0-55,112-167",
		"processor\t: 0\nmodel name\t: AMD EPYC 7543\n", "processor : 99999999999999999999\nmodel name : x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if g := parseLinkSpeed(s); g < 0 || g > 6 {
			t.Fatalf("parseLinkSpeed(%q) = %d", s, g)
		}
		if w := parseLinkWidth(s); w < 0 || w > 32 {
			t.Fatalf("parseLinkWidth(%q) = %d", s, w)
		}
		for _, g := range []float64{parseIBRate(s), parseNetSpeed(s)} {
			if !(g == 0 || g > 0 && g < 1e6) {
				t.Fatalf("rate of %q = %v", s, g)
			}
		}
		if c, ok := firstCPU(s); ok {
			if n, err := strconv.Atoi(s[:digitRun(s)]); err != nil || n != c {
				t.Fatalf("firstCPU(%q) = %d", s, c)
			}
		}
		for cpu := range parseCPUInfo(s) {
			if cpu < 0 {
				t.Fatalf("parseCPUInfo(%q) has processor %d", s, cpu)
			}
		}
		if p, n := trailingNumber(s); n >= 0 {
			if v, err := strconv.Atoi(s[len(p):]); !strings.HasPrefix(s, p) || err != nil || v != n {
				t.Fatalf("trailingNumber(%q) = %q, %d", s, p, n)
			}
		}
	})
}
