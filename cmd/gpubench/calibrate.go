package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/input"
	"github.com/gpubench/gpubench/internal/results"
	"github.com/gpubench/gpubench/internal/sim"
)

// calibrateKeeps are the machine flags calibrate takes: the machine the runs were measured on.
var calibrateKeeps = []string{"topology", "nodes", "gpus-per-node"}

func newCalibrateCmd(e *env, g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "calibrate RESULT... --topology PRESET|FILE -o CALIBRATED.json",
		Short: "Fit the simulator to measured runs of a machine, and write its calibrated topology",
		Long: "calibrate reads runs measured on one kind of machine (gpubench --output json or --out files,\n" +
			"gpubench p2p --output json, nccl-tests' output) and fits the simulator's figures to them: the\n" +
			"host's launch cost, each algorithm and protocol's latency and bandwidth, the copy inside a GPU.\n" +
			"It writes --topology with those figures and a record of what was fitted, from which files, what\n" +
			"the runs did not constrain, and the error per size band before and after. Simulating the\n" +
			"calibrated file (--topology CALIBRATED.json, --nodes N for a larger machine of the same nodes)\n" +
			"predicts what that machine does (docs/calibrate.md).",
		Example: "  gpubench calibrate --topology dgx-h100 all_reduce_perf.log -o calibrated.json\n" +
			"  gpubench allreduce --backend sim --topology calibrated.json --nodes 64",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("calibrate needs the runs to fit: gpubench calibrate RESULT... --topology PRESET|FILE -o CALIBRATED.json")
			}
			if err := readsFiles(cmd, "calibrate", calibrateKeeps...); err != nil {
				return err
			}
			if !cmd.Flags().Changed("topology") { // its default is a machine the runs may not be from
				return usageErr("calibrate needs the machine the runs were measured on: --topology PRESET|FILE (gpubench topo --output json on it writes its file)")
			}
			return runCalibrate(e, g, args, out)
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "the calibrated topology file to write (required)")
	hideShared(cmd, machineFlags, calibrateKeeps...)
	return cmd
}

func runCalibrate(e *env, g *globals, files []string, out string) error {
	if g.output != "table" && g.output != "json" {
		return usageErr("unknown --output %q for calibrate: use table or json", g.output)
	}
	if out == "" {
		return usageErr("calibrate needs the file to write: -o CALIBRATED.json")
	}
	if err := checkOutFile("-o", out, append([]string{g.topology}, files...)...); err != nil {
		return err
	}
	t, err := g.loadTopology()
	if err != nil {
		return err
	}
	if t.Calibration != nil {
		return usageErr("topology %s is already calibrated: give the machine's own topology (a preset, or gpubench topo --output json), not a calibrated one", input.Safe(g.topology))
	}
	var colls []sim.CollRun
	var copies []sim.LocalCopy
	for i, name := range files {
		if slices.ContainsFunc(files[:i], func(n string) bool { return filepath.Clean(n) == filepath.Clean(name) }) {
			return usageErr("%s is given twice: give each run once", input.Safe(name))
		}
		f, err := results.ReadFile(name)
		if err != nil {
			return usageErr("%v", err)
		}
		name = input.Safe(name)
		for _, n := range f.Notices { // a cut log or a run that did not finish is fitted as it is, said
			fmt.Fprintf(e.stderr, "gpubench: %s: %s\n", name, n)
		}
		if f.Coll != nil {
			run, err := collRun(t, name, f.Coll)
			if err != nil {
				return usageErr("%v", err)
			}
			if f.Coll.Config.Iters == 0 {
				fmt.Fprintf(e.stderr, "gpubench: %s does not say how many timed iterations it ran (nccl-tests' \"# nThread ... iters:\" line): its default, %d, is taken\n", name, run.Iters)
			}
			colls = append(colls, run)
			continue
		}
		c, err := localCopies(t, name, f.P2P)
		if err != nil {
			return usageErr("%v", err)
		}
		copies = append(copies, c...)
	}
	cal, err := sim.Calibrate(t, colls, copies)
	if errors.Is(err, sim.ErrCalibrate) {
		return usageErr("%v", strings.TrimPrefix(err.Error(), sim.ErrCalibrate.Error()+": "))
	}
	if err != nil {
		return err
	}
	for _, b := range cal.Error {
		if b.After > b.Before+1 { // a percentage point: less is the fit's own rounding
			fmt.Fprintf(e.stderr, "gpubench: the fit leaves sizes %s further off than the model was (%.3g%% against %.3g%%): the model's terms do not describe these runs there\n", b.Band, b.After, b.Before)
		}
	}
	data, err := calibratedFile(g.topology, cal)
	if err != nil {
		return err
	}
	if err := writeAtomic(out, data); err != nil {
		return usageErr("cannot write -o %s: %v", input.Safe(out), err)
	}
	if g.output == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Topology    string           `json:"topology"`
			Out         string           `json:"out"`
			Calibration *gpu.Calibration `json:"calibration"`
		}{t.Name, out, cal})
	}
	return writeCalibration(e.stdout, t.Name, out, cal)
}

// collRun is a collective result file as a run to calibrate from, refused when it was measured on
// other GPUs than the topology's or timed otherwise than calibration models: a loop of calls each
// launched on its own and queued (nccl-tests' defaults -G 0 -z 0 -m 1).
func collRun(t *gpu.Topology, name string, c *results.Coll) (sim.CollRun, error) {
	ranks := c.Config.Ranks
	if ranks == 0 {
		ranks = len(c.Devices)
	}
	if err := sameGPUs(t, name, c.Devices); err != nil {
		return sim.CollRun{}, err
	}
	if err := sameHosts(t, name, c.Devices); err != nil {
		return sim.CollRun{}, err
	}
	switch x := c.Config; {
	case x.Graph > 0:
		return sim.CollRun{}, fmt.Errorf("%s timed CUDA graph launches (-G %d), whose host cost calibration does not model: give a run without -G", name, x.Graph)
	case x.Blocking > 0:
		return sim.CollRun{}, fmt.Errorf("%s waited after each call (-z %d), which calibration does not model: give a run without -z", name, x.Blocking)
	case x.Aggregate > 1:
		return sim.CollRun{}, fmt.Errorf("%s grouped %d calls an iteration (-m %d), which calibration does not model: give a run with -m 1", name, x.Aggregate, x.Aggregate)
	}
	// Launches per host thread: the most ranks one process drives (a process per GPU: 1) over
	// its threads (-t). nccl-tests -J lists one device a process: its ranks are spread evenly.
	perProcess := map[string]int{}
	most := 1
	for _, d := range c.Devices {
		k := fmt.Sprintf("%s/%d", d.Host, d.PID)
		perProcess[k]++
		most = max(most, perProcess[k])
	}
	if n := len(perProcess); n > 0 && len(c.Devices) < ranks {
		most = max(most, ranks/n)
	}
	iters := c.Config.Iters
	if iters == 0 {
		iters = 20 // nccl-tests' -n default, for a log that does not say
	}
	run := sim.CollRun{File: name, Coll: c.Collective, Ranks: ranks, PerThread: max(most/max(c.Config.Threads, 1), 1), Iters: iters}
	for _, r := range c.Results {
		run.Rows = append(run.Rows, sim.MeasuredRow{Bytes: r.Size, TimeUS: r.OutOfPlace.TimeUS})
	}
	if len(run.Rows) == 0 {
		return sim.CollRun{}, fmt.Errorf("%s holds no measured size: give a run that measured some", name)
	}
	return run, nil
}

// localCopies are a p2p result's copies inside each GPU.
func localCopies(t *gpu.Topology, name string, p *results.P2P) ([]sim.LocalCopy, error) {
	if err := sameGPUs(t, name, p.Devices); err != nil {
		return nil, err
	}
	var out []sim.LocalCopy
	for i, h := range p.Host {
		if h.Local != nil && i < len(p.Devices) {
			out = append(out, sim.LocalCopy{File: name, Device: i, Bytes: p.Config.Size, GBs: *h.Local})
		}
	}
	return out, nil
}

// sameGPUs refuses a file whose GPUs the topology does not have, rank by rank; a file that does
// not name its GPUs is taken as it is.
func sameGPUs(t *gpu.Topology, name string, devs []results.Device) error {
	if len(devs) > t.NumGPUs() {
		return fmt.Errorf("%s ran on %d GPUs; topology %s has %d: give the topology of the machine it ran on (--nodes N for N of its nodes, --gpus-per-node K for K GPUs of each)", name, len(devs), t.Name, t.NumGPUs())
	}
	for _, d := range devs {
		if d.Rank < 0 || d.Rank >= t.NumGPUs() {
			return fmt.Errorf("%s lists rank %d; topology %s has %d GPUs: give the topology of the machine it ran on (--nodes N for N of its nodes)", name, d.Rank, t.Name, t.NumGPUs())
		}
		g, _ := t.GPU(d.Rank)
		if d.Name != "" && g.Name != "" && !strings.EqualFold(gpuModel(d.Name), gpuModel(g.Name)) {
			return fmt.Errorf("%s was measured on %s (rank %d); topology %s has %s there: give the topology of the machine it ran on (gpubench topo --output json on it)",
				name, input.Safe(d.Name), d.Rank, t.Name, g.Name)
		}
	}
	return nil
}

// sameHosts refuses a run whose ranks shared hosts otherwise than the topology's nodes share its
// first GPUs: what crossed the network in the run would not in the model, or the other way round,
// and the fit would put the difference into the wrong figures. Ranks the file does not list, or
// lists without a host, are not judged.
func sameHosts(t *gpu.Topology, name string, devs []results.Device) error {
	nodeOf, hostOf := map[string]int{}, map[int]string{}
	var hosts []string
	perHost := map[string]int{}
	mismatch := false
	for _, d := range devs {
		if d.Host == "" || d.Rank < 0 || d.Rank >= t.NumGPUs() {
			continue
		}
		node := t.NodeOf(d.Rank)
		if n, ok := nodeOf[d.Host]; ok && n != node {
			mismatch = true
		}
		if h, ok := hostOf[node]; ok && h != d.Host {
			mismatch = true
		}
		if _, ok := nodeOf[d.Host]; !ok {
			hosts = append(hosts, d.Host)
		}
		nodeOf[d.Host], hostOf[node] = node, d.Host
		perHost[d.Host]++
	}
	if !mismatch {
		return nil
	}
	fix := "give the topology of the machine it ran on"
	k := perHost[hosts[0]]
	inOrder := !slices.ContainsFunc(hosts, func(h string) bool { return perHost[h] != k }) &&
		!slices.ContainsFunc(devs, func(d results.Device) bool {
			return d.Host != "" && d.Rank >= 0 && hosts[min(d.Rank/k, len(hosts)-1)] != d.Host
		})
	switch {
	case inOrder:
		fix = fmt.Sprintf("give --nodes %d --gpus-per-node %d, as it ran", len(hosts), k)
	case len(hosts) > 1:
		fix = "its ranks went to the hosts out of rank order, which no --nodes layout gives: calibrate from a run with consecutive ranks on each host"
	}
	return fmt.Errorf("%s ran its ranks on %d host%s (%s); topology %s puts them on its nodes otherwise: %s",
		name, len(hosts), plural(len(hosts)), input.Safe(hostList(hosts)), t.Name, fix)
}

// hostList names up to three hosts.
func hostList(hosts []string) string {
	if len(hosts) > 3 {
		return strings.Join(hosts[:3], ", ") + ", ..."
	}
	return strings.Join(hosts, ", ")
}

// gpuModel is a GPU's name without the vendor word older drivers leave out ("A100-SXM4-80GB" is
// "NVIDIA A100-SXM4-80GB").
func gpuModel(name string) string {
	name = strings.TrimSpace(name)
	if len(name) > 7 && strings.EqualFold(name[:7], "NVIDIA ") {
		return name[7:]
	}
	return name
}

// calibratedFile is the topology's own text (a preset's, or the file's, as written) with format 2
// and the calibration, checked by reading it back.
func calibratedFile(nameOrPath string, cal *gpu.Calibration) ([]byte, error) {
	data, _, err := sim.TopologyData(nameOrPath)
	if err != nil {
		return nil, usageErr("invalid --topology: %v", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, usageErr("invalid --topology: %v", err)
	}
	doc["format"], _ = json.Marshal(gpu.TopologyFormat2)
	doc["calibration"], _ = json.Marshal(cal)
	// A run on it names it apart from the machine's own (a preset's name, else the file's).
	var name string
	if json.Unmarshal(doc["name"], &name) == nil && name != "" {
		doc["name"], _ = json.Marshal(name + "-calibrated")
	}
	// The keys in the order docs/topology.md gives them, the rest after.
	order := []string{"format", "name", "description", "p2p", "network", "nvlink_domain_nodes", "calibration", "templates", "nodes"}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	rank := func(k string) int {
		for i, o := range order {
			if o == k {
				return i
			}
		}
		return len(order)
	}
	sort.SliceStable(keys, func(i, j int) bool {
		return rank(keys[i]) < rank(keys[j]) || rank(keys[i]) == rank(keys[j]) && keys[i] < keys[j]
	})
	var buf bytes.Buffer
	buf.WriteString("{\n")
	for i, k := range keys {
		var v bytes.Buffer
		if err := json.Indent(&v, doc[k], " ", " "); err != nil {
			return nil, err
		}
		fmt.Fprintf(&buf, " %q: %s", k, v.Bytes())
		if i < len(keys)-1 {
			buf.WriteString(",")
		}
		buf.WriteString("\n")
	}
	buf.WriteString("}\n")
	if _, err := gpu.ParseTopology(buf.Bytes()); err != nil {
		return nil, fmt.Errorf("the calibrated topology does not read back: %v", err)
	}
	return buf.Bytes(), nil
}

// writeCalibration prints what was fitted.
func writeCalibration(w io.Writer, topology, out string, cal *gpu.Calibration) error {
	fmt.Fprintf(w, "# gpubench calibrate: topology %s, from %s\n", topology, strings.Join(cal.From, ", "))
	if m := cal.Measured; m.MaxRanks > 0 {
		fmt.Fprintf(w, "# measured: %s to %s, up to %d rank%s\n#\n", approxSize(m.MinBytes), approxSize(m.MaxBytes), m.MaxRanks, plural(m.MaxRanks))
	} else {
		fmt.Fprintf(w, "# measured: no collective (copies only)\n#\n")
	}
	fmt.Fprintf(w, "%-22s  %12s  %12s  %5s  %-21s  %9s\n", "fitted", "latency (us)", "bandwidth", "rows", "sizes", "error (%)")
	if cal.LaunchUS > 0 {
		fmt.Fprintf(w, "%-22s  %12.3g\n", "launch per GPU", cal.LaunchUS)
	}
	keys := make([]string, 0, len(cal.Algorithms))
	for k := range cal.Algorithms {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		a := cal.Algorithms[k]
		sizes := ""
		if a.Rows > 0 {
			sizes = approxSize(a.MinBytes) + " to " + approxSize(a.MaxBytes)
		}
		fmt.Fprintf(w, "%-22s  %+12.3g  %11.3gx  %5d  %-21s  %9.3g\n", k, a.LatencyUS, a.Bandwidth, a.Rows, sizes, a.ErrorPercent)
	}
	if cal.LocalCopyEfficiency > 0 {
		fmt.Fprintf(w, "%-22s  %12s  %11.3gx\n", "local copy (of memory)", "", cal.LocalCopyEfficiency)
	}
	for _, d := range cal.Defaults {
		fmt.Fprintf(w, "# not constrained: %s\n", d)
	}
	fmt.Fprintf(w, "#\n%-16s  %5s  %12s  %12s\n", "sizes", "rows", "before (%)", "after (%)")
	for _, b := range cal.Error {
		fmt.Fprintf(w, "%-16s  %5d  %12.3g  %12.3g\n", b.Band, b.Rows, b.Before, b.After)
	}
	_, err := fmt.Fprintf(w, "# wrote %s\n", input.Safe(out))
	return err
}

// calibratedRange says on stderr when a run on a calibrated topology goes past the sizes or the
// ranks the calibration was measured at: its figures are then extrapolated.
func calibratedRange(e *env, cal *gpu.Calibration, w coll.Sweep, ranks int) {
	m := cal.Measured
	if m.MaxRanks == 0 {
		return // no collective was measured, so none of the collective model's figures was fitted
	}
	var past []string
	sizes := w.Sizes()
	if largest := sizes[len(sizes)-1]; w.Min < m.MinBytes || largest > m.MaxBytes { // the sizes the sweep runs: 1M:12G:x16 ends at 4G
		past = append(past, fmt.Sprintf("sizes %s to %s (measured %s to %s)", coll.FormatSize(w.Min), coll.FormatSize(largest), coll.FormatSize(m.MinBytes), coll.FormatSize(m.MaxBytes)))
	}
	if ranks > m.MaxRanks {
		past = append(past, fmt.Sprintf("%d ranks (measured up to %d)", ranks, m.MaxRanks))
	}
	if past != nil {
		fmt.Fprintf(e.stderr, "gpubench: this run goes past what the topology was calibrated on: %s; those figures are extrapolated\n", strings.Join(past, " and "))
	}
}
