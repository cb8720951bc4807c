package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newVersionCmd(e *env, g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print gpubench's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := struct {
				Version string `json:"version"`
				Commit  string `json:"commit"`
				Go      string `json:"go"`
				OS      string `json:"os"`
				Arch    string `json:"arch"`
			}{e.version, commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH}
			switch g.output {
			case "table":
				fmt.Fprintln(e.stdout, versionLine(e.version))
			case "markdown":
				fmt.Fprintf(e.stdout, "**gpubench %s** (commit %s, %s, %s/%s)\n", v.Version, v.Commit, v.Go, v.OS, v.Arch)
			case "json":
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			default:
				return usageErr("unknown --output %q for version: use table, json or markdown", g.output)
			}
			return nil
		},
	}
}

// versionLine is what `gpubench version` and `gpubench --version` print.
func versionLine(v string) string {
	return fmt.Sprintf("gpubench %s (commit %s, %s, %s/%s)", v, commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// commitID is set by make (-X main.commitID=...) from git.
var commitID string

// commit is the source's revision: make's, or the one the Go toolchain recorded in the binary
// ("unknown" when neither knows it), with "+dirty" for uncommitted changes.
func commit() string {
	if commitID != "" {
		return commitID
	}
	rev, dirty := "unknown", ""
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision" && len(s.Value) >= 12:
				rev = s.Value[:12]
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "+dirty"
			}
		}
	}
	return rev + dirty
}
