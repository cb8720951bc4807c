// Command gpubench benchmarks and diagnoses multi-GPU machines: collectives as nccl-tests measures
// them, on real GPUs or on a simulated machine.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

// version is the file VERSION's (a test keeps them equal); make sets it from that file too.
var version = "0.2.0-dev"

func main() {
	ctx, stop := signalContext()
	e := &env{stdout: os.Stdout, stderr: os.Stderr, pid: os.Getpid(), now: time.Now, version: version, procs: setProcs}
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		e.progress = true // someone is watching: say how far long runs have got
	}
	code := run(ctx, e, os.Args[1:])
	stop()
	os.Exit(code)
}

// signalContext ends on SIGINT, SIGTERM or SIGHUP alike: a run stops, keeping the rows measured.
// Once one has come, the next kills the process at once.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		<-ctx.Done()
		stop()
	}()
	return ctx, stop
}

func setProcs(n int) { runtime.GOMAXPROCS(n) }
