package sim_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/sim"
)

func TestParseFault(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want sim.Fault
	}{
		{"hang=3", sim.Fault{Kind: "hang", Device: 3}},
		{"hang=0", sim.Fault{Kind: "hang", Device: 0}},
		{"hang=3@100", sim.Fault{Kind: "hang", Device: 3, After: 100}},
		{"hang=3@0", sim.Fault{Kind: "hang", Device: 3}},
		{"hang=1048576", sim.Fault{Kind: "hang", Device: 1 << 20}},
		{"corrupt=0@5", sim.Fault{Kind: "corrupt", Device: 0, After: 5}},
		{"corrupt=2", sim.Fault{Kind: "corrupt", Device: 2}},
		{"slow-link=gpu0,nvswitch,0.25", sim.Fault{Kind: "slow-link", A: "gpu0", B: "nvswitch", Factor: 0.25}},
		{"slow-link=dgx-h100-0/gpu0,dgx-h100-0/nvswitch,1", sim.Fault{Kind: "slow-link", A: "dgx-h100-0/gpu0", B: "dgx-h100-0/nvswitch", Factor: 1}},
		{"slow-link=pcie0,cpu0,1e-3", sim.Fault{Kind: "slow-link", A: "pcie0", B: "cpu0", Factor: 0.001}},
		{"slow-link=a,b,.5", sim.Fault{Kind: "slow-link", A: "a", B: "b", Factor: 0.5}},
		{"slow-link=gpu0,nvswitch,0.25@10m", sim.Fault{Kind: "slow-link", A: "gpu0", B: "nvswitch", Factor: 0.25, At: 10 * time.Minute}},
		{"slow-link=gpu0,nvswitch,0.5@0s", sim.Fault{Kind: "slow-link", A: "gpu0", B: "nvswitch", Factor: 0.5}},
		{"xid=1", sim.Fault{Kind: "xid", Device: 1, Code: 79}},
		{"xid=1@90s", sim.Fault{Kind: "xid", Device: 1, At: 90 * time.Second, Code: 79}},
		{"xid=1@90s:48", sim.Fault{Kind: "xid", Device: 1, At: 90 * time.Second, Code: 48}},
		{"xid=7:13", sim.Fault{Kind: "xid", Device: 7, Code: 13}},
		{"slow-nic=dgx-h100-317/mlx5_3,0.4", sim.Fault{Kind: "slow-nic", A: "dgx-h100-317/mlx5_3", Factor: 0.4}},
		{"slow-node=dgx-h100-7,0.5", sim.Fault{Kind: "slow-node", A: "dgx-h100-7", Factor: 0.5}},
		{"flaky-link=n/gpu1,n/nvswitch,3", sim.Fault{Kind: "flaky-link", A: "n/gpu1", B: "n/nvswitch", Every: 3}},
		{"xid=0@1h2m3.5s:65536", sim.Fault{Kind: "xid", At: time.Hour + 2*time.Minute + 3500*time.Millisecond, Code: 65536}},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := sim.ParseFault(tc.in)
			if err != nil {
				t.Fatalf("ParseFault(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Errorf("ParseFault(%q) = %+v; want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseFaultErrors(t *testing.T) {
	t.Parallel()
	const usage = "use hang=DEVICE[@N], corrupt=DEVICE[@N], slow-link=PART,PART,FACTOR[@TIME], slow-nic=HOST/NIC,FACTOR, slow-node=HOST,FACTOR, flaky-link=PART,PART,N or xid=DEVICE[@TIME][:CODE]"
	tests := []struct {
		name string
		in   string
		want []string // substrings of the error
	}{
		{"empty", "", []string{`bad fault ""`, usage}},
		{"no '='", "hang", []string{`bad fault "hang"`, usage}},
		{"no argument", "hang=", []string{`bad fault "hang="`, usage}},
		{"unknown kind", "crash=3", []string{`unknown fault "crash"`, usage}},
		{"kind is case-sensitive", "HANG=3", []string{`unknown fault "HANG"`}},
		{"no kind", "=3", []string{`unknown fault ""`}},
		{"negative device", "hang=-1", []string{`bad fault "hang=-1"`, `"-1" is not a device number`, usage}},
		{"device not a number", "corrupt=gpu0", []string{`"gpu0" is not a device number`}},
		{"device too large", "hang=1048577", []string{`"1048577" is not a device number`}},
		{"device overflows int", "hang=99999999999999999999", []string{"is not a device number"}},
		{"space in device", "hang= 3", []string{`" 3" is not a device number`}},
		{"@-1", "hang=3@-1", []string{`bad fault "hang=3@-1"`, `"-1" is not a count of collectives`, usage}},
		{"empty count", "corrupt=2@", []string{`"" is not a count of collectives`}},
		{"count not a number", "corrupt=2@x", []string{`"x" is not a count of collectives`}},
		{"two @", "hang=3@4@5", []string{`"4@5" is not a count of collectives`}},
		{"factor 0", "slow-link=gpu0,nvswitch,0", []string{`bad fault "slow-link=gpu0,nvswitch,0"`, `factor "0" must be a number from 0.001 to 1`}},
		{"negative factor", "slow-link=gpu0,nvswitch,-0.5", []string{`factor "-0.5" must be a number from 0.001 to 1`}},
		{"factor 1.5", "slow-link=gpu0,nvswitch,1.5", []string{`factor "1.5" must be a number from 0.001 to 1`}},
		{"factor nan", "slow-link=gpu0,nvswitch,nan", []string{`factor "nan" must be a number from 0.001 to 1`}},
		{"factor too small", "slow-link=gpu0,nvswitch,4.9e-324", []string{`factor "4.9e-324" must be a number from 0.001 to 1`}},
		{"factor NaN", "slow-link=gpu0,nvswitch,NaN", []string{`factor "NaN" must be a number`}},
		{"factor inf", "slow-link=gpu0,nvswitch,inf", []string{`factor "inf" must be a number`}},
		{"factor not a number", "slow-link=gpu0,nvswitch,half", []string{`factor "half" must be a number`}},
		{"empty factor", "slow-link=gpu0,nvswitch,", []string{`factor "" must be a number`}},
		{"two fields", "slow-link=gpu0,0.5", []string{`bad fault "slow-link=gpu0,0.5"`, usage}},
		{"one field", "slow-link=gpu0", []string{`bad fault "slow-link=gpu0"`, usage}},
		{"four fields", "slow-link=gpu0,nvswitch,0.5,1", []string{`bad fault "slow-link=gpu0,nvswitch,0.5,1"`, usage}},
		{"empty first part", "slow-link=,nvswitch,0.5", []string{`bad fault "slow-link=,nvswitch,0.5"`, usage}},
		{"empty second part", "slow-link=gpu0,,0.5", []string{`bad fault "slow-link=gpu0,,0.5"`, usage}},
		{"slow-link bad time", "slow-link=a,b,0.5@soon", []string{`"soon" is not a time`, usage}},
		{"slow-link negative time", "slow-link=a,b,0.5@-1s", []string{`"-1s" is not a time`}},
		{"slow-link empty time", "slow-link=a,b,0.5@", []string{`"" is not a time`}},
		{"slow-link time without unit", "slow-link=a,b,0.5@10", []string{`"10" is not a time`}},
		{"xid no device", "xid=@10s", []string{`"" is not a device number`, usage}},
		{"xid bad device", "xid=gpu1@10s", []string{`"gpu1" is not a device number`}},
		{"xid bad time", "xid=1@x:48", []string{`"x" is not a time`}},
		{"xid count instead of time", "xid=1@5", []string{`"5" is not a time`}},
		{"xid code 0", "xid=1@5s:0", []string{`"0" is not an XID number (1-65536)`}},
		{"xid code too large", "xid=1:65537", []string{`"65537" is not an XID number`}},
		{"xid empty code", "xid=1@5s:", []string{`"" is not an XID number`}},
		{"xid code not a number", "xid=1:fell", []string{`"fell" is not an XID number`}},
		{"slow-nic without host", "slow-nic=mlx5_3,0.4", []string{`name the NIC as HOST/NIC`}},
		{"slow-nic factor 2", "slow-nic=h/mlx5_3,2", []string{`factor "2" must be a number from 0.001 to 1`}},
		{"slow-nic no factor", "slow-nic=h/mlx5_3", []string{usage}},
		{"slow-node three fields", "slow-node=h,0.5,1", []string{usage}},
		{"slow-node at a time", "slow-node=h,0.5@1m30s", []string{"a start time (@TIME) is for slow-link only; slow-node starts slow"}},
		{"flaky-link period 0", "flaky-link=a,b,0", []string{`"0" is not a period`}},
		{"flaky-link two fields", "flaky-link=a,3", []string{usage}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := sim.ParseFault(tc.in)
			if err == nil {
				t.Fatalf("ParseFault(%q) = %+v; want an error", tc.in, f)
			}
			if f != (sim.Fault{}) {
				t.Errorf("ParseFault(%q) returned %+v with its error; want the zero Fault", tc.in, f)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ParseFault(%q) error %q; want it to contain %q", tc.in, err, w)
				}
			}
		})
	}
}

func TestFaultString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		f    sim.Fault
		want string
	}{
		{sim.Fault{Kind: "hang", Device: 3}, "hang=3"},
		{sim.Fault{Kind: "hang", Device: 3, After: 100}, "hang=3@100"},
		{sim.Fault{Kind: "corrupt", Device: 0, After: 5}, "corrupt=0@5"},
		{sim.Fault{Kind: "corrupt", Device: 7}, "corrupt=7"},
		{sim.Fault{Kind: "slow-link", A: "gpu0", B: "nvswitch", Factor: 0.25}, "slow-link=gpu0,nvswitch,0.25"},
		{sim.Fault{Kind: "slow-link", A: "h/gpu0", B: "h/nvswitch", Factor: 1}, "slow-link=h/gpu0,h/nvswitch,1"},
		{sim.Fault{Kind: "slow-link", A: "a", B: "b", Factor: 0.1}, "slow-link=a,b,0.1"},
		{sim.Fault{Kind: "slow-link", A: "a", B: "b", Factor: 1e-7}, "slow-link=a,b,1e-07"},
		{sim.Fault{Kind: "slow-link", A: "a", B: "b", Factor: 0.5, At: 90 * time.Second}, "slow-link=a,b,0.5@1m30s"},
		{sim.Fault{Kind: "xid", Device: 2, At: 90 * time.Second, Code: 48}, "xid=2@1m30s:48"},
		{sim.Fault{Kind: "xid", Device: 2, Code: 79}, "xid=2:79"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			t.Parallel()
			if got := tc.f.String(); got != tc.want {
				t.Errorf("%+v.String() = %q; want %q", tc.f, got, tc.want)
			}
		})
	}
}

// String's output parses back to the same fault, for every fault ParseFault accepts.
func TestFaultStringRoundTrips(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"hang=3", "hang=3@100", "hang=0@0", "corrupt=0@5", "corrupt=1048576@2147483647",
		"hang=+4", "hang=007@08", "hang=-0",
		"slow-link=gpu0,nvswitch,0.25",
		"slow-link=dgx-h100-0/gpu0,dgx-h100-0/nvswitch,1",
		"slow-link=a,b,0.1", "slow-link=a,b,0.30000000000000004", "slow-link=a,b,0.001",
		"slow-link=a,b,0x1p-2", "slow-link=a,b,1.0000", "slow-link=a=b,c,0.5",
		"slow-link=a b,c,0.5", "slow-link=a,b,0.5@90s", "slow-link=a,b,0.5@1.5h", "slow-link=a,b,0.5@0s",
		"xid=1", "xid=1@90s:48", "xid=3:13", "xid=0@2562047h47m16.854775807s:65536", "xid=1@1us",
	} {
		t.Run(in, func(t *testing.T) {
			t.Parallel()
			f, err := sim.ParseFault(in)
			if err != nil {
				t.Fatalf("ParseFault(%q): %v", in, err)
			}
			s := f.String()
			g, err := sim.ParseFault(s)
			if err != nil {
				t.Fatalf("ParseFault(%q.String() = %q): %v", in, s, err)
			}
			if g != f {
				t.Errorf("ParseFault(%q) = %+v; ParseFault(String() = %q) = %+v", in, f, s, g)
			}
			if s2 := g.String(); s2 != s {
				t.Errorf("String is not stable: %q then %q", s, s2)
			}
		})
	}
}

func FuzzParseFault(f *testing.F) {
	for _, s := range []string{
		"hang=3", "hang=3@100", "corrupt=0@5", "corrupt=2",
		"slow-link=gpu0,nvswitch,0.25", "slow-link=dgx-h100-0/gpu0,dgx-h100-0/nvswitch,1",
		"hang", "crash=3", "hang=-1", "hang=3@-1", "slow-link=gpu0,nvswitch,0",
		"slow-link=gpu0,nvswitch,1.5", "slow-link=gpu0,nvswitch,nan", "slow-link=gpu0,0.5",
		"slow-link=a,b,1e-320", "hang=+1@+2", "slow-link=a,b,0.5@10m", "xid=1@90s:48", "xid=2",
		"xid=1@-1s", "xid=1:0", "slow-link=a,b,1@1h@2h",
		"slow-nic=h/mlx5_3,0.4", "slow-node=h,0.5", "flaky-link=a,b,3", "slow-nic=h,0.4", "flaky-link=a,b,0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fault, err := sim.ParseFault(s)
		if err != nil {
			if fault != (sim.Fault{}) {
				t.Fatalf("ParseFault(%q) returned %+v with error %v", s, fault, err)
			}
			return
		}
		switch fault.Kind {
		case "hang", "corrupt":
			if fault.Device < 0 || fault.After < 0 || fault.A != "" || fault.B != "" || fault.Factor != 0 || fault.At != 0 || fault.Code != 0 {
				t.Fatalf("ParseFault(%q) = %+v", s, fault)
			}
		case "slow-link":
			if fault.A == "" || fault.B == "" || !(fault.Factor > 0 && fault.Factor <= 1) || math.IsNaN(fault.Factor) || fault.At < 0 || fault.Code != 0 {
				t.Fatalf("ParseFault(%q) = %+v", s, fault)
			}
		case "xid":
			if fault.Device < 0 || fault.At < 0 || fault.Code < 1 || fault.Code > 1<<16 || fault.A != "" || fault.Factor != 0 || fault.After != 0 {
				t.Fatalf("ParseFault(%q) = %+v", s, fault)
			}
		case "slow-nic", "slow-node":
			if fault.A == "" || fault.B != "" || !(fault.Factor >= 0.001 && fault.Factor <= 1) || fault.Kind == "slow-nic" && !strings.Contains(fault.A, "/") || fault.Every != 0 {
				t.Fatalf("ParseFault(%q) = %+v", s, fault)
			}
		case "flaky-link":
			if fault.A == "" || fault.B == "" || fault.Every < 1 || fault.Factor != 0 {
				t.Fatalf("ParseFault(%q) = %+v", s, fault)
			}
		default:
			t.Fatalf("ParseFault(%q) accepted kind %q", s, fault.Kind)
		}
		str := fault.String()
		again, err := sim.ParseFault(str)
		if err != nil {
			t.Fatalf("ParseFault(%q) = %+v, whose String %q does not parse: %v", s, fault, str, err)
		}
		if again != fault {
			t.Fatalf("ParseFault(%q) = %+v; ParseFault(%q) = %+v", s, fault, str, again)
		}
	})
}

// A slow NIC slows what crosses it and nothing else; a slow node all of its links; a flaky link
// drops one call in N of those that cross it.
// faulty is two DGX H100 on the simulator with faults and NCCL_* variables.
func faulty(t *testing.T, env map[string]string, faults ...string) *sim.Backend {
	t.Helper()
	topo, err := sim.LoadTopology("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	if topo, err = topo.WithNodes(2); err != nil {
		t.Fatal(err)
	}
	var fs []sim.Fault
	for _, s := range faults {
		f, err := sim.ParseFault(s)
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	b, err := sim.New(topo, sim.Options{Faults: fs, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFleetFaults(t *testing.T) {
	topoWith := func(faults ...string) *sim.Backend { return faulty(t, nil, faults...) }
	timeOf := func(b *sim.Backend, devs []int) (float64, error) {
		c, err := b.NewComm(devs)
		if err != nil {
			t.Fatal(err)
		}
		bufs := make([]gpu.Buffer, len(devs))
		for i, d := range devs {
			if bufs[i], err = b.Alloc(d, 1<<28); err != nil {
				t.Fatal(err)
			}
		}
		start := b.Now()
		if err := c.AllReduce(bufs, bufs, 1<<26, gpu.Float, gpu.Sum); err != nil {
			return 0, err
		}
		if err := c.Synchronize(context.Background()); err != nil {
			return 0, err
		}
		return float64(b.Now() - start), nil
	}
	rail3, inNode := []int{3, 11}, []int{0, 1, 2, 3, 4, 5, 6, 7}
	// GPU 3 reaches mlx5_4 and mlx5_5 through its PCIe switch, and NCCL spreads a rail's rings over
	// both; GPUs 0 and 8 reach neither.
	healthy := topoWith()
	slowNIC := topoWith("slow-nic=dgx-h100-1/mlx5_5,0.25")
	for _, tc := range []struct {
		devs []int
		slow bool
	}{{rail3, true}, {[]int{0, 8}, false}, {inNode, false}} {
		h, _ := timeOf(healthy, tc.devs)
		s, err := timeOf(slowNIC, tc.devs)
		if err != nil || (s > 1.5*h) != tc.slow {
			t.Errorf("GPUs %v over a slow mlx5_5 of node 1: %v against %v healthy (%v); slowed: want %v", tc.devs, s, h, err, tc.slow)
		}
	}
	// NCCL_IB_HCA pins the NICs: rail 3 over mlx5_4 alone misses the slow mlx5_5, over it alone
	// is slowed.
	for hca, slowed := range map[string]bool{"=mlx5_4": false, "=mlx5_5": true, "^=mlx5_5": false, "mlx5_5:1": true} {
		h, _ := timeOf(faulty(t, map[string]string{"NCCL_IB_HCA": hca}), rail3)
		s, _ := timeOf(faulty(t, map[string]string{"NCCL_IB_HCA": hca}, "slow-nic=dgx-h100-1/mlx5_5,0.25"), rail3)
		if (s > 1.5*h) != slowed {
			t.Errorf("NCCL_IB_HCA=%s: %v against %v healthy; slowed: want %v", hca, s, h, slowed)
		}
	}
	slowNode := topoWith("slow-node=dgx-h100-1,0.5")
	if h, _ := timeOf(healthy, []int{8, 9, 10, 11}); func() bool { s, _ := timeOf(slowNode, []int{8, 9, 10, 11}); return s < 1.5*h }() {
		t.Error("a slow node's own NVLink collective is not slowed")
	}
	flaky := topoWith("flaky-link=dgx-h100-0/gpu1,dgx-h100-0/nvswitch,3")
	var failed []int
	for i := 1; i <= 6; i++ {
		if _, err := timeOf(flaky, inNode); err != nil {
			if !errors.Is(err, sim.ErrLinkFailed) || !strings.Contains(err.Error(), "flaky-link=dgx-h100-0/gpu1,dgx-h100-0/nvswitch,3") {
				t.Errorf("call %d: %v", i, err)
			}
			failed = append(failed, i)
		}
	}
	if !slices.Equal(failed, []int{3, 6}) {
		t.Errorf("calls %v failed; want 3 and 6", failed)
	}
	if _, err := timeOf(flaky, []int{8, 9}); err != nil {
		t.Errorf("a collective that does not cross the flaky link: %v", err)
	}
	for _, bad := range []string{"slow-nic=dgx-h100-9/mlx5_3,0.5", "slow-node=nowhere,0.5", "flaky-link=dgx-h100-0/gpu1,dgx-h100-1/gpu1,2"} {
		topo, _ := sim.LoadTopology("dgx-h100")
		topo, _ = topo.WithNodes(2)
		f, _ := sim.ParseFault(bad)
		if _, err := sim.New(topo, sim.Options{Faults: []sim.Fault{f}}); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
