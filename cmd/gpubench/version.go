package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print gpubench's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(e.stdout, "gpubench %s (%s, %s/%s)\n", e.version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
