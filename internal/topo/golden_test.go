package topo

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/topo -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run go test ./internal/topo -update after checking the change):\n%s", path, got)
	}
}

// render writes a report in one format.
func render(t *testing.T, r *Report, format string) string {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, format, r); err != nil {
		t.Fatalf("Write %s: %v", format, err)
	}
	return b.String()
}
