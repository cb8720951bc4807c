package fleet

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/gpu"
)

// The outlier rule names a node far below the others, and no one in a fleet whose figures
// barely differ.
func TestOutlierBelow(t *testing.T) {
	tight := []float64{1, 0.99, 1.01, 1, 0.98, 1.02, 1}
	if low := outlierBelow(tight); low > 0.9 || 0.97 < low {
		t.Errorf("tight fleet: bound %v; want at most 0.9 of the median", low)
	}
	spread := append([]float64{0.6}, tight...)
	if low := outlierBelow(spread); !(0.6 < low) {
		t.Errorf("a node at 0.6 among nodes at 1: bound %v does not name it", low)
	}
	if low := outlierBelow([]float64{1, 0.5}); low != 0 {
		t.Errorf("two nodes: bound %v; want none (too few to tell)", low)
	}
}

func TestRunRefuses(t *testing.T) {
	open := func(map[string]string, bool) (gpu.Backend, error) { return nil, errors.New("no cluster") }
	for _, o := range []Options{{Open: open, Floor: 0, Repeat: 1, Group: 2}, {Open: open, Floor: 0.75, Repeat: 0, Group: 2}, {Open: open, Floor: 0.75, Repeat: 1, Group: 1}} {
		if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "want a floor in (0, 1]") {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if _, err := Run(context.Background(), Options{Open: open, Floor: 0.75, Repeat: 1, Group: 2}); err == nil || err.Error() != "no cluster" {
		t.Errorf("a cluster that does not open: %v", err)
	}
}
