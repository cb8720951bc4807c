package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpubench/gpubench/internal/p2p"
	"github.com/gpubench/gpubench/internal/results"
)

// P2PRun is a p2p run and what its output says besides the results.
type P2PRun struct {
	Version  string
	Backend  string
	Topology string // empty on real GPUs
	Runtime  string // on real GPUs: the CUDA driver and runtime versions and the library loaded
	Opt      p2p.Options
	Start    time.Time
	Result   *p2p.Result
	// Expect, with --expect: the same run on the simulator, and where it came from.
	Expect *P2PExpectation
}

// P2PExpectation is what a p2p run is set beside (--expect).
type P2PExpectation struct {
	Source string
	Floor  float64
	Result *p2p.Result // the same copies on the simulated machine
}

// p2pFigure is one measured figure of a p2p run beside its expected one.
type p2pFigure struct {
	measure  string // a matrix key, or h2d, d2h, host_bidir, local
	row, col int    // device ordinals; col -1 for host copies
	ratio    float64
}

// p2pBelow lists the figures under the floor of the expected ones, and how many were compared:
// bandwidths as measured / expected, latencies as expected / measured.
func p2pBelow(r *P2PRun) (below []p2pFigure, compared int) {
	res, exp := r.Result, r.Expect.Result
	add := func(measure string, row, col int, got, want p2p.Cell, latency bool) {
		if got.Value == nil || want.Value == nil || *got.Value <= 0 || *want.Value <= 0 {
			return
		}
		compared++
		ratio := *got.Value / *want.Value
		if latency {
			ratio = 1 / ratio
		}
		if ratio < r.Expect.Floor {
			below = append(below, p2pFigure{measure, row, col, ratio})
		}
	}
	for mi, m := range res.Matrices {
		if mi >= len(exp.Matrices) || exp.Matrices[mi].Key != m.Key {
			continue
		}
		for i, row := range m.Cells {
			for j, c := range row {
				add(m.Key, res.Devices[i].Ordinal, res.Devices[j].Ordinal, c, exp.Matrices[mi].Cells[i][j], m.Unit == "us")
			}
		}
	}
	for i, h := range res.Host {
		if i >= len(exp.Host) {
			break
		}
		e, d := exp.Host[i], res.Devices[i].Ordinal
		add("h2d", d, -1, h.H2D, e.H2D, false)
		add("d2h", d, -1, h.D2H, e.D2H, false)
		add("host_bidir", d, -1, h.Bidir, e.Bidir, false)
		add("local", d, -1, h.Local, e.Local, false)
	}
	return below, compared
}

// p2pExpectNote is the footer's line on expectations.
func p2pExpectNote(r *P2PRun) string {
	if r.Expect == nil {
		return ""
	}
	below, n := p2pBelow(r)
	head := fmt.Sprintf("Expected: from %s; ", r.Expect.Source)
	if len(below) == 0 {
		return head + fmt.Sprintf("all %d figures at %.0f%% of it or more (--expect-floor %g)", n, 100*r.Expect.Floor, r.Expect.Floor)
	}
	var parts []string
	for i, b := range below {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("and %d more", len(below)-i))
			break
		}
		where := fmt.Sprintf("%d->%d", b.row, b.col)
		if b.col < 0 {
			where = fmt.Sprintf("GPU %d", b.row)
		}
		parts = append(parts, fmt.Sprintf("%s %s %.0f%%", b.measure, where, 100*b.ratio))
	}
	return head + fmt.Sprintf("%d of %d figures under %.0f%% of it (--expect-floor %g): %s", len(below), n, 100*r.Expect.Floor, r.Expect.Floor, strings.Join(parts, ", "))
}

// WriteP2P writes a p2p run in an --output format.
func WriteP2P(w io.Writer, format string, r *P2PRun) error {
	switch format {
	case "table":
		return p2pTable(w, r)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(p2pJSON(r))
	case "csv":
		return p2pCSV(w, r)
	case "markdown":
		return p2pMarkdown(w, r)
	}
	return fmt.Errorf("unknown output format %q: use %s", format, strings.Join(Formats, ", "))
}

func p2pTable(w io.Writer, r *P2PRun) error {
	res, o := r.Result, r.Opt
	where := "backend " + r.Backend
	if r.Topology != "" {
		where += ", topology " + r.Topology
	}
	check := "data verified"
	switch {
	case !o.Verify:
		check = "data not verified"
	case res.Verified == 0:
		check = "no copy's data could be checked (see the data check below)"
	}
	fmt.Fprintf(w, "# gpubench %s: p2p, %s\n", r.Version, where)
	if r.Runtime != "" {
		fmt.Fprintf(w, "# %s\n", r.Runtime)
	}
	fmt.Fprintf(w, "# size %d B, %d copies per sample, median of %d samples, %s; latency: %d-byte copies x %d; GB = 1e9 bytes\n",
		o.Size, o.Repeat, o.Samples, check, p2p.LatencyBytes, p2p.LatencyRepeat)
	fmt.Fprintln(w, "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]")
	for _, d := range res.Devices {
		dom, bus, dev := pciParts(d.PCIBusID)
		fmt.Fprintf(w, "Device: %d, %s, pciBusID: %x, pciDeviceID: %x, pciDomainID:%x\n", d.Ordinal, d.Name, bus, dev, dom)
	}
	for i, a := range res.Devices {
		for j, b := range res.Devices {
			if i != j {
				can := "CANNOT"
				if res.Access[i][j].Info.Access {
					can = "CAN"
				}
				fmt.Fprintf(w, "Device=%d %s Access Peer Device=%d\n", a.Ordinal, can, b.Ordinal)
			}
		}
	}
	fmt.Fprintln(w, "P2P Connectivity Matrix")
	header(w, res, "     D\\D", "%6d")
	for i, a := range res.Devices {
		fmt.Fprintf(w, "%6d\t", a.Ordinal)
		for j := range res.Devices {
			v := 0
			if i == j || res.Access[i][j].Info.Access {
				v = 1
			}
			fmt.Fprintf(w, "%6d", v)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "P2P Attributes (performance rank, lower is better / native atomics)")
	header(w, res, "   D\\D", "%7d")
	for i, a := range res.Devices {
		fmt.Fprintf(w, "%6d", a.Ordinal)
		for j := range res.Devices {
			cell := "-"
			if acc := res.Access[i][j]; i != j && acc.Info.Access {
				cell = fmt.Sprintf("%d/%s", acc.Info.PerfRank, yesNo(acc.Info.NativeAtomics))
			}
			fmt.Fprintf(w, " %6s", cell)
		}
		fmt.Fprintln(w)
	}
	heading := "Peer Access Enable Status\n" // only above pairs that have access
	for i, a := range res.Devices {
		for j, b := range res.Devices {
			if acc := res.Access[i][j]; i != j && acc.Info.Access && acc.Enable != "" { // "" where a hang came first
				fmt.Fprintf(w, "%s%6d -> %d: %s\n", heading, a.Ordinal, b.Ordinal, acc.Enable)
				heading = ""
			}
		}
	}
	for _, m := range res.Matrices {
		fmt.Fprintln(w, m.Title)
		header(w, res, "   D\\D", "%6d ")
		for i, a := range res.Devices {
			fmt.Fprintf(w, "%6d ", a.Ordinal)
			for _, c := range m.Cells[i] {
				fmt.Fprintf(w, "%6s ", cellText(c, "%6.02f"))
			}
			fmt.Fprintln(w)
		}
		for _, note := range naNotes(res, m) {
			fmt.Fprintf(w, "   %s\n", note)
		}
	}
	if len(res.Host) > 0 { // none when a run stopped before the host copies
		fmt.Fprintln(w, "Host and Local Copy Bandwidth (GB/s; pinned host memory; Bidir = both directions together; Local = one copy's bytes)")
		fmt.Fprintf(w, "%6s %8s %8s %8s %8s\n", "GPU", "H2D", "D2H", "Bidir", "Local")
		for i, h := range res.Host {
			fmt.Fprintf(w, "%6d %8s %8s %8s %8s\n", res.Devices[i].Ordinal, cellText(h.H2D, "%.2f"), cellText(h.D2H, "%.2f"), cellText(h.Bidir, "%.2f"), cellText(h.Local, "%.2f"))
		}
	}
	if res.SweepPair != nil {
		fmt.Fprintf(w, "Size Sweep, GPU %d <-> GPU %d, %s (GB/s)\n", res.SweepPair.A, res.SweepPair.B, sweepMode(res))
		fmt.Fprintf(w, "%12s %8s %8s\n", "Size (B)", "Uni", "Bidir")
		for _, s := range res.Sweep {
			fmt.Fprintf(w, "%12d %8s %8s\n", s.Size, cellText(s.Uni, "%.2f"), cellText(s.Bidir, "%.2f"))
		}
		for _, note := range sweepNotes(res) {
			fmt.Fprintf(w, "   %s\n", note)
		}
	}
	if note := p2pExpectNote(r); note != "" {
		fmt.Fprintln(w, note)
	}
	_, err := fmt.Fprintf(w, "Data check: %d copies verified, %d mismatched, %d not checked\n", res.Verified, res.Mismatched, res.Unverified)
	return err
}

// sweepMode says whether the size sweep's pair had peer access.
func sweepMode(res *p2p.Result) string {
	if len(res.Sweep) > 0 && res.Sweep[0].P2P {
		return "P2P=Enabled"
	}
	return "P2P=Disabled"
}

func header(w io.Writer, res *p2p.Result, first, col string) {
	fmt.Fprint(w, first)
	for _, d := range res.Devices {
		fmt.Fprintf(w, col, d.Ordinal)
	}
	fmt.Fprintln(w)
}

func yesNo(b bool) string {
	if b {
		return "y"
	}
	return "n"
}

// cellText is a cell's value, "N/A", or the value marked "!" when its data did not match.
func cellText(c p2p.Cell, format string) string {
	if c.Value == nil {
		return "N/A"
	}
	s := fmt.Sprintf(format, *c.Value)
	if c.Bad {
		s += "!"
	}
	return s
}

// naNotes groups a matrix's N/A cells by reason, e.g. "N/A 0->1, 0->2: no P2P access ...".
func naNotes(res *p2p.Result, m p2p.Matrix) []string {
	byReason := map[string][]string{}
	for i, row := range m.Cells {
		for j, c := range row {
			if c.Value == nil {
				byReason[c.NA] = append(byReason[c.NA], fmt.Sprintf("%d->%d", res.Devices[i].Ordinal, res.Devices[j].Ordinal))
			}
		}
	}
	var notes []string
	for reason, cells := range byReason {
		notes = append(notes, fmt.Sprintf("N/A %s: %s", strings.Join(cells, ", "), reason))
	}
	sort.Strings(notes)
	for i, row := range m.Cells {
		for j, c := range row {
			if c.Bad {
				notes = append(notes, fmt.Sprintf("! %d->%d: the copied data did not match", res.Devices[i].Ordinal, res.Devices[j].Ordinal))
			}
		}
	}
	return notes
}

// sweepNotes says why the size sweep's N/A cells are N/A, and which cells' data did not match.
func sweepNotes(res *p2p.Result) []string {
	var notes []string
	add := func(note string) {
		if !slices.Contains(notes, note) {
			notes = append(notes, note)
		}
	}
	for _, s := range res.Sweep {
		for _, c := range []struct {
			dir  string
			cell p2p.Cell
		}{{"Uni", s.Uni}, {"Bidir", s.Bidir}} {
			switch {
			case c.cell.Value == nil && c.cell.NA != "":
				add("N/A: " + c.cell.NA)
			case c.cell.Bad:
				add(fmt.Sprintf("! %s at %d B: the copied data did not match", c.dir, s.Size))
			}
		}
	}
	return notes
}

// mdNotes writes notes under a Markdown table as a list, after a blank line; nothing for none.
func mdNotes(w io.Writer, notes []string) {
	if len(notes) > 0 {
		fmt.Fprintln(w)
	}
	for _, note := range notes {
		fmt.Fprintf(w, "- %s\n", note)
	}
}

func pciParts(id string) (domain, bus, dev uint64) {
	parts := strings.Split(id, ":")
	if len(parts) >= 2 {
		domain, _ = strconv.ParseUint(parts[0], 16, 32)
		bus, _ = strconv.ParseUint(parts[1], 16, 32)
	}
	if len(parts) >= 3 { // DOMAIN:BUS:DEVICE.FUNCTION
		d, _, _ := strings.Cut(parts[2], ".")
		dev, _ = strconv.ParseUint(d, 16, 32)
	}
	return domain, bus, dev
}

// p2pJSON is the JSON document for a p2p run, in the schema internal/results reads.
func p2pJSON(r *P2PRun) *results.P2P {
	res, o := r.Result, r.Opt
	doc := &results.P2P{Version: r.Version, Command: "p2p", Backend: r.Backend, Topology: results.NullString(r.Topology),
		Runtime: results.NullString(r.Runtime), StartTime: r.Start.UTC().Format(time.RFC3339),
		Config: results.P2PConfig{Size: o.Size, Repeat: o.Repeat, Samples: o.Samples, Verify: o.Verify,
			LatencyBytes: p2p.LatencyBytes, LatencyRepeat: p2p.LatencyRepeat, Sweep: o.Sweep},
		Matrices: map[string]results.Matrix{}, Host: []results.HostCopy{},
		Verified: res.Verified, Mismatched: res.Mismatched, Unverified: res.Unverified}
	for _, p := range o.Pairs {
		doc.Config.Pairs = append(doc.Config.Pairs, [2]int{p.A, p.B})
	}
	for i, d := range res.Devices {
		doc.Devices = append(doc.Devices, results.Device{Rank: i, Host: d.Host, Device: d.Ordinal, PCIBusID: d.PCIBusID, Name: d.Name, Memory: d.MemoryBytes})
		row := make([]*results.Access, len(res.Devices))
		for j := range res.Devices {
			if i == j {
				continue
			}
			acc := res.Access[i][j]
			ja := &results.Access{Access: acc.Info.Access, Enable: results.NullString(acc.Enable)}
			if acc.Info.Access {
				rank, atomics := acc.Info.PerfRank, acc.Info.NativeAtomics
				ja.PerfRank, ja.NativeAtomics = &rank, &atomics
			}
			row[j] = ja
		}
		doc.Access = append(doc.Access, row)
	}
	for _, m := range res.Matrices {
		jm := results.Matrix{Title: m.Title, Unit: m.Unit}
		for _, row := range m.Cells {
			var vals []*float64
			var na []results.NullString
			var bad []bool
			for _, c := range row {
				vals = append(vals, c.Value)
				bad = append(bad, c.Bad)
				if c.Value == nil {
					na = append(na, results.NullString(c.NA))
				} else {
					na = append(na, "")
				}
			}
			jm.Values, jm.NA, jm.Bad = append(jm.Values, vals), append(jm.NA, na), append(jm.Bad, bad)
		}
		doc.Matrices[m.Key] = jm
	}
	for i, h := range res.Host {
		doc.Host = append(doc.Host, results.HostCopy{Device: res.Devices[i].Ordinal, H2D: h.H2D.Value, D2H: h.D2H.Value, Bidir: h.Bidir.Value, Local: h.Local.Value})
	}
	if res.SweepPair != nil {
		s := &results.Sweep{Pair: [2]int{res.SweepPair.A, res.SweepPair.B}}
		for _, row := range res.Sweep {
			s.P2P = row.P2P
			s.Rows = append(s.Rows, results.SweepRow{Size: row.Size, Uni: row.Uni.Value, Bidir: row.Bidir.Value})
		}
		doc.Sweep = s
	}
	if x := r.Expect; x != nil {
		e := &results.P2PExpect{Source: x.Source, Floor: x.Floor, Matrices: map[string][][]*float64{}, Below: []results.P2PBelow{}}
		for _, m := range x.Result.Matrices {
			for _, row := range m.Cells {
				var vals []*float64
				for _, c := range row {
					vals = append(vals, c.Value)
				}
				e.Matrices[m.Key] = append(e.Matrices[m.Key], vals)
			}
		}
		for i, h := range x.Result.Host {
			e.Host = append(e.Host, results.HostCopy{Device: x.Result.Devices[i].Ordinal, H2D: h.H2D.Value, D2H: h.D2H.Value, Bidir: h.Bidir.Value, Local: h.Local.Value})
		}
		below, _ := p2pBelow(r)
		for _, b := range below {
			jb := results.P2PBelow{Measure: b.measure, Row: b.row, Ratio: b.ratio}
			if b.col >= 0 {
				jb.Column = &b.col
			}
			e.Below = append(e.Below, jb)
		}
		doc.Expect = e
	}
	return doc
}

func p2pCSV(w io.Writer, r *P2PRun) error {
	res := r.Result
	c := csv.NewWriter(w)
	c.Write([]string{"measure", "row", "column", "value", "unit", "na_reason"})
	num := func(v *float64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatFloat(*v, 'f', -1, 64)
	}
	for _, m := range res.Matrices {
		for i, row := range m.Cells {
			for j, cell := range row {
				c.Write([]string{m.Key, strconv.Itoa(res.Devices[i].Ordinal), strconv.Itoa(res.Devices[j].Ordinal), num(cell.Value), m.Unit, cell.NA})
			}
		}
	}
	for i, h := range res.Host {
		d := strconv.Itoa(res.Devices[i].Ordinal)
		for _, x := range []struct {
			name string
			cell p2p.Cell
		}{{"h2d", h.H2D}, {"d2h", h.D2H}, {"host_bidir", h.Bidir}, {"local", h.Local}} {
			c.Write([]string{x.name, d, "", num(x.cell.Value), "GB/s", x.cell.NA})
		}
	}
	for _, s := range res.Sweep {
		size := strconv.FormatInt(s.Size, 10)
		c.Write([]string{"sweep_uni_" + size, strconv.Itoa(res.SweepPair.A), strconv.Itoa(res.SweepPair.B), num(s.Uni.Value), "GB/s", s.Uni.NA})
		c.Write([]string{"sweep_bidir_" + size, strconv.Itoa(res.SweepPair.A), strconv.Itoa(res.SweepPair.B), num(s.Bidir.Value), "GB/s", s.Bidir.NA})
	}
	if x := r.Expect; x != nil { // the simulator's figures, each measure named with _expected
		for _, m := range x.Result.Matrices {
			for i, row := range m.Cells {
				for j, cell := range row {
					c.Write([]string{m.Key + "_expected", strconv.Itoa(x.Result.Devices[i].Ordinal), strconv.Itoa(x.Result.Devices[j].Ordinal), num(cell.Value), m.Unit, cell.NA})
				}
			}
		}
		for i, h := range x.Result.Host {
			d := strconv.Itoa(x.Result.Devices[i].Ordinal)
			for _, y := range []struct {
				name string
				cell p2p.Cell
			}{{"h2d", h.H2D}, {"d2h", h.D2H}, {"host_bidir", h.Bidir}, {"local", h.Local}} {
				c.Write([]string{y.name + "_expected", d, "", num(y.cell.Value), "GB/s", y.cell.NA})
			}
		}
	}
	c.Flush()
	return c.Error()
}

func p2pMarkdown(w io.Writer, r *P2PRun) error {
	res := r.Result
	fmt.Fprintf(w, "**gpubench %s p2p** on %d devices, backend %s\n", r.Version, len(res.Devices), r.Backend)
	for _, m := range res.Matrices {
		fmt.Fprintf(w, "\n%s\n\n| D\\D |", m.Title)
		for _, d := range res.Devices {
			fmt.Fprintf(w, " %d |", d.Ordinal)
		}
		fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---:|", len(res.Devices)))
		for i, row := range m.Cells {
			fmt.Fprintf(w, "| %d |", res.Devices[i].Ordinal)
			for _, c := range row {
				fmt.Fprintf(w, " %s |", cellText(c, "%.2f"))
			}
			fmt.Fprintln(w)
		}
		mdNotes(w, naNotes(res, m)) // why the N/A cells are N/A, as the table says
	}
	if len(res.Host) > 0 {
		fmt.Fprintf(w, "\n| GPU | H2D (GB/s) | D2H (GB/s) | Bidir (GB/s) | Local (GB/s) |\n|---:|---:|---:|---:|---:|\n")
		for i, h := range res.Host {
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s |\n", res.Devices[i].Ordinal, cellText(h.H2D, "%.2f"), cellText(h.D2H, "%.2f"), cellText(h.Bidir, "%.2f"), cellText(h.Local, "%.2f"))
		}
	}
	if res.SweepPair != nil {
		fmt.Fprintf(w, "\nSize sweep, GPU %d <-> GPU %d, %s\n\n| size (B) | Uni (GB/s) | Bidir (GB/s) |\n|---:|---:|---:|\n", res.SweepPair.A, res.SweepPair.B, sweepMode(res))
		for _, s := range res.Sweep {
			fmt.Fprintf(w, "| %d | %s | %s |\n", s.Size, cellText(s.Uni, "%.2f"), cellText(s.Bidir, "%.2f"))
		}
		mdNotes(w, sweepNotes(res))
	}
	if note := p2pExpectNote(r); note != "" {
		fmt.Fprintf(w, "\n> %s\n", note)
	}
	_, err := fmt.Fprintf(w, "\nData check: %d copies verified, %d mismatched, %d not checked.\n", res.Verified, res.Mismatched, res.Unverified)
	return err
}
