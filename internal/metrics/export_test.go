package metrics

import (
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SetCacheAge changes how long h serves one encoding.
func SetCacheAge(h *Handler, age time.Duration) { h.age = age }

// SetClock makes h read the time from now.
func SetClock(h *Handler, now func() time.Time) { h.now = now }

// SetSamplerClock makes s read the time from now.
func SetSamplerClock(s *Sampler, now func() time.Time) { s.now = now }

// Serve serves g on ln as Listen does, with maxConns in place of MaxConns.
func Serve(ln net.Listener, g prometheus.Gatherer, maxConns int) *Server {
	return serve(ln, g, maxConns)
}
