package plot

import (
	"bytes"
	"fmt"
	"image/color"
	"image/png"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotutil"

	"github.com/gpubench/gpubench/internal/plot/svgtest"
	"github.com/gpubench/gpubench/internal/results"
)

// collFile is an all-reduce run from 1 KiB to 1 MiB (x4, 6 sizes, and a 0-byte row that is not
// drawn), its busbw scaled by speed.
func collFile(name string, speed float64) *results.File {
	c := &results.Coll{Collective: "allreduce", Backend: "sim", Config: results.Config{Ranks: 8},
		BusPeak: &results.BusPeak{GBs: 450, Link: "nvlink"}}
	for size := int64(1024); size <= 1<<20; size *= 4 {
		p := results.Placement{TimeUS: float64(size) / 1e3, AlgBW: speed * float64(size) / 1e4, BusBW: speed * float64(size) / 5e3}
		c.Results = append(c.Results, results.Row{Size: size, Count: size / 4, Type: "float", Op: "sum", OutOfPlace: p, InPlace: p})
	}
	c.Results = append([]results.Row{{Type: "float", Op: "sum"}}, c.Results...)
	return &results.File{Name: "runs/" + name + ".json", Form: results.FormDocument, Complete: true, Coll: c}
}

// p2pFile is three GPUs, the pair 0-2 without peer access.
func p2pFile() *results.File {
	v := func(x float64) *float64 { return &x }
	m := results.Matrix{Title: "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)", Unit: "GB/s",
		Values: [][]*float64{{v(900), v(25), nil}, {v(25), v(900), v(24)}, {nil, v(25), v(900)}}}
	return &results.File{Name: "p2p.json", Form: results.FormDocument, Complete: true, P2P: &results.P2P{
		Backend: "sim", Devices: []results.Device{{Device: 0}, {Rank: 1, Device: 1}, {Rank: 2, Device: 5}},
		Matrices: map[string]results.Matrix{"uni_enabled": m, "bi_enabled": m}}}
}

// parseSVG returns an SVG's size, paths and texts.
func parseSVG(t *testing.T, data []byte) (width, height string, paths []svgtest.Path, texts []string) {
	t.Helper()
	svg, err := svgtest.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return svg.Width, svg.Height, svg.Paths, svg.Texts
}

func hexColor(c color.Color) string {
	r, g, b, _ := c.RGBA()
	return fmt.Sprintf("#%02X%02X%02X", r>>8, g>>8, b>>8)
}

// Two runs, both placements: an SVG of the size asked, one line per run and placement with a
// vertex per size above 0 B (in-place dashed), a legend entry for each and one for the peak.
func TestDrawSweep(t *testing.T) {
	var buf bytes.Buffer
	files := []*results.File{collFile("base", 1), collFile("slow", 0.5)}
	if err := Draw(&buf, files, Options{Measure: "busbw", Placement: "both", Width: 800, Height: 500, Format: "svg"}); err != nil {
		t.Fatal(err)
	}
	width, height, paths, texts := parseSVG(t, buf.Bytes())
	if width != "600pt" || height != "375pt" {
		t.Errorf("size %s x %s; want 600pt x 375pt (800x500 CSS pixels at 0.75 pt)", width, height)
	}
	for i, label := range []string{"base out-of-place", "base in-place", "slow out-of-place", "slow in-place"} {
		stroke := "stroke:" + hexColor(plotutil.Color(i))
		var lines []svgtest.Path
		for _, p := range paths {
			if strings.Contains(p.Style, stroke) && strings.Contains(p.Style, "stroke-width:1.5") && strings.Count(p.D, "L") == 5 {
				lines = append(lines, p)
			}
		}
		dashed := strings.HasSuffix(label, " in-place")
		if len(lines) != 1 || strings.Contains(lines[0].Style, "stroke-dasharray") != dashed {
			t.Errorf("%s: %d lines of 6 sizes in %s; want 1, dashed %v", label, len(lines), stroke, dashed)
		}
		if !slices.Contains(texts, label) {
			t.Errorf("no legend entry %q in %q", label, texts)
		}
	}
	if n := strings.Count(buf.String(), "stroke:"+hexColor(plotutil.Color(4))); n != 0 {
		t.Errorf("%d paths of a fifth series' colour; want none", n)
	}
	for _, want := range []string{"allreduce: bus bandwidth against size", "nominal bus peak 450 GB/s (nvlink)", "1K", "1M", "busbw (GB/s)"} {
		if !slices.Contains(texts, want) {
			t.Errorf("no text %q in %q", want, texts)
		}
	}
}

// A run of one size still draws its nominal peak as a line across the plot, not a point.
func TestDrawOneSize(t *testing.T) {
	f := collFile("one", 1)
	f.Coll.Results = f.Coll.Results[3:4]
	var buf bytes.Buffer
	if err := Draw(&buf, []*results.File{f}, Options{Measure: "busbw", Placement: "out", Width: 800, Height: 500, Format: "svg"}); err != nil {
		t.Fatal(err)
	}
	_, _, paths, _ := parseSVG(t, buf.Bytes())
	long := false
	for _, p := range paths {
		var x0, y0, x1, y1 float64
		if strings.Contains(p.Style, "stroke-dasharray:2,3") {
			if _, err := fmt.Sscanf(p.D, "M%g,%gL%g,%g", &x0, &y0, &x1, &y1); err == nil && x1-x0 > 300 {
				long = true
			}
		}
	}
	if !long {
		t.Error("no peak line across the plot")
	}
}

// A run set beside expectations (--expect) draws its expected curve too, dotted, in the legend
// as "... expected", at the measured figure over the ratio.
func TestDrawExpected(t *testing.T) {
	f := collFile("run", 1)
	for i := range f.Coll.Results {
		r := &f.Coll.Results[i]
		if r.Size > 0 {
			r.OutOfPlace.Expected = &results.Expected{TimeUS: r.OutOfPlace.TimeUS / 2, BusBW: 2 * r.OutOfPlace.BusBW, Ratio: 0.5}
		}
	}
	var buf bytes.Buffer
	if err := Draw(&buf, []*results.File{f}, Options{Measure: "busbw", Placement: "out", Width: 800, Height: 500, Format: "svg"}); err != nil {
		t.Fatal(err)
	}
	_, _, paths, texts := parseSVG(t, buf.Bytes())
	if !slices.Contains(texts, "run expected") || !slices.Contains(texts, "run") {
		t.Errorf("legend %q; want run and run expected", texts)
	}
	stroke := "stroke:" + hexColor(plotutil.Color(1))
	dotted := 0
	for _, p := range paths {
		if strings.Contains(p.Style, stroke) && strings.Contains(p.Style, "stroke-dasharray") && strings.Count(p.D, "L") == 5 {
			dotted++
		}
	}
	if dotted != 1 {
		t.Errorf("%d dotted lines of 6 sizes in %s; want the expected curve", dotted, stroke)
	}
}

// p2p heat maps: a PNG of the size asked, one map per matrix, N/A cells grey, and every cell's
// figure written on it, the devices labelled by ordinal.
func TestDrawHeatMaps(t *testing.T) {
	var buf bytes.Buffer
	opt := Options{Matrices: []string{"uni_enabled"}, Width: 640, Height: 480, Format: "png"}
	if err := Draw(&buf, []*results.File{p2pFile()}, opt); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 640 || b.Dy() != 480 {
		t.Errorf("image %v; want 640x480", b)
	}
	grey, yellow := 0, 0
	for y := range img.Bounds().Dy() {
		for x := range img.Bounds().Dx() {
			switch hexColor(img.At(x, y)) {
			case "#DDDDDD":
				grey++
			case "#F5ECB0":
				yellow++
			}
		}
	}
	// 3x3 cells in a plot area of about 500x400 pixels: a cell is about 25,000 pixels, less the
	// figure written on it.
	cell := yellow / 3
	if cell < 15000 || cell > 35000 || grey < 2*cell*95/100 || grey > 2*cell*105/100 {
		t.Errorf("%d grey and %d pale yellow pixels; want 2 N/A cells and the 3 diagonal cells", grey, yellow)
	}

	buf.Reset()
	opt.Format, opt.Matrices = "svg", []string{"uni_enabled", "bi_enabled"}
	if err := Draw(&buf, []*results.File{p2pFile()}, opt); err != nil {
		t.Fatal(err)
	}
	_, _, _, texts := parseSVG(t, buf.Bytes())
	count := func(s string) int {
		n := 0
		for _, t := range texts {
			if t == s {
				n++
			}
		}
		return n
	}
	if count("N/A") != 4 || count("900") != 6 || count("24.0") != 2 || count("5") != 4 ||
		count("p2p: uni_enabled (GB/s)") != 1 || count("p2p: bi_enabled (GB/s)") != 1 {
		t.Errorf("texts %q; want two maps titled by matrix, each with 2 N/A cells, 3 of 900, one of 24.0, and GPU 5 labelled on both axes", texts)
	}
	if err := Draw(&buf, []*results.File{p2pFile()}, Options{Matrices: []string{"lat_enabled"}, Width: 640, Height: 480, Format: "svg"}); err == nil ||
		!strings.Contains(err.Error(), `p2p.json has no matrix "lat_enabled": it holds bi_enabled, uni_enabled`) {
		t.Errorf("missing matrix: %v", err)
	}
}

func TestDrawRefuses(t *testing.T) {
	ok := Options{Measure: "busbw", Placement: "out", Width: 800, Height: 500, Format: "svg"}
	cases := []struct {
		files []*results.File
		opt   func(*Options)
		want  string
	}{
		{nil, func(*Options) {}, "no result files"},
		{[]*results.File{collFile("a", 1)}, func(o *Options) { o.Width = 50 }, "image size 50x500"},
		{[]*results.File{collFile("a", 1), p2pFile()}, func(*Options) {}, "draw collective results and p2p results in separate plots"},
		{[]*results.File{collFile("a", 1)}, func(o *Options) { o.Format = "pdf" }, `unknown image format "pdf"`},
		{[]*results.File{collFile("a", 1)}, func(o *Options) { o.Measure = "speed" }, `unknown measure "speed"`},
		{[]*results.File{{Name: "zero.json", Coll: &results.Coll{Collective: "allgather", Results: []results.Row{{Type: "float"}}}}}, func(*Options) {}, "nothing to draw"},
	}
	for _, c := range cases {
		opt := ok
		c.opt(&opt)
		if err := Draw(&bytes.Buffer{}, c.files, opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.want, err)
		}
	}
}

// FuzzParseImageSize: --size gives a width and height of 100 to 20000 pixels that read back the
// same, or an error of one line; never a panic.
func FuzzParseImageSize(f *testing.F) {
	for _, s := range []string{"960x600", "100X100", "20000x20000", "99x100", "x", "", "1e3x200", "-100x200", "300x", "+100x+100"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, h, err := ParseImageSize(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("ParseImageSize(%q): error is not one line: %q", s, err)
			}
			return
		}
		w2, h2, err := ParseImageSize(fmt.Sprintf("%dx%d", w, h))
		if w < 100 || h < 100 || w > 20000 || h > 20000 || err != nil || w2 != w || h2 != h {
			t.Fatalf("ParseImageSize(%q) = %d x %d, which reads back as %d x %d, %v", s, w, h, w2, h2, err)
		}
	})
}

// A run that repeats its sweep (-N) is a line per cycle, each labelled with it, not one line
// that runs through every cycle's sizes back and forth.
func TestSeriesPerCycle(t *testing.T) {
	f := collFile("cycles", 1)
	var rows []results.Row
	for cycle := 1; cycle <= 2; cycle++ {
		for _, r := range f.Coll.Results {
			r.Cycle = cycle
			rows = append(rows, r)
		}
	}
	f.Coll.Results = rows
	s := fileSeries(f, Options{Measure: "busbw", Placement: "out"}, false)
	var labels []string
	for _, x := range s {
		labels = append(labels, x.label)
		if len(x.xys) != 6 {
			t.Errorf("%s: %d points; want the 6 sizes above 0 B", x.label, len(x.xys))
		}
	}
	if want := []string{"cycles float sum cycle 1", "cycles float sum cycle 2"}; !slices.Equal(labels, want) {
		t.Errorf("lines %q; want %q", labels, want)
	}
}
