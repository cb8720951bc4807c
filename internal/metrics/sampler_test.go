package metrics_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/metrics"
	"github.com/gpubench/gpubench/internal/metrics/telemetry"
)

// closingSource is a source that, like NVML, must not be used once closed, nor closed under a
// sample: it records every such use. A sample takes a while (until the source closes, or 50 ms),
// so that a close that does not wait for the sampler lands under it.
type closingSource struct {
	mu       sync.Mutex
	inFlight bool
	closed   bool
	misuse   []string
	entered  chan struct{} // gets a value when a sample starts
	release  chan struct{} // closed by Close
}

func (s *closingSource) Inventory() telemetry.Inventory { return telemetry.Inventory{} }

func (s *closingSource) Sample() telemetry.Sample {
	s.mu.Lock()
	if s.closed {
		s.misuse = append(s.misuse, "sample after close")
	}
	s.inFlight = true
	s.mu.Unlock()
	select {
	case s.entered <- struct{}{}:
	default:
	}
	select {
	case <-s.release:
	case <-time.After(50 * time.Millisecond):
	}
	s.mu.Lock()
	s.inFlight = false
	s.mu.Unlock()
	return telemetry.Sample{}
}

func (s *closingSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight {
		s.misuse = append(s.misuse, "close under a sample")
	}
	if !s.closed {
		s.closed = true
		close(s.release)
	}
	return nil
}

// Once Start's stop returns, the sampler polls no more: the source can be closed (the burn-in
// closes NVML right after), even while a sample was in flight when stop was called.
func TestSamplerStopWaitsForSample(t *testing.T) {
	for range 5 {
		src := &closingSource{entered: make(chan struct{}), release: make(chan struct{})}
		s := metrics.NewSampler(src, metrics.MinInterval)
		stop := s.Start(context.Background())
		<-src.entered // a sample is in flight
		stop()
		src.Close()
		src.mu.Lock()
		if len(src.misuse) > 0 {
			t.Fatalf("source misused: %v", src.misuse)
		}
		src.mu.Unlock()
	}
}
