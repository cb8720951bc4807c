// Package metrics exports gpubench's telemetry and benchmark figures to Prometheus: a sampler that
// polls a telemetry source on its own bounded timer and keeps the latest sample, collectors on a
// private registry that read only that cache (a scrape never waits on NVML), the benchmark and
// burn-in figures, and an HTTP server that serves GET /metrics and /health and nothing else.
// Names, units and labels follow docs/monitoring.md.
package metrics

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/gpubench/gpubench/internal/metrics/telemetry"
)

// Interval bounds: sampling faster than MinInterval costs NVML time for nothing, slower than
// MaxInterval misses short events.
const (
	MinInterval     = 100 * time.Millisecond
	MaxInterval     = time.Minute
	DefaultInterval = time.Second
)

// Snapshot is the sampler's cache: the latest sample and what has accumulated since the start.
type Snapshot struct {
	Inventory telemetry.Inventory
	Sample    telemetry.Sample
	// At is when the latest sample was taken (zero before the first).
	At time.Time
	// XIDCounts are the XID events seen since the start, per GPU and XID number.
	XIDCounts map[[2]int]float64
	// XIDs are every event seen since the start, in order.
	XIDs []telemetry.XID
	// Slowdowns counts, per GPU, the samples since the start in which a hardware slowdown held
	// the clocks down, and Slowed is the latest of them: a reader that looks only now and then
	// (the burn-in, between steps) still sees every one.
	Slowdowns map[int]int
	Slowed    map[int]telemetry.GPU
	// Samples counts the polls so far.
	Samples int
}

// Sampler polls a source and caches what it reports.
type Sampler struct {
	src      telemetry.Source
	interval time.Duration
	now      func() time.Time

	poll sync.Mutex // one poll at a time
	mu   sync.RWMutex
	snap Snapshot
}

// NewSampler returns a sampler of src at interval, clamped to [MinInterval, MaxInterval].
func NewSampler(src telemetry.Source, interval time.Duration) *Sampler {
	interval = min(max(interval, MinInterval), MaxInterval)
	s := &Sampler{src: src, interval: interval, now: time.Now}
	s.snap = Snapshot{Inventory: src.Inventory(), XIDCounts: map[[2]int]float64{}}
	return s
}

// Interval is the sampling period in use.
func (s *Sampler) Interval() time.Duration { return s.interval }

// Run polls every interval until ctx ends. It polls once at once.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.Refresh()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Start polls every interval in a goroutine of its own until ctx ends or stop is called. stop
// returns once that goroutine has, so that no sample is in flight when the caller then closes
// the source (closing NVML under a sample frees what the sample reads).
func (s *Sampler) Start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// Refresh polls the source now and returns the new snapshot.
func (s *Sampler) Refresh() Snapshot {
	s.poll.Lock()
	defer s.poll.Unlock()
	sample := s.src.Sample()
	at := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	counts := maps.Clone(s.snap.XIDCounts)
	if counts == nil {
		counts = map[[2]int]float64{}
	}
	xids := s.snap.XIDs
	for _, x := range sample.XIDs {
		counts[[2]int{x.GPU, x.Code}]++
		xids = append(xids[:len(xids):len(xids)], x)
	}
	slowdowns, slowed := maps.Clone(s.snap.Slowdowns), maps.Clone(s.snap.Slowed)
	if slowdowns == nil {
		slowdowns, slowed = map[int]int{}, map[int]telemetry.GPU{}
	}
	for _, g := range sample.GPUs {
		if g.ReasonsKnown && g.ClockReasons&telemetry.ReasonsHardwareSlowing != 0 {
			slowdowns[g.Index]++
			slowed[g.Index] = g
		}
	}
	s.snap = Snapshot{Inventory: s.snap.Inventory, Sample: sample, At: at, XIDCounts: counts, XIDs: xids,
		Slowdowns: slowdowns, Slowed: slowed, Samples: s.snap.Samples + 1}
	return s.snap
}

// Latest returns the cached snapshot without polling. Its maps and slices must not be changed.
func (s *Sampler) Latest() Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.snap
}
