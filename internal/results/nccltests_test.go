package results

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
)

// The logs in testdata/nccl-tests are nccl-tests output as people published it (README.md there
// says where each is from); the -J file is built to the format, as none was found published.
const ntDir = "testdata/nccl-tests/"

// ntRow is what a test expects of one row: its size, type, op, root (-1 for none) and, for each
// placement, time, algbw, busbw and #wrong (-1 for not checked).
type ntRow struct {
	size                    int64
	count                   int64
	typ, op                 string
	root                    int
	oopTime, oopAlg, oopBus float64
	oopWrong                int64
	ipTime, ipAlg, ipBus    float64
	ipWrong                 int64
}

func (w ntRow) check(t *testing.T, r Row) {
	t.Helper()
	root := -1
	if r.Root != nil {
		root = *r.Root
	}
	wrong := func(p *int64) int64 {
		if p == nil {
			return -1
		}
		return *p
	}
	got := ntRow{r.Size, r.Count, r.Type, string(r.Op), root,
		r.OutOfPlace.TimeUS, r.OutOfPlace.AlgBW, r.OutOfPlace.BusBW, wrong(r.OutOfPlace.Wrong),
		r.InPlace.TimeUS, r.InPlace.AlgBW, r.InPlace.BusBW, wrong(r.InPlace.Wrong)}
	// Bandwidths worked out from the time round to the printed ones: two decimals, and the
	// time's own rounding (its last digit, at most 5e-4 of it).
	for _, bw := range [][2]*float64{{&got.oopAlg, &w.oopAlg}, {&got.oopBus, &w.oopBus}, {&got.ipAlg, &w.ipAlg}, {&got.ipBus, &w.ipBus}} {
		if math.Abs(*bw[0]-*bw[1]) <= 0.0051+5e-4**bw[1] {
			*bw[0] = *bw[1]
		}
	}
	if got != w {
		t.Errorf("row %+v\nwant %+v", got, w)
	}
}

// Each published log reads into exactly the rows its table shows, whatever the nccl-tests
// version's layout: with or without the redop and root columns, "error" (older 2.x) or
// #wrong, N/A, counts of wrong elements, a footer or none.
func TestReadNCCLTests(t *testing.T) {
	cases := []struct {
		file       string
		prefix     string // lines put before the log, where it names no program
		form       string
		complete   bool
		collective string
		ranks      int
		runtime    string
		rows       int
		avg        float64
		first      ntRow
		picks      map[int]ntRow // more rows, by index
		notices    []string
	}{{
		// 2.x with redop and root, #wrong; named by the mpirun command line above the table.
		file: "a3mega-allreduce.log", form: FormNCCLTests, complete: true, collective: "allreduce", ranks: 16, rows: 31, avg: 70.742,
		first: ntRow{8, 2, "float", "sum", -1, 135.8, 0, 0, 0, 123.5, 0, 0, 0},
		picks: map[int]ntRow{30: {8589934592, 2147483648, "float", "sum", -1, 47535, 180.71, 338.82, 0, 47743, 179.92, 337.35, 0},
			22: {33554432, 8388608, "float", "sum", -1, 1059.9, 31.66, 59.36, 0, 1054.0, 31.84, 59.69, 0}},
	}, {
		// 2.17.9: a version line and wrong elements, and no footer: the log was cut.
		file: "olivia-allreduce-2.17.9.log", form: FormNCCLTests, complete: false, collective: "allreduce", ranks: 16,
		runtime: "nccl-tests 2.17.9, NCCL 2.29.2", rows: 28,
		first: ntRow{1, 1, "int8", "sum", -1, 24.41, 0, 0, 0, 21.26, 0, 0, 0},
		picks: map[int]ntRow{21: {2097152, 2097152, "int8", "sum", -1, 6249.20, 0.34, 0.63, 18134, 6142.32, 0.34, 0.64, 9609},
			22: {4194304, 4194304, "int8", "sum", -1, 9489.31, 0.44, 0.83, 96817, 10542.7, 0.40, 0.75, 124342},
			27: {134217728, 134217728, "int8", "sum", -1, 2800.93, 47.92, 89.85, 0, 3023.61, 44.39, 83.23, 0}},
		notices: []string{"the run at line 1 has no footer"},
	}, {
		// Older 2.x: no redop column for broadcast, "error" N/A (-c 0), an NCCL INFO line in the
		// table; the collective told from the columns (a root, no op, size = count x 4). The
		// two 0 B rows are one size measured twice.
		file: "superbench-broadcast.log", form: FormNCCLTests, complete: true, collective: "broadcast", ranks: 8, rows: 33, avg: 64.8653,
		first: ntRow{0, 0, "float", "", 0, 34.61, 0, 0, -1, 34.33, 0, 0, -1},
		picks: map[int]ntRow{21: {4194304, 1048576, "float", "", 0, 81.06, 51.74, 51.74, -1, 80.39, 52.17, 52.17, -1},
			32: {8589934592, 2147483648, "float", "", 0, 36896, 232.81, 232.81, -1, 36599, 234.70, 234.70, -1}},
	}, {
		// Older 2.x: all-to-all printed an empty redop; all-gather prints the same columns, so
		// the log needs its program named (here by a command line).
		file: "superbench-alltoall.log", prefix: "$ ./build/alltoall_perf -b 1 -e 8G -f 2 -g 8\n",
		form: FormNCCLTests, complete: true, collective: "alltoall", ranks: 8, rows: 30, avg: 58.6481,
		first: ntRow{0, 0, "float", "", -1, 1.63, 0, 0, -1, 1.38, 0, 0, -1},
		picks: map[int]ntRow{1: {32, 1, "float", "", -1, 89.00, 0, 0, -1, 85.13, 0, 0, -1},
			29: {8589934592, 268435456, "float", "", -1, 33508, 256.36, 224.31, -1, 33234, 258.47, 226.16, -1}},
	}, {
		// 2.x with "Collective test starting/concluded", an NCCL version line, and the device
		// list cut short with "...": 8 ranks from the last rank listed.
		file: "oci-gb300-allreduce-2nodes.log", form: FormNCCLTests, complete: true, collective: "allreduce", ranks: 8,
		runtime: "NCCL 2.28.7+cuda13.0", rows: 16, avg: 474.234,
		first: ntRow{524288, 131072, "float", "sum", -1, 30.31, 17.30, 30.27, 0, 29.57, 17.73, 31.02, 0},
		picks: map[int]ntRow{15: {17179869184, 4294967296, "float", "sum", -1, 35722, 480.93, 841.63, 0, 35702, 481.21, 842.11, 0}},
	}, {
		// All-to-all's in-place result is not checked: N/A.
		file: "oci-gb300-alltoall.log", form: FormNCCLTests, complete: true, collective: "alltoall", ranks: 4,
		runtime: "NCCL 2.28.7+cuda13.0", rows: 16, avg: 381.478,
		first: ntRow{524288, 32768, "float", "", -1, 14.50, 36.15, 27.11, 0, 13.74, 38.15, 28.61, -1},
		picks: map[int]ntRow{14: {8589934592, 536870912, "float", "", -1, 10308, 833.31, 624.98, 0, 9568.2, 897.76, 673.32, -1}},
	}, {
		// -J's JSON (version 3): stringly booleans, a padded root, one device per process.
		file: "constructed-allreduce-v3.json", form: FormNCCLTestsJSON, complete: true, collective: "allreduce", ranks: 8,
		runtime: "NCCL 2.28.7", rows: 4, avg: 82.095,
		first: ntRow{524288, 131072, "float", "sum", -1, 30.31, 17.30, 30.27, 0, 29.57, 17.73, 31.02, 0},
		picks: map[int]ntRow{3: {4194304, 1048576, "float", "sum", -1, 56.01, 74.89, 131.05, 0, 55.91, 75.02, 131.28, 0}},
	}}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			f, err := Read(c.file, append([]byte(c.prefix), readFixture(t, ntDir+c.file)...))
			if err != nil {
				t.Fatal(err)
			}
			r := f.Coll
			if f.Form != c.form || f.Complete != c.complete || r == nil || r.Collective != c.collective || r.Backend != BackendNCCLTests ||
				r.Topology != "" || r.Config.Ranks != c.ranks || string(r.Runtime) != c.runtime || len(r.Results) != c.rows || r.AvgBusBW != c.avg {
				t.Fatalf("form %s, complete %v, %s on %s/%s, %d ranks, runtime %q, %d rows, avg %v; want %s, %v, %s on nccl-tests, %d ranks, %q, %d rows, avg %v",
					f.Form, f.Complete, r.Collective, r.Backend, r.Topology, r.Config.Ranks, r.Runtime, len(r.Results), r.AvgBusBW,
					c.form, c.complete, c.collective, c.ranks, c.runtime, c.rows, c.avg)
			}
			c.first.check(t, r.Results[0])
			for i, w := range c.picks {
				w.check(t, r.Results[i])
			}
			if len(f.Notices) != len(c.notices) {
				t.Fatalf("notices %q; want %q", f.Notices, c.notices)
			}
			for i, n := range c.notices {
				if !strings.Contains(f.Notices[i], n) {
					t.Errorf("notice %q; want one containing %q", f.Notices[i], n)
				}
			}
		})
	}
}

// A log whose table names no program is read as the one collective its rows fit, and refused,
// with what to add, where several fit.
func TestReadNCCLTestsUnnamed(t *testing.T) {
	// Before nccl-tests 2.13 all-to-all alone of the tests without an op printed a redop column;
	// checked (validation 1), it printed an in-place error too, which says nothing of the test.
	f, err := ReadFile(ntDir + "superbench-alltoall.log")
	if err != nil || f.Coll.Collective != "alltoall" {
		t.Fatalf("superbench-alltoall.log: %v", err)
	}
	checked := strings.ReplaceAll(strings.Replace(string(readFixture(t, ntDir+"superbench-alltoall.log")), "validation: 0", "validation: 1", 1), "N/A", "0e+00")
	if f, err = Read("a.log", []byte(checked)); err != nil || f.Coll.Collective != "alltoall" {
		t.Errorf("superbench-alltoall.log checked: %v", err)
	}
	// Today all-gather and all-to-all print alike; with -c 0 nothing tells them apart.
	devices := "#  Rank  0 Group  0 Pid 1 on h device  0 [0000:18:00] G\n#  Rank  7 Group  0 Pid 1 on h device  7 [0000:db:00] G\n"
	log := devices + ntHeader +
		"     1048576         32768     float    none      -1    20.00   52.43   45.88    N/A    20.00   52.43   45.88    N/A\n"
	_, err = Read("a.log", []byte(log))
	want := `a.log: line 3: which nccl-tests program printed this table? ` +
		`It has no "# Collective test concluded:" line, no line before it names a *_perf program, and its columns fit several collectives (all_gather_perf or alltoall_perf): ` +
		`add the line "# Collective test concluded: NAME_perf" after the table`
	if err == nil || err.Error() != want {
		t.Fatalf("error %v\nwant %s", err, want)
	}
	// The line it asks for is enough.
	if f, err = Read("a.log", []byte(log+"# Collective test concluded: alltoall_perf\n")); err != nil || f.Coll.Collective != "alltoall" {
		t.Fatalf("with the line added: %v", err)
	}
	// Checked out of place and N/A in place: alltoall_perf's (all_gather_perf checks in place);
	// checked in place: all_gather_perf's.
	if f, err = Read("a.log", []byte(strings.Replace(log, "N/A", "  0", 1))); err != nil || f.Coll.Collective != "alltoall" {
		t.Errorf("in place unchecked: %v", err)
	}
	if f, err = Read("a.log", []byte(strings.ReplaceAll(log, "N/A", "  0"))); err != nil || f.Coll.Collective != "allgather" {
		t.Errorf("in place checked: %v", err)
	}
	// Before nccl-tests 2.13 all_gather_perf printed neither redop nor root.
	old := "#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error\n" +
		"     1048576         32768   float    20.00   52.43   45.88  0e+00    20.00   52.43   45.88  0e+00\n"
	if f, err = Read("a.log", []byte(devices+old)); err != nil || f.Coll.Collective != "allgather" {
		t.Errorf("old all_gather_perf: %v", err)
	}
}

// sendrecv_perf heads its rows with -o's op, as all_reduce_perf does: an unnamed table is told
// from an all-reduce by busbw / algbw where its digits and ranks can, refused where they cannot.
// gpubench's rows before it named the op (none) read as the sum they ran.
func TestReadNCCLTestsSendRecvOrAllReduce(t *testing.T) {
	devs := func(n int) string {
		var b strings.Builder
		for r := range n {
			fmt.Fprintf(&b, "#  Rank %2d Group  0 Pid 1 on h device %2d [0000:%02x:00] NVIDIA H100 80GB HBM3\n", r, r, r)
		}
		return b.String()
	}
	sendrecv := "     4194304       1048576     float     sum      -1    61.28   68.44   68.44      0    61.28   68.44   68.44    N/A\n"
	allreduce := "     4194304       1048576     float     sum      -1    61.28   68.44  119.77      0    61.28   68.44  119.77      0\n"
	tiny := "           8             2     float     sum      -1    23.11    0.00    0.00      0    23.11    0.00    0.00    N/A\n"
	old := strings.Replace(sendrecv, "sum", "none", 1)
	unchecked := func(row string) string { return strings.Replace(row, "   0  ", " N/A  ", 1) } // -c 0
	for _, c := range []struct {
		name, log, want, op string
	}{
		{"sendrecv on 8 ranks", devs(8) + ntHeader + sendrecv, "sendrecv", "sum"},
		{"sendrecv on 8 ranks, -c 0", devs(8) + ntHeader + unchecked(sendrecv), "sendrecv", "sum"},
		{"allreduce on 8 ranks", devs(8) + ntHeader + allreduce, "allreduce", "sum"},
		{"allreduce, ranks unknown", ntHeader + allreduce, "allreduce", "sum"},
		// In place unchecked beside a checked out-of-place result: sendrecv_perf's.
		{"sendrecv, ranks unknown", ntHeader + sendrecv, "sendrecv", "sum"},
		{"2 ranks", devs(2) + ntHeader + sendrecv, "sendrecv", "sum"},
		{"digits too few", devs(8) + ntHeader + tiny, "sendrecv", "sum"},
		// Without that, a factor of 1 fits a 2-rank all-reduce too.
		{"sendrecv, ranks unknown, -c 0", ntHeader + unchecked(sendrecv), "", ""},
		{"2 ranks, -c 0", devs(2) + ntHeader + unchecked(sendrecv), "", ""},
		{"digits too few, -c 0", devs(8) + ntHeader + unchecked(tiny), "", ""},
		{"earlier gpubench", devs(8) + ntHeader + old, "sendrecv", "sum"},
		{"earlier gpubench, named", devs(8) + ntHeader + old + "# Collective test concluded: sendrecv_perf\n", "sendrecv", "sum"},
	} {
		f, err := Read("x.log", []byte(c.log))
		switch {
		case c.want == "" && (err == nil || !strings.Contains(err.Error(), "fit several collectives (all_reduce_perf or sendrecv_perf)")):
			t.Errorf("%s: %v; want it refused as fitting several", c.name, err)
		case c.want != "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (f.Coll.Collective != c.want || string(f.Coll.Results[0].Op) != c.op):
			t.Errorf("%s: %s, op %q; want %s, op %q", c.name, f.Coll.Collective, f.Coll.Results[0].Op, c.want, c.op)
		}
	}
	// gpubench's JSON before it named send/recv's op: redop null.
	doc := strings.Replace(string(readFixture(t, goldenDoc)), `"collective": "allreduce"`, `"collective": "sendrecv"`, 1)
	f, err := Read("old.json", []byte(strings.ReplaceAll(doc, `"redop": "sum"`, `"redop": null`)))
	if err != nil || f.Coll.Results[0].Op != "sum" {
		t.Fatalf("old gpubench JSON: %v", err)
	}
}

// A log holding several runs: of one collective and different rows they are read as one run;
// otherwise the file is refused at the line where the second run starts or repeats a row.
func TestReadNCCLTestsRuns(t *testing.T) {
	allreduce := string(readFixture(t, ntDir+"oci-gb300-allreduce-2nodes.log"))
	alltoall := string(readFixture(t, ntDir+"oci-gb300-alltoall.log"))
	a3mega := string(readFixture(t, ntDir+"a3mega-allreduce.log"))
	azure := string(readFixture(t, ntDir+"azureml-allreduce-two-runs.log"))

	// The same run again with another type (made here from the log, as a -d run would print).
	half := allreduce + strings.ReplaceAll(allreduce, "float", " half")
	f, err := Read("two.log", []byte(half))
	if err != nil {
		t.Fatal(err)
	}
	if c := f.Coll; len(c.Results) != 32 || c.Results[16].Type != "half" || c.Results[16].Size != 524288 || len(f.Notices) != 1 ||
		!strings.Contains(f.Notices[0], "2 runs of all_reduce_perf (from lines 1, 35) are read as one") {
		t.Errorf("%d rows, row 16 %+v, notices %q", len(c.Results), c.Results[16], f.Notices)
	}

	// A run killed before its table is left out.
	f, err = Read("killed.log", []byte("# Collective test starting: all_gather_perf\n# nThread 1 nGpus 8\n"+allreduce))
	if err != nil || f.Coll.Collective != "allreduce" || len(f.Coll.Results) != 16 {
		t.Errorf("a killed run before the log: %v", err)
	}

	for _, c := range []struct {
		name, log, want string
	}{
		{"two collectives", allreduce + alltoall, "two.log: line 35: a run of alltoall_perf follows the run of all_reduce_perf at line 1: a file holds one collective; split the log"},
		{"two rank counts", a3mega + allreduce, "two.log: line 65: this run has 8 ranks and the run at line 9 has 16: split the log"},
		{"the same rows twice", allreduce + allreduce, "two.log: line 49: the run from line 35 measures allreduce 524288 B float sum again (first at line 15): a file holds one run; split the log"},
		// Azure's two example runs, on two machines, in one README: both all-reduce over the same sizes.
		{"published runs", azure, "two.log: line 28: the run from line 25 measures allreduce 33554432 B float sum again (first at line 10): a file holds one run; split the log"},
	} {
		if _, err := Read("two.log", []byte(c.log)); err == nil || err.Error() != c.want {
			t.Errorf("%s: error %v\nwant %s", c.name, err, c.want)
		}
	}

	// Azure's first run alone: the old "error" column (the largest error, not a count) leaves
	// wrong unknown; there is no footer.
	first, _, _ := strings.Cut(azure, "### Standard_ND96amsr_A100_v4")
	f, err = Read("azure.log", []byte(first))
	if err != nil {
		t.Fatal(err)
	}
	c := f.Coll
	if c.Collective != "allreduce" || c.Config.Ranks != 0 || len(c.Results) != 9 || f.Complete {
		t.Fatalf("%s, %d ranks, %d rows, complete %v", c.Collective, c.Config.Ranks, len(c.Results), f.Complete)
	}
	ntRow{33554432, 8388608, "float", "sum", -1, 4393.9, 7.64, 14.32, -1, 4384.4, 7.65, 14.35, -1}.check(t, c.Results[0])
	ntRow{8589934592, 2147483648, "float", "sum", -1, 987274, 8.70, 16.31, -1, 986984, 8.70, 16.32, -1}.check(t, c.Results[8])
	// A broken run's largest error can be any size: it is read, and is no figure of the run.
	if _, err := Read("azure.log", []byte(strings.Replace(first, "14.32  4e-07", "14.32  3e+38", 1))); err != nil {
		t.Errorf("an error column of 3e+38: %v", err)
	}
}

// gpubench's own table has nccl-tests' layout and reads the same way, with its backend and
// topology from its first line.
func TestReadGpubenchTable(t *testing.T) {
	f, err := ReadFile("../../cmd/gpubench/testdata/allreduce.golden")
	if err != nil {
		t.Fatal(err)
	}
	if c := f.Coll; f.Form != FormNCCLTests || c.Backend != "sim" || c.Topology != "dgx-h100" || c.Collective != "allreduce" ||
		c.Config.Ranks != 8 || len(c.Results) != 10 || math.Abs(c.Results[9].OutOfPlace.BusBW-74.27) > 0.05 {
		t.Errorf("%s: %s on %s/%s, %d ranks, %d rows", f.Form, c.Collective, c.Backend, c.Topology, c.Config.Ranks, len(c.Results))
	}
}

const ntHeader = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"

// Bad or foreign input is one line naming the file and the line (or the JSON field).
func TestReadNCCLTestsBad(t *testing.T) {
	row := "          8             2     float     sum      -1    135.8    0.00    0.00      0    123.5    0.00    0.00      0\n"
	jsonDoc := string(readFixture(t, ntDir+"constructed-allreduce-v3.json"))
	cases := []struct {
		name, data, want string
	}{
		{"not a number", ntHeader + strings.Replace(row, "135.8", "13x.8", 1), `x.log: line 2: out-of-place time "13x.8" is not a number from 0 to 1e12`},
		{"size too large", ntHeader + strings.Replace(row, "          8 ", "99999999999999999999 ", 1), `x.log: line 2: size "99999999999999999999" is not a count`},
		{"negative", ntHeader + strings.Replace(row, "123.5", "-23.5", 1), `x.log: line 2: in-place time "-23.5" is not a number from 0 to 1e12`},
		{"nan", ntHeader + strings.Replace(row, "0.00    0.00      0    123.5", "nan    0.00      0    123.5", 1), `x.log: line 2: out-of-place algbw "nan" is not a number from 0 to 1e12`},
		{"short row", ntHeader + "   8  2  float  sum  -1  135.8\n", "x.log: line 2: a table row with 6 fields, where the table header has 13 columns"},
		{"wrong count", ntHeader + strings.Replace(row, "  0\n", "0.5\n", 1), `x.log: line 2: in-place #wrong "0.5" is not a count`},
		{"type", ntHeader + strings.Replace(row, "float", "flaot", 1), `x.log: line 2: type "flaot" is not one nccl-tests prints`},
		{"redop", ntHeader + strings.Replace(row, "sum", "xor", 1), `x.log: line 2: redop "xor" is not one nccl-tests prints`},
		{"cpu time", strings.Replace(ntHeader, "time", "cputime", 2) + row, "x.log: line 1: the table reports host CPU times (-C 1), which gpubench does not set against GPU times: rerun without -C (gpubench's --output json of such a run holds both)"},
		{"one placement", "#  size  count  type  time  algbw  busbw  #wrong\n", "x.log: line 1: a table header with 1 time columns: expected an out-of-place and an in-place one"},
		{"hypercube", "# Collective test starting: hypercube_perf\n" + ntHeader + row,
			"x.log: line 1: hypercube_perf measures a collective gpubench does not run (it reads all_reduce_perf, all_gather_perf, reduce_scatter_perf, broadcast_perf, reduce_perf, alltoall_perf, sendrecv_perf, gather_perf, scatter_perf)"},
		{"ends otherwise", "# Collective test starting: all_reduce_perf\n" + ntHeader + row + "# Collective test concluded: reduce_perf\n", "x.log: line 4: the run of all_reduce_perf (line 1) ends as reduce_perf"},
		{"bounds", ntHeader + row + "# Out of bounds values : many FAILED\n", `x.log: line 3: out of bounds values "many FAILED" is not a count`},
		{"twice", "# Collective test concluded: all_reduce_perf\n" + ntHeader + row + row + strings.Replace(row, "   8    ", "  16    ", 1) + row,
			"x.log: line 6: the row allreduce 8 B float sum appears twice (first at line 3)"},
		{"no rows", "# Collective test starting: all_reduce_perf\n" + ntHeader + "# Out of bounds values : 0 OK\n", "x.log: line 2: nccl-tests' table header, but no row under it: the run stopped before its first size"},
		{"text", "hello\nworld\n", `x.log: not gpubench JSON results (--output json or --out FILE): the file does not start with a JSON object, and it is not nccl-tests output either (no table header "#  size  count  type ... time  algbw  busbw ...")`},
		{"json version", strings.Replace(jsonDoc, `"version": 3`, `"version": 2`, 1), "x.log: nccl-tests JSON version 2: only version 3 (JSON_FILE_VERSION in nccl-tests' src/util.cu) is read"},
		{"json nan", strings.Replace(jsonDoc, `"time": 30.310000`, `"time": "nan"`, 1), `x.log: results[0].out_of_place.time: "nan" is not a number from 0 to 1e12`},
		{"json cpu time", strings.Replace(jsonDoc, `"time": 30.310000`, `"cpu_time": 30.310000`, 1), "x.log: results[0].out_of_place.cpu_time: host CPU times (nccl-tests -C 1) are not set against GPU times: rerun without -C"},
		{"json program", strings.Replace(jsonDoc, "./build/all_reduce_perf", "./build/hypercube_perf", 1), "x.log: args[0]: hypercube_perf measures a collective gpubench does not run (it reads all_reduce_perf, all_gather_perf, reduce_scatter_perf, broadcast_perf, reduce_perf, alltoall_perf, sendrecv_perf, gather_perf, scatter_perf)"},
		{"json nwrong", strings.Replace(jsonDoc, `"nwrong": 0.000000`, `"nwrong": -1.000000`, 1), "x.log: results[0].out_of_place.nwrong: -1.000000 is not a count"},
	}
	for _, c := range cases {
		f, err := Read("x.log", []byte(c.data))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: file %v, error %v\nwant %s", c.name, f, err, c.want)
		}
	}
}

// -J's JSON from one process with 8 GPUs (-g 8) lists one device, and the run has 8 ranks;
// without a program in args the collective is told from the results; unchecked placements
// write nwrong null; errors nccl-tests reported are noticed.
func TestReadNCCLTestsJSONQuirks(t *testing.T) {
	doc := `{"version": 3, "args": ["nccl-tests"], "nccl_version": 22703,
 "config": {"nthreads": 1, "ngpus": 8, "devices": [{"rank": 0, "group": 0, "pid": 7, "hostname": "node01", "device": 0, "device_hex": "0000:18:00", "device_info": "NVIDIA H100 80GB HBM3"}]},
 "results": [{"size": 1048576, "count": 32768, "type": "float", "redop": "sum", "root": "    -1",
   "out_of_place": {"time": 25.5, "alg_bw": 41.12, "bus_bw": 35.98, "nwrong": null},
   "in_place": {"time": 25.1, "alg_bw": 41.78, "bus_bw": 36.56, "nwrong": null}}],
 "out_of_bounds": {"count": 0, "okay": "true"}, "average_bus_bandwidth": {"bandwidth": 36.27, "okay": "unchecked"},
 "errors": ["unhandled cuda error"]}`
	f, err := Read("q.json", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	c := f.Coll
	if c.Collective != "reducescatter" || c.Config.Ranks != 8 || c.Runtime != "NCCL 2.27.3" || !c.OutOfBounds.OK ||
		len(f.Notices) != 1 || f.Notices[0] != "nccl-tests reported an error: unhandled cuda error" {
		t.Fatalf("%s, %d ranks, %q, bounds %+v, notices %q", c.Collective, c.Config.Ranks, c.Runtime, c.OutOfBounds, f.Notices)
	}
	ntRow{1048576, 32768, "float", "sum", -1, 25.5, 41.12, 35.98, -1, 25.1, 41.78, 36.56, -1}.check(t, c.Results[0])
}

// The fuzz seeds include the logs; their files are small.
func TestNCCLTestsFixturesSmall(t *testing.T) {
	entries, err := os.ReadDir(ntDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if info, _ := e.Info(); info.Size() > 16<<10 {
			t.Errorf("%s is %d bytes", e.Name(), info.Size())
		}
	}
}

// -I 1's per-iteration columns after each placement's are skipped, and the prefixes mpirun
// --tag-output and srun -l put on each line are taken off. (Made here: the header is laid out
// as nccl-tests 2.19.6's writeResultHeader prints it with -I 1; no published log was found.)
func TestReadNCCLTestsPerIterColumns(t *testing.T) {
	log := "[1,0]<stdout>:# Collective test starting: all_reduce_perf\n" +
		"[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99   i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99   i_cv%\n" +
		"[1,0]<stdout>:     1048576        262144     float     sum      -1    30.04   34.91   61.09       0    29.10    33.90    33.10    3.20    29.88   35.10   61.42       0    29.00    32.80    32.20    2.90\n" +
		"0: # Out of bounds values : 0 OK\n"
	f, err := Read("i.log", []byte(log))
	if err != nil {
		t.Fatal(err)
	}
	if c := f.Coll; c.Collective != "allreduce" || len(c.Results) != 1 || c.OutOfBounds != (Bounds{Count: 0, OK: true}) {
		t.Fatalf("%s, %d rows, bounds %+v", c.Collective, len(c.Results), c.OutOfBounds)
	}
	ntRow{1048576, 262144, "float", "sum", -1, 30.04, 34.91, 61.09, 0, 29.88, 35.10, 61.42, 0}.check(t, f.Coll.Results[0])
}

// What a multi-process launch does to a log: mpirun --tag-output tags each of the three writes
// nccl-tests prints a row in, srun -l right-aligns its label past 9 tasks, and a rank's NCCL INFO
// line may land between a row's writes, which leaves the row out with a notice (the rest of it,
// on a line of its own, is no row either). Shapes from published logs: NVIDIA/nccl-tests#290
// (srun -l), a p5 run through mpirun --tag-output, an 8-rank run with NCCL_DEBUG=INFO.
func TestReadNCCLTestsLaunchedLogs(t *testing.T) {
	head := "# Collective test starting: all_reduce_perf\n" + ntHeader
	prefix := func(p, text string) string {
		return p + strings.ReplaceAll(strings.TrimSuffix(text, "\n"), "\n", "\n"+p) + "\n"
	}
	tagged := prefix("[1,0]<stdout>:", head) +
		"[1,0]<stdout>:           8             2     float     sum      -1[1,0]<stdout>:    85.14    0.00    0.00      0[1,0]<stdout>:    62.82    0.00    0.00      0\n"
	padded := prefix(" 0: ", head) +
		" 0:      8388608       2097152     float     sum      -1    215.3   38.96   73.04    N/A    180.0   46.60   87.38    N/A\n"
	cut := head +
		"      524288        131072     float     sum      -1    50.99   10.28   18.00      0    51.21   10.24   17.91      0\n" +
		"     2097152        524288     float     sum      -1gcn151:1905790:1905879 [0] NCCL INFO Channel 00/0 : 7[3] -> 0[0] [receive] via NET/IB/2/GDRDMA\n" +
		"gcn154:1794762:1794845 [1] NCCL INFO Connected all rings\n" +
		"    93.65   22.39   39.19      0    84.09   24.94   43.64      0\n" +
		"     4194304       1048576     float     sum      -1    136.7   30.68   53.70      0    136.4   30.75   53.81      0\n"
	cutAtAFigure := strings.Replace(cut, "    93.65   22.39", "    10308   22.39", 1) // a time of 5 digits prints with none after the point
	for _, c := range []struct {
		name, log string
		sizes     []int64
		notice    string
	}{
		{"tags inside the row", tagged, []int64{8}, ""},
		{"srun -l padded", padded, []int64{8388608}, ""},
		{"a row cut", cut, []int64{524288, 4194304}, "are left out: line 4 (2097152 B)"},
		{"a row cut, its rest a count", cutAtAFigure, []int64{524288, 4194304}, "are left out: line 4 (2097152 B)"},
	} {
		f, err := Read("x.log", []byte(c.log))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var sizes []int64
		for _, r := range f.Coll.Results {
			sizes = append(sizes, r.Size)
		}
		cutNotice := slices.IndexFunc(f.Notices, func(n string) bool { return strings.Contains(n, "are left out") })
		if f.Coll.Collective != "allreduce" || !slices.Equal(sizes, c.sizes) || (c.notice == "") != (cutNotice < 0) ||
			c.notice != "" && !strings.Contains(f.Notices[cutNotice], c.notice) {
			t.Errorf("%s: %s, sizes %v, notices %q; want sizes %v, a notice %q", c.name, f.Coll.Collective, sizes, f.Notices, c.sizes, c.notice)
		}
	}
	// A short NCCL line inside a row cuts it too; a mistyped figure (no word in it) is still
	// refused.
	short := strings.Replace(cut, "-1gcn151:1905790:1905879 [0] NCCL INFO Channel 00/0 : 7[3] -> 0[0] [receive] via NET/IB/2/GDRDMA", "-1gcn151:1:2 [0] NCCL INFO Connected all trees", 1)
	if f, err := Read("x.log", []byte(short)); err != nil || len(f.Coll.Results) != 2 {
		t.Errorf("a short NCCL line: %v", err)
	}
	bad := head + "     2097152        524288     float     sum      -1    93.65   22.39   39.19      0    84.09   24.94   43.64   1O\n"
	if _, err := Read("x.log", []byte(bad)); err == nil || !strings.Contains(err.Error(), "line 3: ") {
		t.Errorf("a bad field: %v", err)
	}
}

// How a run was timed comes from nccl-tests' header line and blocking line, and from -J's config.
func TestReadNCCLTestsSetup(t *testing.T) {
	log := "# nThread 2 nGpus 4 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 30 agg iters: 3 validation: 1 graph: 7 unalign: 0\n" +
		"# Blocking Enabled: wait after each inner iteration (-m), no barrier \n#\n" + ntHeader +
		"          8             2     float     sum      -1    135.8    0.00    0.00      0    123.5    0.00    0.00      0\n" +
		"# Collective test concluded: all_reduce_perf\n" // an 8 B table alone could be sendrecv_perf's
	f, err := Read("x.log", []byte(log))
	if err != nil {
		t.Fatal(err)
	}
	if c := f.Coll.Config; c.Threads != 2 || c.Warmup != 5 || c.Iters != 30 || c.Aggregate != 3 || c.Graph != 7 || c.Blocking != 2 {
		t.Errorf("log: %+v", c)
	}
	if f, err = Read("x.json", readFixture(t, ntDir+"constructed-allreduce-v3.json")); err != nil {
		t.Fatal(err)
	}
	if c := f.Coll.Config; c.Threads != 1 || c.Warmup != 1 || c.Iters != 50 || c.Aggregate != 0 || c.Graph != 0 || c.Blocking != 0 {
		t.Errorf("-J: %+v", c)
	}
}

// The bandwidths of a table are worked out from its times, which keep more digits: 512 B in
// 35.50 µs is 0.0144 GB/s algbw, printed 0.01.
func TestReadNCCLTestsBandwidthFromTime(t *testing.T) {
	row := "         512           128     float     sum      -1    35.50    0.01    0.03      0    35.50    0.01    0.03      0\n"
	f, err := Read("x.log", []byte("#  Rank  0 Group  0 Pid 1 on h device  0 [0000:18:00] G\n#  Rank  7 Group  0 Pid 1 on h device  7 [0000:db:00] G\n"+ntHeader+row))
	if err != nil {
		t.Fatal(err)
	}
	p := f.Coll.Results[0].OutOfPlace
	if alg := 512 / 35.5e3; math.Abs(p.AlgBW-alg) > 1e-12 || math.Abs(p.BusBW-alg*1.75) > 1e-12 {
		t.Errorf("algbw %v busbw %v; want %v and %v", p.AlgBW, p.BusBW, alg, alg*1.75)
	}
	// A size and time whose bandwidth no run reaches keep the printed figures, read within bounds.
	huge := "4611686018427387904  1152921504606846976  float  sum  -1  0.01  0.01  0.03  0  0.01  0.01  0.03  0\n"
	if f, err = Read("x.log", []byte("#  Rank  7 Group  0 Pid 1 on h device  7 [0000:db:00] G\n"+ntHeader+huge)); err != nil {
		t.Fatal(err)
	}
	if p := f.Coll.Results[0].OutOfPlace; p.AlgBW != 0.01 || p.BusBW != 0.03 {
		t.Errorf("huge: %+v; want the printed 0.01 and 0.03", p)
	}
}
