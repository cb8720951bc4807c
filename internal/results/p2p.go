package results

import (
	"errors"
	"fmt"
	"sort"
)

type jsonP2P struct {
	Version  string  `json:"gpubench_version"`
	Backend  *string `json:"backend"`
	Topology *string `json:"topology"`
	Devices  *[]struct {
		Device *int `json:"device"`
	} `json:"devices"`
	Matrices *map[string]struct {
		Title  string       `json:"title"`
		Unit   string       `json:"unit"`
		Values [][]*float64 `json:"values"`
		NA     [][]*string  `json:"na_reasons"`
	} `json:"matrices"`
}

func readP2P(data []byte) (*P2P, error) {
	var doc jsonP2P
	if err := strictUnmarshal(data, &doc); err != nil {
		return nil, err
	}
	switch {
	case doc.Backend == nil || *doc.Backend == "":
		return nil, errors.New("no \"backend\" field")
	case doc.Devices == nil:
		return nil, errors.New("no \"devices\" array")
	case doc.Matrices == nil:
		return nil, errors.New("no \"matrices\" object")
	}
	p := &P2P{Version: doc.Version, Backend: *doc.Backend, Matrices: map[string]Matrix{}}
	if doc.Topology != nil {
		p.Topology = *doc.Topology
	}
	for i, d := range *doc.Devices {
		if d.Device == nil {
			return nil, fmt.Errorf("devices[%d]: no \"device\"", i)
		}
		p.Devices = append(p.Devices, *d.Device)
	}
	n := len(p.Devices)
	keys := make([]string, 0, len(*doc.Matrices))
	for k := range *doc.Matrices {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		jm := (*doc.Matrices)[key]
		m := Matrix{Title: jm.Title, Unit: jm.Unit}
		if len(jm.Values) != n {
			return nil, fmt.Errorf("matrices.%s: %d rows for %d devices", key, len(jm.Values), n)
		}
		if jm.NA != nil && len(jm.NA) != n {
			return nil, fmt.Errorf("matrices.%s: %d rows of na_reasons for %d devices", key, len(jm.NA), n)
		}
		for i, row := range jm.Values {
			if len(row) != n {
				return nil, fmt.Errorf("matrices.%s: row %d has %d cells for %d devices", key, i, len(row), n)
			}
			na := make([]string, n)
			if jm.NA != nil {
				if len(jm.NA[i]) != n {
					return nil, fmt.Errorf("matrices.%s: row %d has %d na_reasons for %d devices", key, i, len(jm.NA[i]), n)
				}
				for j, r := range jm.NA[i] {
					if r != nil {
						na[j] = *r
					}
				}
			}
			for j, v := range row {
				if v != nil {
					if err := nonNegative(fmt.Sprintf("matrices.%s[%d][%d]", key, i, j), *v); err != nil {
						return nil, err
					}
				}
			}
			m.Values, m.NA = append(m.Values, row), append(m.NA, na)
		}
		p.Matrices[key] = m
	}
	return p, nil
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
