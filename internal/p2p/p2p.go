// Package p2p measures how GPUs reach each other and the host: peer access, unidirectional and
// bidirectional copy bandwidth and latency with P2P enabled and disabled, host copies and
// device-local copies, as p2pBandwidthLatencyTest and nvbandwidth measure them. It sees only the
// backend interfaces in internal/gpu.
package p2p

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
)

// Backend is what the benchmark needs: devices and memory, and copies.
type Backend interface {
	gpu.Backend
	gpu.Copier
}

// Options describe one run.
type Options struct {
	Size    int64  // bytes per copy (nvbandwidth's default is 512 MiB)
	Repeat  int    // copies per sample, back to back
	Samples int    // timed samples per cell; the median is reported
	Devices []int  // the devices to measure; nil means all
	Pairs   []Pair // restrict the matrices to these pairs; nil means every pair of Devices
	// Sweep, when set, measures one pair (Pairs[0]) at each of these sizes.
	Sweep   []int64
	Verify  bool          // check every copy's data afterwards
	Timeout time.Duration // bound on each wait for the devices
	// Progress, when set, hears what is about to be measured.
	Progress func(what string)
}

// LatencyBytes and LatencyRepeat are p2pBandwidthLatencyTest's latency copies: 16 bytes, 100 times.
const (
	LatencyBytes  = 16
	LatencyRepeat = 100
)

// Cell is one matrix entry: a value, or why there is none.
type Cell struct {
	Value *float64
	NA    string // why the cell has no value
	Bad   bool   // the copy's data did not match
}

// Matrix is a device-by-device result, labelled as p2pBandwidthLatencyTest labels it.
type Matrix struct {
	Key   string // short name: uni_disabled, uni_enabled, bi_disabled, bi_enabled, lat_disabled, lat_enabled
	Title string
	Unit  string // GB/s or us
	Cells [][]Cell
}

// Access is what one ordered pair says about peer access.
type Access struct {
	Info   gpu.PeerInfo
	Enable string // "" when access is not possible; "ok"; "not requested" (--pairs); or why enabling failed
}

// HostRow is one device's host and local copy bandwidth, GB/s.
type HostRow struct {
	H2D, D2H, Bidir, Local Cell
}

// SweepRow is one size of the one-pair sweep.
type SweepRow struct {
	Size       int64
	Uni, Bidir Cell
	P2P        bool // peer access was enabled for this pair
}

// Result is a whole run.
type Result struct {
	Devices    []gpu.Device
	Access     [][]Access // [row][column]; the diagonal is unused
	Matrices   []Matrix
	Host       []HostRow
	Sweep      []SweepRow
	SweepPair  *Pair
	Verified   int // copies whose data was checked and matched
	Mismatched int // copies whose data did not match
	Unverified int // copies that carried no data (the simulator's data cap) or were not checked
}

// Matrix is the result's matrix of that key (uni_enabled, bi_disabled, ...), or nil.
func (r *Result) Matrix(key string) *Matrix {
	for i := range r.Matrices {
		if r.Matrices[i].Key == key {
			return &r.Matrices[i]
		}
	}
	return nil
}

// BadCopy is a copy between two GPUs whose data did not match: its matrix's key and the source
// and destination ordinals.
type BadCopy struct {
	Key      string
	Src, Dst int
}

// BadCopies lists the copies between GPUs whose data did not match, matrix by matrix; a
// bidirectional cell is both of its copies.
func (r *Result) BadCopies() []BadCopy {
	var out []BadCopy
	for _, m := range r.Matrices {
		for i, row := range m.Cells {
			for j, c := range row {
				if !c.Bad {
					continue
				}
				a, d := r.Devices[i].Ordinal, r.Devices[j].Ordinal
				out = append(out, BadCopy{m.Key, a, d})
				if strings.HasPrefix(m.Key, "bi") {
					out = append(out, BadCopy{m.Key, d, a})
				}
			}
		}
	}
	return out
}

// ErrTooBig is returned when the buffers would not fit in a device's free memory.
var ErrTooBig = errors.New("buffer size larger than free device memory")

type runner struct {
	b    Backend
	ctx  context.Context
	opt  Options
	devs []int
	// src and dst are each device's two buffers of Size.
	src, dst map[int]gpu.Buffer
	res      *Result
	host     []byte // for filling and checking buffers (hostChunks)
}

// MaxDevices is the most GPUs p2p measures at once: its matrices grow with the square of their
// number, and a peer-to-peer fabric is one machine's (NVL72, the largest, has 72 GPUs).
const MaxDevices = 72

// Groups splits devices into the groups whose pairs can be measured together: each host's, as
// CUDA's peer access joins the GPUs of one host (the trays of a GB200 rack share NVLink, not
// cudaDeviceEnablePeerAccess), in groups of at most MaxDevices. split reports whether a host's
// GPUs were cut into several groups, whose pairs across groups then go unmeasured.
func Groups(devs []gpu.Device) (groups [][]int, split bool) {
	index := map[string]int{}
	for _, d := range devs {
		i, ok := index[d.Host]
		if !ok || len(groups[i]) == MaxDevices {
			split = split || ok
			i = len(groups)
			index[d.Host] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], d.Ordinal)
	}
	return groups, split
}

// Run measures everything Options ask for.
func Run(ctx context.Context, b Backend, opt Options) (*Result, error) {
	all := b.Devices()
	devs := opt.Devices
	if devs == nil {
		for _, d := range all {
			devs = append(devs, d.Ordinal)
		}
	}
	if opt.Size < LatencyBytes || opt.Repeat < 1 || opt.Samples < 1 {
		return nil, fmt.Errorf("size %d, repeat %d, samples %d: %w", opt.Size, opt.Repeat, opt.Samples, gpu.ErrInvalid)
	}
	biggest := opt.Size
	for _, s := range opt.Sweep {
		biggest = max(biggest, s)
	}
	for _, d := range devs {
		free, err := b.FreeMemory(d)
		if err != nil {
			return nil, err
		}
		if 2*biggest > free {
			return nil, fmt.Errorf("%w: device %d has %d bytes free and needs two buffers of %d", ErrTooBig, d, free, biggest)
		}
	}
	r := &runner{b: b, ctx: ctx, opt: opt, devs: devs, src: map[int]gpu.Buffer{}, dst: map[int]gpu.Buffer{}, res: &Result{}}
	for _, d := range devs {
		r.res.Devices = append(r.res.Devices, all[d])
	}
	defer r.freeAll()
	err := r.run()
	slices.SortStableFunc(r.res.Matrices, func(a, b Matrix) int { return order[a.Key] - order[b.Key] })
	return r.res, err
}

func (r *runner) run() error {
	if err := r.alloc(r.opt.Size); err != nil {
		return err
	}
	n := len(r.devs)
	r.res.Access = make([][]Access, n)
	for i, a := range r.devs {
		r.res.Access[i] = make([]Access, n)
		for j, c := range r.devs {
			if i == j {
				continue
			}
			info, err := r.b.PeerInfo(a, c)
			if err != nil {
				return err
			}
			r.res.Access[i][j].Info = info
		}
	}
	// P2P disabled first, as p2pBandwidthLatencyTest does; then enabled.
	for _, enabled := range []bool{false, true} {
		if enabled {
			r.enableAll()
			defer r.disableAll()
		}
		for _, m := range []func(bool) (Matrix, error){r.uni, r.bidir, r.latency} {
			mat, err := m(enabled)
			if err != nil {
				return err
			}
			r.res.Matrices = append(r.res.Matrices, mat)
		}
	}
	if err := r.hostCopies(); err != nil {
		return err
	}
	if len(r.opt.Sweep) > 0 {
		return r.sweep()
	}
	return nil
}

// order is p2pBandwidthLatencyTest's order of matrices.
var order = map[string]int{"uni_disabled": 0, "uni_enabled": 1, "bi_disabled": 2, "bi_enabled": 3, "lat_disabled": 4, "lat_enabled": 5}

func (r *runner) alloc(size int64) error {
	r.freeAll()
	for _, d := range r.devs {
		for _, m := range []map[int]gpu.Buffer{r.src, r.dst} {
			x, err := r.b.Alloc(d, size)
			if err != nil {
				return err
			}
			m[d] = x
		}
		if err := r.fill(r.src[d], d); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) freeAll() {
	for _, m := range []map[int]gpu.Buffer{r.src, r.dst} {
		for d, x := range m {
			_ = r.b.Free(x)
			delete(m, d)
		}
	}
}

// enableAll enables peer access both ways for every pair that has it, recording the outcome.
func (r *runner) enableAll() {
	for i, a := range r.devs {
		for j, c := range r.devs {
			acc := &r.res.Access[i][j]
			if i == j || !acc.Info.Access {
				continue
			}
			if !r.wanted(i, j) {
				acc.Enable = "not requested"
				continue
			}
			switch err := r.b.EnablePeer(a, c); {
			case err == nil:
				acc.Enable = "ok"
			case errors.Is(err, gpu.ErrPeerEnabled):
				acc.Enable = "ok (already enabled)"
			default:
				acc.Enable = err.Error()
			}
		}
	}
}

func (r *runner) disableAll() {
	for i, a := range r.devs {
		for j, c := range r.devs {
			if i != j && r.enabled(i, j) {
				_ = r.b.DisablePeer(a, c)
			}
		}
	}
}

func (r *runner) enabled(i, j int) bool {
	e := r.res.Access[i][j].Enable
	return e == "ok" || e == "ok (already enabled)"
}

// wanted reports whether the pair of matrix positions i, j was asked for.
func (r *runner) wanted(i, j int) bool {
	if r.opt.Pairs == nil || i == j {
		return true
	}
	p := Pair{min(r.devs[i], r.devs[j]), max(r.devs[i], r.devs[j])}
	return slices.Contains(r.opt.Pairs, p)
}

// naReason says why the enabled cell i, j cannot be measured, or "" when it can.
func (r *runner) naReason(i, j int, enabled, both bool) string {
	switch {
	case !r.wanted(i, j):
		return "not requested"
	case r.res.Devices[i].Host != r.res.Devices[j].Host:
		return "different hosts: no copy between them (NCCL's network, not a peer copy)"
	case !enabled || i == j:
		return ""
	case !r.res.Access[i][j].Info.Access || both && !r.res.Access[j][i].Info.Access:
		return "no P2P access (cudaDeviceCanAccessPeer = 0)"
	case !r.enabled(i, j):
		return "enabling peer access failed: " + r.res.Access[i][j].Enable
	case both && !r.enabled(j, i):
		return "enabling peer access failed: " + r.res.Access[j][i].Enable
	}
	return ""
}

func label(enabled bool, what string) string {
	if enabled {
		return "P2P=Enabled " + what
	}
	return "P2P=Disabled " + what
}

func key(kind string, enabled bool) string {
	if enabled {
		return kind + "_enabled"
	}
	return kind + "_disabled"
}

func (r *runner) progress(what string) {
	if r.opt.Progress != nil {
		r.opt.Progress(what)
	}
}

func (r *runner) matrix(kind string, enabled bool, title, unit string, cell func(i, j int) (Cell, error)) (Matrix, error) {
	r.progress(title)
	m := Matrix{Key: key(kind, enabled), Title: title, Unit: unit}
	for i := range r.devs {
		row := make([]Cell, len(r.devs))
		for j := range r.devs {
			c, err := cell(i, j)
			if err != nil {
				return m, err
			}
			row[j] = c
		}
		m.Cells = append(m.Cells, row)
	}
	return m, nil
}

// uni: row i writes to column j (issued by i); the diagonal is a copy inside i, counted twice
// (read and write) as p2pBandwidthLatencyTest counts it.
func (r *runner) uni(enabled bool) (Matrix, error) {
	title := "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)"
	if enabled {
		title = "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)"
	}
	return r.matrix("uni", enabled, title, "GB/s", func(i, j int) (Cell, error) {
		if why := r.naReason(i, j, enabled, false); why != "" {
			return Cell{NA: why}, nil
		}
		a, c := r.devs[i], r.devs[j]
		factor := 1.0
		if i == j {
			factor = 2
		}
		return r.bandwidth([]gpu.Copy{{Src: r.src[a], Dst: r.dst[c], Issuer: a}}, factor)
	})
}

// bidir: i writes to j while j writes to i; the figure is both directions together.
func (r *runner) bidir(enabled bool) (Matrix, error) {
	return r.matrix("bi", enabled, "Bidirectional "+label(enabled, "Bandwidth Matrix (GB/s)"), "GB/s", func(i, j int) (Cell, error) {
		if why := r.naReason(i, j, enabled, true); why != "" {
			return Cell{NA: why}, nil
		}
		a, c := r.devs[i], r.devs[j]
		factor := 1.0
		copies := []gpu.Copy{{Src: r.src[a], Dst: r.dst[c], Issuer: a}, {Src: r.src[c], Dst: r.dst[a], Issuer: c}}
		if i == j {
			// Two copies inside one device, each read and written: split its buffers in halves.
			half := r.opt.Size / 2
			copies = []gpu.Copy{
				{Src: r.src[a].Slice(0, half), Dst: r.dst[a].Slice(0, half), Issuer: a},
				{Src: r.src[a].Slice(half, half), Dst: r.dst[a].Slice(half, half), Issuer: a},
			}
			factor = 2
		}
		return r.bandwidth(copies, factor)
	})
}

// latency: 16-byte copies, 100 of them, timed on the device; µs per copy.
func (r *runner) latency(enabled bool) (Matrix, error) {
	title := "P2P=Disabled Latency Matrix (us)"
	if enabled {
		title = "P2P=Enabled Latency (P2P Writes) Matrix (us)"
	}
	return r.matrix("lat", enabled, title, "us", func(i, j int) (Cell, error) {
		if why := r.naReason(i, j, enabled, false); why != "" {
			return Cell{NA: why}, nil
		}
		a, c := r.devs[i], r.devs[j]
		cp := gpu.Copy{Src: r.src[a].Slice(0, LatencyBytes), Dst: r.dst[c].Slice(0, LatencyBytes), Issuer: a, Repeat: LatencyRepeat}
		d, err := r.samples([]gpu.Copy{cp})
		if refused(err) {
			return Cell{NA: refusedText + err.Error()}, nil
		}
		if err != nil {
			return Cell{}, err
		}
		us := median(d, func(t []time.Duration) float64 { return t[0].Seconds() * 1e6 / LatencyRepeat })
		return Cell{Value: &us}, nil
	})
}

func (r *runner) hostCopies() error {
	r.progress("host and local copies")
	for _, d := range r.devs {
		row, err := r.hostRow(d)
		if err != nil {
			return err
		}
		r.res.Host = append(r.res.Host, row)
	}
	return nil
}

// hostRow measures one device's copies with pinned host memory on its own NUMA node, and inside
// its memory.
func (r *runner) hostRow(d int) (HostRow, error) {
	var row HostRow
	in, err := r.b.AllocHost(d, r.opt.Size)
	if err != nil {
		return row, err
	}
	defer r.b.Free(in)
	out, err := r.b.AllocHost(d, r.opt.Size)
	if err != nil {
		return row, err
	}
	defer r.b.Free(out)
	if err := r.fill(in, gpu.HostDevice); err != nil {
		return row, err
	}
	if row.H2D, err = r.bandwidth([]gpu.Copy{{Src: in, Dst: r.dst[d], Issuer: d}}, 1); err != nil {
		return row, err
	}
	if row.D2H, err = r.bandwidth([]gpu.Copy{{Src: r.src[d], Dst: out, Issuer: d}}, 1); err != nil {
		return row, err
	}
	if row.Bidir, err = r.bandwidth([]gpu.Copy{{Src: in, Dst: r.dst[d], Issuer: d}, {Src: r.src[d], Dst: out, Issuer: d}}, 1); err != nil {
		return row, err
	}
	// nvbandwidth's device_local_copy: one copy's bytes over its time.
	row.Local, err = r.bandwidth([]gpu.Copy{{Src: r.src[d], Dst: r.dst[d], Issuer: d}}, 1)
	return row, err
}

// sweep measures the one pair at every size of the sweep, with P2P enabled where it could be. It
// runs last: it replaces the buffers with ones of each size.
func (r *runner) sweep() error {
	p := r.opt.Pairs[0]
	r.res.SweepPair = &p
	i, j := slices.Index(r.devs, p.A), slices.Index(r.devs, p.B)
	if i < 0 || j < 0 {
		return fmt.Errorf("sweep pair %s is not among the devices measured: %w", p, gpu.ErrInvalid)
	}
	for _, size := range r.opt.Sweep {
		r.progress(fmt.Sprintf("sweep of pair %s at %d B", p, size))
		row := SweepRow{Size: size, P2P: r.enabled(i, j) && r.enabled(j, i)}
		if why := r.naReason(i, j, false, false); why != "" { // GPUs of two hosts: no copy joins them
			row.Uni, row.Bidir = Cell{NA: why}, Cell{NA: why}
			r.res.Sweep = append(r.res.Sweep, row)
			continue
		}
		if err := r.alloc(size); err != nil {
			return err
		}
		a, c := p.A, p.B
		var err error
		if row.Uni, err = r.bandwidth([]gpu.Copy{{Src: r.src[a], Dst: r.dst[c], Issuer: a}}, 1); err != nil {
			return err
		}
		if row.Bidir, err = r.bandwidth([]gpu.Copy{{Src: r.src[a], Dst: r.dst[c], Issuer: a}, {Src: r.src[c], Dst: r.dst[a], Issuer: c}}, 1); err != nil {
			return err
		}
		r.res.Sweep = append(r.res.Sweep, row)
	}
	return nil
}

// bandwidth measures copies that run together: total bytes over the slowest copy's time, times
// factor; then it checks every destination.
func (r *runner) bandwidth(copies []gpu.Copy, factor float64) (Cell, error) {
	for i := range copies {
		copies[i].Repeat = r.opt.Repeat
		if err := r.b.Memset(copies[i].Dst, 0); err != nil && !errors.Is(err, gpu.ErrNoData) {
			return Cell{}, err
		}
	}
	d, err := r.samples(copies)
	if refused(err) {
		return Cell{NA: refusedText + err.Error()}, nil
	}
	if err != nil {
		return Cell{}, err
	}
	var bytes float64
	for _, c := range copies {
		bytes += float64(c.Src.Len()) * float64(c.Repeat)
	}
	gbs := median(d, func(t []time.Duration) float64 { return factor * bytes / slices.Max(t).Seconds() / 1e9 })
	cell := Cell{Value: &gbs}
	for _, c := range copies {
		ok, checked, err := r.verify(c)
		if err != nil {
			return Cell{}, err
		}
		switch {
		case !checked:
			r.res.Unverified++
		case ok:
			r.res.Verified++
		default:
			r.res.Mismatched++
			cell.Bad = true
		}
	}
	return cell, nil
}

// Some systems (confidential computing, some VMs) refuse peer copies outside peer access instead
// of staging them through the host: that is a cell without a figure, not a failed run.
const refusedText = "the driver refused the copy: "

func refused(err error) bool {
	return errors.Is(err, gpu.ErrPeerNotEnabled) || errors.Is(err, gpu.ErrNotSupported)
}

// samples runs one untimed warm-up, then the timed samples.
func (r *runner) samples(copies []gpu.Copy) ([][]time.Duration, error) {
	warm := slices.Clone(copies)
	for i := range warm {
		warm[i].Repeat = 1
	}
	if _, err := r.timed(warm); err != nil {
		return nil, err
	}
	var out [][]time.Duration
	for s := 0; s < r.opt.Samples; s++ {
		d, err := r.timed(copies)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func (r *runner) timed(copies []gpu.Copy) ([]time.Duration, error) {
	if err := r.ctx.Err(); err != nil { // stopped: a backend whose copies take no wall time would not see it
		return nil, err
	}
	ctx := r.ctx
	if r.opt.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opt.Timeout)
		defer cancel()
	}
	return r.b.TimedCopies(ctx, copies)
}

func median(samples [][]time.Duration, value func([]time.Duration) float64) float64 {
	v := make([]float64, len(samples))
	for i, s := range samples {
		v[i] = value(s)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
