// Package golden compares test output with files under testdata/, and rewrites them when a test
// binary runs with -update.
package golden

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Check compares got with testdata/name, or writes it there under -update. A mismatch shows the
// lines that differ, with a few lines around them.
func Check(t testing.TB, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run the test with -update after checking the change):\n%s", path, Diff(string(want), got))
	}
}

// Context is the number of unchanged lines shown around a change, and MaxLines the most lines a
// diff shows.
const (
	Context  = 3
	MaxLines = 80
)

// Diff is a unified-style diff from want to got: hunks headed "@@ -line,count +line,count @@",
// lines only in want marked "-", only in got "+", and Context unchanged lines around them.
func Diff(want, got string) string {
	a, b := lines(want), lines(got)
	ops := edits(a, b)
	var out []string
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk: from Context lines before this change to Context lines after the last change
		// that is at most 2*Context unchanged lines from the one before it.
		start, end := max(i-Context, 0), i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j
			} else if j-end > 2*Context {
				break
			}
		}
		end = min(end+Context+1, len(ops))
		first := ops[start]
		na, nb := 0, 0
		for _, op := range ops[start:end] {
			if op.kind != '+' {
				na++
			}
			if op.kind != '-' {
				nb++
			}
		}
		out = append(out, fmt.Sprintf("@@ -%d,%d +%d,%d @@", first.a+1, na, first.b+1, nb))
		for _, op := range ops[start:end] {
			out = append(out, string(op.kind)+op.text)
		}
		i = end
	}
	if len(out) > MaxLines {
		out = append(out[:MaxLines], fmt.Sprintf("... and %d more lines of diff", len(out)-MaxLines))
	}
	return strings.Join(out, "\n")
}

// lines splits text into lines; a last line without its newline is marked so.
func lines(s string) []string {
	if s == "" {
		return nil
	}
	ls := strings.SplitAfter(s, "\n")
	if last := ls[len(ls)-1]; last == "" {
		ls = ls[:len(ls)-1]
	} else {
		ls[len(ls)-1] = last + "\n\\ no newline at end"
	}
	for i, l := range ls {
		ls[i] = strings.TrimSuffix(l, "\n")
	}
	return ls
}

// edit is one line of a diff: kept (' '), only in want ('-') or only in got ('+'), with its
// index in want (a) and in got (b).
type edit struct {
	kind byte
	a, b int
	text string
}

// edits is a shortest edit script from a to b: common prefix and suffix, and a longest common
// subsequence of the lines between them (a middle past 4,000 lines each way is all replaced).
func edits(a, b []string) []edit {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	var ops []edit
	for i := range pre {
		ops = append(ops, edit{' ', i, i, a[i]})
	}
	// lcs[i][j] is the length of a longest common subsequence of ma[i:] and mb[j:].
	var lcs [][]int
	if len(ma) <= 4000 && len(mb) <= 4000 {
		lcs = make([][]int, len(ma)+1)
		for i := range lcs {
			lcs[i] = make([]int, len(mb)+1)
		}
		for i := len(ma) - 1; i >= 0; i-- {
			for j := len(mb) - 1; j >= 0; j-- {
				if ma[i] == mb[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
	}
	i, j := 0, 0
	for i < len(ma) || j < len(mb) {
		switch {
		case lcs != nil && i < len(ma) && j < len(mb) && ma[i] == mb[j]:
			ops = append(ops, edit{' ', pre + i, pre + j, ma[i]})
			i, j = i+1, j+1
		case i < len(ma) && (j == len(mb) || lcs == nil || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, edit{'-', pre + i, pre + j, ma[i]})
			i++
		default:
			ops = append(ops, edit{'+', pre + i, pre + j, mb[j]})
			j++
		}
	}
	for k := range suf {
		ia, ib := len(a)-suf+k, len(b)-suf+k
		ops = append(ops, edit{' ', ia, ib, a[ia]})
	}
	return ops
}

// Updating reports whether the test binary runs with -update: tests that keep other files than
// golden ones (a generated document, recorded bands) rewrite them then too.
func Updating() bool { return *update }
