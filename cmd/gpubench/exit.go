package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/input"
)

// Exit codes (README, "Exit codes").
const (
	exitOK        = 0
	exitFailure   = 1
	exitUsage     = 2
	exitCheck     = 3
	exitNoGPU     = 4
	exitHang      = 5
	exitInterrupt = 130
)

// env is what a command needs from the outside world; tests replace all of it.
type env struct {
	stdout, stderr io.Writer
	pid            int
	now            func() time.Time
	version        string
	progress       bool // stderr is a terminal: report progress there
	// procs sets the processors this process runs Go code on (GOMAXPROCS); nil where several
	// ranks share one process (tests in-process).
	procs func(n int)
}

// exitError carries the exit code a failure maps to. Commands return only exitErrors; any other
// error comes from cobra's own parsing and is a usage error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, a...)}
}

// flagErr is cobra's flag error function: a value the flag cannot parse is named as the other
// usage errors name theirs (the short flag when there is one), with what the flag takes in place
// of strconv's words; other parse errors (an unknown flag, a missing value) stay as pflag says.
func flagErr(_ *cobra.Command, err error) error {
	var bad *pflag.InvalidValueError
	if !errors.As(err, &bad) {
		return usageErr("%v", err)
	}
	f := bad.GetFlag()
	takes, ok := flagTakes[f.Value.Type()]
	if !ok {
		return usageErr("%v", err)
	}
	name := "--" + f.Name
	if f.Shorthand != "" {
		name = "-" + f.Shorthand
	}
	if errors.Is(err, strconv.ErrRange) {
		takes = "out of range: too large in size"
	}
	// A percentage given to a flag that takes a fraction.
	if v := bad.GetValue(); fractionFlags[f.Name] && strings.HasSuffix(v, "%") {
		if pct, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64); err == nil && pct > 0 && pct <= 1000 {
			takes = fmt.Sprintf("use a number; for %s%%, give %g", strings.TrimSuffix(v, "%"), pct/100)
		}
	}
	return usageErr("invalid %s %q: %s", name, bad.GetValue(), takes)
}

// fractionFlags take a fraction (0.75), which users may give as a percentage (75%).
var fractionFlags = map[string]bool{"floor": true, "expect-floor": true, "compute-efficiency": true, "sim-jitter": true}

// flagTakes says what a flag of each pflag type takes.
var flagTakes = map[string]string{
	"int":      "use a whole number",
	"uint64":   "use a whole number, 0 or more",
	"float64":  "use a number",
	"bool":     "use true or false",
	"duration": "use a duration such as 90s, 10m or 1h30m",
}

// runtimeErr maps a failure while running to its exit code.
func runtimeErr(err error) error {
	var hang *gpu.HangError
	switch {
	case errors.Is(err, context.Canceled):
		return &exitError{code: exitInterrupt, err: fmt.Errorf("interrupted: %w", err)}
	case errors.As(err, &hang):
		return &exitError{code: exitHang, err: fmt.Errorf("hang: %w", err)}
	}
	return &exitError{code: exitFailure, err: err}
}

// exitCode prints err (one line, on stderr) and returns the process's exit code.
func exitCode(stderr io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	code := exitUsage
	var e *exitError
	if errors.As(err, &e) {
		code = e.code
	}
	if msg := oneLine(err.Error()); msg != "" {
		fmt.Fprintln(stderr, "gpubench: "+msg)
	}
	return code
}

// oneLine makes an error message one line of plain text: cobra's suggestions ("Did you mean
// this?" then a tab-indented name per line) become "; did you mean X or Y?", runs of white space
// one space, any other control character (from a name in a file) its escape, and a word past
// longWord bytes (a 5 MB id in a file, quoted back) its start and its length.
func oneLine(msg string) string {
	if head, names, ok := strings.Cut(msg, "\n\nDid you mean this?\n"); ok {
		msg = strings.TrimSpace(head) + "; did you mean " + strings.Join(strings.Fields(names), " or ") + "?"
	}
	words := strings.Fields(msg)
	for i, w := range words {
		if len(w) > longWord {
			words[i] = fmt.Sprintf("%s...[%d bytes in all]", strings.ToValidUTF8(w[:longWord/4], ""), len(w))
		}
	}
	return input.Safe(strings.Join(words, " "))
}

// longWord is the longest word an error message repeats whole.
const longWord = 256
