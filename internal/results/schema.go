package results

import "encoding/json"

// The result files' JSON schema (docs/output.md, docs/results.md). internal/report writes these
// types and this package reads them back, so a field exists once for both. Fields written as
// null when they do not apply are pointers or NullString; fields that only some options add are
// omitempty, so a run without the option writes what it always did. A key that a file must hold
// (size_bytes, time_us, ...) is checked when read: the types that have one note, in their
// UnmarshalJSON, the first such key the object lacks (the unexported field absent), and the
// reader's checks report it with where it was.

// Coll is a collective run: the document `gpubench <collective> --output json` writes, and what a
// stream's records (--out) add up to. The field order is the document's.
type Coll struct {
	Version     string     `json:"gpubench_version"`
	Collective  string     `json:"collective"`
	NCCLTests   string     `json:"nccl_tests_equivalent"`
	Backend     string     `json:"backend"`
	Topology    NullString `json:"topology"`   // the simulated machine; null on real GPUs
	Runtime     NullString `json:"runtime"`    // on real GPUs: CUDA and NCCL versions and libraries
	Launch      NullString `json:"launch"`     // across processes: launcher, processes, rendezvous
	StartTime   string     `json:"start_time"` // RFC 3339, UTC
	Config      Config     `json:"config"`
	Devices     []Device   `json:"devices"` // one per rank
	Notes       []string   `json:"notes"`   // the lines gpubench adds to the table, without "#"
	Results     []Row      `json:"results"`
	OutOfBounds Bounds     `json:"out_of_bounds"`
	AvgBusBW    float64    `json:"avg_busbw_gbs"`
	MinBusBW    *float64   `json:"min_busbw_gbs,omitempty"` // NCCL_TESTS_MIN_BW: the run fails under 0.9 of it
	Best        *Best      `json:"best"`
	BusPeak     *BusPeak   `json:"bus_peak"`
	// TimingOnlyFrom is the first size that carried no data.
	TimingOnlyFrom *int64      `json:"timing_only_from_bytes"`
	ZeroBusBW      bool        `json:"busbw_zero_by_definition"` // one rank, and a factor 0 there
	Interrupted    bool        `json:"interrupted"`              // stopped by Ctrl-C
	Error          NullString  `json:"error"`                    // why the run stopped early
	WrongRanks     []WrongRank `json:"wrong_ranks,omitempty"`
	Expect         *Expect     `json:"expect,omitempty"` // with --expect
}

// Config is how a collective run was set up.
type Config struct {
	Ranks        int      `json:"ranks"`
	MinBytes     int64    `json:"min_bytes"` // the sweep as run (after a memory clamp)
	MaxBytes     int64    `json:"max_bytes"`
	RequestedMax int64    `json:"requested_max_bytes"`
	StepFactor   *int64   `json:"step_factor"` // one of the two steps is set
	StepBytes    *int64   `json:"step_bytes"`
	Warmup       int      `json:"warmup_iters"`
	Iters        int      `json:"iters"`
	Check        int      `json:"check_iters"`
	Average      int      `json:"average"`
	Graph        int      `json:"graph_launches"`
	Blocking     int      `json:"blocking"`
	Threads      int      `json:"threads"` // host threads per process (-t; nccl-tests' nThread)
	Aggregate    int      `json:"-"`       // nccl-tests -m above 1, from its output (gpubench runs -m 1)
	DTypes       []string `json:"dtypes"`
	Ops          []string `json:"ops"` // empty for collectives that do not reduce
	Root         *int     `json:"root"`
	Seed         uint64   `json:"seed"`
	DataCap      *int64   `json:"sim_data_cap_bytes"`
	Cycles       int      `json:"run_cycles,omitempty"`     // -N: absent for one cycle, -1 until interrupted
	CPUTime      bool     `json:"report_cputime,omitempty"` // -C
	PerIterSkip  int      `json:"per_iter_skip,omitempty"`  // -K
}

// Device is one rank's GPU (a collective run) or one GPU measured (p2p).
type Device struct {
	Rank     int    `json:"rank"`
	PID      int    `json:"pid"`
	Host     string `json:"host"`
	Device   int    `json:"device"` // the CUDA ordinal
	PCIBusID string `json:"pci_bus_id"`
	Name     string `json:"name"`
	Memory   int64  `json:"memory_bytes"`
	absent   string
}

// Row is one size of a sweep, for one type, op and root.
type Row struct {
	Cycle int `json:"cycle,omitempty"` // with -N, which cycle, from 1; 0 for one cycle
	// Algorithm, Protocol and Channels are how the backend ran the size, where it can say (the
	// simulator: NCCL's tuner's choice); absent otherwise.
	Algorithm  string     `json:"algorithm,omitempty"`
	Protocol   string     `json:"protocol,omitempty"`
	Channels   int        `json:"channels,omitempty"`
	Size       int64      `json:"size_bytes"`
	Count      int64      `json:"count"`
	Type       string     `json:"type"`
	Op         NullString `json:"redop"` // empty for collectives that do not reduce
	Root       *int       `json:"root"`  // nil for collectives without a root
	OutOfPlace Placement  `json:"out_of_place"`
	InPlace    Placement  `json:"in_place"`
	absent     string
}

// Placement is one placement's figures.
type Placement struct {
	TimeUS     float64 `json:"time_us"`
	AlgBW      float64 `json:"algbw_gbs"`
	BusBW      float64 `json:"busbw_gbs"`
	Wrong      *int64  `json:"wrong"` // wrong elements; nil when not checked
	TimingOnly bool    `json:"timing_only"`
	// CPUTimeUS is the host's launch time per collective, with -C.
	CPUTimeUS *float64 `json:"cpu_time_us,omitempty"`
	// Runs across processes: every rank's time, and the slowest rank (nil when all took the same).
	RankTimesUS []float64 `json:"rank_time_us,omitempty"`
	SlowestRank *int      `json:"slowest_rank,omitempty"`
	PerIter     *PerIter  `json:"per_iter,omitempty"` // with --per-iter
	Expected    *Expected `json:"expected,omitempty"` // with --expect
	absent      string
	// slack is how far, as a fraction, the bandwidths may be from the run's own for want of
	// printed digits: half a unit of the last digit printed of the figure they come from (the
	// time, or a log's busbw when its ranks are unknown), over the figure. 0 for JSON.
	slack, timeSlack float64
	// checked and unchecked: a log printed its #wrong (or error) as a figure, or as N/A.
	checked, unchecked bool
}

// Expected is what the machine should do for a placement (--expect): the simulator's time and
// busbw for the same machine, size and settings, and ratio = expected time / measured time.
type Expected struct {
	TimeUS float64 `json:"time_us"`
	BusBW  float64 `json:"busbw_gbs"`
	Ratio  float64 `json:"ratio"`
}

// Expect says where a run's expected figures came from (--expect), and which placements fell
// below the floor.
type Expect struct {
	Source string  `json:"source"`
	Floor  float64 `json:"floor"`
	Below  []Below `json:"below"`
}

// Below is a placement under the --expect-floor.
type Below struct {
	Size      int64      `json:"size_bytes"`
	Type      string     `json:"type"`
	Op        NullString `json:"redop"`
	Root      *int       `json:"root"`
	Placement string     `json:"placement"` // out_of_place or in_place
	Ratio     float64    `json:"ratio"`
	Cycle     int        `json:"cycle,omitempty"` // with -N, which cycle, from 1
}

// PerIter is a placement's per-iteration statistics (--per-iter), times in microseconds.
type PerIter struct {
	N       int       `json:"n"`
	MeanUS  float64   `json:"mean_us"`
	P50US   float64   `json:"p50_us"`
	P95US   float64   `json:"p95_us"`
	P99US   float64   `json:"p99_us"`
	MaxUS   float64   `json:"max_us"`
	CV      float64   `json:"cv"` // standard deviation / mean
	TimesUS []float64 `json:"times_us"`
	absent  string
}

// Bounds is nccl-tests' "Out of bounds values": placements whose check found wrong data.
type Bounds struct {
	Count int  `json:"count"`
	OK    bool `json:"ok"`
}

// Best is the highest busbw of a run and the size it was reached at.
type Best struct {
	BusBW float64 `json:"busbw_gbs"`
	Size  int64   `json:"size_bytes"`
}

// BusPeak is the topology's nominal bus peak for the run's ranks.
type BusPeak struct {
	GBs          float64  `json:"gbs"`
	Link         string   `json:"link"`          // the kind of link that sets it
	BestFraction *float64 `json:"best_fraction"` // best busbw / peak
}

// WrongRank is a rank whose output held wrong data, and how often.
type WrongRank struct {
	Rank     int    `json:"rank"`
	Device   int    `json:"device"`
	Host     string `json:"host"`
	Results  int    `json:"results"`  // placements with wrong elements in this rank's output
	Elements int64  `json:"elements"` // wrong elements in all of them
}

// P2P is a p2p run: the document `gpubench p2p --output json` writes (docs/p2p.md).
type P2P struct {
	Version    string            `json:"gpubench_version"`
	Command    string            `json:"command"` // "p2p"
	Backend    string            `json:"backend"`
	Topology   NullString        `json:"topology"`
	Runtime    NullString        `json:"runtime"`
	StartTime  string            `json:"start_time"`
	Config     P2PConfig         `json:"config"`
	Devices    []Device          `json:"devices"`
	Access     [][]*Access       `json:"access"`   // [row][column]; nil on the diagonal
	Matrices   map[string]Matrix `json:"matrices"` // uni_enabled, bi_disabled, lat_enabled, ...
	Host       []HostCopy        `json:"host"`
	Sweep      *Sweep            `json:"sweep"`
	Verified   int               `json:"verified"`         // copies whose data was checked and matched
	Mismatched int               `json:"mismatched"`       // copies whose data did not match
	Unverified int               `json:"unverified"`       // copies not checked
	Expect     *P2PExpect        `json:"expect,omitempty"` // with --expect
}

// P2PExpect is what a p2p run was set beside (--expect): the same copies on the simulated
// machine, as matrices keyed as the run's and host copies, and the figures under the floor.
type P2PExpect struct {
	Source   string                  `json:"source"`
	Floor    float64                 `json:"floor"`
	Matrices map[string][][]*float64 `json:"matrices"`
	Host     []HostCopy              `json:"host"`
	Below    []P2PBelow              `json:"below"`
}

// P2PBelow is a p2p figure under the --expect-floor: a matrix cell (row and column device
// ordinals) or a host copy (column null), and measured over expected (expected over measured
// for latencies).
type P2PBelow struct {
	Measure string  `json:"measure"`
	Row     int     `json:"row"`
	Column  *int    `json:"column"`
	Ratio   float64 `json:"ratio"`
}

// P2PConfig is how a p2p run was set up.
type P2PConfig struct {
	Size          int64    `json:"size_bytes"`
	Repeat        int      `json:"repeat"`
	Samples       int      `json:"samples"`
	Verify        bool     `json:"verify"`
	LatencyBytes  int      `json:"latency_bytes"`
	LatencyRepeat int      `json:"latency_repeat"`
	Pairs         [][2]int `json:"pairs"`
	Sweep         []int64  `json:"sweep_sizes"`
}

// Access is what one ordered pair of GPUs says about peer access.
type Access struct {
	Access        bool       `json:"access"`
	PerfRank      *int       `json:"perf_rank"` // nil without access
	NativeAtomics *bool      `json:"native_atomics"`
	Enable        NullString `json:"enable"` // "ok", "not requested", or why enabling failed
}

// Matrix is one p2p matrix, rows the GPU issuing the copies; a nil value is an N/A cell, with
// its reason in NA.
type Matrix struct {
	Title  string         `json:"title"`
	Unit   string         `json:"unit"` // GB/s or us
	Values [][]*float64   `json:"values"`
	NA     [][]NullString `json:"na_reasons"`
	Bad    [][]bool       `json:"data_mismatch"`
}

// HostCopy is one GPU's host and local copy bandwidth, GB/s; nil when N/A.
type HostCopy struct {
	Device int      `json:"device"`
	H2D    *float64 `json:"h2d_gbs"`
	D2H    *float64 `json:"d2h_gbs"`
	Bidir  *float64 `json:"bidir_gbs"`
	Local  *float64 `json:"local_gbs"`
}

// Sweep is the size sweep over one pair of GPUs.
type Sweep struct {
	Pair [2]int     `json:"pair"`
	P2P  bool       `json:"p2p"` // peer access was enabled for the pair
	Rows []SweepRow `json:"rows"`
}

// SweepRow is one size of the sweep, GB/s; nil when N/A.
type SweepRow struct {
	Size  int64    `json:"size_bytes"`
	Uni   *float64 `json:"uni_gbs"`
	Bidir *float64 `json:"bidir_gbs"`
}

// NullString is a string that JSON holds as null when it is empty.
type NullString string

// MarshalJSON writes an empty string as null.
func (s NullString) MarshalJSON() ([]byte, error) {
	if s == "" {
		return []byte("null"), nil
	}
	return json.Marshal(string(s))
}

// UnmarshalJSON reads null as an empty string.
func (s *NullString) UnmarshalJSON(data []byte) error {
	var v *string
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*s = ""
	if v != nil {
		*s = NullString(*v)
	}
	return nil
}

// The UnmarshalJSON methods below read an object as encoding/json would and note the first
// required key it lacks. A missing key reads as 0, so the keys are looked for only when a
// required figure is 0 (a missing object leaves its first figure 0 too).

// UnmarshalJSON reads a row.
func (r *Row) UnmarshalJSON(data []byte) error {
	type plain Row
	var v plain
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	if v.Size == 0 || v.OutOfPlace.TimeUS == 0 || v.InPlace.TimeUS == 0 {
		v.absent = absent(data, "size_bytes", "out_of_place", "in_place")
	}
	*r = Row(v)
	return nil
}

// UnmarshalJSON reads a placement.
func (p *Placement) UnmarshalJSON(data []byte) error {
	type plain Placement
	var v plain
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	if v.TimeUS == 0 || v.AlgBW == 0 || v.BusBW == 0 {
		v.absent = absent(data, "time_us", "algbw_gbs", "busbw_gbs")
	}
	*p = Placement(v)
	return nil
}

// UnmarshalJSON reads per-iteration statistics.
func (p *PerIter) UnmarshalJSON(data []byte) error {
	type plain PerIter
	var v plain
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	if v.MeanUS == 0 || v.P50US == 0 || v.P95US == 0 || v.P99US == 0 || v.MaxUS == 0 || v.CV == 0 {
		v.absent = absent(data, "mean_us", "p50_us", "p95_us", "p99_us", "max_us", "cv")
	}
	*p = PerIter(v)
	return nil
}

// UnmarshalJSON reads a device.
func (d *Device) UnmarshalJSON(data []byte) error {
	type plain Device
	var v plain
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	if v.Device == 0 {
		v.absent = absent(data, "device")
	}
	*d = Device(v)
	return nil
}

// absent is the first of keys that the JSON object data lacks or holds as null, or "".
func absent(data []byte, keys ...string) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return "" // not an object: the typed decoding has said so
	}
	for _, k := range keys {
		if v, ok := m[k]; !ok || string(v) == "null" {
			return k
		}
	}
	return ""
}
