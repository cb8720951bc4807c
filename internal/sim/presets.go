package sim

import (
	"embed"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/input"
)

//go:embed presets/*.json
var presetFiles embed.FS

// Presets lists the names of the built-in topologies.
func Presets() []string {
	entries, _ := presetFiles.ReadDir("presets")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	sort.Strings(names)
	return names
}

// LoadTopology returns a built-in topology by name, or reads a topology file (any argument that
// names an existing file, or contains a slash or ends in .json).
func LoadTopology(nameOrPath string) (*gpu.Topology, error) {
	data, preset, err := TopologyData(nameOrPath)
	if err != nil {
		return nil, err
	}
	t, err := gpu.ParseTopology(data)
	switch {
	case err != nil && preset:
		return nil, fmt.Errorf("built-in topology %s: %w", nameOrPath, err)
	case err != nil:
		return nil, fmt.Errorf("topology file %s: %w", nameOrPath, err)
	}
	return t, nil
}

// TopologyData returns the text of a built-in topology or a topology file, as LoadTopology finds
// it, and whether it is a built-in one.
func TopologyData(nameOrPath string) (data []byte, preset bool, err error) {
	if data, err := presetFiles.ReadFile("presets/" + nameOrPath + ".json"); err == nil && !strings.ContainsAny(nameOrPath, "/\\") {
		return data, true, nil
	}
	_, statErr := os.Stat(nameOrPath)
	if statErr != nil && !strings.ContainsAny(nameOrPath, "/\\") && !strings.HasSuffix(nameOrPath, ".json") {
		return nil, false, fmt.Errorf("unknown topology %q: use a preset (%s) or a topology file's path", nameOrPath, strings.Join(Presets(), ", "))
	}
	data, err = input.ReadFile(nameOrPath, input.TopologyLimit)
	if err != nil {
		return nil, false, fmt.Errorf("cannot read topology file %v", err)
	}
	return data, false, nil
}
