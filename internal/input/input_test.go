package input

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(small, 5); err != nil || string(data) != "12345" {
		t.Errorf("a file at its limit: %q, %v", data, err)
	}
	if _, err := ReadFile(small, 4); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), small) {
		t.Errorf("a file past its limit: %v, want ErrTooLarge naming the path", err)
	}
	if _, err := ReadFile(dir, 100); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a directory") {
		t.Errorf("a directory: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), 100); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing file: %v", err)
	}
}

// A FIFO with no writer would block open(2) for ever, and /dev/zero would never end: neither may
// be opened.
func TestReadFileRefusesSpecialFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(fifo, 100); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a FIFO") {
		t.Errorf("FIFO: %v", err)
	}
	if _, err := ReadFile("/dev/zero", 100); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "character device") {
		t.Errorf("/dev/zero: %v", err)
	}
}

func TestReadStream(t *testing.T) {
	if _, err := Read(strings.NewReader(strings.Repeat("x", 2048)), "-", 1024); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "1 KiB") {
		t.Errorf("stream past its limit: %v", err)
	}
	if data, err := Read(strings.NewReader("abc"), "-", 1024); err != nil || string(data) != "abc" {
		t.Errorf("stream: %q, %v", data, err)
	}
}

func TestUnsafeAndSafe(t *testing.T) {
	if _, bad := Unsafe("NVIDIA H100 80GB HBM3 — µs"); bad {
		t.Error("plain text (with non-ASCII letters) taken for unsafe")
	}
	for s, want := range map[string]rune{"gpu\x1b[2Jname": 0x1b, "gpu\u202e0upg": 0x202e, "a\u2028b": 0x2028, "zero\u200bwidth": 0x200b, "bad\xffutf8": utf8.RuneError} {
		if r, bad := Unsafe(s); !bad || r != want {
			t.Errorf("Unsafe(%q) = %q %v; want %q", s, r, bad, want)
		}
	}
	if _, bad := Unsafe("U+FFFD itself, \ufffd, is text"); bad {
		t.Error("U+FFFD taken for a byte that is not UTF-8")
	}
	if got := Safe("a\nb\x1b[31mc\td\u202ee\xff\ufffd"); got != "a\\nb\\x1b[31mc\\td\\u202ee\\xff\ufffd" {
		t.Errorf("Safe = %q", got)
	}
}
