package topo

import (
	"bytes"
	"testing"
)

// render writes a report in one format.
func render(t *testing.T, r *Report, format string) string {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, format, r); err != nil {
		t.Fatalf("Write %s: %v", format, err)
	}
	return b.String()
}
