package metrics

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Paths served; every other path is 404, every other method 405.
const (
	MetricsPath = "/metrics"
	HealthPath  = "/health"
)

// Server limits.
const (
	// MaxInFlight bounds the scrapes being answered at once; more wait their turn (until their
	// request ends) rather than fail.
	MaxInFlight = 64
	// CacheAge is how long one encoding of the registry serves scrapes: many scrapers at once cost
	// one Gather.
	CacheAge = 200 * time.Millisecond
)

// Handler serves a gatherer's metrics in the Prometheus text format.
type Handler struct {
	g          prometheus.Gatherer
	age        time.Duration
	sem        chan struct{}
	mu         sync.Mutex
	at         time.Time
	body       []byte // text exposition
	gz         []byte // the same, gzipped
	refreshing bool   // a goroutine is encoding anew
}

// NewHandler returns the handler of GET /metrics and /health for g.
func NewHandler(g prometheus.Gatherer) *Handler {
	return &Handler{g: g, age: CacheAge, sem: make(chan struct{}, MaxInFlight)}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != MetricsPath && r.URL.Path != HealthPath {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "only GET and HEAD are served", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == HealthPath {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
		return
	}
	select {
	case h.sem <- struct{}{}:
		defer func() { <-h.sem }()
	case <-r.Context().Done():
		return
	}
	body, gz, err := h.encoded()
	if err != nil {
		http.Error(w, "gathering metrics: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	w.Header().Set("Vary", "Accept-Encoding")
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		body = gz
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

func acceptsGzip(h string) bool {
	for _, part := range strings.Split(h, ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// encoded returns the cached exposition. Once it is older than the cache age, one goroutine
// encodes anew while scrapes go on getting the last one, so that no scrape but the first waits
// for an encoding.
func (h *Handler) encoded() (body, gz []byte, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.body == nil {
		if h.body, h.gz, err = h.encode(); err != nil {
			return nil, nil, err
		}
		h.at = time.Now()
	} else if time.Since(h.at) >= h.age && !h.refreshing {
		h.refreshing = true
		go h.refresh()
	}
	return h.body, h.gz, nil
}

func (h *Handler) refresh() {
	body, gz, err := h.encode()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.body, h.gz = body, gz
	}
	h.at, h.refreshing = time.Now(), false
}

// encode gathers and encodes the metrics, plain and gzipped.
func (h *Handler) encode() (body, gz []byte, err error) {
	mfs, err := h.g.Gather()
	if err != nil && len(mfs) == 0 {
		return nil, nil, err
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, nil, err
		}
	}
	var zbuf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zbuf, gzip.BestSpeed)
	_, _ = zw.Write(buf.Bytes())
	if err := zw.Close(); err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), zbuf.Bytes(), nil
}

// Server is the metrics endpoint.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// Listen starts serving g on addr (host:port; port 0 picks a free one).
func Listen(addr string, g prometheus.Gatherer) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, done: make(chan error, 1), srv: &http.Server{
		Handler:           NewHandler(g),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
	}}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server, letting scrapes in progress finish for up to a few seconds.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if e := <-s.done; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}

// NewRegistry returns a private registry with the telemetry collector of s (when not nil) and
// the benchmark figures.
func NewRegistry(s *Sampler) (*prometheus.Registry, *Bench) {
	reg := prometheus.NewRegistry()
	if s != nil {
		reg.MustRegister(NewTelemetryCollector(s))
	}
	return reg, NewBench(reg)
}

// NewTelemetryRegistry returns a private registry with only the telemetry collector of s.
func NewTelemetryRegistry(s *Sampler) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewTelemetryCollector(s))
	return reg
}
