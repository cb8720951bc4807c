package gpu

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// The values of a topology file's "format" field. Version 2 adds node templates with a count,
// fabrics of leaves and spines, NVLink domains across hosts and GPU-to-NIC affinity; version 1
// files keep loading unchanged.
const (
	TopologyFormat  = "gpubench-topology/1"
	TopologyFormat2 = "gpubench-topology/2"
)

// LinkKind is a link's kind: what it is made of, which sets its protocol efficiencies and its
// default latency.
type LinkKind string

// The kinds of link.
const (
	LinkNVLink LinkKind = "nvlink"
	LinkPCIe   LinkKind = "pcie"
	LinkSMP    LinkKind = "smp" // between CPU sockets
	LinkNet    LinkKind = "net" // a NIC's link to the network (made by Validate, never in a file)
)

// PathType names a route between two GPUs as NCCL and nvidia-smi name paths.
type PathType string

// The types of path, from the closest to the farthest.
const (
	PathNVL PathType = "NVL" // over NVLink
	PathPIX PathType = "PIX" // through at most one PCIe switch
	PathPXB PathType = "PXB" // through several PCIe switches, no CPU
	PathPHB PathType = "PHB" // through a CPU's PCIe host bridge
	PathSYS PathType = "SYS" // across CPU sockets
	PathSHM PathType = "SHM" // staged through host memory (P2P off)
	PathNET PathType = "NET" // through the network
)

// Ranges that keep the cost model's answers finite and meaningful: no link is slower than 1 MB/s
// (the slowest real one, PCIe Gen1 x1, carries 250 MB/s), and a slow link keeps at least a
// thousandth of its bandwidth (one NVLink lane of 18 keeps 0.055, PCIe x1 at Gen1 instead of x16
// at Gen5 about 0.004).
const (
	MinGBs        = 0.001
	MinSlowFactor = 0.001
)

// Topology describes one or more machines: GPUs, CPUs, switches, NICs and the links between them.
// It is what the simulator runs on, and what `gpubench topo --output json` records. The file format
// is documented in docs/topology.md. Parse it with ParseTopology, which also builds the routing
// graph; a hand-made Topology must go through Validate before use.
type Topology struct {
	Format      string   `json:"format"`
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	P2P         string   `json:"p2p,omitempty"` // "all" (default): same-node GPUs may use P2P; "none"
	Network     *Network `json:"network,omitempty"`
	// Templates (version 2) are node bodies that entries of Nodes name with a count.
	Templates map[string]Node `json:"templates,omitempty"`
	// NVLinkDomainNodes (version 2), when above 1, makes every run of that many consecutive nodes
	// one NVLink domain: their NVSwitches are one fabric (GB200 NVL72: 18 nodes of 4 GPUs).
	NVLinkDomainNodes int    `json:"nvlink_domain_nodes,omitempty"`
	Nodes             []Node `json:"nodes"`
	// Calibration (version 2) is what gpubench calibrate fitted from runs of this machine.
	Calibration *Calibration `json:"calibration,omitempty"`
	// NoPXN routes traffic between nodes out of the sending GPU's own NIC, never over NVLink to
	// the GPU next to the receiver's rail first (NCCL_PXN_DISABLE=1). Not part of the file.
	NoPXN bool `json:"-"`
	// NICOK, when set, is the NICs NCCL may use, by id (NCCL_IB_HCA): Validate gives every GPU
	// one of them, a GPU whose own NIC it leaves out the nearest it takes. Not part of the file.
	NICOK func(id string) bool `json:"-"`

	gpus  []gpuRef
	verts map[string]int // "host/id" -> vertex
	kinds []string       // vertex kind: gpu, cpu, nvswitch, pcie, nic, fabric
	edges []edge
	adj   [][]int // vertex -> edge indices
	// Between nodes, a GPU's route always leaves and enters through its nearest NIC, found once
	// per GPU at Validate rather than once per pair: up[g] and down[g] are the hops from GPU g
	// to that NIC and back (nil without one), netEdge[v] a NIC vertex's link to the network.
	up, down [][]Hop
	nic      []int // GPU -> its NIC's vertex (its "nic", else the nearest, balanced), or -1
	netEdge  map[int]int
	fabric   fabric
	entry    []int            // node -> the entry of the file's nodes it comes from (expand)
	nvlPaths map[[2]int][]Hop // NVLink paths between GPUs of one NVLink domain, found on demand
	near     map[int][]int    // GPU -> the NICs it reaches over PCIe without a CPU, found on demand
	lanes    map[int][]int    // GPU -> its local NICs for point-to-point (laneNICs), found on demand
	laneWays map[[3]int][]Hop // (GPU, NIC, 1 up or 0 down) -> a lane's PCIe way, found on demand
	mu       sync.Mutex       // guards nvlPaths, near, lanes and laneWays
	// scratch is walk's marks of what it has seen, kept for the next search; scratchMu guards it.
	scratch   *bfsScratch
	scratchMu sync.Mutex
}

// Network is the fabric that joins the nodes' NICs. Version 1 knows only a non-blocking one;
// version 2 describes leaves and spines as NCCL's users know them (docs/topology.md).
type Network struct {
	Kind      string  `json:"kind"`       // infiniband, ethernet; version 2 adds roce and efa
	LatencyUS float64 `json:"latency_us"` // each NIC's link to the fabric
	// Layout: "" or "single" (one non-blocking switch), "rail" (a leaf per rail, i.e. per NIC
	// index, for every NodesPerLeaf nodes: NVIDIA's rail-optimized design) or "fat-tree" (a leaf
	// for every NodesPerLeaf nodes, all their NICs), with leaves joined by spines.
	Layout       string `json:"layout,omitempty"`
	NodesPerLeaf int    `json:"nodes_per_leaf,omitempty"`
	// Tiers is 2 (leaf, spine) or 3 (leaf, spine, core): how many switches a message crosses
	// between leaves. Oversubscription is a leaf's downlink over its uplink bandwidth (1: none).
	Tiers            int     `json:"tiers,omitempty"`
	Oversubscription float64 `json:"oversubscription,omitempty"`
	SwitchLatencyUS  float64 `json:"switch_latency_us,omitempty"` // one switch crossed
	// SHARP: the switches reduce in the network (NVIDIA SHARP), which NCCL's CollNet uses.
	SHARP bool `json:"sharp,omitempty"`
	// PluginLatencyUS is the latency NCCL's net plugin reports for its devices
	// (ncclNetProperties_t latency), which NCCL's tuner adds to every step between nodes of its
	// estimate, twice for Simple: it steers NCCL's pick, not the wire. nil: the kind's default
	// (PluginLatency).
	PluginLatencyUS *float64 `json:"plugin_latency_us,omitempty"`
	// MessageUS is what each message to or from the fabric costs the host that posts it (NCCL's
	// proxy thread posting a send or a receive and handling its completion), µs. nil: the
	// default (MessageCost).
	MessageUS *float64 `json:"message_us,omitempty"`
}

// Node is one machine.
type Node struct {
	Hostname string `json:"hostname"`
	// Template and Count (version 2): this entry stands for Count nodes (1 if 0) whose parts are
	// the template's, named Hostname with "{i}" replaced by 0, 1, ... (or Hostname-i when Hostname
	// has no "{i}" and Count is above 1).
	Template string   `json:"template,omitempty"`
	Count    int      `json:"count,omitempty"`
	CPUs     []CPU    `json:"cpus"`
	GPUs     []GPU    `json:"gpus"`
	Switches []Switch `json:"switches,omitempty"`
	NICs     []NIC    `json:"nics,omitempty"`
	Links    []Link   `json:"links"`
}

// CPU is a CPU socket (a NUMA node's root complex).
type CPU struct {
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	NUMANode int    `json:"numa_node"`
}

// GPU is one device.
type GPU struct {
	ID                string  `json:"id"`
	Name              string  `json:"name"`
	UUID              string  `json:"uuid,omitempty"`
	PCIBusID          string  `json:"pci_bus_id"`
	MemoryBytes       int64   `json:"memory_bytes"`
	MemoryGBs         float64 `json:"memory_bandwidth_gbs"`
	ComputeCapability string  `json:"compute_capability"`
	NUMANode          int     `json:"numa_node"`

	// What `gpubench topo` records of a real GPU beside its wiring; the simulator shows these
	// facts but does not use them. Zero and absent mean not recorded.
	// NIC (version 2) names the NIC this GPU's traffic between nodes leaves by (its rail);
	// without it, the nearest NIC, spreading GPUs that are equally near over their NICs.
	NIC string `json:"nic,omitempty"`

	CPUAffinity  string `json:"cpu_affinity,omitempty"`     // CPUs local to the GPU, a Linux CPU list: "0-55,112-167"
	PCIeGen      int    `json:"pcie_gen,omitempty"`         // PCIe link generation when recorded (idle GPUs lower it)
	PCIeWidth    int    `json:"pcie_width,omitempty"`       // PCIe link width when recorded
	PCIeGenMax   int    `json:"pcie_gen_max,omitempty"`     // the highest generation the GPU and its slot allow
	PCIeWidthMax int    `json:"pcie_width_max,omitempty"`   // the widest link the GPU and its slot allow
	Persistence  *bool  `json:"persistence_mode,omitempty"` // NVIDIA driver persistence mode
	MIG          *bool  `json:"mig_mode,omitempty"`         // MIG mode (current)
}

// Switch is an NVSwitch fabric (kind "nvswitch"; NVLS when it supports NVLink SHARP) or a PCIe
// switch (kind "pcie").
type Switch struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	NVLS bool   `json:"nvls,omitempty"`
}

// NIC is a network adapter on the node's PCIe tree.
type NIC struct {
	ID   string  `json:"id"`
	Kind string  `json:"kind"` // infiniband, ethernet
	Gbps float64 `json:"gbps"`
}

// Link joins two of a node's parts. GBs is the bandwidth in each direction in GB/s (1e9 bytes),
// for all lanes together; for PCIe it may be left out and is then derived from Gen and Width.
type Link struct {
	A         string   `json:"a"`
	B         string   `json:"b"`
	Kind      LinkKind `json:"kind"` // nvlink, pcie, smp (CPU to CPU)
	Lanes     int      `json:"lanes,omitempty"`
	Gen       int      `json:"gen,omitempty"`
	Width     int      `json:"width,omitempty"`
	GBs       float64  `json:"gbs,omitempty"`
	LatencyUS float64  `json:"latency_us,omitempty"`
	// HostBridge names the PCIe host bridge (root complex) a pcie link into a CPU enters, as Linux
	// names it ("pci0000:17"). Optional; `gpubench topo` tells PHB from NODE by it.
	HostBridge string `json:"host_bridge,omitempty"`
}

type gpuRef struct {
	node, index int // position in Nodes[node].GPUs
	vert        int
}

type edge struct {
	a, b      int
	kind      LinkKind
	gbs       float64 // nominal, per direction
	slow      float64 // fraction of gbs the link delivers (SlowLink); 1 when healthy
	latencyUS float64
	// node is the node whose links declare this one, or -1 for a link Validate makes (the
	// network's). The NVSwitch an NVLink domain's hosts share is named by all of them, so its
	// links tell their host only by this (SlowNode).
	node int
}

// PCIe bandwidth per lane and direction in GB/s after line coding (PCI-SIG): Gen1/2 8b/10b,
// Gen3+ 128b/130b, Gen6 FLIT.
var pcieLaneGBs = map[int]float64{1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

// PCIeEfficiency is NCCL's PCIe figure per lane (width × GT/s / 80: 1.5 GB/s for Gen4, 24 GB/s
// for Gen4 x16) over the nominal one after line coding (1.969 GB/s).
const PCIeEfficiency = 1.5 / 1.969

// Default per-hop latencies (µs) where a link gives none; see docs/model.md.
var defaultLatencyUS = map[LinkKind]float64{LinkNVLink: 0.5, LinkPCIe: 0.25, LinkSMP: 0.5, LinkNet: 2.0}

var netKinds = map[string]bool{"infiniband": true, "ethernet": true, "roce": true, "efa": true}

var (
	idPattern      = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)
	ccPattern      = regexp.MustCompile(`^[1-9][0-9]?\.[0-9]$`)
	cpuListPattern = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)
)

// ParseTopology reads and validates a topology file.
func ParseTopology(data []byte) (*Topology, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // the byte order mark some editors write
	if !utf8.Valid(data) {                                // the JSON reader would make each bad byte U+FFFD, unseen
		bad := 0
		for bad < len(data) {
			r, n := utf8.DecodeRune(data[bad:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			bad += n
		}
		return nil, fmt.Errorf("not a gpubench topology file: a byte that is not UTF-8 at %s: save the file as UTF-8", lineCol(data, int64(bad)+1))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var t Topology
	if err := dec.Decode(&t); err == io.EOF {
		return nil, fmt.Errorf("not a gpubench topology file: it is empty (gpubench topo --output json writes one)")
	} else if err != nil {
		return nil, fmt.Errorf("not a gpubench topology file: %s", jsonErr(data, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("not a gpubench topology file: data after the topology object")
	}
	if err := duplicateKey(data); err != nil {
		return nil, err
	}
	if err := zeroNetworkField(data); err != nil {
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

// duplicateKey finds a name given twice in one object of data, a valid JSON document: encoding/json
// keeps the last value and matches names in any case, so the first would be dropped unseen.
func duplicateKey(data []byte) error {
	type frame struct {
		keys    map[string]bool // an object's names so far, lower-cased; nil for an array
		wantKey bool
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil { // io.EOF, or an error Decode has already reported
			return nil
		}
		if n := len(stack); n > 0 && stack[n-1].wantKey {
			if k, ok := tok.(string); ok {
				top := stack[n-1]
				if top.keys[strings.ToLower(k)] {
					return fmt.Errorf("%q is given twice in one object (the names may differ in case), at %s: give each once", k, lineCol(data, dec.InputOffset()))
				}
				top.keys[strings.ToLower(k)], top.wantKey = true, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, wantKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if n := len(stack); n > 0 && stack[n-1].keys != nil { // a value of an object ended
			stack[n-1].wantKey = true
		}
	}
}

// zeroNetworkField refuses a network field given as 0 where 0 is no valid value: decoded, a 0 is
// the field left out, and would quietly take its default (oversubscription 0 read as 1, none).
func zeroNetworkField(data []byte) error {
	var doc struct {
		Network map[string]json.RawMessage `json:"network"`
	}
	if json.Unmarshal(data, &doc) != nil {
		return nil // decoded once already: what is wrong there has been said
	}
	for _, f := range []struct{ name, want string }{
		{"nodes_per_leaf", fmt.Sprintf("give 1 to %d nodes a leaf, or leave it out (32)", MaxGPUs)},
		{"tiers", "want 2 or 3, or leave it out (2)"},
		{"oversubscription", "want a ratio from 1 (none) to 64, or leave it out (1)"},
	} {
		for k, v := range doc.Network {
			var x float64
			if strings.EqualFold(k, f.name) && json.Unmarshal(v, &x) == nil && x == 0 {
				return fmt.Errorf("network %s 0: %s", f.name, f.want)
			}
		}
	}
	return nil
}

// jsonErr says where in data a decoding error is, as a line and column, which a JSON error's byte
// offset leaves the reader to count.
func jsonErr(data []byte, err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("%v, at %s", err, lineCol(data, se.Offset))
	case errors.As(err, &te):
		field := cmp.Or(te.Field, "the topology")
		return fmt.Sprintf("%s is %s, where %s belongs, at %s", field, jsonValue(te.Value), jsonKind(te.Type), lineCol(data, te.Offset))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "it ends inside the topology (the file was cut short?)"
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		msg := "unknown field " + name + ": check its spelling and place against docs/topology.md"
		// A quoted name followed by a colon is a name, never a value, in valid JSON.
		for off := 0; ; {
			i := bytes.Index(data[off:], []byte(name))
			if i < 0 {
				return msg
			}
			off += i + len(name)
			if rest := bytes.TrimLeft(data[off:], " \t\r\n"); len(rest) > 0 && rest[0] == ':' {
				return msg + ", at " + lineCol(data, int64(off))
			}
		}
	}
	return err.Error()
}

// jsonValue names the kind of JSON value an UnmarshalTypeError found ("string", "number 1.5").
func jsonValue(v string) string {
	switch {
	case v == "array" || v == "object":
		return "an " + v
	case v == "bool":
		return "a boolean"
	}
	return "a " + v
}

// jsonKind says what JSON value a Go type is read from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list [...]"
	}
	return "an object {...}"
}

// lineCol is where the byte before offset off of data is (encoding/json's offsets count the byte
// at fault read), as "line L, column C", both from 1.
func lineCol(data []byte, off int64) string {
	before := data[:min(max(off, 1), int64(len(data)))]
	return fmt.Sprintf("line %d, column %d", bytes.Count(before, []byte("\n"))+1, len(before)-bytes.LastIndexByte(before, '\n')-1)
}

// Validate checks the topology and builds its routing graph; an empty p2p becomes "all", a
// version 2 file's templates become nodes, and a network's defaults are filled in.
func (t *Topology) Validate() error {
	if err := t.checkHeader(); err != nil {
		return err
	}
	t.gpus, t.verts, t.kinds, t.edges, t.adj, t.netEdge, t.nvlPaths, t.near = nil, map[string]int{}, nil, nil, nil, map[int]int{}, nil, nil
	t.lanes, t.laneWays = nil, nil
	hosts := map[string]int{} // hostname -> the node that has it
	for ni := range t.Nodes {
		n := &t.Nodes[ni]
		// Errors name the file's entry (a template's entry makes several nodes).
		switch prev, dup := hosts[n.Hostname]; {
		case n.Hostname == "":
			return fmt.Errorf("node %d: hostname is missing: give every node one (letters, digits and _.:-)", t.entry[ni])
		case !idPattern.MatchString(n.Hostname):
			return fmt.Errorf("node %d: hostname %q is malformed: use letters, digits and _.:- only", t.entry[ni], n.Hostname)
		case dup:
			return fmt.Errorf("node %d: hostname %q is used twice, by node %d too: give every node its own", t.entry[ni], n.Hostname, t.entry[prev])
		}
		hosts[n.Hostname] = ni
		if err := t.addParts(ni); err != nil {
			return err
		}
		for li, l := range n.Links {
			if err := t.addLink(ni, li, l); err != nil {
				return err
			}
		}
	}
	t.buildFabric()
	if err := t.assignNICs(); err != nil {
		return err
	}
	// Every GPU must reach every other one.
	return t.checkReach()
}

// checkHeader checks the top-level fields and the limits, before any part is looked at.
func (t *Topology) checkHeader() error {
	if t.Format != TopologyFormat && t.Format != TopologyFormat2 {
		return fmt.Errorf("topology format is %q; want %q or %q", t.Format, TopologyFormat, TopologyFormat2)
	}
	if t.Name == "" {
		return fmt.Errorf("topology has no name: give it one (name)")
	}
	switch t.P2P {
	case "":
		t.P2P = "all"
	case "all", "none":
	default:
		return fmt.Errorf("topology p2p is %q; want \"all\" or \"none\"", t.P2P)
	}
	if err := t.checkVersion(); err != nil {
		return err
	}
	if t.Calibration != nil {
		if err := t.Calibration.check(); err != nil {
			return err
		}
	}
	if err := t.expand(); err != nil {
		return err
	}
	if err := t.checkText(); err != nil {
		return err
	}
	if err := t.checkLimits(); err != nil {
		return err
	}
	switch {
	case len(t.Nodes) == 0:
		return fmt.Errorf("topology %s has no nodes: describe at least one (nodes)", t.Name)
	case len(t.Nodes) > 1 && t.Network == nil:
		return fmt.Errorf("topology %s has %d nodes but no network: describe the network between them, e.g. \"network\": {\"kind\": \"infiniband\"}", t.Name, len(t.Nodes))
	case t.Network != nil && !netKinds[t.Network.Kind]:
		return fmt.Errorf("network kind %q; want infiniband, roce, efa or ethernet", t.Network.Kind)
	case t.Network != nil && (t.Network.LatencyUS < 0 || t.Network.LatencyUS > 1e6):
		return fmt.Errorf("network latency_us %v is out of range: give 0 (the kind's default) to 1e6 µs", t.Network.LatencyUS)
	case t.Network != nil:
		return t.Network.check()
	}
	return nil
}

// addVertex adds a vertex of the routing graph and returns it.
func (t *Topology) addVertex(kind string) int {
	t.kinds = append(t.kinds, kind)
	t.adj = append(t.adj, nil)
	return len(t.kinds) - 1
}

// addPart adds a node's part as a vertex named host/id.
func (t *Topology) addPart(host, id, kind string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("node %s: bad id %q (use letters, digits and _.:-)", host, id)
	}
	key := host + "/" + id
	if _, dup := t.verts[key]; dup {
		return fmt.Errorf("node %s: id %q used twice: give each CPU, GPU, switch and NIC of a node its own", host, id)
	}
	t.verts[key] = t.addVertex(kind)
	return nil
}

// addParts checks node ni's CPUs, GPUs, switches and NICs and adds them to the graph. The
// NVSwitches of nodes in one NVLink domain are one vertex, shared.
func (t *Topology) addParts(ni int) error {
	n := &t.Nodes[ni]
	if len(n.GPUs) == 0 {
		return fmt.Errorf("node %s has no GPUs: give it at least one (gpus), or drop the node", n.Hostname)
	}
	for _, c := range n.CPUs {
		if err := t.addPart(n.Hostname, c.ID, "cpu"); err != nil {
			return err
		}
	}
	for gi, g := range n.GPUs {
		if err := t.addPart(n.Hostname, g.ID, "gpu"); err != nil {
			return err
		}
		if err := g.validate(); err != nil {
			return fmt.Errorf("node %s gpu %s: %v", n.Hostname, g.ID, err)
		}
		t.gpus = append(t.gpus, gpuRef{node: ni, index: gi, vert: len(t.kinds) - 1})
	}
	for _, s := range n.Switches {
		if s.Kind != "nvswitch" && s.Kind != "pcie" {
			return fmt.Errorf("node %s switch %s: kind %q; want nvswitch or pcie", n.Hostname, s.ID, s.Kind)
		}
		if s.NVLS && s.Kind != "nvswitch" {
			return fmt.Errorf("node %s switch %s: nvls is NVLink SHARP, which only an nvswitch has: drop it, or make the switch's kind nvswitch", n.Hostname, s.ID)
		}
		if err := t.addPart(n.Hostname, s.ID, s.Kind); err != nil {
			return err
		}
		if d := t.domainOf(ni); s.Kind == "nvswitch" && t.NVLinkDomainNodes > 1 {
			key := fmt.Sprintf("nvlink-domain-%d/%s", d, s.ID)
			if shared, ok := t.verts[key]; ok {
				t.verts[n.Hostname+"/"+s.ID] = shared // the part just added stays unlinked
			} else {
				t.verts[key] = t.verts[n.Hostname+"/"+s.ID]
			}
		}
	}
	for _, c := range n.NICs {
		if err := t.addPart(n.Hostname, c.ID, "nic"); err != nil {
			return err
		}
		if !netKinds[c.Kind] {
			return fmt.Errorf("node %s nic %s: kind %q; want infiniband, roce, efa or ethernet", n.Hostname, c.ID, c.Kind)
		}
		if !(c.Gbps >= 8*MinGBs && c.Gbps < 1e6) {
			return fmt.Errorf("node %s nic %s: gbps %v is out of range [%g, 1e6)", n.Hostname, c.ID, c.Gbps, 8*MinGBs)
		}
	}
	return nil
}

// validate checks a GPU's required fields and the optional facts `gpubench topo` records.
func (g GPU) validate() error {
	switch {
	case g.MemoryBytes < 0:
		return fmt.Errorf("memory_bytes %d must be positive: give the GPU's memory in bytes, e.g. 85520809984", g.MemoryBytes)
	case g.MemoryGBs < 0:
		return fmt.Errorf("memory_bandwidth_gbs %v must be positive: give the GPU's memory bandwidth in GB/s, e.g. 3350", g.MemoryGBs)
	case g.MemoryBytes == 0 || g.MemoryGBs == 0 || g.Name == "":
		return fmt.Errorf("name, memory_bytes and memory_bandwidth_gbs must be set")
	}
	if !(g.MemoryGBs >= MinGBs && g.MemoryGBs < 1e6) {
		return fmt.Errorf("memory_bandwidth_gbs %v is out of range [%g, 1e6)", g.MemoryGBs, MinGBs)
	}
	if !ccPattern.MatchString(g.ComputeCapability) {
		return fmt.Errorf("compute_capability %q; want MAJOR.MINOR, e.g. \"9.0\"", g.ComputeCapability)
	}
	return g.validateFacts()
}

// addLink checks link li of node ni and adds it to the graph, with its bandwidth (derived from
// PCIe's generation and width when not given) and latency (the kind's default when not given).
func (t *Topology) addLink(ni, li int, l Link) error {
	n := &t.Nodes[ni]
	a, okA := t.verts[n.Hostname+"/"+l.A]
	b, okB := t.verts[n.Hostname+"/"+l.B]
	if !okA || !okB || a == b {
		return fmt.Errorf("node %s link %d: %q-%q does not join two known parts", n.Hostname, li, l.A, l.B)
	}
	if err := t.checkEnds(l.Kind, a, b); err != nil {
		return fmt.Errorf("node %s link %s-%s: %v", n.Hostname, l.A, l.B, err)
	}
	gbs := l.GBs
	switch l.Kind {
	case LinkPCIe:
		if gbs == 0 {
			per, ok := pcieLaneGBs[l.Gen]
			if !ok || l.Width <= 0 || l.Width > 32 {
				return fmt.Errorf("node %s link %s-%s: pcie needs gbs, or gen 1-6 and width 1-32", n.Hostname, l.A, l.B)
			}
			gbs = per * float64(l.Width)
		}
	case LinkNVLink, LinkSMP:
	default:
		return fmt.Errorf("node %s link %s-%s: kind %q; want nvlink, pcie or smp", n.Hostname, l.A, l.B, l.Kind)
	}
	if !(gbs >= MinGBs && gbs < 1e6) {
		return fmt.Errorf("node %s link %s-%s: gbs %v is out of range [%g, 1e6)", n.Hostname, l.A, l.B, gbs, MinGBs)
	}
	if l.Lanes < 0 || l.Lanes > 1024 {
		return fmt.Errorf("node %s link %s-%s: lanes %d; want 0 (not recorded) to 1024", n.Hostname, l.A, l.B, l.Lanes)
	}
	if l.HostBridge != "" && (l.Kind != LinkPCIe || t.kinds[a] != "cpu" && t.kinds[b] != "cpu" || !idPattern.MatchString(l.HostBridge)) {
		return fmt.Errorf("node %s link %s-%s: host_bridge %q needs a pcie link to a CPU and a name of letters, digits and _.:-", n.Hostname, l.A, l.B, l.HostBridge)
	}
	lat := l.LatencyUS
	if lat == 0 {
		lat = defaultLatencyUS[l.Kind]
	}
	if lat < 0 || lat > 1e6 {
		return fmt.Errorf("node %s link %s-%s: latency_us %v is out of range: give 0 (the kind's default) to 1e6 µs", n.Hostname, l.A, l.B, lat)
	}
	t.addEdge(a, b, l.Kind, gbs, lat)
	t.edges[len(t.edges)-1].node = ni
	return nil
}

// checkEnds checks that a link of the kind can join parts a and b: NVLink joins GPUs and
// NVSwitches, smp joins CPU sockets, and PCIe joins a device (GPU or NIC) to a switch or CPU, or
// switches and CPUs to each other, never two devices.
func (t *Topology) checkEnds(kind LinkKind, a, b int) error {
	ka, kb := t.kinds[a], t.kinds[b]
	device := func(k string) bool { return k == "gpu" || k == "nic" }
	switch {
	case kind == LinkNVLink && (ka != "gpu" && ka != "nvswitch" || kb != "gpu" && kb != "nvswitch"):
		return fmt.Errorf("nvlink joins GPUs and NVSwitches, not a %s and a %s (a Grace CPU's NVLink-C2C to its GPUs is a pcie link with its gbs, as in the gb200-nvl72 preset)", ka, kb)
	case kind == LinkSMP && (ka != "cpu" || kb != "cpu"):
		use := "pcie" // what joins a device, a PCIe switch or an NVSwitch to a CPU
		if (ka == "gpu" || ka == "nvswitch") && (kb == "gpu" || kb == "nvswitch") {
			use = "nvlink"
		}
		return fmt.Errorf("smp joins CPU sockets, not a %s and a %s: use %s", ka, kb, use)
	case kind == LinkPCIe && device(ka) && device(kb):
		return fmt.Errorf("pcie joins a %s to a PCIe switch or CPU, not to a %s: link both to the switch or CPU between them", ka, kb)
	}
	return nil
}

// validateFacts checks the optional facts `gpubench topo` records.
func (g GPU) validateFacts() error {
	if g.CPUAffinity != "" && !cpuListPattern.MatchString(g.CPUAffinity) {
		return fmt.Errorf("cpu_affinity %q; want a CPU list such as \"0-55,112-167\"", g.CPUAffinity)
	}
	for r := range strings.SplitSeq(g.CPUAffinity, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, errA := strconv.Atoi(lo)
		b, errB := strconv.Atoi(hi)
		if r != "" && (errA != nil || isRange && (errB != nil || b < a)) {
			return fmt.Errorf("cpu_affinity %q: range %q; want CPU numbers, each range from low to high, as in \"0-55,112-167\"", g.CPUAffinity, r)
		}
	}
	for _, f := range []struct {
		name     string
		v, limit int
	}{{"pcie_gen", g.PCIeGen, 6}, {"pcie_gen_max", g.PCIeGenMax, 6}, {"pcie_width", g.PCIeWidth, 32}, {"pcie_width_max", g.PCIeWidthMax, 32}} {
		if f.v < 0 || f.v > f.limit {
			return fmt.Errorf("%s %d is out of range 1-%d", f.name, f.v, f.limit)
		}
	}
	return nil
}

func (t *Topology) addEdge(a, b int, kind LinkKind, gbs, lat float64) {
	t.adj[a] = append(t.adj[a], len(t.edges))
	t.adj[b] = append(t.adj[b], len(t.edges))
	t.edges = append(t.edges, edge{a: a, b: b, kind: kind, gbs: gbs, slow: 1, latencyUS: lat, node: -1})
}

// NumGPUs is the number of GPUs over all nodes; GPUs are numbered in node order.
func (t *Topology) NumGPUs() int { return len(t.gpus) }

// GPU returns GPU i's description and the node it is on.
func (t *Topology) GPU(i int) (GPU, *Node) {
	r := t.gpus[i]
	return t.Nodes[r.node].GPUs[r.index], &t.Nodes[r.node]
}

// NodeOf returns the index of the node GPU i is on.
func (t *Topology) NodeOf(i int) int { return t.gpus[i].node }

// NodeGPUs lists each node's GPUs, by node.
func (t *Topology) NodeGPUs() [][]int {
	out := make([][]int, len(t.Nodes))
	for i := range t.gpus {
		n := t.gpus[i].node
		out[n] = append(out[n], i)
	}
	return out
}

// GPUName is "host/id" for GPU i.
func (t *Topology) GPUName(i int) string {
	g, n := t.GPU(i)
	return n.Hostname + "/" + g.ID
}

// NVLS reports whether GPU i sits on an NVSwitch with NVLink SHARP.
func (t *Topology) NVLS(i int) bool {
	s := t.nvSwitchOf(i)
	return s != nil && s.NVLS
}

// NVSwitch reports whether GPU i reaches the other GPUs through an NVSwitch, as NCCL's topology
// holds an NVS node (ncclTopoGetNvsCount).
func (t *Topology) NVSwitch(i int) bool { return t.nvSwitchOf(i) != nil }

// nvSwitchOf is the NVSwitch GPU i has an NVLink to, or nil.
func (t *Topology) nvSwitchOf(i int) *Switch {
	_, n := t.GPU(i)
	for _, ei := range t.adj[t.gpus[i].vert] {
		e := t.edges[ei]
		if e.kind != LinkNVLink {
			continue
		}
		other := e.a + e.b - t.gpus[i].vert
		for k := range n.Switches {
			if s := &n.Switches[k]; s.Kind == "nvswitch" && t.verts[n.Hostname+"/"+s.ID] == other {
				return s
			}
		}
	}
	return nil
}

// SlowLink makes the links between parts a and b deliver only f (0 < f <= 1) of their bandwidth:
// the simulator's slow-link fault. Nominal figures (BusPeak) keep the link's design value, so the
// loss shows against them. Parts are named "id" on a one-node topology, or "host/id".
func (t *Topology) SlowLink(a, b string, f float64) error {
	if !(f >= MinSlowFactor && f <= 1) {
		return fmt.Errorf("link factor %v is out of range [%g, 1]", f, MinSlowFactor)
	}
	va, okA := t.vertex(a)
	vb, okB := t.vertex(b)
	if !okA || !okB {
		return fmt.Errorf("no link %s-%s in topology %s: name parts by their id (host/id on several nodes)", a, b, t.Name)
	}
	found := false
	for i := range t.edges {
		if e := &t.edges[i]; e.a == va && e.b == vb || e.a == vb && e.b == va {
			e.slow *= f
			found = true
		}
	}
	if !found {
		return fmt.Errorf("no link %s-%s in topology %s", a, b, t.Name)
	}
	return nil
}

// SlowNIC makes a NIC's link to the network deliver only f of its bandwidth: the simulator's
// slow-nic fault (a bad transceiver, cable or port). The NIC is named "host/id".
func (t *Topology) SlowNIC(nic string, f float64) error {
	if !(f >= MinSlowFactor && f <= 1) {
		return fmt.Errorf("NIC factor %v is out of range [%g, 1]", f, MinSlowFactor)
	}
	v, ok := t.vertex(nic)
	e, linked := t.netEdge[v]
	if !ok || !linked {
		return fmt.Errorf("no NIC %s on a network in topology %s: name it host/id, as gpubench topo lists NICs", nic, t.Name)
	}
	if t.OneDomain() {
		return fmt.Errorf("NIC %s: topology %s is one NVLink domain, whose NICs carry nothing between its GPUs; give --nodes for more", nic, t.Name)
	}
	t.edges[e].slow *= f
	return nil
}

// SlowNode makes every link of a node (the links its file lists: NVLink, PCIe and CPU links,
// and its NICs' links to the network) deliver only f of its bandwidth: the simulator's slow-node
// fault. The links are picked by the node that lists them, not by the parts they touch: in an
// NVLink domain every host names the shared NVSwitch, and the other hosts' links to it stay
// healthy.
func (t *Topology) SlowNode(host string, f float64) error {
	if !(f >= MinSlowFactor && f <= 1) {
		return fmt.Errorf("node factor %v is out of range [%g, 1]", f, MinSlowFactor)
	}
	ni := slices.IndexFunc(t.Nodes, func(n Node) bool { return n.Hostname == host })
	if ni < 0 {
		return fmt.Errorf("no node %s in topology %s", host, t.Name)
	}
	for i := range t.edges {
		if e := &t.edges[i]; e.node == ni {
			e.slow *= f
		}
	}
	for _, v := range t.NICs(ni) {
		if e, ok := t.netEdge[v]; ok {
			t.edges[e].slow *= f
		}
	}
	return nil
}

// LinkEdges are the links between parts a and b ("id" on one node, else "host/id"), for faults
// that need to know whether a route crosses them.
func (t *Topology) LinkEdges(a, b string) ([]int, error) {
	va, okA := t.vertex(a)
	vb, okB := t.vertex(b)
	if !okA || !okB {
		return nil, fmt.Errorf("no link %s-%s in topology %s: name parts by their id (host/id on several nodes)", a, b, t.Name)
	}
	var out []int
	for i, e := range t.edges {
		if e.a == va && e.b == vb || e.a == vb && e.b == va {
			out = append(out, i)
		}
	}
	if out == nil {
		return nil, fmt.Errorf("no link %s-%s in topology %s", a, b, t.Name)
	}
	return out, nil
}

// nearNICs are the NICs of GPU g's host that it reaches over PCIe without crossing a CPU.
func (t *Topology) nearNICs(g int) []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.near[g]; ok {
		return v
	}
	var out []int
	for _, nic := range t.NICs(t.gpus[g].node) {
		if h := t.bfs(t.gpus[g].vert, nic, LinkPCIe); h != nil && !t.crossesCPU(h) {
			out = append(out, nic)
		}
	}
	if t.near == nil {
		t.near = map[int][]int{}
	}
	t.near[g] = out
	return out
}

func (t *Topology) vertex(name string) (int, bool) {
	if !strings.Contains(name, "/") && len(t.Nodes) == 1 {
		name = t.Nodes[0].Hostname + "/" + name
	}
	v, ok := t.verts[name]
	return v, ok
}

// Hop is one link crossed in one direction.
type Hop struct {
	Edge    int
	Forward bool // from the edge's a side to its b side
}

// Path is a route between two GPUs.
type Path struct {
	Hops      []Hop
	Type      PathType
	LatencyUS float64
}

// Route returns the path data takes from GPU a to GPU b: NVLink where it joins them, else PCIe
// (through host memory when P2P is off), and through the nodes' nearest NICs between nodes.
func (t *Topology) Route(a, b int) Path {
	va, vb := t.gpus[a].vert, t.gpus[b].vert
	if na, nb := t.gpus[a].node, t.gpus[b].node; na != nb {
		if t.domainOf(na) != t.domainOf(nb) {
			return t.own().netRoute(a, b)
		}
		return t.NVLinkRoute(a, b) // one NVLink domain across hosts
	}
	if t.P2P == "all" {
		if p := t.NVLinkRoute(a, b); p.Hops != nil {
			return p
		}
		if h := t.bfs(va, vb, LinkPCIe, LinkSMP); h != nil {
			return t.path(h, t.pcieType(h))
		}
		return Path{}
	}
	return t.StagedRoute(a, b)
}

// RouteNVLink is Route(a, b) where that route is NVLink, else an empty path, found without the
// PCIe or network search Route makes for a pair NVLink does not join.
func (t *Topology) RouteNVLink(a, b int) Path {
	if t.gpus[a].node == t.gpus[b].node && t.P2P != "all" {
		return Path{} // Route stages one node's pair through host memory without P2P
	}
	return t.NVLinkRoute(a, b)
}

// NVLinkRoute is the NVLink path from GPU a to GPU b (type NVL), whether or not P2P is on: NVLS
// reaches the switch over it either way, as its multicast is no peer access; empty where no
// NVLink joins them.
func (t *Topology) NVLinkRoute(a, b int) Path {
	if h := t.nvlPath(a, b); h != nil {
		return t.path(h, PathNVL)
	}
	return Path{}
}

// StagedRoute is the path of a copy between two GPUs of one node staged through host memory: up
// to the first GPU's nearest CPU, then down to the second GPU.
func (t *Topology) StagedRoute(a, b int) Path {
	va, vb := t.gpus[a].vert, t.gpus[b].vert
	cpu := t.nearest(va, "cpu", LinkPCIe)
	if cpu < 0 || t.gpus[a].node != t.gpus[b].node {
		return Path{}
	}
	up, down := t.bfs(va, cpu, LinkPCIe), t.bfs(cpu, vb, LinkPCIe, LinkSMP)
	if up == nil || down == nil {
		return Path{}
	}
	return t.path(append(up, down...), PathSHM)
}

// HostPath is the path between GPU g and pinned memory on its nearest CPU socket, towards the GPU
// (toGPU) or away from it.
func (t *Topology) HostPath(g int, toGPU bool) Path {
	v := t.gpus[g].vert
	cpu := t.nearest(v, "cpu", LinkPCIe)
	if cpu < 0 {
		return Path{}
	}
	if toGPU {
		return t.path(t.bfs(cpu, v, LinkPCIe), PathPHB)
	}
	return t.path(t.bfs(v, cpu, LinkPCIe), PathPHB)
}

// RouteVia routes between GPUs on different nodes through the given NIC vertices. When a's way to
// nicA crosses a CPU and the GPU that owns nicA is an NVLink away, the data goes over NVLink to
// it first (NCCL's PXN), unless NoPXN.
func (t *Topology) RouteVia(a, b, nicA, nicB int) Path {
	if nicA < 0 || nicB < 0 {
		return Path{}
	}
	h1 := t.bfs(t.gpus[a].vert, nicA, LinkPCIe, LinkSMP)
	if peer, nvl := t.own().nicOwner(a, nicA, h1); peer != a {
		h1 = append(append([]Hop(nil), nvl...), t.up[peer]...)
	} else if way := t.besideNIC(a, nicA, h1); way != nil {
		h1 = way
	}
	h3 := t.bfs(nicB, t.gpus[b].vert, LinkPCIe, LinkSMP)
	if h1 == nil || h3 == nil {
		return Path{}
	}
	return t.path(append(append(h1, t.netHops(nicA, nicB)...), h3...), PathNET)
}

// nicOwner is the GPU of a's node whose way out a's traffic to NIC nic takes: a itself when
// direct (a's own PCIe way to nic) does not cross a CPU; else, NVLink permitting, another GPU that
// leaves by nic, the first whose own way crosses no CPU or else the first, with the NVLink hops to
// it (NCCL's PXN) when PXN is on. A NIC that NCCL_IB_HCA gives a GPU from elsewhere in its node is
// reached this way.
func (v nicView) nicOwner(a, nic int, direct []Hop) (int, []Hop) {
	t := v.t
	if !t.pxn() || direct != nil && !t.crossesCPU(direct) {
		return a, nil
	}
	owner, first := -1, a-t.gpus[a].index
	for p := first; p < first+len(t.Nodes[t.gpus[a].node].GPUs); p++ {
		if p == a || v.nic(p) != nic {
			continue
		}
		if owner < 0 {
			owner = p
		}
		if !t.crossesCPU(v.up(p)) {
			owner = p
			break
		}
	}
	if owner >= 0 {
		if nvl := t.nvlPath(a, owner); nvl != nil {
			return owner, nvl
		}
	}
	return a, nil
}

// besideNIC is GPU a's way to NIC nic over NVLink to a GPU beside the NIC, where a's own way
// (direct) crosses a CPU and no GPU that leaves by nic took it (nicOwner): a NIC no GPU leaves by,
// such as a ConnectX-8's second port, is reached through the GPU local to it, as NCCL's PXN goes.
// nil where PXN is off, direct crosses no CPU, or no such GPU is an NVLink away.
func (t *Topology) besideNIC(a, nic int, direct []Hop) []Hop {
	if !t.pxn() || direct != nil && !t.crossesCPU(direct) {
		return nil
	}
	first := a - t.gpus[a].index
	for p := first; p < first+len(t.Nodes[t.gpus[a].node].GPUs); p++ {
		if p == a {
			continue
		}
		nvl := t.nvlPath(a, p) // first: it is kept, and nil at once for a GPU without NVLink
		if nvl == nil {
			continue
		}
		if way := t.bfs(t.gpus[p].vert, nic, LinkPCIe, LinkSMP); way != nil && !t.crossesCPU(way) {
			return append(append([]Hop(nil), nvl...), way...)
		}
	}
	return nil
}

// pxn reports whether traffic between nodes may cross NVLink to another GPU of its node first
// (NCCL's PXN): not with NoPXN, nor with P2P off, since PXN writes into that GPU's memory and
// without P2P NCCL routes the pair through the CPU (src/graph/paths.cc), which fails PXN's
// NVLink test.
func (t *Topology) pxn() bool { return !t.NoPXN && t.P2P == "all" }

// crossesCPU says whether a path passes through a CPU.
func (t *Topology) crossesCPU(h []Hop) bool {
	for _, x := range h {
		e := t.edges[x.Edge]
		if x.Forward && t.kinds[e.b] == "cpu" || !x.Forward && t.kinds[e.a] == "cpu" {
			return true
		}
	}
	return false
}

// NICOf is the id of the NIC GPU g's traffic between nodes leaves by (its rail's NIC, e.g.
// "mlx5_3"), or "" when it has none.
func (t *Topology) NICOf(g int) string {
	if t.nic[g] < 0 {
		return ""
	}
	return t.nicOf(g, t.nic[g]).ID
}

// LocalNICs returns GPU g's own NIC (the one its traffic between nodes leaves by) first, then the
// others it reaches over PCIe without crossing a CPU, in file order; none when it has no NIC.
func (t *Topology) LocalNICs(g int) []NIC {
	var out []NIC
	for _, v := range t.localNICs(g) {
		out = append(out, t.nicOf(g, v))
	}
	return out
}

// localNICs is LocalNICs as NIC vertices.
func (t *Topology) localNICs(g int) []int {
	if t.nic[g] < 0 {
		return nil
	}
	out := []int{t.nic[g]}
	for _, v := range t.nearNICs(g) {
		if v != t.nic[g] {
			out = append(out, v)
		}
	}
	return out
}

// nicOf is the NIC of GPU g's node at vertex v.
func (t *Topology) nicOf(g, v int) NIC {
	n := t.gpus[g].node
	return t.Nodes[n].NICs[slices.Index(t.NICs(n), v)]
}

// NICs returns the NIC vertices of node n, in file order.
func (t *Topology) NICs(n int) []int {
	var v []int
	for _, c := range t.Nodes[n].NICs {
		v = append(v, t.verts[t.Nodes[n].Hostname+"/"+c.ID])
	}
	return v
}

// nearest finds the vertex of the given kind fewest hops from v over the given link kinds.
func (t *Topology) nearest(v int, kind string, via ...LinkKind) (found int) {
	t.walk(v, via, func(w int) bool { return t.kinds[w] == kind }, func(w int, _ *bfsScratch) { found = w })
	return found
}

// bfs finds a fewest-hop route from u to v over the given link kinds.
func (t *Topology) bfs(from, to int, via ...LinkKind) (hops []Hop) {
	if from == to {
		return []Hop{}
	}
	t.walk(from, via, func(w int) bool { return w == to }, func(w int, s *bfsScratch) {
		if w < 0 {
			return
		}
		n := 0
		for x := to; x != from; n++ {
			x = t.edges[s.prev[x].Edge].a + t.edges[s.prev[x].Edge].b - x
		}
		hops = make([]Hop, n)
		for x := to; x != from; {
			n--
			hops[n] = s.prev[x]
			x = t.edges[hops[n].Edge].a + t.edges[hops[n].Edge].b - x
		}
	})
	return hops
}

// search is walk's result as a map: the vertex done accepted (or -1), and how each vertex seen
// was reached (the start with Edge -1), for the callers that keep a search tree.
func (t *Topology) search(from int, via []LinkKind, done func(int) bool) (found int, prev map[int]Hop) {
	t.walk(from, via, done, func(w int, s *bfsScratch) {
		found, prev = w, make(map[int]Hop, len(s.reached))
		for _, v := range s.reached {
			prev[v] = s.prev[v]
		}
	})
	return found, prev
}

// walk searches breadth-first from a vertex over the given link kinds, never through a GPU or a
// NIC, until it reaches a vertex that done accepts, then hands see that vertex (or -1) and the
// search's marks, which hold only until see returns. The marks live in slices the topology keeps
// from one search to the next rather than in a map made for each (a route between two of a
// node's 256 PCIe GPUs crosses most of the node, and diag and fleet ask for thousands); a search
// that finds them taken by another goroutine's makes its own.
func (t *Topology) walk(from int, via []LinkKind, done func(int) bool, see func(int, *bfsScratch)) {
	s := &bfsScratch{}
	if t.scratchMu.TryLock() {
		defer t.scratchMu.Unlock()
		if t.scratch == nil {
			t.scratch = s
		}
		s = t.scratch
	}
	s.reset(len(t.kinds))
	s.mark(from, Hop{Edge: -1})
	found := -1
	for i := 0; i < len(s.reached) && found < 0; i++ { // reached is the queue, in the order seen
		u := s.reached[i]
		if k := t.kinds[u]; i > 0 && (k == "gpu" || k == "nic") {
			continue
		}
		for _, ei := range t.adj[u] {
			e := t.edges[ei]
			w := e.a + e.b - u
			if s.seen[w] == s.gen || !slices.Contains(via, e.kind) {
				continue
			}
			s.mark(w, Hop{Edge: ei, Forward: e.a == u})
			if done(w) {
				found = w
				break
			}
		}
	}
	see(found, s)
}

// bfsScratch is what one walk has seen: seen[v] == gen for each vertex it reached, by the hop
// prev[v], and reached lists them in the order seen.
type bfsScratch struct {
	seen    []uint32
	prev    []Hop
	gen     uint32
	reached []int
}

// reset readies the scratch for a search of a graph of n vertices.
func (s *bfsScratch) reset(n int) {
	if len(s.seen) < n {
		s.seen, s.prev, s.gen = make([]uint32, n), make([]Hop, n), 0
	}
	s.gen++
	if s.gen == 0 { // wrapped: no stamp may stand for this search
		clear(s.seen)
		s.gen = 1
	}
	s.reached = s.reached[:0]
}

func (s *bfsScratch) mark(v int, h Hop) {
	s.seen[v], s.prev[v] = s.gen, h
	s.reached = append(s.reached, v)
}

func (t *Topology) path(h []Hop, typ PathType) Path {
	p := Path{Hops: h, Type: typ}
	for _, x := range h {
		p.LatencyUS += t.edges[x.Edge].latencyUS
	}
	return p
}

// pcieType names a PCIe path as nvidia-smi and NCCL do.
func (t *Topology) pcieType(h []Hop) PathType {
	cpus, smp := 0, false
	for _, x := range h {
		e := t.edges[x.Edge]
		if e.kind == LinkSMP {
			smp = true
		}
		if x.Forward && t.kinds[e.b] == "cpu" || !x.Forward && t.kinds[e.a] == "cpu" {
			cpus++
		}
	}
	switch {
	case smp:
		return PathSYS
	case cpus > 0:
		return PathPHB
	case len(h) <= 2:
		return PathPIX
	default:
		return PathPXB
	}
}

// LinkGBs is the bandwidth edge e delivers in each direction: its nominal figure, less any
// slow-link fault.
func (t *Topology) LinkGBs(e int) float64 { return t.edges[e].gbs * t.edges[e].slow }

// LinkKind is edge e's kind.
func (t *Topology) LinkKind(e int) LinkKind { return t.edges[e].kind }

// Flow is traffic along a path, in bytes (or any unit shared by all flows of one question).
//
// Count, when not 0, makes the flow stand for Count flows of Bytes each (0 means one): a link it
// crosses carries Bytes × Count. The flows of a large all-to-all are summed that way
// (AllToAllFlows), each then a part of the routes it stands for (see there).
type Flow struct {
	Path  Path
	Bytes float64
	Count float64
}

// Total is the bytes the flow puts on each link it crosses: Bytes × Count (Bytes when Count is 0).
func (f Flow) Total() float64 {
	if f.Count != 0 {
		return f.Bytes * f.Count
	}
	return f.Bytes
}

// LinkLoad returns the time in µs the flows take when they run together and share every link's
// capacity in each direction, each link derated by eff(kind) and by any slow-link fault.
func (t *Topology) LinkLoad(flows []Flow, eff func(LinkKind) float64) float64 {
	us, _ := t.LinkLoadKind(flows, eff)
	return us
}

// LinkLoadKind is LinkLoad and the kind of the link that sets it (the network's kind for a NIC's
// link or an uplink).
func (t *Topology) LinkLoadKind(flows []Flow, eff func(LinkKind) float64) (float64, string) {
	us, kind := t.load(flows, func(e edge) float64 { return e.gbs * e.slow * eff(e.kind) })
	return us, string(kind)
}

// load returns the flows' time in µs over links of the given capacities (GB/s), and the kind of
// the link that sets it.
func (t *Topology) load(flows []Flow, capacity func(edge) float64) (us float64, kind LinkKind) {
	bytes := map[Hop]float64{}
	for _, f := range flows {
		for _, h := range f.Path.Hops {
			bytes[h] += f.Total()
		}
	}
	for h, b := range bytes {
		e := t.edges[h.Edge]
		if x := b / (1e3 * capacity(e)); x > us || x == us && e.kind < kind {
			us, kind = x, e.kind
		}
	}
	if kind == LinkNet && t.Network != nil {
		kind = LinkKind(t.Network.Kind) // the limit is named as the network is: infiniband, ethernet
	}
	return us, kind
}

// RingFlows returns the flows of the rings NCCL would build through the given GPUs, one unit of
// data per ring hop. NCCL's nodes are NVLink domains: one host, or with nvlink_domain_nodes a run of
// hosts whose GPUs reach each other over NVLink (a GB200 NVL72 rack). In one domain that is one ring
// in the given order. Across domains there is one ring per NIC (the fewest any domain has, counting
// the NICs of the ring's GPUs, each GPU's own and those it reaches over PCIe without crossing a
// CPU, in host and file order): ring k enters each domain at the GPU
// nearest to the domain's k-th NIC, visits the domain's other GPUs, and leaves from the
// next-nearest GPU through the same NIC; every other ring visits the GPUs between in the other
// order (ringThroughNIC), so that entries and exits spread over the PCIe links as NCCL's channels
// do.
func (t *Topology) RingFlows(gpus []int) (flows []Flow, rings int) {
	return t.RingFlowsOn(gpus, nil)
}

// RingFlowsOn is RingFlows with the NICs between domains limited to those nicOK takes (by their
// id in the file, e.g. "mlx5_3"), as NCCL_IB_HCA limits NCCL's; nil takes every one.
func (t *Topology) RingFlowsOn(gpus []int, nicOK func(id string) bool) (flows []Flow, rings int) {
	var byDomain [][]int
	index := map[int]int{}
	for _, g := range gpus {
		d := t.DomainOf(g)
		if _, ok := index[d]; !ok {
			index[d] = len(byDomain)
			byDomain = append(byDomain, nil)
		}
		byDomain[index[d]] = append(byDomain[index[d]], g)
	}
	nics := map[int][]int{} // domain -> the NICs of its hosts that hold GPUs of the rings
	hop := func(a, b int, nic func(domain int) int) {
		if a == b {
			return
		}
		p := t.Route(a, b)
		switch da, db := t.DomainOf(a), t.DomainOf(b); {
		case da != db:
			p = t.RouteVia(a, b, t.hostNIC(a, nic(da), nics[da]), t.hostNIC(b, nic(db), nics[db]))
		case p.Hops == nil && t.gpus[a].node != t.gpus[b].node: // a domain's hosts without NVLink between them
			p = t.own().netRoute(a, b)
		}
		flows = append(flows, Flow{Path: p, Bytes: 1})
	}
	if len(byDomain) == 1 {
		for i, g := range gpus {
			hop(g, gpus[(i+1)%len(gpus)], nil)
		}
		return flows, 1
	}
	nicHost := map[int]int{} // NIC vertex -> its host
	rings = math.MaxInt
	for d, i := range index {
		var hosts []int
		for _, g := range byDomain[i] {
			if n := t.gpus[g].node; !slices.Contains(hosts, n) {
				hosts = append(hosts, n)
			}
		}
		slices.Sort(hosts)
		used := map[int]bool{} // the NICs of the ring's GPUs: NCCL leaves a node by its GPUs' NICs
		for _, g := range byDomain[i] {
			used[t.nic[g]] = true
			for _, v := range t.nearNICs(g) {
				used[v] = true
			}
		}
		for _, n := range hosts {
			for k, v := range t.NICs(n) {
				nicHost[v] = n
				if used[v] && (nicOK == nil || nicOK(t.Nodes[n].NICs[k].ID)) {
					nics[d] = append(nics[d], v)
				}
			}
		}
		if len(nics[d]) == 0 { // none near, or none nicOK takes: every NIC of the hosts
			for _, n := range hosts {
				nics[d] = append(nics[d], t.NICs(n)...)
			}
		}
		rings = min(rings, len(nics[d]))
	}
	for k := 0; k < rings; k++ {
		nic := func(domain int) int { return nics[domain][k] }
		var order []int
		for _, local := range byDomain {
			v := nic(t.DomainOf(local[0]))
			local = t.ringThroughNIC(local, v, nicHost[v], k%2 == 1)
			order = append(order, local...)
		}
		for i, g := range order {
			hop(g, order[(i+1)%len(order)], nic)
		}
	}
	return flows, rings
}

// hostNIC is the NIC by which GPU g's traffic leaves its domain where the ring names nic: nic on
// g's host, and on a domain of several hosts whose ring enters on one host and leaves from another
// (one GPU a host: a rail across GB200 trays), the NIC of allowed on g's host, its own first, as
// NCCL's network transport leaves a host by a NIC of its own.
func (t *Topology) hostNIC(g, nic int, allowed []int) int {
	host := t.gpus[g].node
	if nic < 0 || slices.Contains(t.NICs(host), nic) {
		return nic
	}
	if slices.Contains(allowed, t.nic[g]) {
		return t.nic[g]
	}
	for _, v := range allowed {
		if slices.Contains(t.NICs(host), v) {
			return v
		}
	}
	return nic
}

// ringThroughNIC orders one domain's GPUs to enter at the GPU nearest the NIC (on host) and leave
// from the next-nearest one; the others keep their order between. GPUs of the domain's other hosts, which
// do not reach the NIC over PCIe, are entry or exit only when no nearer GPU is left.
// reverse visits the GPUs between in the other order, and swaps entry and exit when they are as
// near the NIC as each other: a ring never enters through a CPU when a GPU beside the NIC can take
// it (NCCL's search starts each ring at the NIC's nearest GPU).
func (t *Topology) ringThroughNIC(local []int, nic, host int, reverse bool) []int {
	dist := map[int]int{}
	for _, g := range local {
		dist[g] = math.MaxInt
		if t.gpus[g].node != host { // PCIe does not leave a host: no search needed
			continue
		}
		if h := t.bfs(nic, t.gpus[g].vert, LinkPCIe, LinkSMP); h != nil {
			dist[g] = len(h)
		}
	}
	byDist := slices.Clone(local)
	slices.SortStableFunc(byDist, func(a, b int) int { return cmp.Compare(dist[a], dist[b]) })
	if len(byDist) == 1 {
		return byDist
	}
	entry, exit := byDist[0], byDist[1]
	if reverse && dist[entry] == dist[exit] {
		entry, exit = exit, entry
	}
	if dist[exit] == math.MaxInt { // no other GPU near the NIC: leave from the one after the entry,
		// by its own host's NIC (hostNIC), so that rings entering on different hosts leave from
		// different ones, as NCCL's channels spread over the domain's NICs
		step := 1
		if reverse {
			step = len(local) - 1
		}
		exit = local[(slices.Index(local, entry)+step)%len(local)]
	}
	order := []int{entry}
	for _, g := range local {
		if g != entry && g != exit {
			order = append(order, g)
		}
	}
	if reverse {
		slices.Reverse(order[1:])
	}
	return append(order, exit)
}

// BestRingFlows is RingFlowsOn as NCCL's search keeps it across domains: the rings through every
// NIC near the rings' GPUs, or through each GPU's own NIC alone where those carry as much by load
// (the flows' time in µs; rings carry rings / load). A GPU that reaches two NICs over its PCIe
// switch gives each a ring only where its PCIe link carries both, and NCCL, trying its fastest
// channel speed first, keeps one channel a GPU at full speed over two at half: GPUs 1, 2, 6 and 7
// of a DGX H100 leave by four NICs at 48 GB/s, not six that share two GPUs' links (144 in all),
// and one GPU of a node by its own NIC alone.
func (t *Topology) BestRingFlows(gpus []int, nicOK func(id string) bool, load func([]Flow) float64) ([]Flow, int) {
	flows, rings := t.RingFlowsOn(gpus, nicOK)
	own, across := map[string]bool{}, false
	for _, g := range gpus {
		if t.nic[g] >= 0 {
			own[t.nicOf(g, t.nic[g]).ID] = true
		}
		across = across || t.DomainOf(g) != t.DomainOf(gpus[0])
	}
	if !across {
		return flows, rings
	}
	f, r := t.RingFlowsOn(gpus, func(id string) bool { return own[id] && (nicOK == nil || nicOK(id)) })
	if us, u := load(flows), load(f); r > 0 && us > 0 && u > 0 && float64(r)/u >= (1-1e-9)*float64(rings)/us {
		return f, r
	}
	return flows, rings
}

// BusPeak is the nominal bus bandwidth (GB/s) of a ring over the given GPUs: the rate at which
// every GPU can send to the next one at once, on the links' nominal figures. It is the figure
// nccl-tests' busbw is measured against; limit is the kind of link that sets it.
func (t *Topology) BusPeak(gpus []int) (gbs float64, limit string) {
	if len(gpus) < 2 {
		return 0, ""
	}
	// The rings are those NCCL's own figures favour (PCIe at its rate); their peak is nominal.
	ncclView := func(flows []Flow) float64 {
		us, _ := t.load(flows, func(e edge) float64 {
			if e.kind == LinkPCIe {
				return e.gbs * PCIeEfficiency
			}
			return e.gbs
		})
		return us
	}
	flows, rings := t.BestRingFlows(gpus, t.NICOK, ncclView) // the NICs NCCL_IB_HCA leaves
	us, kind := t.load(flows, func(e edge) float64 { return e.gbs })
	if us == 0 {
		return 0, ""
	}
	return float64(rings) / (us * 1e3), string(kind)
}
