package results

import (
	"errors"
	"fmt"
	"sort"
)

// check refuses a p2p run without its devices and matrices, or with a matrix that is not one
// row and one column per device.
func (p *P2P) check() error {
	switch {
	case p.Backend == "":
		return errors.New("no \"backend\" field")
	case p.Devices == nil:
		return errors.New("no \"devices\" array")
	case p.Matrices == nil:
		return errors.New("no \"matrices\" object")
	}
	for i, d := range p.Devices {
		if d.absent != "" {
			return fmt.Errorf("devices[%d]: no %q", i, d.absent)
		}
	}
	n := len(p.Devices)
	for _, key := range p.MatrixNames() {
		m := p.Matrices[key]
		if len(m.Values) != n {
			return fmt.Errorf("matrices.%s: %d rows for %d devices", key, len(m.Values), n)
		}
		if m.NA != nil && len(m.NA) != n {
			return fmt.Errorf("matrices.%s: %d rows of na_reasons for %d devices", key, len(m.NA), n)
		}
		for i, row := range m.Values {
			if len(row) != n {
				return fmt.Errorf("matrices.%s: row %d has %d cells for %d devices", key, i, len(row), n)
			}
			if m.NA != nil && len(m.NA[i]) != n {
				return fmt.Errorf("matrices.%s: row %d has %d na_reasons for %d devices", key, i, len(m.NA[i]), n)
			}
			for j, v := range row {
				if v != nil {
					if err := nonNegative(fmt.Sprintf("matrices.%s[%d][%d]", key, i, j), *v); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// MatrixNames lists the run's matrices, sorted.
func (p *P2P) MatrixNames() []string {
	var names []string
	for k := range p.Matrices {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}
