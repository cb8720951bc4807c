package golden

import (
	"fmt"
	"strings"
	"testing"
)

func numbered(n int, change map[int]string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		line := fmt.Sprintf("line %d", i)
		if c, ok := change[i]; ok {
			line = c
		}
		if line != "" {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func TestDiff(t *testing.T) {
	cases := []struct {
		name, want, got, diff string
	}{
		{"one line changed", numbered(20, nil), numbered(20, map[int]string{10: "line ten"}),
			"@@ -7,7 +7,7 @@\n line 7\n line 8\n line 9\n-line 10\n+line ten\n line 11\n line 12\n line 13"},
		{"two changes apart", numbered(30, nil), numbered(30, map[int]string{2: "two", 25: ""}),
			"@@ -1,5 +1,5 @@\n line 1\n-line 2\n+two\n line 3\n line 4\n line 5\n" +
				"@@ -22,7 +22,6 @@\n line 22\n line 23\n line 24\n-line 25\n line 26\n line 27\n line 28"},
		{"two changes close", numbered(12, nil), numbered(12, map[int]string{3: "three", 8: "eight"}),
			"@@ -1,11 +1,11 @@\n line 1\n line 2\n-line 3\n+three\n line 4\n line 5\n line 6\n line 7\n-line 8\n+eight\n line 9\n line 10\n line 11"},
		{"line added at the end", "a\nb\n", "a\nb\nc\n", "@@ -1,2 +1,3 @@\n a\n b\n+c"},
		{"no newline at the end", "a\nb\n", "a\nb", "@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ no newline at end"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Diff(c.want, c.got); got != c.diff {
				t.Errorf("diff\n%s\nwant\n%s", got, c.diff)
			}
		})
	}
}

// A large change is cut short, saying how much more there is.
func TestDiffLimit(t *testing.T) {
	want := numbered(500, nil)
	got := strings.ReplaceAll(want, "line", "LINE")
	d := Diff(want, got)
	if n := strings.Count(d, "\n"); n != MaxLines || !strings.HasSuffix(d, "... and 921 more lines of diff") {
		t.Errorf("%d lines, ending %q", n, d[max(len(d)-60, 0):])
	}
}
