package topo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/input"
)

// Formats are the output forms of `gpubench topo`.
var Formats = []string{"table", "json", "markdown", "dot"}

// Write writes the report in one of Formats.
func Write(w io.Writer, format string, r *Report) error {
	switch format {
	case "table":
		return WriteTable(w, r)
	case "json":
		return WriteJSON(w, r)
	case "markdown":
		return WriteMarkdown(w, r)
	case "dot":
		return WriteDOT(w, r)
	}
	return fmt.Errorf("unknown output %q: use %s", format, strings.Join(Formats, ", "))
}

// matrixLegend is nvidia-smi topo -m's legend.
const matrixLegend = `Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
`

// p2pLegend is nvidia-smi topo -p2p's legend, with the regkey status newer drivers add.
const p2pLegend = `Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
  GNS  = GPU not supported
  TNS  = Topology not supported
  DR   = Disabled by regkey
  NS   = Not supported
  U    = Unknown
`

// WriteTable writes the report as `gpubench topo` prints it: per node the GPUs, the connection
// matrix with nvidia-smi's legend, the NICs, the NVLinks and, when asked for, the P2P status
// matrix; then the warnings.
func WriteTable(w io.Writer, r *Report) error { return write(w, r, plainText) }

// WriteMarkdown writes what WriteTable does as Markdown, for pasting into an issue: tables as
// tables, legends as code blocks, warnings as a list.
func WriteMarkdown(w io.Writer, r *Report) error { return write(w, r, markdown) }

func write(w io.Writer, r *Report, st style) error {
	var b bytes.Buffer
	name := r.Nodes[0].Hostname
	if r.Topology != nil {
		name = r.Topology.Name
	}
	fmt.Fprintf(&b, st.title, name, r.Source)
	for _, n := range r.Nodes {
		if len(r.Nodes) > 1 {
			fmt.Fprintf(&b, st.node, n.Hostname)
		}
		writeNode(&b, n, r.P2PCap, st)
	}
	if len(r.Warnings) > 0 {
		b.WriteString(st.warnings)
		for _, x := range r.Warnings {
			fmt.Fprintf(&b, st.warning, x)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// style is how writeNode lays out its tables and legends.
type style struct {
	md                bool
	table             func(b *bytes.Buffer, rows [][]string)
	legend            func(b *bytes.Buffer, text string)
	title, node       string // formats of the title (name, source) and of a node's heading
	warnings, warning string // the warnings' heading, and the format of one
}

var (
	plainText = style{table: columns, legend: func(b *bytes.Buffer, s string) { b.WriteString(s) },
		title: "gpubench topo: %s (%s)\n", node: "\nNode %s\n", warnings: "\nWarnings:\n", warning: "  %s\n"}
	markdown = style{md: true, table: markdownTable, legend: func(b *bytes.Buffer, s string) { b.WriteString("```\n" + s + "```\n") },
		title: "**gpubench topo: %s** (%s)\n", node: "\n### Node %s\n", warnings: "\n**Warnings**\n\n", warning: "- %s\n"}
)

// markdownTable writes rows as a Markdown table, the first row its header.
func markdownTable(b *bytes.Buffer, rows [][]string) {
	for i, r := range rows {
		cells := make([]string, len(r))
		for j, c := range r {
			cells[j] = strings.ReplaceAll(strings.TrimSpace(c), "|", "\\|")
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		if i == 0 {
			b.WriteString(strings.Repeat("|---", len(r)) + "|\n")
		}
	}
}

func writeNode(b *bytes.Buffer, n *NodeReport, p2pCap string, st style) {
	rows := [][]string{{"GPU", "CUDA", "Name", "UUID", "PCI bus id", "Memory", "CC", "NUMA", "CPU affinity", "Persistence", "MIG", "PCIe", "PCIe max"}}
	for _, g := range n.GPUs {
		rows = append(rows, []string{g.Index, g.CUDA, g.Name, g.UUID, g.BusID, g.Memory, g.CC, g.NUMA, g.Affinity, g.Persistence, g.MIG, g.PCIe, g.PCIeMax})
	}
	b.WriteString("\n")
	st.table(b, rows)
	if len(n.MIG) > 0 {
		b.WriteString("\nMIG devices CUDA sees:\n")
		for _, m := range n.MIG {
			fmt.Fprintf(b, "  %s\n", m)
		}
	}

	labels := gpuLabels(n.GPUs)
	for i := range n.NICs {
		labels = append(labels, fmt.Sprintf("NIC%d", i))
	}
	rows = [][]string{append(append([]string{""}, labels...), "CPU Affinity", "NUMA Affinity")}
	for i, cells := range n.Matrix {
		row := append([]string{labels[i]}, cells...)
		if i < len(n.GPUs) {
			row = append(row, n.GPUs[i].Affinity, n.GPUs[i].NUMA)
		}
		rows = append(rows, row)
	}
	b.WriteString("\n")
	st.table(b, rows)
	b.WriteString("\n")
	st.legend(b, matrixLegend)
	if len(n.NICs) > 0 {
		b.WriteString("\nNIC Legend:\n\n")
		rows = nil
		if st.md { // a Markdown table needs a header row
			rows = [][]string{{"NIC", "name", "kind", "speed", "PCI bus id", "state"}}
		}
		for i, c := range n.NICs {
			rows = append(rows, []string{fmt.Sprintf("  NIC%d:", i), c.Name, c.Kind, c.Speed, c.BusID, c.State})
		}
		st.table(b, rows)
	}

	b.WriteString("\n")
	if len(n.NVLinks) == 0 {
		b.WriteString("NVLink: none\n")
	} else {
		rows = [][]string{{"NVLink", "to", "links", "up", "down", "version", "GB/s each", "GB/s up"}}
		for _, l := range n.NVLinks {
			links, each, total := strconv.Itoa(l.Links), "N/A", "N/A"
			if l.Links == 0 {
				links = "N/A"
			}
			if l.PerLinkGBs > 0 {
				each = gbsText(l.PerLinkGBs)
			}
			if l.TotalGBs > 0 {
				total = gbsText(l.TotalGBs)
			}
			down := "-"
			if len(l.Down) > 0 {
				down = joinInts(l.Down)
			}
			rows = append(rows, []string{"GPU" + n.GPUs[l.GPU].Index, l.Remote, links, strconv.Itoa(l.Up), down, l.Version, each, total})
		}
		st.table(b, rows)
	}

	if p2pCap != "" && n.P2P != nil {
		fmt.Fprintf(b, "\nP2P %s status\n\n", p2pCap)
		labels := gpuLabels(n.GPUs)
		rows = [][]string{append([]string{""}, labels...)}
		for i, cells := range n.P2P {
			rows = append(rows, append([]string{labels[i]}, cells...))
		}
		st.table(b, rows)
		b.WriteString("\n")
		st.legend(b, p2pLegend)
	}
}

// gpuLabels names GPUs by their NVML index, which stays right when NVML could not open one.
func gpuLabels(gpus []GPURow) []string {
	l := make([]string, len(gpus))
	for i, g := range gpus {
		l[i] = "GPU" + g.Index
	}
	return l
}

// columns writes rows with each column as wide as its widest cell, two spaces apart.
func columns(b *bytes.Buffer, rows [][]string) {
	var width []int
	for _, r := range rows {
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len(c))
		}
	}
	for _, r := range rows {
		var line strings.Builder
		for i, c := range r {
			line.WriteString(c)
			if i < len(r)-1 {
				line.WriteString(strings.Repeat(" ", width[i]-len(c)+2))
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}

// WriteJSON writes the machine as a topology file (docs/topology.md), which --topology reads back;
// a file past what --topology reads (input.TopologyLimit, reached by a template of long names
// repeated over thousands of nodes, which the file writes node by node) is refused with
// input.ErrTooLarge, and nothing is written.
func WriteJSON(w io.Writer, r *Report) error {
	if r.Topology == nil {
		return r.TopologyErr
	}
	data, err := json.MarshalIndent(r.Topology, "", " ")
	if err != nil {
		return err
	}
	if len(data) >= input.TopologyLimit {
		return fmt.Errorf("%w: the topology file would be %d MiB, and gpubench reads back at most %d MiB: give the parts shorter names and ids, or describe fewer nodes", input.ErrTooLarge, len(data)>>20, input.TopologyLimit>>20)
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// WriteDOT writes the machine as a Graphviz graph: one cluster per node, a vertex per part and an
// edge per link, labelled with its kind and bandwidth.
func WriteDOT(w io.Writer, r *Report) error {
	var b bytes.Buffer
	name := r.Nodes[0].Hostname
	if r.Topology != nil {
		name = r.Topology.Name
	}
	fmt.Fprintf(&b, "graph %s {\n  node [shape=box, fontname=\"Helvetica\"];\n  edge [fontname=\"Helvetica\", fontsize=10];\n", quote(name))
	for _, n := range r.dotNodes() {
		fmt.Fprintf(&b, "  subgraph %s {\n    label=%s;\n", quote("cluster_"+n.Hostname), quote(n.Hostname))
		v := func(id string) string { return quote(n.Hostname + "/" + id) }
		for _, c := range n.CPUs {
			fmt.Fprintf(&b, "    %s [shape=ellipse, label=%s];\n", v(c.ID), quote(joinNonEmpty(c.ID, c.Name, "NUMA "+strconv.Itoa(c.NUMANode))))
		}
		for i, g := range n.GPUs {
			fmt.Fprintf(&b, "    %s [style=bold, label=%s];\n", v(g.ID), quote(joinNonEmpty(fmt.Sprintf("GPU%d %s", i, g.ID), g.Name, g.PCIBusID)))
		}
		for _, s := range n.Switches {
			kind := "PCIe switch"
			if s.Kind == "nvswitch" {
				kind = "NVSwitch"
				if s.NVLS {
					kind += " (NVLS)"
				}
			}
			fmt.Fprintf(&b, "    %s [shape=diamond, label=%s];\n", v(s.ID), quote(s.ID+"\n"+kind))
		}
		for _, c := range n.NICs {
			fmt.Fprintf(&b, "    %s [shape=hexagon, label=%s];\n", v(c.ID), quote(joinNonEmpty(c.ID, c.Kind+" "+gbpsText(c.Gbps))))
		}
		for _, l := range n.Links {
			fmt.Fprintf(&b, "    %s -- %s [%s];\n", v(l.A), v(l.B), dotEdge(l))
		}
		b.WriteString("  }\n")
	}
	if r.Topology != nil && r.Topology.Network != nil {
		fmt.Fprintf(&b, "  network [shape=doubleoctagon, label=%s];\n", quote(r.Topology.Network.Kind+" network"))
		for _, n := range r.Topology.Nodes {
			for _, c := range n.NICs {
				fmt.Fprintf(&b, "  %s -- network [style=dotted];\n", quote(n.Hostname+"/"+c.ID))
			}
		}
	}
	b.WriteString("}\n")
	_, err := w.Write(b.Bytes())
	return err
}

// dotNodes are the nodes to draw: on a real machine every part found, including NICs the
// topology file leaves out.
func (r *Report) dotNodes() []gpu.Node {
	if r.nodes != nil || r.Topology == nil {
		return r.nodes
	}
	return r.Topology.Nodes
}

func dotEdge(l gpu.Link) string {
	var label string
	switch l.Kind {
	case gpu.LinkNVLink:
		label = "NVLink"
		if l.Lanes > 0 {
			label += fmt.Sprintf(" x%d", l.Lanes)
		}
		label += "\n" + gbsText(l.GBs) + " GB/s"
		return fmt.Sprintf("color=green4, penwidth=2, label=%s", quote(label))
	case gpu.LinkSMP:
		return fmt.Sprintf("style=dashed, label=%s", quote("SMP\n"+gbsText(l.GBs)+" GB/s"))
	}
	label = "PCIe"
	if l.Gen > 0 && l.Width > 0 {
		label += fmt.Sprintf(" Gen%d x%d", l.Gen, l.Width)
	}
	if l.GBs > 0 {
		label += "\n" + gbsText(l.GBs) + " GB/s"
	}
	if l.HostBridge != "" {
		label += "\nhost bridge " + l.HostBridge
	}
	return "label=" + quote(label)
}

func joinNonEmpty(s ...string) string {
	var out []string
	for _, x := range s {
		if x != "" {
			out = append(out, x)
		}
	}
	return strings.Join(out, "\n")
}

// quote writes a DOT string: newlines as \n, quotes and backslashes escaped.
func quote(s string) string {
	s = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
	return `"` + s + `"`
}
