package burnin

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary is the end-of-run document --output json writes.
type Summary struct {
	Version     string    `json:"gpubench_version"`
	Backend     string    `json:"backend"`
	Topology    string    `json:"topology,omitempty"`
	StartTime   time.Time `json:"start_time"`
	Planned     float64   `json:"duration_seconds"`
	Elapsed     float64   `json:"elapsed_seconds"`
	Passes      int       `json:"passes"`
	Devices     []Device  `json:"devices"`
	Verdict     string    `json:"verdict"`
	Interrupted bool      `json:"interrupted"`
	Error       *string   `json:"error"`
	Checks      []Check   `json:"checks"`
}

// Write renders the summary as table, json, csv or markdown.
func Write(w io.Writer, format string, s *Summary) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	case "csv":
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{"subject", "check", "verdict", "reason", "threshold", "failures"})
		for _, c := range s.Checks {
			_ = cw.Write([]string{c.Subject, c.Check, c.Verdict, c.Reason, c.Threshold, fmt.Sprint(c.Failures)})
		}
		cw.Flush()
		return cw.Error()
	case "markdown":
		var b strings.Builder
		fmt.Fprintf(&b, "## gpubench burn-in: %s\n\n", strings.ToUpper(s.Verdict))
		fmt.Fprintf(&b, "%s, %d passes in %s on the %s backend", deviceText(s.Devices), s.Passes, secs(s.Elapsed), s.Backend)
		if s.Topology != "" {
			fmt.Fprintf(&b, " (%s)", s.Topology)
		}
		b.WriteString(".\n\n| subject | check | verdict | reason | threshold |\n|---|---|---|---|---|\n")
		for _, c := range s.Checks {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", c.Subject, c.Check, c.Verdict, mdEscape(c.Reason), mdEscape(c.Threshold))
		}
		_, err := io.WriteString(w, b.String())
		return err
	case "table":
		fmt.Fprintf(w, "# gpubench burn-in: %s, %d passes in %s on the %s backend", deviceText(s.Devices), s.Passes, secs(s.Elapsed), s.Backend)
		if s.Topology != "" {
			fmt.Fprintf(w, " (%s)", s.Topology)
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SUBJECT\tCHECK\tVERDICT\tREASON")
		for _, c := range s.Checks {
			reason := c.Reason
			if c.Threshold != "" {
				reason += " [" + c.Threshold + "]"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Subject, c.Check, strings.ToUpper(c.Verdict), reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		_, err := fmt.Fprintf(w, "# verdict: %s\n", strings.ToUpper(s.Verdict))
		return err
	}
	return fmt.Errorf("unknown output format %q: use table, json, csv or markdown", format)
}

func deviceText(d []Device) string {
	if len(d) == 0 {
		return "no GPUs"
	}
	return fmt.Sprintf("%d x %s", len(d), d[0].Name)
}

func secs(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Millisecond).String()
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
