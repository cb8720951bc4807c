package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/golden"
)

// Every form of the hand-built collective run: nccl-tests' table with gpubench's lines, JSON, CSV,
// Markdown, and the JSON lines --out streams.
func TestCollForms(t *testing.T) {
	for _, format := range append(Formats, "jsonl") {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			w := NewCollStream(&buf)
			if format != "jsonl" {
				var err error
				if w, err = NewCollWriter(format, &buf); err != nil {
					t.Fatal(err)
				}
			}
			writeColl(t, w, sampleColl())
			golden.Check(t, "coll."+format, buf.String())
		})
	}
	if _, err := NewCollWriter("yaml", nil); err == nil || !strings.Contains(err.Error(), `unknown output format "yaml"`) {
		t.Errorf("yaml: %v", err)
	}
}

// Every form of the hand-built p2p run; each carries the size sweep, and says which cells are N/A.
func TestP2PForms(t *testing.T) {
	out := map[string]string{}
	for _, format := range Formats {
		var buf bytes.Buffer
		if err := WriteP2P(&buf, format, sampleP2P()); err != nil {
			t.Fatal(err)
		}
		out[format] = buf.String()
		golden.Check(t, "p2p."+format, buf.String())
	}
	for _, format := range []string{"table", "markdown"} {
		for _, want := range []string{"GPU 0 <-> GPU 1, P2P=Enabled", "4096", "1048576", "20.25", "N/A", "24.50!"} {
			if !strings.Contains(out[format], want) {
				t.Errorf("%s: no %q", format, want)
			}
		}
	}
	var doc struct {
		Sweep struct {
			Rows []struct {
				Size  int64    `json:"size_bytes"`
				Bidir *float64 `json:"bidir_gbs"`
			} `json:"rows"`
		} `json:"sweep"`
	}
	if err := json.Unmarshal([]byte(out["json"]), &doc); err != nil || len(doc.Sweep.Rows) != 2 || doc.Sweep.Rows[1].Bidir != nil {
		t.Errorf("json sweep %+v (%v); want 2 sizes, the second's bidir null", doc.Sweep, err)
	}
	recs, err := csv.NewReader(strings.NewReader(out["csv"])).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	sweep := 0
	for _, r := range recs {
		if strings.HasPrefix(r[0], "sweep_") {
			sweep++
		}
		if len(r) != 6 {
			t.Errorf("csv record %q: want 6 fields", r)
		}
	}
	if sweep != 4 || len(recs) != 1+2*9+3*4+4+2*9+1*4 {
		t.Errorf("csv: %d records, %d of the sweep; want a header, 2 matrices of 9 cells, 3 host rows of 4, 4 sweep figures, and the expected 2 matrices and 1 host row", len(recs), sweep)
	}
	// The peers measured at half what was expected are named, the rest are not.
	if note := "Expected: from the simulator on topology pcie-4090x8; 3 of 18 figures under 75% of it (--expect-floor 0.75): uni_enabled 0->1 50%, uni_enabled 1->0 50%, uni_enabled 2->1 50%"; !strings.Contains(out["table"], note) {
		t.Errorf("table lacks %q", note)
	}
	if err := WriteP2P(&bytes.Buffer{}, "yaml", sampleP2P()); err == nil {
		t.Error("yaml: no error")
	}
}

// A PCI bus id names its domain, bus and device as p2pBandwidthLatencyTest prints them
// (pciDomainID, pciBusID, pciDeviceID), each in hex; a GPU behind a switch port can sit at a
// device number other than 0.
func TestPCIParts(t *testing.T) {
	for _, c := range []struct {
		id            string
		dom, bus, dev uint64
	}{
		{"00000000:18:00.0", 0, 0x18, 0},
		{"0000:10:1c.0", 0, 0x10, 0x1c},
		{"0001:c1:02.1", 1, 0xc1, 2},
		{"", 0, 0, 0},
	} {
		if dom, bus, dev := pciParts(c.id); dom != c.dom || bus != c.bus || dev != c.dev {
			t.Errorf("%q: %x:%x:%x; want %x:%x:%x", c.id, dom, bus, dev, c.dom, c.bus, c.dev)
		}
	}
}
