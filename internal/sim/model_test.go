package sim

import (
	"math"
	"testing"
)

func modelOf(t *testing.T, topo string, nodes, n int) *model {
	t.Helper()
	tp, err := LoadTopology(topo)
	if err != nil {
		t.Fatal(err)
	}
	if nodes > 1 {
		if tp, err = tp.WithNodes(nodes); err != nil {
			t.Fatal(err)
		}
	}
	return newModel(tp, ranks(n), nil)
}

// NCCL's search raises a tree's bwIntra up to twice its bwInter where the chain inside a node
// carries it: on two DGX A100 each of the 8 channels leaves by a 200 Gb/s NIC behind PCIe (24 GB/s
// a ring), and the NVLinks (240 GB/s) carry 30 a channel, so the tree's bwIntra is 30, its bwInter
// and the ring's 24. On one node the tree is the ring.
func TestTreeBwIntra(t *testing.T) {
	t.Parallel()
	m := modelOf(t, "dgx-a100", 2, 16)
	ring, tree := m.graphs[algoRing], m.graphs[algoTree]
	if math.Abs(ring.bwIntra-24) > 1e-9 || math.Abs(ring.bwInter-24) > 1e-9 || math.Abs(tree.bwInter-24) > 1e-9 || math.Abs(tree.bwIntra-30) > 1e-9 {
		t.Errorf("two DGX A100: ring %+v, tree %+v; want the ring 24/24, the tree 30 inside, 24 between", ring, tree)
	}
	one := modelOf(t, "dgx-a100", 1, 8)
	if one.graphs[algoTree] != one.graphs[algoRing] {
		t.Errorf("one DGX A100: tree %+v, ring %+v; want the same graph", one.graphs[algoTree], one.graphs[algoRing])
	}
}
