package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/input"
	"github.com/gpubench/gpubench/internal/plot"
	"github.com/gpubench/gpubench/internal/results"
)

type plotFlags struct {
	out       string
	oldOut    string // -o, the old name of --out
	y         string
	placement string
	matrices  []string
	size      string
	title     string
}

func newPlotCmd(e *env, g *globals) *cobra.Command {
	f := &plotFlags{}
	cmd := &cobra.Command{
		Use:   "plot RESULT.json [RESULT.json...] --out FILE.svg|png",
		Short: "Draw results: busbw or time against size, runs overlaid; p2p matrices as heat maps",
		Long: "plot draws collective results (--output json documents, JSON lines written with --out, or\n" +
			"nccl-tests' output) as busbw, algbw or time against size on a log axis, one line per run with a\n" +
			"legend, what the run was expected to do where it carries --expect figures (dotted), and each\n" +
			"topology's nominal bus peak as a dotted grey line. p2p results (gpubench p2p --output json) become\n" +
			"heat maps of the matrices asked for, the unidirectional P2P write bandwidth by default. The\n" +
			"image is SVG or PNG, by the extension of --out.",
		Example: "  gpubench plot before.json after.json --out busbw.svg\n  gpubench plot run.json --y time --placement both --out time.png\n  gpubench plot p2p.json --matrix uni_enabled,bi_enabled --out p2p.png",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := readsFiles(cmd, "plot"); err != nil {
				return err
			}
			return f.run(cmd, e, g, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.out, "out", "", "the image to write: FILE.svg or FILE.png (required)")
	// -o was the image; on the collectives it is nccl-tests' --op: one letter, one meaning. It
	// still works, with a notice.
	fl.StringVarP(&f.oldOut, "image", "o", "", "")
	_ = fl.MarkHidden("image")
	fl.StringVar(&f.y, "y", "busbw", "collectives: what to draw against size: "+strings.Join(plot.Measures, ", "))
	fl.StringVar(&f.placement, "placement", "out", "collectives: out (out-of-place), in (in-place) or both")
	fl.StringSliceVar(&f.matrices, "matrix", []string{"uni_enabled"}, "p2p: matrices to draw, side by side: uni_enabled, uni_disabled, bi_enabled, bi_disabled, lat_enabled, lat_disabled")
	fl.StringVar(&f.size, "size", "960x600", "image size in pixels, WIDTHxHEIGHT (SVG: CSS pixels)")
	fl.StringVar(&f.title, "title", "", "title (default: what is drawn)")
	hideShared(cmd, machineFlags)
	return cmd
}

func (f *plotFlags) run(cmd *cobra.Command, e *env, g *globals, args []string) error {
	if len(args) == 0 {
		return usageErr("plot needs a result file: gpubench plot RESULT.json [RESULT.json...] --out FILE.svg")
	}
	if f.oldOut != "" {
		if f.out != "" {
			return usageErr("give the image once, with --out")
		}
		fmt.Fprintln(e.stderr, "gpubench: plot -o is deprecated (on the collectives -o is the reduction op): use --out")
		f.out = f.oldOut
	}
	if f.out == "" {
		return usageErr("plot needs an image to write: add --out FILE.svg or --out FILE.png")
	}
	if !slices.Contains([]string{"table", "json", "markdown"}, g.output) {
		return usageErr("unknown --output %q for plot: use table, json or markdown (the image goes to --out)", g.output)
	}
	opt := plot.Options{Measure: f.y, Placement: f.placement, Matrices: f.matrices, Title: f.title}
	opt.Format = strings.TrimPrefix(strings.ToLower(filepath.Ext(f.out)), ".")
	if !slices.Contains(plot.Formats, opt.Format) {
		return usageErr("invalid --out %q: name an .svg or .png file", f.out)
	}
	if err := checkOutFile("--out", f.out, args...); err != nil {
		return err
	}
	var err error
	if opt.Width, opt.Height, err = plot.ParseImageSize(f.size); err != nil {
		return usageErr("invalid --size %q: %v", f.size, err)
	}
	if !slices.Contains(plot.Measures, f.y) {
		return usageErr("invalid --y %q: use %s", f.y, strings.Join(plot.Measures, ", "))
	}
	if !slices.Contains(plot.Placements, f.placement) {
		return usageErr("invalid --placement %q: use out, in or both", f.placement)
	}
	files := make([]*results.File, len(args))
	for i, name := range args {
		if files[i], err = results.ReadFile(name); err != nil {
			return usageErr("%v", err)
		}
	}
	p2p := files[0].P2P != nil
	for _, file := range files[1:] {
		if (file.P2P != nil) != p2p {
			return usageErr("%s and %s: plot collective results and p2p results separately", files[0].Name, file.Name)
		}
	}
	fl := cmd.Flags()
	switch {
	case p2p && (fl.Changed("y") || fl.Changed("placement")):
		return usageErr("--y and --placement are for collective results; for p2p results choose matrices with --matrix")
	case !p2p && fl.Changed("matrix"):
		return usageErr("--matrix is for p2p results; for collective results choose --y and --placement")
	}
	for _, file := range files {
		for _, n := range file.Notices {
			fmt.Fprintf(e.stderr, "gpubench: %s: %s\n", file.Name, n)
		}
	}
	if !p2p && opt.Measure == "busbw" && !fl.Changed("y") && !slices.ContainsFunc(files, func(f *results.File) bool { return !f.Coll.ZeroBusBW && f.Coll.Config.Ranks != 1 }) {
		fmt.Fprintln(e.stderr, "gpubench: busbw is 0 by definition on one rank: drawing algbw (--y algbw)")
		opt.Measure = "algbw"
	}
	var img bytes.Buffer
	if err := plot.Draw(&img, files, opt); err != nil {
		return usageErr("%v", err)
	}
	if err := writeAtomic(f.out, img.Bytes()); err != nil {
		return runtimeErr(fmt.Errorf("writing %s: %w", f.out, err))
	}
	line := fmt.Sprintf("wrote %s (%dx%d %s) from %s", f.out, opt.Width, opt.Height, strings.ToUpper(opt.Format), strings.Join(args, ", "))
	return summary(e, g.output, "plot", line, map[string]any{"file": f.out, "format": opt.Format,
		"width": opt.Width, "height": opt.Height, "inputs": args})
}

// checkOutFile refuses, before any work is done, a file flag names to write that could not be
// written in place: one in a folder that does not exist, a folder itself, or one of the files the
// command reads (which writing would destroy).
func checkOutFile(flag, path string, inputs ...string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Stat(filepath.Dir(path)); err != nil || !st.IsDir() {
		return usageErr("cannot write %s %s: %s is not a folder; give a file in one", flag, input.Safe(path), input.Safe(filepath.Dir(path)))
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil // a new file
	}
	if st.IsDir() {
		return usageErr("cannot write %s %s: it is a folder; name a file in it", flag, input.Safe(path))
	}
	for _, in := range inputs {
		if si, err := os.Stat(in); err == nil && os.SameFile(st, si) {
			return usageErr("cannot write %s %s: it is a file this command reads; name another", flag, input.Safe(path))
		}
	}
	return nil
}

// writeAtomic writes data to path through a temporary file in the same folder, so that a failure
// leaves no half-written file. As a shell's redirect does, it writes through what is not a
// regular file (-o /dev/null, /dev/stdout: renaming over a device would replace it for every
// process of the machine) and follows links to the file they name, existing or not. A file it
// replaces keeps its permissions.
func writeAtomic(path string, data []byte) error {
	st, err := os.Stat(path)
	switch {
	case err == nil && (!st.Mode().IsRegular() || strings.HasPrefix(path, "/dev/") || strings.HasPrefix(path, "/proc/")):
		// /dev/stdout redirected to a file is that file's open descriptor: written through too
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	case err == nil:
		if path, err = filepath.EvalSymlinks(path); err != nil {
			return err
		}
	case errors.Is(err, fs.ErrNotExist):
		if path, err = newFile(path); err != nil {
			return err
		}
	default:
		return err // a loop of links, a folder that cannot be read
	}
	mode := os.FileMode(0o644)
	if st != nil {
		mode = st.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the temporary file's name means nothing to the user
		}
		return fmt.Errorf("cannot create a file in %s: %w", filepath.Dir(path), err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), mode); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// newFile is the file a path that does not exist yet names: the path, or where the links it
// passes through lead, each resolved from its folder's real place.
func newFile(path string) (string, error) {
	for range 40 {
		dir, err := filepath.EvalSymlinks(filepath.Dir(path))
		if err != nil {
			return "", err
		}
		path = filepath.Join(dir, filepath.Base(path))
		st, err := os.Lstat(path)
		if err != nil || st.Mode()&os.ModeSymlink == 0 {
			return path, nil // a new file
		}
		to, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(to) {
			to = filepath.Join(dir, to)
		}
		path = to
	}
	return "", fmt.Errorf("%s: too many links", path)
}
