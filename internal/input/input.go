// Package input reads the files gpubench is given, within bounds: only regular files (and stdin
// where a command offers "-"), never more than a stated limit. A device such as /dev/zero, a FIFO
// with no writer or a runaway file gets a one-line error instead of a hang or an exhausted memory.
package input

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on what gpubench reads, by kind of file. Each is far above any real file of its kind
// (a 1,024-node topology written node by node is about 7 MiB; a day-long burn-in's records are
// a few MiB) and far below what would strain a machine.
const (
	TopologyLimit = 64 << 20  // topology files
	ResultsLimit  = 256 << 20 // result files: JSON documents, JSON lines, nccl-tests logs
	SysfsLimit    = 1 << 20   // one sysfs or /proc file read by topo or diag
)

// ErrTooLarge is returned for a file past its limit; ErrNotRegular for a path that names
// something other than a regular file.
var (
	ErrTooLarge   = errors.New("file too large")
	ErrNotRegular = errors.New("not a regular file")
)

// ReadFile reads path, which must be a regular file of at most limit bytes. It never opens
// anything else, so a FIFO or a device cannot block or flood it. Errors read "PATH: why".
func ReadFile(path string, limit int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, unwrapPath(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (it is %s); give a file", path, ErrNotRegular, kind(fi.Mode()))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, unwrapPath(err))
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil || !fi.Mode().IsRegular() { // replaced since the Stat above
		return nil, fmt.Errorf("%s: %w; give a file", path, ErrNotRegular)
	}
	if fi.Size() > limit { // refused unread; Read still holds a file that grows to the limit
		return nil, tooLarge(path, limit)
	}
	return Read(f, path, limit)
}

// Read reads r (named name in errors) to its end, failing once it passes limit bytes.
func Read(r io.Reader, name string, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, unwrapPath(err))
	}
	if int64(len(data)) > limit {
		return nil, tooLarge(name, limit)
	}
	return data, nil
}

func tooLarge(name string, limit int64) error {
	return fmt.Errorf("%s: %w: more than %s, the most gpubench reads from such a file", name, ErrTooLarge, human(limit))
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "not a regular file"
}

func human(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Unsafe returns the first character in s that is not plain text, and whether there is one: a
// control character (an escape, a newline, a tab...), a format character that reorders or hides
// text (U+202E, right-to-left override; U+200B, zero width space), a line or paragraph separator,
// or a byte that is not UTF-8 (given as utf8.RuneError). Names read from files are printed in
// tables: one that holds such a character could rewrite the terminal, forge a line of the table,
// or show other text than it holds, so readers refuse it.
func Unsafe(s string) (rune, bool) {
	for i, r := range s {
		if unsafeAt(s, i, r) {
			return r, true
		}
	}
	return 0, false
}

// unsafeAt reports whether r, at byte i of s, is what Unsafe finds: a RuneError there is a byte
// that is not UTF-8 unless s holds U+FFFD itself at i.
func unsafeAt(s string, i int, r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) ||
		r == utf8.RuneError && !strings.HasPrefix(s[i:], string(utf8.RuneError))
}

// Safe returns s with every character Unsafe finds written as a Go escape (\x1b, \n, \u202e, and
// \xff for a byte that is not UTF-8), for text gpubench did not choose, such as a file name,
// printed where a terminal would act on it.
func Safe(s string) string {
	if _, bad := Unsafe(s); !bad {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case !unsafeAt(s, i, r):
			b.WriteRune(r)
		case r == utf8.RuneError: // a byte that is not UTF-8
			fmt.Fprintf(&b, `\x%02x`, s[i])
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
	}
	return b.String()
}
