package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/input"
)

// nccl-tests' own output read as a collective run (docs/results.md, "nccl-tests output"): the
// text its *_perf programs print, as a log keeps it with whatever else the log holds, and the
// file its -J flag writes. Reference: nccl-tests 2.19.6, src/util.cu.

// Forms of nccl-tests' output.
const (
	FormNCCLTests     = "nccl-tests"      // the text a *_perf program prints (or a gpubench table, in the same layout)
	FormNCCLTestsJSON = "nccl-tests-json" // the file -J writes (JSON_FILE_VERSION 3)
)

// BackendNCCLTests is the backend of a run read from nccl-tests' output.
const BackendNCCLTests = "nccl-tests"

// ntEltSize is the element size of each type nccl-tests prints ("char" and "int" are 1.x's).
var ntEltSize = map[string]int64{"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
	"half": 2, "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1, "char": 1, "int": 4}

// ntOps are the redop column's values: "none" for collectives that do not reduce, and empty
// where nccl-tests prints nothing (hypercube, and all-to-all in older 2.x).
var ntOps = []string{"sum", "prod", "max", "min", "avg", "mulsum", "none", ""}

// ntProgram finds an nccl-tests program's name, with a path or a NAME_SUFFIX around it
// (./build/all_reduce_perf_mpi).
var ntProgram = regexp.MustCompile(`\b(all_reduce|all_gather|reduce_scatter|alltoallv?|broadcast|reduce|sendrecv|gather|scatter|hypercube)_perf`)

// collectiveOf is the gpubench collective the nccl-tests program measures.
func collectiveOf(program string) (*coll.Collective, error) {
	perf := ntProgram.FindString(program)
	if perf == "" {
		return nil, fmt.Errorf("%q is not an nccl-tests program (NAME_perf)", input.Safe(program))
	}
	for _, c := range coll.Collectives {
		if c.Perf == perf {
			return c, nil
		}
	}
	var known []string
	for _, c := range coll.Collectives {
		known = append(known, c.Perf)
	}
	return nil, fmt.Errorf("%s measures a collective gpubench does not run (it reads %s)", perf, strings.Join(known, ", "))
}

// ntRun is one run of a *_perf program found in a log.
type ntRun struct {
	line      int      // where the run starts
	program   string   // from "# Collective test starting:" or "concluded:"
	mentions  []string // nccl-tests programs named on other lines before its table: a command line
	runtime   []string // nccl-tests and NCCL versions
	gpubench  []string // a gpubench table's own backend, topology and version
	devices   []Device
	layout    *ntLayout
	tableLine int
	rows      []Row
	rowLines  []int
	cut       []string // rows left out: another program's output cut into them (line and size)
	cutAfter  int      // 1 + how many rows were read when the last row was cut; 0 before any
	bounds    *Bounds
	avg       *float64
	setup     *ntSetup // from the "# nThread" line, when the log has it
	cycles    int      // a gpubench table's -N: its note "The sweep runs N times" or "repeats until interrupted" (-1)
}

// ntSetup is how a run was timed, from its "# nThread ..." line and "# Blocking Enabled" line.
type ntSetup struct {
	threads, gpus, warmup, iters, agg, graph, blocking int
}

// parseSetup reads "nThread 1 nGpus 8 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5
// iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0"; what a version does not print stays 0.
func parseSetup(text string) *ntSetup {
	s := &ntSetup{}
	f := strings.Fields(text)
	for i := 0; i+1 < len(f); i++ {
		v, err := strconv.Atoi(f[i+1])
		if err != nil || v < 0 {
			continue
		}
		switch {
		case f[i] == "nThread":
			s.threads = v
		case f[i] == "nGpus":
			s.gpus = v
		case f[i] == "graph:":
			s.graph = v
		case f[i] == "iters:" && i > 0 && f[i-1] == "warmup":
			s.warmup = v
		case f[i] == "iters:" && i > 0 && f[i-1] == "agg":
			s.agg = v
		case f[i] == "iters:":
			s.iters = v
		}
	}
	return s
}

// blockingMode is nccl-tests -z's value from the line it prints for it.
func blockingMode(text string) int {
	switch {
	case strings.Contains(text, "no barrier"):
		return 2
	case strings.Contains(text, "outer iteration"):
		return 3
	}
	return 1
}

func (r *ntRun) ended() bool { return r.bounds != nil || r.avg != nil }

// addRuntime notes nccl-tests' version, or NCCL's once (NCCL INFO prints it on every rank).
func (r *ntRun) addRuntime(s string) {
	if !slices.ContainsFunc(r.runtime, func(v string) bool { return v[:5] == s[:5] }) {
		r.runtime = append(r.runtime, s)
	}
}

var (
	// mpirun --tag-output tags every write, and nccl-tests prints a row in three (its size and
	// type, then each placement's figures), so its tags may come inside a line too; srun -l
	// labels lines, right-aligned once a step has 10 tasks or more (" 0: ").
	ntTag      = regexp.MustCompile(`\[\d+,\d+\]<std(?:out|err)>:`)
	ntLabel    = regexp.MustCompile(`^\s*\d+: `)
	ntRank     = regexp.MustCompile(`^Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$`)
	ntNCCL     = regexp.MustCompile(`NCCL version (\S+)`)
	ntGpubench = regexp.MustCompile(`^gpubench (\S+): \S+ \(nccl-tests (\S+) layout\), backend (\S+?)(?:, topology (\S+))?$`)
	ntCycles   = regexp.MustCompile(`^The sweep (?:runs (\d+) times \(-N \d+\)|repeats until interrupted \(-N 0\))`)
)

// readNCCLTests reads the text nccl-tests prints. A log may hold several runs: they are read as
// one when they are of one collective on as many ranks and measure different rows (one run per
// data type, say); otherwise the file is refused, naming the line.
func readNCCLTests(name string, data []byte) (*File, error) {
	runs, empty, err := scanNCCLTests(string(data))
	if err != nil {
		return nil, err
	}
	if len(runs) == 0 && empty > 0 {
		return nil, fmt.Errorf("line %d: nccl-tests' table header, but no row under it: the run stopped before its first size", empty)
	}
	if len(runs) == 0 {
		return nil, errors.New(`not gpubench JSON results (--output json or --out FILE): the file does not start with a JSON object, and it is not nccl-tests output either (no table header "#  size  count  type ... time  algbw  busbw ...")`)
	}
	c, notices, err := mergeRuns(runs)
	if err != nil {
		return nil, err
	}
	f := &File{Name: name, Form: FormNCCLTests, Complete: true, Coll: c, Notices: notices}
	for _, r := range runs {
		if !r.ended() {
			f.Complete = false
			f.Notices = append(f.Notices, fmt.Sprintf("the run at line %d has no footer (# Out of bounds values, # Avg bus bandwidth): it stopped, or the log was cut; its %d rows are read", r.line, len(r.rows)))
		}
	}
	more, err := checkRows(c)
	if err != nil {
		return nil, err
	}
	f.Notices = append(f.Notices, more...)
	return f, nil
}

// scanNCCLTests finds the runs in a log and their rows; lines that are not nccl-tests' own
// (mpirun's, NCCL INFO, a shell prompt) are skipped. Runs without rows are left out: empty is
// the line of the first such run's table header.
func scanNCCLTests(text string) (runs []*ntRun, empty int, err error) {
	run := &ntRun{}
	var mentions []string
	// begin starts a new run at line n if the current one already has its table.
	begin := func(n int) {
		if run.layout != nil {
			if len(run.rows) > 0 {
				runs = append(runs, run)
			} else if empty == 0 {
				empty = run.tableLine
			}
			run = &ntRun{}
		}
		if run.line == 0 {
			run.line = n
		}
	}
	// restart begins a run at a line that only opens one: a run named before it that never
	// printed its table (it was killed) is dropped.
	restart := func(n int) {
		if run.layout == nil && run.program != "" {
			run = &ntRun{}
		}
		begin(n)
	}
	program := func(n int, p string) error {
		p = input.Safe(strings.TrimSpace(p))
		if run.program != "" && run.program != p {
			return fmt.Errorf("line %d: the run of %s (line %d) ends as %s", n, run.program, run.line, p)
		}
		run.program = p
		return nil
	}
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		line = strings.TrimSpace(ntTag.ReplaceAllString(ntLabel.ReplaceAllString(strings.TrimRight(line, "\r"), ""), ""))
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "#") {
			f := strings.Fields(line)
			if run.layout != nil && !run.ended() && isCount(f[0]) {
				r, err := run.layout.row(f)
				switch {
				case err != nil && slices.ContainsFunc(f[min(len(f), run.layout.cutFrom()):], foreign):
					// Another process's output (a rank's NCCL INFO line) landed between the
					// writes of this row: what is left of it cannot be told apart for sure.
					run.cut = append(run.cut, fmt.Sprintf("%d (%s B)", n, f[0]))
					run.cutAfter = len(run.rows) + 1
					continue
				case err != nil && run.cutAfter == len(run.rows)+1 && len(f) < run.layout.columns:
					continue // the rest of the row cut just before, on a line of its own
				case err != nil:
					return nil, 0, fmt.Errorf("line %d: %v", n, err)
				}
				run.rows, run.rowLines = append(run.rows, r), append(run.rowLines, n)
				continue
			}
			mentions = append(mentions, ntProgram.FindAllString(line, -1)...)
			if m := ntNCCL.FindStringSubmatch(line); m != nil && run.layout == nil {
				run.addRuntime("NCCL " + input.Safe(m[1]))
			}
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		key, value, _ := strings.Cut(text, ":")
		switch {
		case strings.HasPrefix(text, "nccl-tests version "):
			restart(n)
			f := strings.Fields(text)
			run.addRuntime("nccl-tests " + input.Safe(f[2]))
			for _, kv := range f[3:] {
				if code, ok := strings.CutPrefix(kv, "nccl-library="); ok {
					run.addRuntime("NCCL " + ncclVersion(code))
				}
			}
		case ntGpubench.MatchString(text):
			restart(n)
			m := ntGpubench.FindStringSubmatch(text)
			if err := program(n, m[2]); err != nil {
				return nil, 0, err
			}
			run.gpubench = []string{input.Safe(m[3]), input.Safe(m[4]), input.Safe(m[1])} // backend, topology, version
		case key == "Collective test starting":
			restart(n)
			if err := program(n, value); err != nil {
				return nil, 0, err
			}
		case strings.HasPrefix(text, "nThread "):
			begin(n)
			run.setup = parseSetup(text)
		case run.gpubench != nil && run.layout == nil && ntCycles.MatchString(text):
			if m := ntCycles.FindStringSubmatch(text); m[1] != "" {
				run.cycles, _ = strconv.Atoi(m[1])
			} else {
				run.cycles = -1
			}
		case strings.HasPrefix(text, "Blocking Enabled") && run.setup != nil && run.layout == nil:
			run.setup.blocking = blockingMode(text)
		case strings.HasPrefix(text, "Rank "):
			if run.layout != nil {
				begin(n)
			}
			if m := ntRank.FindStringSubmatch(text); m != nil {
				rank, _ := strconv.Atoi(m[1])
				pid, _ := strconv.Atoi(m[2])
				dev, _ := strconv.Atoi(m[4])
				run.devices = append(run.devices, Device{Rank: rank, PID: pid, Host: input.Safe(m[3]), Device: dev,
					PCIBusID: input.Safe(m[5]), Name: input.Safe(m[6])})
			}
		case key == "Collective test concluded":
			if err := program(n, value); err != nil {
				return nil, 0, err
			}
		case strings.TrimSpace(key) == "Out of bounds values" && run.layout != nil:
			f := strings.Fields(value)
			count, err := strconv.Atoi(f0(f))
			if err != nil || count < 0 {
				return nil, 0, fmt.Errorf("line %d: out of bounds values %q is not a count", n, input.Safe(strings.TrimSpace(value)))
			}
			run.bounds = &Bounds{Count: count, OK: count == 0}
		case strings.TrimSpace(key) == "Avg bus bandwidth" && run.layout != nil:
			avg, err := strconv.ParseFloat(f0(strings.Fields(value)), 64)
			if err != nil || !valid(avg) {
				return nil, 0, fmt.Errorf("line %d: avg bus bandwidth %q is not a bandwidth", n, input.Safe(strings.TrimSpace(value)))
			}
			run.avg = &avg
		case isTableHeader(strings.Fields(text)):
			begin(n)
			var err error
			if run.layout, err = parseLayout(headerColumns(text)); err != nil {
				return nil, 0, fmt.Errorf("line %d: %v", n, err)
			}
			run.tableLine, run.mentions, mentions = n, mentions, nil
		}
	}
	begin(len(text)) // ends the last run
	return runs, empty, nil
}

func f0(f []string) string {
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// foreign reports whether s is another program's text, not a field of nccl-tests' row: not a
// number, N/A, a type or an op, and holding a word (three letters running: "NCCL", "INFO", a
// host's name), where a mistyped figure ("13x.8") holds none.
func foreign(s string) bool {
	if _, err := strconv.ParseFloat(s, 64); err == nil || s == "N/A" || ntEltSize[s] != 0 || slices.Contains(ntOps, s) {
		return false
	}
	run := 0
	for _, r := range s {
		if unicode.IsLetter(r) {
			if run++; run == 3 {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

// cutFrom is the first column another program's output may land in, cutting a row: nccl-tests
// writes the size, count, type and op with the root, then each placement's figures.
func (l *ntLayout) cutFrom() int {
	if l.root >= 0 {
		return l.root
	}
	return l.place[0].time
}

// isCount says whether s is a row's first field, a size in bytes: digits only, so that a size too
// large to read is refused with its line, not passed over as another line.
func isCount(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// ncclVersion writes NCCL_VERSION_CODE as a version: 22902 is 2.29.2 (1000s before 2.9).
func ncclVersion(code string) string {
	v, err := strconv.Atoi(code)
	switch {
	case err != nil || v <= 0:
		return input.Safe(code)
	case v >= 10000:
		return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v/100%10, v%100)
}

// isTableHeader says whether the words of a comment line are the table's column names.
func isTableHeader(f []string) bool {
	return slices.Contains(f, "size") && slices.Contains(f, "count") && slices.Contains(f, "type") &&
		(slices.Contains(f, "time") || slices.Contains(f, "cputime")) && slices.Contains(f, "busbw")
}

// headerColumns are the table header's column names: its words, except that gpubench's --expect
// columns are headed "vs exp", two words for one column.
func headerColumns(text string) []string {
	f := strings.Fields(text)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "vs" && f[i+1] == "exp" {
			f = slices.Replace(f, i, i+2, "vs exp")
		}
	}
	return f
}

// ntLayout is where a table's figures are: column indexes, -1 for a column the table lacks.
type ntLayout struct {
	columns                       int
	size, count, typ, redop, root int
	place                         [2]ntPlace // out-of-place, in-place
}

type ntPlace struct {
	time, algbw, busbw, wrong int
	counts                    bool // wrong counts wrong elements (#wrong); older 2.x (2.10 at least) printed "error", the largest error
}

// parseLayout reads the table header: size, count, type, then redop and root where the test
// has them (older 2.x: only the tests that use them), then out-of-place and in-place columns,
// each starting with time; columns after those it needs (-I 1's i_min ...) are skipped.
func parseLayout(cols []string) (*ntLayout, error) {
	switch {
	case slices.Contains(cols, "cputime"):
		return nil, errors.New("the table reports host CPU times (-C 1), which gpubench does not set against GPU times: rerun without -C (gpubench's --output json of such a run holds both)")
	case slices.Contains(cols, "timestamp"):
		return nil, errors.New("the table has a timestamp column (nccl-tests -S 1), which is not read: rerun without -S")
	}
	var starts []int
	for i, c := range cols {
		if c == "time" {
			starts = append(starts, i)
		}
	}
	if len(starts) != 2 {
		return nil, fmt.Errorf("a table header with %d time columns: expected an out-of-place and an in-place one", len(starts))
	}
	pre := cols[:starts[0]]
	l := &ntLayout{columns: len(cols), size: slices.Index(pre, "size"), count: slices.Index(pre, "count"),
		typ: slices.Index(pre, "type"), redop: slices.Index(pre, "redop"), root: slices.Index(pre, "root")}
	if l.size < 0 || l.count < 0 || l.typ < 0 {
		return nil, errors.New("a table header without size, count and type before its time columns")
	}
	for k, s := range starts {
		end := len(cols)
		if k == 0 {
			end = starts[1]
		}
		g := cols[s:end]
		at := func(name string) int {
			if i := slices.Index(g, name); i >= 0 {
				return s + i
			}
			return -1
		}
		p := ntPlace{time: s, algbw: at("algbw"), busbw: at("busbw"), wrong: at("#wrong"), counts: true}
		if p.wrong < 0 {
			p.wrong, p.counts = at("error"), false
		}
		if p.algbw < 0 || p.busbw < 0 {
			return nil, errors.New("a table header without algbw and busbw after each time column")
		}
		l.place[k] = p
	}
	return l, nil
}

// row reads a table row's fields. A row one field short, in a table with a redop column, has
// an empty redop (nccl-tests prints "" there for hypercube, and did for all-to-all in older 2.x).
func (l *ntLayout) row(f []string) (Row, error) {
	if len(f) == l.columns-1 && l.redop >= 0 {
		f = slices.Insert(slices.Clone(f), l.redop, "")
	}
	if len(f) != l.columns {
		return Row{}, fmt.Errorf("a table row with %d fields, where the table header has %d columns", len(f), l.columns)
	}
	var r Row
	var err error
	if r.Size, err = ntCount("size", f[l.size]); err != nil {
		return Row{}, err
	}
	if r.Count, err = ntCount("count", f[l.count]); err != nil {
		return Row{}, err
	}
	if r.Type = f[l.typ]; ntEltSize[r.Type] == 0 {
		return Row{}, fmt.Errorf("type %q is not one nccl-tests prints", input.Safe(r.Type))
	}
	if l.redop >= 0 {
		if !slices.Contains(ntOps, f[l.redop]) {
			return Row{}, fmt.Errorf("redop %q is not one nccl-tests prints", input.Safe(f[l.redop]))
		}
		r.Op = NullString(f[l.redop])
	}
	if l.root >= 0 {
		root, err := strconv.Atoi(f[l.root])
		if err != nil || root < -1 {
			return Row{}, fmt.Errorf("root %q is not a rank (or -1)", input.Safe(f[l.root]))
		}
		r.Root = &root
	}
	for k, p := range []*Placement{&r.OutOfPlace, &r.InPlace} {
		if *p, err = l.place[k].read(f); err != nil {
			return Row{}, fmt.Errorf("%s %v", []string{"out-of-place", "in-place"}[k], err)
		}
	}
	return r, nil
}

// printSlack is how far, as a fraction of v, the figure printed as s may be from the one it was
// printed from: half a unit of its last digit over v (infinite for a printed 0).
func printSlack(s string, v float64) float64 {
	mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
	unit := 1.0
	if _, dec, ok := strings.Cut(mant, "."); ok {
		unit = math.Pow10(-len(dec))
	}
	if e, err := strconv.Atoi(exp); err == nil {
		unit *= math.Pow10(e)
	}
	if v <= 0 {
		return math.Inf(1)
	}
	return unit / 2 / v
}

// bandwidthsFromTime works a row's bandwidths out from its size and times, as nccl-tests does
// before it prints them (algbw = size / time, busbw = algbw × the collective's factor for its
// ranks): it prints them with two decimals, so that at small sizes they keep one significant digit
// or none (0.00) where the time keeps three or more.
func (r *Row) bandwidthsFromTime(c *coll.Collective, ranks int) {
	for _, p := range []*Placement{&r.OutOfPlace, &r.InPlace} {
		if alg := float64(r.Size) / (p.TimeUS * 1e3); p.TimeUS > 0 && valid(alg) && valid(alg*c.Factor(ranks)) {
			p.AlgBW, p.BusBW = alg, alg*c.Factor(ranks) // else the printed ones, which were read within bounds
			p.slack = p.timeSlack
		}
	}
}

func (p ntPlace) read(f []string) (Placement, error) {
	var pl Placement
	for _, v := range []struct {
		name string
		at   int
		to   *float64
	}{{"time", p.time, &pl.TimeUS}, {"algbw", p.algbw, &pl.AlgBW}, {"busbw", p.busbw, &pl.BusBW}} {
		x, err := strconv.ParseFloat(f[v.at], 64)
		if err != nil || !valid(x) {
			return pl, fmt.Errorf("%s %q is not a number from 0 to 1e12", v.name, input.Safe(f[v.at]))
		}
		*v.to = x
	}
	pl.timeSlack, pl.slack = printSlack(f[p.time], pl.TimeUS), printSlack(f[p.busbw], pl.BusBW)
	// Which placements were checked tells alltoall and sendrecv, which do not check in place,
	// from the others: in the #wrong layout (nccl-tests 2.13 on) only; before, alltoall_perf
	// printed an in-place error too (N/A from nccl-tests' a0a1491, 2022).
	if p.wrong < 0 || f[p.wrong] == "N/A" {
		pl.unchecked = p.wrong >= 0 && p.counts
		return pl, nil // not checked
	}
	pl.checked = p.counts
	w, err := strconv.ParseFloat(f[p.wrong], 64)
	switch {
	case !p.counts: // the old error column: the largest error, not a count; wrong stays unknown
		if err != nil || !(w >= 0) || math.IsInf(w, 0) { // any size: a broken run's is huge
			return pl, fmt.Errorf("error %q is not a number", input.Safe(f[p.wrong]))
		}
	case err != nil || w < 0 || w != math.Trunc(w) || w > 1<<53:
		return pl, fmt.Errorf("#wrong %q is not a count", input.Safe(f[p.wrong]))
	default:
		n := int64(w)
		pl.Wrong = &n
	}
	return pl, nil
}

func ntCount(name, s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%s %q is not a count", name, input.Safe(s))
	}
	return v, nil
}

// ranks is the run's rank count: its highest device line's rank + 1 (nccl-tests elides the
// middle of long lists), or 0 when it has none.
func (r *ntRun) ranks() int {
	n := 0
	for _, d := range r.devices {
		n = max(n, d.Rank+1)
	}
	return n
}

// collective is the collective the run measured: named by nccl-tests' "Collective test
// starting/concluded" line, else by the command line before the table, else told from the
// table itself where only one collective fits.
func (r *ntRun) collective() (*coll.Collective, error) {
	if r.program != "" {
		c, err := collectiveOf(r.program)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", r.line, err)
		}
		return c, nil
	}
	named := slices.Compact(slices.Sorted(slices.Values(r.mentions)))
	if len(named) == 1 {
		c, err := collectiveOf(named[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", r.tableLine, err)
		}
		return c, nil
	}
	fit := inferCollective(r.rows, r.ranks(), r.layout)
	if len(fit) == 1 {
		return fit[0], nil
	}
	why := "no line before it names a *_perf program"
	if len(named) > 1 {
		why = "the lines before it name " + strings.Join(named, " and ")
	}
	fits := "its columns fit several collectives (" + perfNames(fit) + ")"
	if len(fit) < 2 {
		fits = "no one collective fits all its rows"
	}
	return nil, fmt.Errorf(`line %d: which nccl-tests program printed this table? It has no "# Collective test concluded:" line, %s, and %s: add the line "# Collective test concluded: NAME_perf" after the table`, r.tableLine, why, fits)
}

// inferCollective lists the collectives a table's rows fit, from what nccl-tests prints of each:
// whether a row names an op (redop: sendrecv_perf's name -o's op too) and has a root; size /
// (count x element size), 1 for the collectives of whole buffers and the rank count for those
// of per-rank chunks; busbw / algbw, as far as the printed digits of busbw and the time (algbw
// = size / time) tell (2(n-1)/n for all-reduce, 1 for send/recv); an in-place #wrong of N/A
// beside a checked out-of-place one (alltoall_perf and sendrecv_perf do not check in place);
// and, in the per-test headers before nccl-tests 2.13 (no root column where a test has no
// root), which tests printed a redop column: those that reduce, and alltoall_perf (empty).
// layout is nil for -J's JSON. On one rank every ratio and factor is 1, and tells nothing.
func inferCollective(rows []Row, ranks int, layout *ntLayout) []*coll.Collective {
	cands := slices.Clone(coll.Collectives)
	keep := func(ok func(c *coll.Collective) bool) {
		cands = slices.DeleteFunc(cands, func(c *coll.Collective) bool { return !ok(c) })
	}
	if layout != nil && layout.root < 0 {
		keep(func(c *coll.Collective) bool { return (c.Reduces || c == coll.AllToAll) == (layout.redop >= 0) })
	}
	for _, r := range rows {
		per := r.Count * ntEltSize[r.Type]
		if per == 0 {
			continue // a 0 B row says nothing
		}
		ratio := r.Size / per
		if r.Size%per != 0 || ratio < 1 || (ranks > 1 && ratio > 1 && ratio != int64(ranks)) {
			return nil
		}
		op, rooted := r.Op != "" && r.Op != "none", r.Root != nil && *r.Root >= 0
		keep(func(c *coll.Collective) bool {
			k := c.Counts(64, 1, 4) // 64 B over 4 ranks: a count of 16 where the size is per-rank chunks
			return c.Rooted == rooted && (c.TakesOp && op || !c.Reduces && !op) && (ranks == 1 || (k.Param == k.Bytes) == (ratio == 1))
		})
		for _, p := range []Placement{r.OutOfPlace, r.InPlace} {
			if ranks == 1 {
				break
			}
			if alg := float64(r.Size) / (p.TimeUS * 1e3); p.TimeUS <= 0 || p.BusBW <= 0 || !valid(alg) {
				continue // no bandwidth a run reaches: the figures were not worked out from each other
			}
			// Each figure within its printed digits, and 1% at least: -J's JSON prints two decimals
			// too. Factors that must be told apart here, 1 and 2(n-1)/n, are 33% apart or more.
			bs, ts := max(p.slack, 0.01), max(p.timeSlack, 0.01)
			f := p.BusBW * p.TimeUS * 1e3 / float64(r.Size)
			lo, hi := f*(1-bs)*(1-ts), f*(1+bs)*(1+ts)
			keep(func(c *coll.Collective) bool {
				if ranks > 1 {
					return lo <= c.Factor(ranks) && c.Factor(ranks) <= hi
				}
				return lo <= 1 || c.Factor(1<<20) > 1 // ranks unknown: a factor above 1 is no factor of 1
			})
		}
		switch {
		case r.InPlace.checked:
			keep(func(c *coll.Collective) bool { return !c.InPlaceUnchecked })
		case r.OutOfPlace.checked && r.InPlace.unchecked:
			keep(func(c *coll.Collective) bool { return c.InPlaceUnchecked })
		}
	}
	return cands
}

// perfNames lists the nccl-tests programs of cs for a message: "a or b", "a, b or c".
func perfNames(cs []*coll.Collective) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Perf
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// mergeRuns makes one collective run of a log's runs, and refuses runs that cannot be one.
func mergeRuns(runs []*ntRun) (*Coll, []string, error) {
	first := runs[0]
	c0, err := first.collective()
	if err != nil {
		return nil, nil, err
	}
	c := &Coll{Collective: c0.Name, NCCLTests: c0.Perf, Backend: BackendNCCLTests, Config: Config{Ranks: first.ranks()},
		Devices: first.devices, Runtime: NullString(strings.Join(first.runtime, ", ")), OutOfBounds: Bounds{OK: true}}
	if g := first.gpubench; g != nil {
		c.Backend, c.Topology, c.Version = g[0], NullString(g[1]), g[2]
	}
	if x := first.setup; x != nil {
		c.Config.Threads, c.Config.Warmup, c.Config.Iters, c.Config.Graph, c.Config.Blocking = x.threads, x.warmup, x.iters, x.graph, x.blocking
		if x.agg > 1 {
			c.Config.Aggregate = x.agg
		}
	}
	seen := map[RowKey]int{} // the line of each row
	var lines []string
	cells, sum := 0, 0.0
	for _, r := range runs {
		rc, err := r.collective()
		switch {
		case err != nil:
			return nil, nil, err
		case rc != c0:
			return nil, nil, fmt.Errorf("line %d: a run of %s follows the run of %s at line %d: a file holds one collective; split the log", r.line, rc.Perf, c0.Perf, first.line)
		case r.ranks() > 0 && c.Config.Ranks > 0 && r.ranks() != c.Config.Ranks:
			return nil, nil, fmt.Errorf("line %d: this run has %d ranks and the run at line %d has %d: split the log", r.line, r.ranks(), first.line, c.Config.Ranks)
		case r.setup != nil && first.setup != nil && *r.setup != *first.setup:
			return nil, nil, fmt.Errorf("line %d: this run was timed otherwise than the run at line %d (threads, GPUs, iterations, graph or blocking): split the log", r.line, first.line)
		}
		c.Config.Ranks = max(c.Config.Ranks, r.ranks())
		if r.cycles != 0 {
			c.Config.Cycles = r.cycles
		}
		var prev *RowKey
		var first, last RowKey // without the cycle
		cycle := 0
		for i, row := range r.rows {
			if !c0.TakesOp {
				row.Op = ""
			}
			if !c0.Rooted {
				row.Root = nil
			}
			if r.cycles != 0 { // gpubench's -N: each cycle's rows follow the last's, from the first size again
				base := row.Key(c0.Name)
				if i == 0 {
					first = base
				}
				if i == 0 || base == first && base != last {
					cycle++
				}
				row.Cycle, last = cycle, base
			}
			k := row.Key(c0.Name)
			if at, ok := seen[k]; ok && (prev == nil || k != *prev) {
				if at >= r.line {
					return nil, nil, fmt.Errorf("line %d: the row %s appears twice (first at line %d)", r.rowLines[i], k, at)
				}
				return nil, nil, fmt.Errorf("line %d: the run from line %d measures %s again (first at line %d): a file holds one run; split the log", r.rowLines[i], r.line, k, at)
			}
			if _, ok := seen[k]; !ok {
				seen[k] = r.rowLines[i]
			}
			prev = &k
			if c.Config.Ranks > 0 {
				row.bandwidthsFromTime(c0, c.Config.Ranks)
			}
			c.Results = append(c.Results, row)
			sum += row.OutOfPlace.BusBW + row.InPlace.BusBW
			cells += 2
		}
		if r.bounds != nil {
			c.OutOfBounds.Count += r.bounds.Count
			c.OutOfBounds.OK = c.OutOfBounds.OK && r.bounds.OK
		} else {
			c.OutOfBounds.OK = false
		}
		lines = append(lines, strconv.Itoa(r.line))
	}
	var notices []string
	var cut []string
	for _, r := range runs {
		cut = append(cut, r.cut...)
	}
	if len(cut) > 0 {
		notices = append(notices, fmt.Sprintf("rows cut by another program's output (a rank's NCCL INFO line between the writes of a row) are left out: line %s", strings.Join(cut, ", line ")))
	}
	switch {
	case len(runs) > 1:
		c.AvgBusBW = sum / float64(cells) // as nccl-tests averages: every cell printed
		notices = append(notices, fmt.Sprintf("%d runs of %s (from lines %s) are read as one: their rows differ", len(runs), c0.Perf, strings.Join(lines, ", ")))
	case first.avg != nil:
		c.AvgBusBW = *first.avg
	}
	if err := c.checkRun(); err != nil {
		return nil, nil, err
	}
	for i := range c.Results {
		if err := c.Results[i].check(); err != nil {
			return nil, nil, err
		}
	}
	return c, notices, nil
}

// The JSON nccl-tests -J writes (JSON_FILE_VERSION 3). Booleans are the strings "true" and
// "false", root is a padded string ("    -1"), nwrong is null when not checked, and a figure
// that is not a number is the string "nan".
type ntJSON struct {
	Version     json.RawMessage `json:"version"`
	Args        []string        `json:"args"`
	NCCLVersion int             `json:"nccl_version"`
	Config      struct {
		NThreads   int             `json:"nthreads"`
		NGPUs      int             `json:"ngpus"`
		Warmup     int             `json:"warmup_iters"`
		Iterations int             `json:"iterations"`
		Aggregate  int             `json:"aggregated_iterations"`
		Graph      int             `json:"graph"`
		Blocking   json.RawMessage `json:"blocking_collectives"`
		Devices    []struct {
			Rank       int    `json:"rank"`
			PID        int    `json:"pid"`
			Hostname   string `json:"hostname"`
			Device     int    `json:"device"`
			DeviceHex  string `json:"device_hex"`
			DeviceInfo string `json:"device_info"`
		} `json:"devices"`
	} `json:"config"`
	Results []struct {
		Size       *int64          `json:"size"`
		Count      int64           `json:"count"`
		Type       string          `json:"type"`
		Redop      string          `json:"redop"`
		Root       json.RawMessage `json:"root"`
		OutOfPlace *ntJSONPlace    `json:"out_of_place"`
		InPlace    *ntJSONPlace    `json:"in_place"`
	} `json:"results"`
	OutOfBounds *struct {
		Count int             `json:"count"`
		Okay  json.RawMessage `json:"okay"`
	} `json:"out_of_bounds"`
	AverageBusBandwidth *struct {
		Bandwidth json.RawMessage `json:"bandwidth"`
	} `json:"average_bus_bandwidth"`
	Errors []string `json:"errors"`
}

type ntJSONPlace struct {
	Time    json.RawMessage `json:"time"`
	CPUTime json.RawMessage `json:"cpu_time"`
	AlgBW   json.RawMessage `json:"alg_bw"`
	BusBW   json.RawMessage `json:"bus_bw"`
	NWrong  json.RawMessage `json:"nwrong"`
}

// isNCCLTestsJSON says whether a JSON object is nccl-tests -J's: a version, results and args.
func isNCCLTestsJSON(doc []byte) bool {
	var probe struct {
		Version, Results, Args json.RawMessage
	}
	return json.Unmarshal(doc, &probe) == nil && probe.Version != nil && probe.Results != nil && probe.Args != nil
}

// readNCCLTestsJSON reads the file nccl-tests -J writes.
func readNCCLTestsJSON(name string, doc []byte) (*File, error) {
	var j ntJSON
	if err := json.Unmarshal(doc, &j); err != nil {
		return nil, fmt.Errorf("not nccl-tests -J JSON: %v", jsonErr(err))
	}
	if v := string(j.Version); v != "3" {
		return nil, fmt.Errorf("nccl-tests JSON version %s: only version 3 (JSON_FILE_VERSION in nccl-tests' src/util.cu) is read", input.Safe(v))
	}
	c := &Coll{Backend: BackendNCCLTests, OutOfBounds: Bounds{OK: true}}
	if j.NCCLVersion > 0 {
		c.Runtime = NullString("NCCL " + ncclVersion(strconv.Itoa(j.NCCLVersion)))
	}
	for _, d := range j.Config.Devices {
		c.Devices = append(c.Devices, Device{Rank: d.Rank, PID: d.PID, Host: input.Safe(d.Hostname), Device: d.Device,
			PCIBusID: input.Safe(d.DeviceHex), Name: input.Safe(d.DeviceInfo)})
	}
	// One device entry per process (nccl-tests' parseRankInfo reads a process's first line).
	if j.Config.NThreads > 0 && j.Config.NGPUs > 0 {
		c.Config.Ranks = len(c.Devices) * j.Config.NThreads * j.Config.NGPUs
	}
	c.Config.Threads, c.Config.Warmup, c.Config.Iters, c.Config.Graph = max(j.Config.NThreads, 0), max(j.Config.Warmup, 0), max(j.Config.Iterations, 0), max(j.Config.Graph, 0)
	if j.Config.Aggregate > 1 {
		c.Config.Aggregate = j.Config.Aggregate
	}
	if b := strings.Trim(string(j.Config.Blocking), `"`); b == "true" || (b != "false" && b != "0" && b != "" && b != "null") {
		c.Config.Blocking = 1 // the file says only whether -z was set
	}
	for i, jr := range j.Results {
		at := fmt.Sprintf("results[%d]", i)
		if jr.Size == nil || *jr.Size < 0 || jr.Count < 0 {
			return nil, fmt.Errorf("%s: no size, or a negative size or count", at)
		}
		r := Row{Size: *jr.Size, Count: jr.Count, Type: jr.Type, Op: NullString(jr.Redop)}
		if ntEltSize[r.Type] == 0 {
			return nil, fmt.Errorf("%s: type %q is not one nccl-tests prints", at, input.Safe(r.Type))
		}
		if !slices.Contains(ntOps, jr.Redop) {
			return nil, fmt.Errorf("%s: redop %q is not one nccl-tests prints", at, input.Safe(jr.Redop))
		}
		if jr.Root != nil {
			var s string
			if json.Unmarshal(jr.Root, &s) != nil {
				s = string(jr.Root)
			}
			root, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || root < -1 {
				return nil, fmt.Errorf("%s: root %s is not a rank (or -1)", at, input.Safe(string(jr.Root)))
			}
			r.Root = &root
		}
		var err error
		if r.OutOfPlace, err = jr.OutOfPlace.placement(); err != nil {
			return nil, fmt.Errorf("%s.out_of_place%v", at, err)
		}
		if r.InPlace, err = jr.InPlace.placement(); err != nil {
			return nil, fmt.Errorf("%s.in_place%v", at, err)
		}
		c.Results = append(c.Results, r)
	}
	if j.OutOfBounds != nil {
		c.OutOfBounds = Bounds{Count: j.OutOfBounds.Count, OK: strings.Trim(string(j.OutOfBounds.Okay), `"`) == "true"}
	}
	if a := j.AverageBusBandwidth; a != nil {
		if v, err := jsonFigure(a.Bandwidth); err == nil {
			c.AvgBusBW = v
		}
	}
	var program string
	if len(j.Args) > 0 {
		program = j.Args[0]
	}
	var co *coll.Collective
	if ntProgram.FindString(program) != "" {
		var err error
		if co, err = collectiveOf(program); err != nil {
			return nil, fmt.Errorf("args[0]: %v", err)
		}
	} else if fit := inferCollective(c.Results, c.Config.Ranks, nil); len(fit) == 1 {
		co = fit[0]
	} else {
		fits, path := "no one collective fits all the results", "./build/all_gather_perf"
		if len(fit) > 1 {
			fits, path = "the results fit several collectives ("+perfNames(fit)+")", "./build/"+fit[0].Perf
		}
		return nil, fmt.Errorf(`args[0] %q names no nccl-tests program, and %s: write the program's path (e.g. "%s") as args[0]`, input.Safe(program), fits, path)
	}
	c.Collective, c.NCCLTests = co.Name, co.Perf
	for i := range c.Results {
		if !co.TakesOp {
			c.Results[i].Op = ""
		}
		if !co.Rooted {
			c.Results[i].Root = nil
		}
	}
	if err := c.checkRun(); err != nil {
		return nil, err
	}
	for i := range c.Results {
		if err := c.Results[i].check(); err != nil {
			return nil, fmt.Errorf("results[%d]: %v", i, err)
		}
	}
	f := &File{Name: name, Form: FormNCCLTestsJSON, Complete: true, Coll: c}
	for _, e := range j.Errors {
		if e = strings.TrimSpace(e); e != "" {
			f.Notices = append(f.Notices, "nccl-tests reported an error: "+input.Safe(e))
		}
	}
	more, err := checkRows(c)
	if err != nil {
		return nil, err
	}
	f.Notices = append(f.Notices, more...)
	return f, nil
}

// placement reads one placement's figures; errors start with the field's name after a dot.
func (p *ntJSONPlace) placement() (Placement, error) {
	var pl Placement
	if p == nil {
		return pl, errors.New(": missing")
	}
	if p.Time == nil && p.CPUTime != nil {
		return pl, errors.New(".cpu_time: host CPU times (nccl-tests -C 1) are not set against GPU times: rerun without -C")
	}
	for _, v := range []struct {
		name string
		raw  json.RawMessage
		to   *float64
	}{{"time", p.Time, &pl.TimeUS}, {"alg_bw", p.AlgBW, &pl.AlgBW}, {"bus_bw", p.BusBW, &pl.BusBW}} {
		x, err := jsonFigure(v.raw)
		if err != nil {
			return pl, fmt.Errorf(".%s: %v", v.name, err)
		}
		*v.to = x
	}
	if p.NWrong != nil && string(p.NWrong) != "null" {
		w, err := jsonFigure(p.NWrong)
		if err != nil || w != math.Trunc(w) || w > 1<<53 {
			return pl, fmt.Errorf(".nwrong: %s is not a count", input.Safe(string(p.NWrong)))
		}
		n := int64(w)
		pl.Wrong = &n
	}
	return pl, nil
}

// jsonFigure reads a figure nccl-tests wrote: a number from 0 to 1e12 ("nan", a string, is not).
func jsonFigure(raw json.RawMessage) (float64, error) {
	var v float64
	if raw == nil || string(raw) == "null" {
		return 0, errors.New("missing")
	}
	if err := json.Unmarshal(raw, &v); err != nil || !valid(v) {
		return 0, fmt.Errorf("%s is not a number from 0 to 1e12", input.Safe(string(raw)))
	}
	return v, nil
}
