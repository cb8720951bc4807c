package topo

import "testing"

// A down RDMA port is worth a warning only when another RDMA port of its kind is up: a plain
// Ethernet port says nothing about the fabric.
func TestNICWarnings(t *testing.T) {
	for _, c := range []struct {
		name string
		nics []nicFacts
		want int
	}{
		{"roce down, plain ethernet up", []nicFacts{{name: "mlx5_0", kind: "ethernet", state: "down", rdma: true}, {name: "eno1", kind: "ethernet", state: "up"}}, 0},
		{"one of two roce ports down", []nicFacts{{name: "mlx5_0", kind: "ethernet", state: "down", rdma: true}, {name: "mlx5_1", kind: "ethernet", state: "up", rdma: true}}, 1},
		{"ib down, roce up", []nicFacts{{name: "mlx5_0", kind: "infiniband", state: "down", rdma: true}, {name: "mlx5_1", kind: "ethernet", state: "up", rdma: true}}, 0},
	} {
		b := &builder{}
		b.nicWarnings(c.nics)
		if len(b.warnings) != c.want {
			t.Errorf("%s: warnings %q; want %d", c.name, b.warnings, c.want)
		}
	}
}
