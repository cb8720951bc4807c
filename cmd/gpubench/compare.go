package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/input"
	"github.com/gpubench/gpubench/internal/results"
)

func newCompareCmd(e *env, g *globals) *cobra.Command {
	var threshold string
	cmd := &cobra.Command{
		Use:   "compare OLD.json NEW.json [NEW.json...]",
		Short: "Compare collective results: busbw and time per size, regressions past a threshold (exit 3)",
		Long: "compare sets each NEW run against OLD, row by row (collective, type, op, root, size) and placement\n" +
			"(out-of-place, in-place): the change in busbw and in time, and a verdict. A row whose busbw fell by\n" +
			"more than --threshold is a regression, unless both runs carry per-iteration times (--per-iter) and\n" +
			"NEW's median iteration is not slower than OLD's 95th percentile: then it is noisy. Any regression,\n" +
			"or row of NEW with wrong data, exits 3, and so does a NEW with no row matching one of OLD's. Files are --output json documents,\n" +
			"JSON lines written with --out, or nccl-tests' output (its text as saved in a log, or its -J JSON),\n" +
			"told apart by content; a run that did not finish is compared on the rows it holds, with a notice.",
		Example: "  gpubench compare before.json after.json\n  gpubench compare --threshold 2% base.json run1.json run2.json --output markdown",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := readsFiles(cmd, "compare"); err != nil {
				return err
			}
			return runCompare(e, g, threshold, args)
		},
	}
	cmd.Flags().StringVar(&threshold, "threshold", "5%", "busbw fall that counts as a regression, in percent (e.g. 5 or 5%)")
	hideShared(cmd, machineFlags)
	return cmd
}

func runCompare(e *env, g *globals, threshold string, args []string) error {
	if len(args) < 2 {
		return usageErr("compare needs two files or more: gpubench compare OLD.json NEW.json [NEW.json...]")
	}
	if !slices.Contains(results.Formats, g.output) {
		return usageErr("unknown --output %q for compare: use %s", g.output, strings.Join(results.Formats, ", "))
	}
	t, err := results.ParseThreshold(threshold)
	if err != nil {
		return usageErr("invalid --threshold %v", err)
	}
	files := make([]*results.File, len(args))
	for i, name := range args {
		f, err := results.ReadFile(name)
		if err != nil {
			return usageErr("%v", err)
		}
		if f.Coll == nil {
			return usageErr("%s: compare reads collective results, and this is a p2p result (gpubench plot draws it)", name)
		}
		files[i] = f
	}
	var cmps []*results.Comparison
	for _, f := range files[1:] {
		c, err := results.Compare(files[0], f, t/100)
		if err != nil {
			return usageErr("%v", err)
		}
		cmps = append(cmps, c)
	}
	for _, f := range files {
		for _, n := range f.Notices {
			fmt.Fprintf(e.stderr, "gpubench: %s: %s\n", f.Name, n)
		}
	}
	if err := results.WriteCompare(e.stdout, g.output, cmps); err != nil {
		return runtimeErr(fmt.Errorf("writing the comparison: %w", err))
	}
	n, wrong := 0, 0
	for _, c := range cmps {
		n, wrong = n+c.Regressions(), wrong+c.Wrong()
	}
	switch {
	case wrong > 0 && n > 0:
		return &exitError{code: exitCheck, err: fmt.Errorf("compare: %d row placement%s of NEW with wrong data (marked WRONG DATA), and %d regression%s past %g%%", wrong, plural(wrong), n, plural(n), t)}
	case wrong > 0:
		return &exitError{code: exitCheck, err: fmt.Errorf("compare: %d row placement%s of NEW with wrong data (marked WRONG DATA): a run that corrupts data fails whatever its speed", wrong, plural(wrong))}
	case n > 0:
		return &exitError{code: exitCheck, err: fmt.Errorf("compare: %d regression%s past %g%% (marked REGRESSION)", n, plural(n), t)}
	}
	for _, c := range cmps { // a gate must not pass on a run that has nothing to compare
		switch {
		case len(c.Old.Coll.Results) == 0:
			return &exitError{code: exitCheck, err: fmt.Errorf("compare: OLD %s holds no rows: nothing was compared", input.Safe(c.Old.Name))}
		case !slices.ContainsFunc(c.Lines, func(l results.Line) bool { return l.Old != nil && l.New != nil }):
			return &exitError{code: exitCheck, err: fmt.Errorf("compare: no row of %s matches one of %s: nothing was compared", input.Safe(c.New.Name), input.Safe(c.Old.Name))}
		}
	}
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
