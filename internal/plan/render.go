package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the plan as one indented JSON object (docs/plan.md, "JSON").
func WriteJSON(w io.Writer, r *Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the plan for a reader: what was planned, the ranking, why the choice wins and
// the others lose, what was left out, and the choice in detail.
func WriteText(w io.Writer, r *Result) error {
	var b strings.Builder
	line := func(label, format string, a ...any) {
		fmt.Fprintf(&b, "%-10s %s\n", label+":", fmt.Sprintf(format, a...))
	}
	m, mc, s := &r.Model, &r.Machine, &r.Setup
	fmt.Fprintf(&b, "gpubench plan: %s on %s\n", m.Name, mc.Name)
	line("model", "%s parameters (%s active), %d layers, hidden %d, %d heads (%d KV), %s, vocabulary %d", billions(m.Params), billions(m.ActiveParams),
		m.Layers, m.Hidden, m.Heads, m.KVHeads, mlpText(&m.Model), m.Vocab)
	line("machine", "%d GPUs, %d node%s of %d, %s; %s, %.1f GiB, %s TFLOPS dense %s (%s)", mc.GPUs, mc.Nodes, plural(mc.Nodes),
		mc.GPUsPerNode, fabricText(mc), mc.GPUName, GiBOf(mc.MemoryBytes), trim(mc.PeakTFLOPS, 1), s.Precision, mc.PeakSource)
	zero := fmt.Sprintf("ZeRO-%d", s.ZeRO)
	line("training", "seq %d, global batch %d (%s tokens a step), micro-batch %d, %s, %s, %s, %s recomputation", s.Seq, s.GlobalBatch,
		millions(float64(m.TokensPerStep)), s.MicroBatch, s.Precision, s.Optimizer, zero, s.Recompute)
	line("compute", "%.2f of peak (--compute-efficiency); %.3g FLOPs a token, %.3g a step", s.ComputeEfficiency, m.TrainFLOPsToken, m.ModelFLOPsPerStep)
	line("priced by", "%s", r.Pricing)
	for _, c := range r.Curves {
		fmt.Fprintf(&b, "%-10s %s: %s, %d ranks%s, %s to %s\n", "", c.File, c.Collective, c.Ranks, nodesText(c.Nodes), bytesText(c.Sizes[0]), bytesText(c.Sizes[len(c.Sizes)-1]))
	}
	// A layout is a shape (TP, CP, PP, DP, EP) with one pipeline schedule; the ranking shows each
	// shape once, with its best schedule.
	searched := fmt.Sprintf("%d layouts: %d fit in memory, %d priced", r.Searched, r.Fitting, r.Priced)
	var notes []string
	if r.Shapes < r.Priced {
		notes = append(notes, fmt.Sprintf("%d shapes, each counted once per pipeline schedule and ranked with its best", r.Shapes))
	}
	if r.Priced < r.Fitting {
		notes = append(notes, "the others cannot beat the ranked ones even before their data-parallel reduction")
	}
	if len(notes) > 0 {
		searched += " (" + strings.Join(notes, "; ") + ")"
	}
	line("searched", "%s", searched)
	b.WriteString("\n")

	if !r.Fits {
		writeNoFit(&b, r)
	} else {
		writeRanking(&b, r)
	}
	if len(r.Rejected) > 0 {
		b.WriteString("\nleft out:\n")
		for _, rj := range r.Rejected {
			fmt.Fprintf(&b, "  %d %s; %s\n", rj.Count, rj.Reason, rj.Example)
		}
	}
	if r.Fits {
		writeDetail(&b, r, &r.Ranked[0])
	}
	b.WriteString("\nassumptions:\n")
	for _, a := range r.Assumptions {
		fmt.Fprintf(&b, "  - %s\n", a)
	}
	lines := strings.Split(b.String(), "\n")
	for i := range lines { // the tables' empty last cells leave spaces
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n"))
	return err
}

func writeRanking(b *strings.Builder, r *Result) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rank\tlayout\tmemory/GPU\tstep\ttokens/s\tMFU\tbubble\tTP\tCP\tEP\tPP\tDP")
	for _, c := range r.Ranked {
		t := c.Time
		fmt.Fprintf(tw, "%d\t%s\t%.1f GiB\t%s\t%s\t%.1f%%\t%.1f%%\t%s\t%s\t%s\t%s\t%s\n", c.Rank, c.Layout, GiBOf(c.Memory.Total), seconds(t.StepS),
			thousands(c.TokensPerS), 100*c.MFU, 100*c.Bubble, seconds(t.TPS), seconds(t.CPS), seconds(t.EPS), seconds(t.PPS), seconds(t.DPS))
	}
	tw.Flush()
	best := r.Ranked[0]
	fmt.Fprintf(b, "(TP to DP: the seconds a step each kind of communication adds, beside the bubble's share)\n")
	fmt.Fprintf(b, "\nwhy %s wins:\n", best.Layout)
	for _, v := range best.Verdict {
		fmt.Fprintf(b, "  - %s\n", v)
	}
	if len(r.Ranked) > 1 {
		b.WriteString("why the others lose:\n")
		for _, c := range r.Ranked[1:] {
			fmt.Fprintf(b, "  %d %s: %s\n", c.Rank, c.Layout, strings.Join(c.Verdict, "; "))
		}
	}
}

func writeNoFit(b *strings.Builder, r *Result) {
	mc := &r.Machine
	if r.Runs {
		fmt.Fprintf(b, "does not fit: no layout of %s fits in the %.1f GiB of a GPU of %s (%d GPUs)\n", r.Model.Name, GiBOf(mc.MemoryBytes), mc.Name, mc.GPUs)
	} else {
		// Memory is not the reason: every way to split the GPUs breaks a constraint.
		fmt.Fprintf(b, "does not run: no layout of %s can run on the %d GPUs of %s: every way to split them breaks a constraint (left out, below), before memory is weighed\n",
			r.Model.Name, mc.GPUs, mc.Name)
		if len(r.Advice) > 0 {
			fmt.Fprintf(b, "to run it here: %s\n", strings.Join(r.Advice, "; or "))
		}
	}
	if len(r.Ranked) > 0 {
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "closest\tlayout\tmemory/GPU\tweights\tgradients\toptimizer\tactivations\tstep if it fitted")
		for i, c := range r.Ranked {
			mem := c.Memory
			fmt.Fprintf(tw, "%d\t%s\t%.1f GiB\t%.1f\t%.1f\t%.1f\t%.1f\t%s (MFU %.1f%%)\n", i+1, c.Layout, GiBOf(mem.Total), GiBOf(mem.Weights), GiBOf(mem.Gradients),
				GiBOf(mem.Optimizer), GiBOf(mem.Activations), seconds(c.Time.StepS), 100*c.MFU)
		}
		tw.Flush()
	}
	switch f := r.SmallestFit; {
	case f == nil && (r.Runs || r.RunsElsewhere):
		fmt.Fprintf(b, "no machine of these nodes fits it, up to %d GPUs: change the setup (a shorter --seq, --recompute full, --zero 3)\n", gpuMax)
	case f == nil:
		fmt.Fprintf(b, "no machine of these nodes can run it, up to %d GPUs: every one breaks a constraint; change the setup\n", gpuMax)
	case !f.Joinable:
		fmt.Fprintf(b, "smallest machine that fits: --nodes %d (%d GPUs), as %s with %.1f GiB a GPU; but this node has no NIC, so no such machine can be built of it\n",
			f.Nodes, f.GPUs, f.Layout, GiBOf(f.Memory))
	default:
		fmt.Fprintf(b, "smallest machine that fits: --nodes %d (%d GPUs), as %s with %.1f GiB a GPU\n", f.Nodes, f.GPUs, f.Layout, GiBOf(f.Memory))
	}
	if f := r.FitBelow; f != nil {
		fmt.Fprintf(b, "most of these %d nodes that fit: --nodes %d (%d GPUs), as %s with %.1f GiB a GPU\n", mc.Nodes, f.Nodes, f.GPUs, f.Layout, GiBOf(f.Memory))
	}
}

func writeDetail(b *strings.Builder, r *Result, c *Candidate) {
	s, mem, t := &r.Setup, &c.Memory, c.Time
	fmt.Fprintf(b, "\n%s in detail\n", c.Layout)
	other := ""
	if c.Layout.PP > 1 {
		other = fmt.Sprintf(", the heaviest; the first stage holds %.1f GiB, the last %.1f", GiBOf(mem.FirstStage), GiBOf(mem.LastStage))
	}
	fmt.Fprintf(b, "memory per GPU (%s%s):\n", mem.Stage, other)
	shard := func(stage int, what string) string {
		l := c.Layout
		switch {
		case s.ZeRO < stage || l.CP*l.DP == 1:
			return "not sharded"
		}
		text := fmt.Sprintf("ZeRO-%d: %s sharded over DP %d", s.ZeRO, what, l.DP)
		if l.CP > 1 {
			text = fmt.Sprintf("ZeRO-%d: %s sharded over CP x DP = %d", s.ZeRO, what, l.CP*l.DP)
		}
		if r.Model.MoE() {
			text += fmt.Sprintf(", the experts' over %d", l.CP*l.DP/l.EP)
		}
		return text
	}
	reserve := "assumed: CUDA context and libraries 1 GiB, NCCL 0.5 GiB a communicator"
	if s.ReserveBytes != nil {
		reserve = "--reserve"
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	for _, row := range []struct {
		name  string
		bytes int64
		note  string
	}{
		{"weights", mem.Weights, shard(3, "weights")},
		{"gradients", mem.Gradients, shard(2, "gradients")},
		{"optimizer state", mem.Optimizer, shard(1, "optimizer state")},
		{"activations", mem.Activations, fmt.Sprintf("%s recomputation; none %.1f, selective %.1f, full %.1f GiB", s.Recompute,
			GiBOf(mem.ActivationsBy["none"]), GiBOf(mem.ActivationsBy["selective"]), GiBOf(mem.ActivationsBy["full"]))},
		{"pipeline buffers", mem.PipelineBuffers, ""},
		{"reserve", mem.Reserve, reserve},
		{"total", mem.Total, fmt.Sprintf("of %.1f GiB", GiBOf(mem.Capacity))},
	} {
		fmt.Fprintf(tw, "  %s\t%6.1f GiB\t%s\n", row.name, GiBOf(row.bytes), row.note)
	}
	tw.Flush()

	b.WriteString("collectives per step, as each GPU sees them:\n")
	tw = tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  group\tcollective\tsize\tGPUs\tlink\tcalls\teach\ttotal\texposed\tpriced by")
	for _, col := range c.Collectives {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", col.Group, col.Collective, bytesText(col.Bytes), col.Where, col.Link,
			thousands(col.PerStep), usText(col.TimeUS), seconds(col.TotalS), seconds(col.ExposedS), col.PricedBy)
	}
	tw.Flush()
	if len(c.Collectives) == 0 {
		b.WriteString("  none: one GPU does it all\n")
	}
	b.WriteString("overlap: ")
	var rules []string
	seen := map[string]bool{}
	for _, col := range c.Collectives {
		if k := col.Group + ": " + col.Overlap; !seen[k] {
			seen[k] = true
			rules = append(rules, k)
		}
	}
	if len(rules) == 0 {
		rules = []string{"nothing to overlap"}
	}
	b.WriteString(strings.Join(rules, "; ") + "\n")

	b.WriteString("time per step:\n")
	tw = tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  compute\t%s\t%d micro-batches x (%.1f ms forward + %.1f ms backward) on the busiest stage, at %.2f of %s TFLOPS\n",
		seconds(t.ComputeS), c.Layout.MicroBatches, t.ForwardMS, t.BackwardMS, s.ComputeEfficiency, trim(r.Machine.PeakTFLOPS, 1))
	fmt.Fprintf(tw, "  bubble\t%s\t(PP-1)/v = %d/%d micro-batch times of compute and communication\n", seconds(t.BubbleS), c.Layout.PP-1, c.Layout.VPP)
	for _, p := range []struct {
		name string
		s    float64
	}{{"TP", t.TPS}, {"CP", t.CPS}, {"EP", t.EPS}, {"PP", t.PPS}, {"DP", t.DPS}} {
		if p.s > 0 {
			fmt.Fprintf(tw, "  %s\t%s\texposed\n", p.name, seconds(p.s))
		}
	}
	fmt.Fprintf(tw, "  optimizer\t%s\tthe update's memory traffic at %s GB/s\n", seconds(t.OptimizerS), trim(r.Machine.MemoryGBs, 0))
	fmt.Fprintf(tw, "  step\t%s\t%s tokens/s, MFU %.1f%%\n", seconds(t.StepS), thousands(c.TokensPerS), 100*c.MFU)
	tw.Flush()
}

// fabricText says what joins a node's GPUs.
func fabricText(mc *Machine) string {
	switch mc.Fabric {
	case "nvlink":
		return fmt.Sprintf("NVLink domains of %d GPUs", mc.DomainGPUs)
	case "pcie-host":
		return "PCIe without P2P (GPU traffic through host memory)"
	case "pcie":
		return "PCIe with P2P, no NVLink"
	}
	return "one GPU a node"
}

// gpuMax is the largest machine the smallest-fit search tries, for the text.
const gpuMax = 16384

func mlpText(m *Model) string {
	if m.MoE() {
		s := fmt.Sprintf("%d experts of FFN %d, top %d", m.Experts, m.ExpertFFN, m.TopK)
		if m.SharedExperts > 0 {
			s += fmt.Sprintf(", %d shared", m.SharedExperts)
		}
		if m.DenseLayers > 0 {
			s += fmt.Sprintf(", first %d layers dense (FFN %d)", m.DenseLayers, m.FFN)
		}
		return s
	}
	return fmt.Sprintf("FFN %d", m.FFN)
}

func billions(v float64) string { return strconv.FormatFloat(v/1e9, 'f', 1, 64) + " B" }
func millions(v float64) string { return strconv.FormatFloat(v/1e6, 'f', 2, 64) + " M" }

func trim(v float64, digits int) string {
	if digits == 0 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strings.TrimSuffix(strings.TrimRight(strconv.FormatFloat(v, 'f', digits, 64), "0"), ".")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func nodesText(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" on %d node%s", n, plural(n))
}

// seconds writes a time to three significant figures, or "-" for none.
func seconds(s float64) string {
	switch {
	case s <= 0:
		return "-"
	case s < 1e-3:
		return trim(s*1e6, 1) + " us"
	case s < 0.9995:
		return threeFigures(s*1e3) + " ms"
	}
	return strconv.FormatFloat(s, 'f', 2, 64) + " s"
}

// threeFigures writes v (from 1 to 1000) to three significant figures without an exponent.
func threeFigures(v float64) string {
	switch {
	case v >= 99.95:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 9.995:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func usText(us float64) string { return seconds(us / 1e6) }

// thousands writes a count with thousands separators.
func thousands(v float64) string {
	s := strconv.FormatFloat(v, 'f', 0, 64)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// bytesText writes a size in binary units, to three figures.
func bytesText(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, k := float64(n), 0
	for v >= 1024 && k < len(units)-1 {
		v /= 1024
		k++
	}
	if k == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return strconv.FormatFloat(v, 'g', 3, 64) + " " + units[k]
}
