package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Verdicts are the outcomes of a burn-in check, in the order gpubench_burn_verdict lists them.
var Verdicts = []string{"pass", "warn", "fail", "skip"}

// Bench holds the benchmark and burn-in figures. Its methods are safe for concurrent use.
type Bench struct {
	busBW, algBW  *prometheus.GaugeVec
	p2pBW         *prometheus.GaugeVec
	iterDuration  *prometheus.HistogramVec
	checkFailures *prometheus.CounterVec
	passes        prometheus.Counter
	miscompares   prometheus.Counter
	running       prometheus.Gauge
	planned       prometheus.Gauge
	elapsed       prometheus.Gauge
	verdict       *prometheus.GaugeVec
}

// NewBench returns the figures, registered on reg.
func NewBench(reg prometheus.Registerer) *Bench {
	b := &Bench{
		busBW: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpubench_bench_bus_bandwidth_bytes_per_second",
			Help: "Latest bus bandwidth of a collective at a size (nccl-tests' busbw, out of place)."}, []string{"collective", "size_bytes"}),
		algBW: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpubench_bench_algorithm_bandwidth_bytes_per_second",
			Help: "Latest algorithm bandwidth of a collective at a size (nccl-tests' algbw, out of place)."}, []string{"collective", "size_bytes"}),
		p2pBW: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpubench_p2p_bandwidth_bytes_per_second",
			Help: "Latest unidirectional copy bandwidth from one GPU to another."}, []string{"src_gpu", "dst_gpu"}),
		iterDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gpubench_bench_iteration_duration_seconds",
			Help:    "Duration of one iteration of a collective (the mean over a measured row), on the backend's clock.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 12)}, []string{"collective"}),
		checkFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpubench_bench_check_failures_total",
			Help: "Measurements that failed a burn-in check, by check."}, []string{"check"}),
		passes: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpubench_burn_passes_total",
			Help: "Burn-in passes completed (every collective and every GPU pair once)."}),
		miscompares: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpubench_burn_miscompares_total",
			Help: "Results and copies whose data was wrong."}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpubench_burn_running",
			Help: "1 while a burn-in runs."}),
		planned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpubench_burn_duration_seconds",
			Help: "The burn-in's planned duration, on the backend's clock."}),
		elapsed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpubench_burn_elapsed_seconds",
			Help: "Time the burn-in has run, on the backend's clock."}),
		verdict: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpubench_burn_verdict",
			Help: "1 for a check's current verdict (pass, warn, fail or skip), 0 for the others; subject is a GPU index, a GPU pair A-B, or all."},
			[]string{"subject", "check", "verdict"}),
	}
	reg.MustRegister(b.busBW, b.algBW, b.p2pBW, b.iterDuration, b.checkFailures, b.passes, b.miscompares,
		b.running, b.planned, b.elapsed, b.verdict)
	return b
}

// Coll records one measured row of a collective: bandwidths in GB/s (1e9 bytes/s), iteration
// time in µs.
func (b *Bench) Coll(name string, size int64, busGBs, algGBs, iterUS float64) {
	s := strconv.FormatInt(size, 10)
	b.busBW.WithLabelValues(name, s).Set(busGBs * 1e9)
	b.algBW.WithLabelValues(name, s).Set(algGBs * 1e9)
	b.iterDuration.WithLabelValues(name).Observe(iterUS / 1e6)
}

// P2P records one copy bandwidth in GB/s.
func (b *Bench) P2P(src, dst int, gbs float64) {
	b.p2pBW.WithLabelValues(strconv.Itoa(src), strconv.Itoa(dst)).Set(gbs * 1e9)
}

// CheckFailed counts n measurements that failed check.
func (b *Bench) CheckFailed(check string, n int) {
	b.checkFailures.WithLabelValues(check).Add(float64(n))
}

// Miscompares counts n results or copies with wrong data.
func (b *Bench) Miscompares(n int) { b.miscompares.Add(float64(n)) }

// Pass counts one finished pass.
func (b *Bench) Pass() { b.passes.Inc() }

// State sets whether the burn-in runs, its planned duration and the time elapsed, in seconds.
func (b *Bench) State(running bool, planned, elapsed float64) {
	v := 0.0
	if running {
		v = 1
	}
	b.running.Set(v)
	b.planned.Set(planned)
	b.elapsed.Set(elapsed)
}

// Verdict sets a check's verdict for a subject.
func (b *Bench) Verdict(subject, check, verdict string) {
	for _, v := range Verdicts {
		x := 0.0
		if v == verdict {
			x = 1
		}
		b.verdict.WithLabelValues(subject, check, v).Set(x)
	}
}
