package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/metrics"
	"github.com/gpubench/gpubench/internal/metrics/telemetry"
	"github.com/gpubench/gpubench/internal/sim"
)

type serveFlags struct {
	addr     string
	interval time.Duration
	nvmlLib  string
}

func newServeCmd(e *env, g *globals) *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve GPU telemetry to Prometheus until stopped (the burn-in's exporter alone)",
		Long: "serve samples every GPU's telemetry through NVML on its own timer (--sample-interval) and\n" +
			"serves the latest sample on GET /metrics, with GET /health for liveness probes. Without NVML,\n" +
			"--backend auto serves the simulator's idle machine instead, with a notice.",
		Example: "  gpubench serve --metrics :9400\n  gpubench serve --metrics 127.0.0.1:9400 --sample-interval 5s",
		Args:    noArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return f.run(cmd, e, g) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "metrics", ":9400", "address to serve on (port 0 picks one)")
	fl.DurationVar(&f.interval, "sample-interval", metrics.DefaultInterval, "how often to sample GPU telemetry (100ms to 1m)")
	fl.StringVar(&f.nvmlLib, "nvml-lib", "", "path of libnvidia-ml to load (default: libnvidia-ml.so.1)")
	return cmd
}

func (f *serveFlags) run(cmd *cobra.Command, e *env, g *globals) error {
	if err := g.validate("auto", "cuda", "sim"); err != nil {
		return err
	}
	if g.output == "csv" {
		return usageErr("unknown --output \"csv\" for serve: use table, json or markdown (the metrics go to --metrics)")
	}
	if strings.TrimSpace(f.addr) == "" { // burnin takes "" for no metrics; serve is nothing but them
		return usageErr("invalid --metrics \"\": give the address to serve on, e.g. :9400 or 127.0.0.1:9400 (port 0 picks one)")
	}
	if f.interval < metrics.MinInterval || f.interval > metrics.MaxInterval {
		return usageErr("invalid --sample-interval %v: use %v to %v", f.interval, metrics.MinInterval, metrics.MaxInterval)
	}
	var src telemetry.Source
	if g.backend != "sim" {
		var err error
		if src, err = metrics.OpenNVML(f.nvmlLib); err != nil {
			named := ""
			if f.nvmlLib != "" {
				named = "--nvml-lib " + f.nvmlLib
			}
			if err := g.noRealGPU(e, err, named); err != nil {
				return err
			}
		}
	}
	if src == nil {
		b, _, err := g.openSim()
		if err != nil {
			return err
		}
		src = sim.NewIdleTelemetry(b, time.Now)
	}
	defer src.Close()
	sampler := metrics.NewSampler(src, f.interval)
	sampler.Refresh()
	reg := metrics.NewTelemetryRegistry(sampler)
	srv, err := metrics.Listen(f.addr, reg)
	if err != nil {
		return usageErr("invalid --metrics %q: %v", f.addr, err)
	}
	defer srv.Close()
	url := "http://" + srv.Addr() + metrics.MetricsPath
	n := len(src.Inventory().Devices)
	if err := summary(e, g.output, "serve", fmt.Sprintf("serving %d GPUs' telemetry on %s, sampled every %v", n, url, sampler.Interval()),
		map[string]any{"metrics_url": url, "gpus": n, "sample_interval_s": sampler.Interval().Seconds()}); err != nil {
		return runtimeErr(err)
	}
	ctx, stop := context.WithCancel(cmd.Context())
	defer stop()
	sampler.Run(ctx) // until interrupted: a stop on SIGINT or SIGTERM is a clean exit
	return nil
}
