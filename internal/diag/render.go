package diag

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Formats are the outputs Write knows.
var Formats = []string{"table", "json", "markdown"}

// Write renders a report: a table for people, JSON with the details, or Markdown.
func Write(w io.Writer, format, version string, r *Report) error {
	switch format {
	case "table":
		return writeTable(w, version, r)
	case "json":
		return writeJSON(w, version, r)
	case "markdown":
		return writeMarkdown(w, version, r)
	}
	return fmt.Errorf("unknown format %q", format)
}

func summary(r *Report) string {
	c := r.Counts()
	return fmt.Sprintf("%d pass, %d warn, %d fail, %d skip", c[Pass], c[Warn], c[Fail], c[Skip])
}

func header(version string, r *Report) string {
	h := fmt.Sprintf("gpubench %s: diag on %s, backend %s", version, r.Host, r.Backend)
	if r.Quick {
		h += ", quick"
	}
	return h
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeTable prints one line a check, and the remedy under a check that is not a pass.
func writeTable(w io.Writer, version string, r *Report) error {
	fmt.Fprintf(w, "# %s\n", header(version, r))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tCHECK\tSTATUS\tFINDING")
	for _, x := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", x.Group, x.Check, strings.ToUpper(string(x.Status)), oneLine(x.Finding))
		if x.Remedy != "" && x.Status != Pass {
			fmt.Fprintf(tw, "\t\t\tfix: %s\n", oneLine(x.Remedy))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "# %s\n", summary(r))
	return err
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// jsonReport is the JSON document: the run, the tally, and every check with its details.
type jsonReport struct {
	Version string         `json:"gpubench_version"`
	Host    string         `json:"host"`
	Backend string         `json:"backend"`
	Quick   bool           `json:"quick"`
	Summary map[Status]int `json:"summary"`
	Failed  []string       `json:"failed"`
	Checks  []Result       `json:"checks"`
}

func writeJSON(w io.Writer, version string, r *Report) error {
	failed := r.Failed()
	if failed == nil {
		failed = []string{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(jsonReport{Version: version, Host: r.Host, Backend: r.Backend, Quick: r.Quick,
		Summary: r.Counts(), Failed: failed, Checks: r.Results})
}

func mdCell(s string) string {
	return strings.ReplaceAll(oneLine(s), "|", `\|`)
}

func writeMarkdown(w io.Writer, version string, r *Report) error {
	fmt.Fprintf(w, "**%s**\n\n", mdCell(header(version, r)))
	fmt.Fprintln(w, "| group | check | status | finding | remedy |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, x := range r.Results {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", x.Group, x.Check, x.Status, mdCell(x.Finding), mdCell(orDash(x.Remedy)))
	}
	_, err := fmt.Fprintf(w, "\n%s\n", summary(r))
	return err
}
