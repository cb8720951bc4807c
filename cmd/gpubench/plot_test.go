package main

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"gonum.org/v1/plot/plotutil"

	"github.com/gpubench/gpubench/internal/plot/svgtest"
)

// parseSVG reads an SVG file.
func parseSVG(t *testing.T, path string) svgtest.SVG {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svg, err := svgtest.Parse(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return svg
}

func hexColor(c color.Color) string {
	r, g, b, _ := c.RGBA()
	return strings.ToUpper(string([]byte{hexDigit(r >> 12), hexDigit(r >> 8 & 15), hexDigit(g >> 12), hexDigit(g >> 8 & 15), hexDigit(b >> 12), hexDigit(b >> 8 & 15)}))
}

func hexDigit(v uint32) byte { return "0123456789ABCDEF"[v&15] }

// Three runs overlaid: an SVG of the size asked, one data line per run with one vertex per size,
// a legend entry per run and the nominal peak.
func TestPlotSVG(t *testing.T) {
	t.Parallel()
	dir := simRuns(t)
	_, errOut, code := inDir(t, dir, "plot", "base.json", "slow.json", "j1.json", "--out", "busbw.svg", "--size", "800x500")
	if code != 0 || errOut != "gpubench: plot: wrote busbw.svg (800x500 SVG) from base.json, slow.json, j1.json\n" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	svg := parseSVG(t, filepath.Join(dir, "busbw.svg"))
	if svg.Width != "600pt" || svg.Height != "375pt" {
		t.Errorf("size %s x %s; want 600pt x 375pt (800x500 CSS pixels)", svg.Width, svg.Height)
	}
	for i, name := range []string{"base", "slow", "j1"} {
		stroke := "stroke:#" + hexColor(plotutil.Color(i))
		lines := 0
		for _, p := range svg.Paths {
			// the series' line: its colour, 6 sizes from 1M to 1G, so 5 segments
			if strings.Contains(p.Style, stroke) && strings.Contains(p.Style, "stroke-width:1.5") && strings.Count(p.D, "L") == 5 {
				lines++
			}
		}
		if lines != 1 {
			t.Errorf("%s: %d data lines in %s; want 1", name, lines, stroke)
		}
	}
	legend := regexp.MustCompile(`^(base|slow|j1|nominal bus peak 450 GB/s \(nvlink\))$`)
	n := 0
	for _, text := range svg.Texts {
		if legend.MatchString(text) {
			n++
		}
	}
	if n != 4 || !slices.Contains(svg.Texts, "allreduce: bus bandwidth against size") || !slices.Contains(svg.Texts, "1G") {
		t.Errorf("texts %q; want 4 legend entries, the title and size labels", svg.Texts)
	}
}

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img
}

func countColor(img image.Image, c color.Color) int {
	r0, g0, b0, _ := c.RGBA()
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 == r0>>8 && g>>8 == g0>>8 && bl>>8 == b0>>8 {
				n++
			}
		}
	}
	return n
}

// A PNG of the size asked, the time plot with both placements, each series' colour drawn.
func TestPlotPNG(t *testing.T) {
	t.Parallel()
	dir := simRuns(t)
	if _, errOut, code := inDir(t, dir, "plot", "base.json", "slow.json", "--y", "time", "--placement", "both", "--out", "time.png", "--size", "640x480"); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	img := decodePNG(t, filepath.Join(dir, "time.png"))
	if b := img.Bounds(); b.Dx() != 640 || b.Dy() != 480 {
		t.Errorf("image %v; want 640x480", b)
	}
	for i := 0; i < 4; i++ { // base and slow, out-of-place and in-place
		if n := countColor(img, plotutil.Color(i)); n < 50 {
			t.Errorf("series %d: %d pixels of its colour; want a drawn line", i, n)
		}
	}
	if n := countColor(img, plotutil.Color(4)); n != 0 {
		t.Errorf("%d pixels of a fifth series' colour; want none", n)
	}
}

// One rank's busbw is 0 by definition: plot draws algbw, and says so, unless --y asks.
func TestPlotOneRank(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, _, code := gpubench(t, "--backend", "sim", "allreduce", "-g", "1", "--sizes", "8:1M", "--output", "json")
	if code != 0 || os.WriteFile(filepath.Join(dir, "g1.json"), []byte(out), 0o644) != nil {
		t.Fatalf("exit %d", code)
	}
	_, errOut, code := inDir(t, dir, "plot", "g1.json", "--out", "g1.svg")
	svg, _ := os.ReadFile(filepath.Join(dir, "g1.svg"))
	if code != 0 || !strings.Contains(errOut, "gpubench: busbw is 0 by definition on one rank: drawing algbw (--y algbw)\n") || !strings.Contains(string(svg), "algbw (GB/s)") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if _, errOut, _ = inDir(t, dir, "plot", "g1.json", "--out", "b.svg", "--y", "busbw"); strings.Contains(errOut, "drawing algbw") {
		t.Errorf("--y busbw: %q", errOut)
	}
}

// p2p heat maps: the size asked, and the N/A cells of a machine without P2P drawn grey.
func TestPlotP2PHeatMap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, topo := range []string{"dgx-h100", "pcie-4090x8"} {
		out, errOut, code := gpubench(t, "p2p", "--backend", "sim", "--topology", topo, "--size", "4M", "--output", "json")
		if code != 0 {
			t.Fatalf("p2p %s: exit %d, %s", topo, code, errOut)
		}
		os.WriteFile(filepath.Join(dir, topo+".json"), []byte(out), 0o644)
	}
	grey := color.Gray{Y: 0xdd}
	if _, errOut, code := inDir(t, dir, "plot", "dgx-h100.json", "--out", "h100.png"); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	img := decodePNG(t, filepath.Join(dir, "h100.png"))
	if b := img.Bounds(); b.Dx() != 960 || b.Dy() != 600 || countColor(img, grey) > 200 { // a few from anti-aliased text
		t.Errorf("dgx-h100: image %v, %d N/A pixels; want 960x600 and every cell measured", b, countColor(img, grey))
	}
	if _, errOut, code := inDir(t, dir, "plot", "pcie-4090x8.json", "dgx-h100.json", "--matrix", "uni_enabled,bi_enabled", "--out", "both.png", "--size", "1200x1000"); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	img = decodePNG(t, filepath.Join(dir, "both.png"))
	if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 1000 || countColor(img, grey) < 10000 {
		t.Errorf("4090 and H100: image %v, %d N/A pixels; want 1200x1000 and the 4090's peer cells N/A", b, countColor(img, grey))
	}
}

func TestPlotBadInput(t *testing.T) {
	t.Parallel()
	dir := simRuns(t)
	out, _, _ := gpubench(t, "p2p", "--backend", "sim", "--size", "4M", "--output", "json")
	os.WriteFile(filepath.Join(dir, "p2p.json"), []byte(out), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"plot", "base.json"}, "add --out FILE.svg"},
		{[]string{"plot", "--out", "x.svg"}, "plot needs a result file"},
		{[]string{"plot", "base.json", "--out", "x.pdf"}, `invalid --out "x.pdf"`},
		{[]string{"plot", "base.json", "--out", "x.svg", "--size", "10x10"}, `invalid --size "10x10"`},
		{[]string{"plot", "base.json", "--out", "x.svg", "--y", "speed"}, `invalid --y "speed"`},
		{[]string{"plot", "base.json", "--out", "x.svg", "--placement", "middle"}, `invalid --placement "middle"`},
		{[]string{"plot", "base.json", "p2p.json", "--out", "x.svg"}, "plot collective results and p2p results separately"},
		{[]string{"plot", "base.json", "--out", "x.svg", "--matrix", "bi_enabled"}, "--matrix is for p2p results"},
		{[]string{"plot", "p2p.json", "--out", "x.svg", "--y", "time"}, "--y and --placement are for collective results"},
		{[]string{"plot", "p2p.json", "--out", "x.svg", "--matrix", "uni"}, `has no matrix "uni": it holds bi_disabled, bi_enabled`},
		{[]string{"plot", "missing.json", "--out", "x.svg"}, "missing.json: no such file or directory"},
	}
	for _, c := range cases {
		out, errOut, code := inDir(t, dir, c.args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2, one line containing %q", c.args, code, out, errOut, c.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "x.svg")); err == nil {
			t.Fatalf("%v: wrote x.svg", c.args)
		}
	}
}

// nccl-tests' own output plots beside gpubench's: a published log's line has a vertex per size
// of its table; a log cut before its footer is drawn with a notice.
func TestPlotNCCLTests(t *testing.T) {
	t.Parallel()
	dir := simRuns(t)
	ncclTestsLogs(t, dir, map[string]string{"oci-gb300-allreduce-2nodes.log": "gb300.log", "olivia-allreduce-2.17.9.log": "olivia.log"})
	_, errOut, code := inDir(t, dir, "plot", "base.json", "gb300.log", "--out", "mixed.svg")
	if code != 0 || errOut != "gpubench: plot: wrote mixed.svg (960x600 SVG) from base.json, gb300.log\n" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	svg := parseSVG(t, filepath.Join(dir, "mixed.svg"))
	for i, segments := range []int{5, 15} { // base: 6 sizes; the log: 16, 512K to 16G
		stroke := "stroke:#" + hexColor(plotutil.Color(i))
		lines := 0
		for _, p := range svg.Paths {
			if strings.Contains(p.Style, stroke) && strings.Contains(p.Style, "stroke-width:1.5") && strings.Count(p.D, "L") == segments {
				lines++
			}
		}
		if lines != 1 {
			t.Errorf("series %d: %d data lines of %d segments in %s; want 1", i, lines, segments, stroke)
		}
	}
	if !slices.Contains(svg.Texts, "gb300") || !slices.Contains(svg.Texts, "base") {
		t.Errorf("texts %q; want the legend to name base and gb300", svg.Texts)
	}

	_, errOut, code = inDir(t, dir, "plot", "olivia.log", "--out", "olivia.png")
	if code != 0 || !strings.Contains(errOut, "gpubench: olivia.log: the run at line 1 has no footer") || !strings.Contains(errOut, "wrote olivia.png") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if img := decodePNG(t, filepath.Join(dir, "olivia.png")); countColor(img, plotutil.Color(0)) < 50 {
		t.Error("olivia.png: its line is not drawn")
	}
}

// An output file is written as a shell's redirect writes it: through a link to the file it
// names, and through what is not a regular file (a pipe here; -o /dev/null as root renamed over
// the device once), keeping a replaced file's permissions.
func TestWriteAtomicKeepsWhatThePathIs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		data, _ := os.ReadFile(fifo) // opens once the writer does
		got <- string(data)
	}()
	if err := writeAtomic(fifo, []byte("through")); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the pipe was replaced: %v %v", st.Mode(), err)
	} else if data := <-got; data != "through" {
		t.Errorf("the pipe's reader got %q", data)
	}

	target, link := filepath.Join(dir, "real.json"), filepath.Join(dir, "link.json")
	if err := os.WriteFile(target, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real.json", link); err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(link, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v %v", st.Mode(), err)
	}
	if data, err := os.ReadFile(target); err != nil || string(data) != "new" {
		t.Errorf("the linked file holds %q, %v", data, err)
	}
	if st, err := os.Stat(target); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the replaced file's mode is %v, was 0600", st.Mode().Perm())
	}

	// A link to a file not made yet, reached through a folder that is itself a link, names the
	// file beside the link's real folder (d -> a/b, a/b/f -> ../x.json: a/x.json), as the kernel
	// resolves it; a loop of links is refused, and left as it is.
	if err := os.MkdirAll(filepath.Join(dir, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Symlink("a/b", filepath.Join(dir, "d")) != nil || os.Symlink("../x.json", filepath.Join(dir, "a/b/f")) != nil ||
		os.Symlink("l2", filepath.Join(dir, "l1")) != nil || os.Symlink("l1", filepath.Join(dir, "l2")) != nil {
		t.Fatal("links")
	}
	if err := writeAtomic(filepath.Join(dir, "d/f"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "a/x.json")); err != nil || string(data) != "x" {
		t.Errorf("a/x.json holds %q, %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.json")); err == nil {
		t.Error("wrote x.json beside d, not beside a/b")
	}
	if err := writeAtomic(filepath.Join(dir, "l1"), []byte("x")); err == nil {
		t.Error("a loop of links was written")
	}
	if st, err := os.Lstat(filepath.Join(dir, "l1")); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the loop's link was replaced: %v", err)
	}
}

// A collective's --out naming its own topology file is refused before anything runs, as other
// commands refuse an output over their inputs; the file is left as it was.
func TestCollOutIsNotItsTopology(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	topo := filepath.Join(dir, "t.json")
	js, _, code := gpubench(t, "topo", "--backend", "sim", "--output", "json")
	if code != 0 {
		t.Fatal(code)
	}
	if err := os.WriteFile(topo, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ out, want string }{
		{topo, "gpubench: cannot write --out " + topo + ": it is a file this command reads; name another\n"},
		{dir, "gpubench: cannot write --out " + dir + ": it is a folder; name a file in it\n"},
	} {
		stdout, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--topology", topo, "--sizes", "8B", "--out", tc.out)
		if code != exitUsage || stdout != "" || errOut != tc.want {
			t.Errorf("--out %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.out, code, stdout, errOut, tc.want)
		}
	}
	if after, err := os.ReadFile(topo); err != nil || string(after) != js {
		t.Error("the topology file changed")
	}
}
