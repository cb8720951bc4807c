package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/golden"
)

func TestP2PGolden(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ topo, devices string }{{"dgx-h100", "0-3"}, {"pcie-4090x8", "0,1,4"}} {
		t.Run(c.topo, func(t *testing.T) {
			out, errOut, code := gpubench(t, "p2p", "--backend", "sim", "--topology", c.topo, "--devices", c.devices, "--size", "1M", "--sim-data-cap", "64M")
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			golden.Check(t, "p2p-"+c.topo+".golden", out)
		})
	}
}

func TestP2PJSON(t *testing.T) {
	t.Parallel()
	out, _, code := gpubench(t, "p2p", "--backend", "sim", "--topology", "pcie-4090x8", "--devices", "0-1", "--size", "1M", "--output", "json", "--pairs", "0-1", "--sweep", "4K:1M:x16")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var doc struct {
		Access   [][]*struct{ Access bool } `json:"access"`
		Matrices map[string]struct {
			Values [][]*float64 `json:"values"`
			NA     [][]*string  `json:"na_reasons"`
		} `json:"matrices"`
		Sweep struct {
			Rows []struct {
				Size int64    `json:"size_bytes"`
				Uni  *float64 `json:"uni_gbs"`
			} `json:"rows"`
		} `json:"sweep"`
		Verified int `json:"verified"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	en := doc.Matrices["uni_enabled"]
	if doc.Access[0][0] != nil || doc.Access[0][1].Access || en.Values[0][1] != nil || en.NA[0][1] == nil || en.Values[0][0] == nil {
		t.Errorf("no-P2P pair: access %v, enabled %v / %v; want no access, null with a reason", doc.Access[0][1], en.Values[0][1], en.NA[0][1])
	}
	if len(doc.Sweep.Rows) != 3 || doc.Sweep.Rows[2].Size != 1<<20 || doc.Sweep.Rows[2].Uni == nil || doc.Verified == 0 {
		t.Errorf("sweep %+v, verified %d", doc.Sweep, doc.Verified)
	}
}

func TestP2PBadInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--devices", "9"}, "out of range"},
		{[]string{"--devices", "0,0"}, "twice"},
		{[]string{"--pairs", "0-0"}, "one device twice"},
		{[]string{"--pairs", "0-1x"}, "not a device number"},
		{[]string{"--devices", "0,1", "--pairs", "2-3"}, "not among --devices"},
		{[]string{"--size", "2T"}, "larger than free device memory"},
		{[]string{"--size", "8"}, "at least 16 bytes"},
		{[]string{"--size", "big"}, "invalid --size"},
		{[]string{"--samples", "0"}, "invalid --samples"},
		{[]string{"--repeat", "0"}, "invalid --repeat"},
		{[]string{"--sweep", "1K:1M"}, "exactly one with --pairs"},
		{[]string{"--sweep", "1M:1K", "--pairs", "0-1"}, "invalid --sweep"},
		{[]string{"--output", "xml"}, "unknown --output"},
		{[]string{"--nodes", "10", "--devices", "0-73"}, "p2p measures every pair of 74 GPUs, and takes at most 72"}, // the 74 asked for, not the machine's 80
		{[]string{"--timeout", "18446744074"}, "invalid --timeout 18446744074: give 1 to 9223372036 seconds"},        // would wrap round to 0.29 s
		{[]string{"--sim-fault", "xid=1"}, "p2p reads no XID events"},
		{[]string{"--sim-fault", "flaky-link=gpu0,nvswitch,3"}, "not copies"},
		{[]string{"--topology", "dgx-h100x2", "--sim-fault", "slow-nic=dgx-h100-0/mlx5_0,0.5"}, "p2p's copies cross no NIC"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, errOut, code := gpubench(t, append([]string{"p2p", "--backend", "sim"}, c.args...)...)
			if code != 2 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 naming %q", code, out, errOut, c.want)
			}
		})
	}
}

// A hang ends the run as Ctrl-C does: what was measured before it is printed, in every form, and
// the exit names the device that did not finish.
func TestP2PHangPrintsWhatWasMeasured(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "p2p", "--backend", "sim", "--sim-fault", "hang=1", "-T", "1", "--size", "1M", "--devices", "0-1")
	if code != 5 || errOut != "gpubench: hang: device 1 did not finish: context deadline exceeded\n" ||
		!strings.Contains(out, "Device=0 CAN Access Peer Device=1\n") || !strings.Contains(out, "Data check:") ||
		strings.Contains(out, "0 -> 1: \n") { // no status line for a pair the hang left without one
		t.Errorf("exit %d, stderr %q, stdout %q; want 5, device 1 named, and the access measured before the hang", code, errOut, out)
	}
	out, _, code = gpubench(t, "p2p", "--backend", "sim", "--sim-fault", "hang=1", "-T", "1", "--size", "1M", "--devices", "0-1", "--output", "json")
	var doc struct {
		Access [][]*struct{ Access bool } `json:"access"`
	}
	if code != 5 || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Access) != 2 || !doc.Access[0][1].Access {
		t.Errorf("json: exit %d, stdout %q; want 5 and a document with the access matrix", code, out)
	}
}
