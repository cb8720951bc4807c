package main

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

func newVersionCmd(e *env, g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print gpubench's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := struct {
				Version string `json:"version"`
				Go      string `json:"go"`
				OS      string `json:"os"`
				Arch    string `json:"arch"`
			}{e.version, runtime.Version(), runtime.GOOS, runtime.GOARCH}
			switch g.output {
			case "table":
				fmt.Fprintf(e.stdout, "gpubench %s (%s, %s/%s)\n", v.Version, v.Go, v.OS, v.Arch)
			case "markdown":
				fmt.Fprintf(e.stdout, "**gpubench %s** (%s, %s/%s)\n", v.Version, v.Go, v.OS, v.Arch)
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
