// Package plot draws result files with gonum/plot: bandwidth or time against size for collective
// runs, several runs overlaid, and heat maps of p2p matrices (docs/results.md).
package plot

import (
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/gpubench/gpubench/internal/results"
)

// Values of Options.
var (
	Measures   = []string{"busbw", "algbw", "time"}
	Placements = []string{"out", "in", "both"}
	Formats    = []string{"svg", "png"}
)

// DPI is the resolution sizes in pixels are given at: a PNG is Width x Height pixels, and an SVG
// Width x Height CSS pixels (written in points, 0.75 pt to the pixel).
const DPI = 96

// An image's width and height, pixels: at least minSide, at most maxSide.
const minSide, maxSide = 100, 20000

// ParseImageSize reads WIDTHxHEIGHT in pixels (plot's --size), minSide to maxSide each.
func ParseImageSize(s string) (w, h int, err error) {
	a, b, ok := strings.Cut(strings.ToLower(s), "x")
	if ok {
		w, err = strconv.Atoi(a)
		if err == nil {
			h, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || !sideOK(w) || !sideOK(h) {
		return 0, 0, fmt.Errorf("give WIDTHxHEIGHT in pixels, %d to %d each, e.g. 960x600", minSide, maxSide)
	}
	return w, h, nil
}

func sideOK(n int) bool { return n >= minSide && n <= maxSide }

// Options say what to draw and how large.
type Options struct {
	Measure   string   // collectives: busbw, algbw or time
	Placement string   // collectives: out, in or both
	Matrices  []string // p2p: the matrices to draw, by key (uni_enabled, bi_disabled, ...)
	Width     int      // pixels
	Height    int      // pixels
	Format    string   // svg or png
	Title     string   // replaces the default title
}

// Draw draws files, all collective runs or all p2p runs, and writes the image to w.
func Draw(w io.Writer, files []*results.File, opt Options) error {
	if len(files) == 0 {
		return errors.New("no result files to draw")
	}
	if !sideOK(opt.Width) || !sideOK(opt.Height) {
		return fmt.Errorf("image size %dx%d: use %d to %d pixels a side", opt.Width, opt.Height, minSide, maxSide)
	}
	p2p := files[0].P2P != nil
	for _, f := range files[1:] {
		if (f.P2P != nil) != p2p {
			return fmt.Errorf("%s and %s: draw collective results and p2p results in separate plots", files[0].Name, f.Name)
		}
	}
	var grid [][]*plot.Plot
	var err error
	if p2p {
		grid, err = heatMaps(files, opt)
	} else {
		var p *plot.Plot
		p, err = sweep(files, opt)
		grid = [][]*plot.Plot{{p}}
	}
	if err != nil {
		return err
	}
	width := vg.Length(opt.Width) * vg.Inch / DPI
	height := vg.Length(opt.Height) * vg.Inch / DPI
	var canvas vg.CanvasSizer
	var out io.WriterTo
	switch opt.Format {
	case "png":
		c := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(DPI))
		canvas, out = c, vgimg.PngCanvas{Canvas: c}
	case "svg":
		c := vgsvg.New(width, height)
		canvas, out = c, c
	default:
		return fmt.Errorf("unknown image format %q: use %s", opt.Format, strings.Join(Formats, " or "))
	}
	dc := draw.New(canvas)
	if len(grid) == 1 && len(grid[0]) == 1 {
		grid[0][0].Draw(dc)
	} else {
		tiles := draw.Tiles{Rows: len(grid), Cols: len(grid[0]), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
			PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
		canvases := plot.Align(grid, tiles, dc)
		for i := range grid {
			for j := range grid[i] {
				if grid[i][j] != nil {
					grid[i][j].Draw(canvases[i][j])
				}
			}
		}
	}
	_, err = out.WriteTo(w)
	return err
}

// Label is the legend's name for a file: its base name without the extension.
func Label(f *results.File) string {
	base := filepath.Base(f.Name)
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// series is one line of a sweep plot.
type series struct {
	label    string
	xys      plotter.XYs
	dash     bool
	expected bool // what the run was set beside (--expect): dotted, without points
}

// sweep draws the collective runs: the measure against size on a log2 axis, one line per file,
// type/op/root group and placement, and each run's nominal bus peak as a dashed line.
func sweep(files []*results.File, opt Options) (*plot.Plot, error) {
	if !slices.Contains(Measures, opt.Measure) {
		return nil, fmt.Errorf("unknown measure %q: use %s", opt.Measure, strings.Join(Measures, ", "))
	}
	if !slices.Contains(Placements, opt.Placement) {
		return nil, fmt.Errorf("unknown placement %q: use %s", opt.Placement, strings.Join(Placements, ", "))
	}
	colls := map[string]bool{}
	for _, f := range files {
		colls[f.Coll.Collective] = true
	}
	var all []series
	for _, f := range files {
		all = append(all, fileSeries(f, opt, len(colls) > 1)...)
	}
	if len(all) == 0 {
		return nil, errors.New("nothing to draw: the files hold no rows with a size above 0 bytes")
	}
	p := plot.New()
	p.Title.Text = opt.Title
	if p.Title.Text == "" {
		names := make([]string, 0, len(colls))
		for c := range colls {
			names = append(names, c)
		}
		slices.Sort(names)
		p.Title.Text = fmt.Sprintf("%s: %s against size", strings.Join(names, ", "), measureName(opt.Measure))
	}
	p.X.Label.Text = "size (bytes)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = sizeTicks{}
	switch opt.Measure {
	case "time":
		p.Y.Label.Text = "time (us)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	default:
		p.Y.Label.Text = opt.Measure + " (GB/s)"
		p.Y.Min = 0
	}
	p.Add(plotter.NewGrid())
	// Bandwidth and time both grow with size: the empty corner is bottom right for bandwidth and
	// top left for time.
	if opt.Measure == "time" {
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs, p.Legend.YOffs = vg.Millimeter*3, -vg.Millimeter*3
	} else {
		p.Legend.XOffs, p.Legend.YOffs = -vg.Millimeter*3, vg.Millimeter*3
	}
	p.Title.Padding = vg.Millimeter * 2
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for i, s := range all {
		line, points, err := plotter.NewLinePoints(s.xys)
		if err != nil {
			return nil, fmt.Errorf("series %s: %v", s.label, err)
		}
		c := plotutil.Color(i)
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		points.Shape = plotutil.Shape(i)
		if s.dash {
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		if s.expected {
			line.Dashes, line.Width = []vg.Length{vg.Points(1.5), vg.Points(2.5)}, vg.Points(1.2)
			p.Add(line)
			p.Legend.Add(s.label, line)
		} else {
			p.Add(line, points)
			p.Legend.Add(s.label, line, points)
		}
		for _, xy := range s.xys {
			xmin, xmax = math.Min(xmin, xy.X), math.Max(xmax, xy.X)
		}
	}
	if xmin == xmax { // one size: the peak's line spans an axis around it
		xmin, xmax = xmin/2, xmax*2
	}
	if opt.Measure == "busbw" {
		type peak struct {
			gbs  float64
			link string
		}
		var peaks []peak
		for _, f := range files {
			if bp := f.Coll.BusPeak; bp != nil && !slices.Contains(peaks, peak{bp.GBs, bp.Link}) {
				peaks = append(peaks, peak{bp.GBs, bp.Link})
			}
		}
		for i, pk := range peaks {
			line, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: pk.gbs}, {X: xmax, Y: pk.gbs}})
			if err != nil {
				return nil, err
			}
			line.Color = color.Gray{Y: uint8(80 + 40*(i%3))}
			line.Width = vg.Points(1)
			line.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
			p.Add(line)
			label := fmt.Sprintf("nominal bus peak %.0f GB/s", pk.gbs)
			if pk.link != "" {
				label += " (" + pk.link + ")"
			}
			p.Legend.Add(label, line)
			p.Y.Max = math.Max(p.Y.Max, pk.gbs)
		}
		p.Y.Max *= 1.05
	}
	return p, nil
}

func measureName(m string) string {
	switch m {
	case "busbw":
		return "bus bandwidth"
	case "algbw":
		return "algorithm bandwidth"
	}
	return "time"
}

// fileSeries makes a file's lines: per type, op and root group, and per placement asked for.
func fileSeries(f *results.File, opt Options, nameColl bool) []series {
	c := f.Coll
	type group struct{ typ, op, root, cycle string }
	var order []group
	rows := map[group][]results.Row{}
	for _, r := range c.Results {
		g := group{typ: r.Type, op: string(r.Op)}
		if r.Root != nil {
			g.root = fmt.Sprintf("root %d", *r.Root)
		}
		if r.Cycle > 0 { // a repeated sweep (-N): a line per cycle
			g.cycle = fmt.Sprintf("cycle %d", r.Cycle)
		}
		if _, ok := rows[g]; !ok {
			order = append(order, g)
		}
		rows[g] = append(rows[g], r)
	}
	var out []series
	for _, g := range order {
		for _, pl := range []string{"out", "in"} {
			if opt.Placement != "both" && opt.Placement != pl {
				continue
			}
			label := Label(f)
			if nameColl {
				label += " " + c.Collective
			}
			if len(order) > 1 {
				label += " " + strings.Join(strings.Fields(strings.Join([]string{g.typ, g.op, g.root, g.cycle}, " ")), " ")
			}
			if opt.Placement == "both" {
				label += map[string]string{"out": " out-of-place", "in": " in-place"}[pl]
			}
			s := series{label: label, dash: pl == "in" && opt.Placement == "both"}
			exp := series{label: label + " expected", expected: true}
			for _, r := range rows[g] {
				pm := r.OutOfPlace
				if pl == "in" {
					pm = r.InPlace
				}
				y := pm.BusBW
				switch opt.Measure {
				case "algbw":
					y = pm.AlgBW
				case "time":
					y = pm.TimeUS
					if y <= 0 {
						continue // a log axis has no place for 0
					}
				}
				if r.Size <= 0 {
					continue
				}
				s.xys = append(s.xys, plotter.XY{X: float64(r.Size), Y: y})
				if e := pm.Expected; e != nil && e.Ratio > 0 {
					ey := y / e.Ratio // the ratio is measured over expected bandwidth
					if opt.Measure == "time" {
						ey = e.TimeUS
					}
					exp.xys = append(exp.xys, plotter.XY{X: float64(r.Size), Y: ey})
				}
			}
			for _, x := range []series{s, exp} {
				slices.SortStableFunc(x.xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
				if len(x.xys) > 0 {
					out = append(out, x)
				}
			}
		}
	}
	return out
}

// sizeTicks marks sizes at powers of two, labelled in binary units (1K, 64M, 1G), with a labelled
// tick every 4x or more so that labels do not crowd.
type sizeTicks struct{}

func (sizeTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) || !(max >= min) {
		return nil
	}
	lo, hi := int(math.Floor(math.Log2(min))), int(math.Ceil(math.Log2(max)))
	step := 2
	for (hi-lo)/step > 8 {
		step += 2
	}
	var ticks []plot.Tick
	for e := lo; e <= hi; e++ {
		v := math.Exp2(float64(e))
		if v < min || v > max {
			continue
		}
		t := plot.Tick{Value: v}
		if e%step == 0 {
			t.Label = sizeLabel(e)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

func sizeLabel(exp int) string {
	units := []string{"", "K", "M", "G", "T", "P", "E"}
	u := exp / 10
	if exp < 0 || u >= len(units) {
		return fmt.Sprintf("2^%d", exp)
	}
	return fmt.Sprintf("%d%s", 1<<(exp%10), units[u])
}

// heatMaps draws, for each p2p file, a heat map per matrix asked for: rows of the grid are files,
// columns matrices.
func heatMaps(files []*results.File, opt Options) ([][]*plot.Plot, error) {
	names := opt.Matrices
	if len(names) == 0 {
		names = []string{"uni_enabled"}
	}
	var grid [][]*plot.Plot
	for _, f := range files {
		var row []*plot.Plot
		for _, name := range names {
			m, ok := f.P2P.Matrices[name]
			if !ok {
				return nil, fmt.Errorf("%s has no matrix %q: it holds %s", f.Name, name, strings.Join(f.P2P.MatrixNames(), ", "))
			}
			p, err := heatMap(f, name, m, opt, len(files) > 1 || len(names) > 1)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %v", f.Name, name, err)
			}
			row = append(row, p)
		}
		grid = append(grid, row)
	}
	return grid, nil
}

// grid is a p2p matrix as gonum's heat map reads it: column c is the matrix's column c, and grid
// row r is matrix row n-1-r, so that the first device is at the top.
type grid struct {
	m results.Matrix
}

func (g grid) Dims() (c, r int) { return len(g.m.Values), len(g.m.Values) }
func (g grid) X(c int) float64  { return float64(c) }
func (g grid) Y(r int) float64  { return float64(r) }
func (g grid) Z(c, r int) float64 {
	v := g.m.Values[len(g.m.Values)-1-r][c]
	if v == nil {
		return math.NaN()
	}
	return *v
}

func heatMap(f *results.File, name string, m results.Matrix, opt Options, small bool) (*plot.Plot, error) {
	n := len(m.Values)
	if n == 0 {
		return nil, errors.New("the matrix is empty")
	}
	g := grid{m: m}
	h := plotter.NewHeatMap(g, ramp{from: color.RGBA{R: 0xf4, G: 0xf8, B: 0xfc, A: 0xff}, to: color.RGBA{R: 0x4a, G: 0x8b, B: 0xc9, A: 0xff}, n: 256})
	h.NaN = color.Gray{Y: 0xdd}
	// The colour scale runs from 0 to the largest peer cell: a GPU's copy within itself (the
	// diagonal) is often several times faster than any link and would wash the peers out, so it
	// is drawn pale yellow when it passes them, its figure written on it like every cell's.
	h.Overflow = color.RGBA{R: 0xf5, G: 0xec, B: 0xb0, A: 0xff}
	h.Min, h.Max = 0, 0
	for i, row := range m.Values {
		for j, v := range row {
			if v != nil && i != j {
				h.Max = math.Max(h.Max, *v)
			}
		}
	}
	if h.Max == 0 {
		for i, row := range m.Values {
			if v := row[i]; v != nil {
				h.Max = math.Max(h.Max, *v)
			}
		}
	}
	if h.Max == 0 {
		h.Max = 1 // every cell N/A or 0: any range will do
	}
	p := plot.New()
	title := m.Title
	if title == "" {
		title = name
	}
	if small {
		title = Label(f) + ": " + name + " (" + m.Unit + ")"
	}
	if opt.Title != "" {
		title = opt.Title
		if small {
			title += ": " + Label(f) + " " + name
		}
	}
	p.Title.Text = title
	p.X.Label.Text = "to GPU (column)"
	p.Y.Label.Text = "from GPU (row)"
	if strings.HasPrefix(name, "bi_") {
		p.X.Label.Text, p.Y.Label.Text = "GPU (column)", "GPU (row)"
	}
	p.Add(h)
	devices := f.P2P.Devices
	var xt, yt []plot.Tick
	for i := 0; i < n; i++ {
		label := fmt.Sprint(i)
		if i < len(devices) {
			label = fmt.Sprint(devices[i].Device)
		}
		xt = append(xt, plot.Tick{Value: float64(i), Label: label})
		yt = append(yt, plot.Tick{Value: float64(n - 1 - i), Label: label})
	}
	p.X.Tick.Marker = plot.ConstantTicks(xt)
	p.Y.Tick.Marker = plot.ConstantTicks(yt)
	var cells plotter.XYLabels
	for i, row := range m.Values {
		for j, v := range row {
			text := "N/A"
			if v != nil {
				text = cellText(*v)
			}
			cells.XYs = append(cells.XYs, plotter.XY{X: float64(j), Y: float64(n - 1 - i)})
			cells.Labels = append(cells.Labels, text)
		}
	}
	labels, err := plotter.NewLabels(cells)
	if err != nil {
		return nil, err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].XAlign, labels.TextStyle[i].YAlign = draw.XCenter, draw.YCenter
		if n > 8 || small {
			labels.TextStyle[i].Font.Size = vg.Points(7)
		}
	}
	p.Add(labels)
	return p, nil
}

func cellText(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// ramp is a palette from one colour to another in n steps; its colours stay light enough for the
// cells' black figures to read on every one.
type ramp struct {
	from, to color.RGBA
	n        int
}

func (r ramp) Colors() []color.Color {
	out := make([]color.Color, r.n)
	mix := func(a, b uint8, t float64) uint8 { return uint8(math.Round(float64(a) + (float64(b)-float64(a))*t)) }
	for i := range out {
		t := float64(i) / float64(r.n-1)
		out[i] = color.RGBA{R: mix(r.from.R, r.to.R, t), G: mix(r.from.G, r.to.G, t), B: mix(r.from.B, r.to.B, t), A: 0xff}
	}
	return out
}
