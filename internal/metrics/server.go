package metrics

import (
	"bytes"
	"compress/gzip"
	"container/list"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"
)

// Paths served; every other path is 404, every other method 405.
const (
	MetricsPath = "/metrics"
	HealthPath  = "/health"
)

// Server limits.
const (
	// MaxInFlight bounds the scrapes finding their page at once; more wait their turn (until their
	// request ends) rather than fail. Writing the page holds no turn.
	MaxInFlight = 64
	// CacheAge is how long one encoding of the registry may serve scrapes: many scrapers at once
	// cost one Gather, and none gets figures older than that.
	CacheAge = 200 * time.Millisecond
	// MaxConns bounds the open connections before each new one closes the longest-idle keep-alive
	// one, so that idle sockets cannot use up the file descriptors that scrapes and NVML need. It
	// is above the 2,000 busy scrapers the endpoint is tested with (a lower bound would close
	// their connections between two scrapes, over and over) and far below usual descriptor
	// limits (Go raises the soft limit to the hard one at start); under a lower limit, running
	// out of descriptors closes the longest-idle connection too.
	MaxConns = 4096
	// IdleTimeout closes a keep-alive connection left idle that long: longer than Prometheus'
	// default scrape interval (1m), so that a scraper reuses its connection, and well under the
	// 2 minutes that let abandoned connections pile up.
	IdleTimeout = 75 * time.Second
)

// Handler serves a gatherer's metrics in the Prometheus text format.
//
// promhttp's handler gathers and encodes anew for every scrape, and its Accept-Encoding
// negotiation is unexported, so the handler keeps its own encoded page (plain and gzipped) and
// negotiates itself; x/sync does the rest: singleflight shares one encoding among the scrapes that
// find the page stale, a weighted semaphore bounds the scrapes in flight.
type Handler struct {
	g       prometheus.Gatherer
	sampler *Sampler // when set, a page whose sample is one interval old and no longer the latest is stale
	age     time.Duration
	now     func() time.Time
	sem     *semaphore.Weighted
	flight  singleflight.Group
	page    atomic.Pointer[page]
}

// page is one encoding of the registry.
type page struct {
	at       time.Time // when its Gather began
	sampleAt time.Time // when the sampler's latest sample was taken then
	samples  int       // the sampler's count of samples then
	body, gz []byte    // text exposition, and the same gzipped
}

// NewHandler returns the handler of GET /metrics and /health for g. When g is a *Registry with a
// sampler, a page is also encoded anew once its sample is one sampling interval old and the
// sampler has a newer one.
func NewHandler(g prometheus.Gatherer) *Handler {
	h := &Handler{g: g, age: CacheAge, now: time.Now, sem: semaphore.NewWeighted(MaxInFlight)}
	if r, ok := g.(*Registry); ok {
		h.sampler = r.sampler
	}
	return h
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
	if err := h.sem.Acquire(r.Context(), 1); err != nil {
		return // the scraper went away while waiting its turn
	}
	p, err := h.current()
	// The page is shared and immutable: writing it to a client that does not read holds no turn,
	// so that stalled connections cannot keep the scrapes that read from being answered.
	h.sem.Release(1)
	if err != nil {
		// One line: a registry's errors come joined by newlines.
		http.Error(w, "gathering metrics: "+strings.ReplaceAll(err.Error(), "\n", " "), http.StatusInternalServerError)
		return
	}
	body := p.body
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	w.Header().Set("Vary", "Accept-Encoding")
	if gzipWanted(r.Header.Values("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		body = p.gz
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

// gzipWanted says whether an Accept-Encoding field (RFC 9110 12.5.3) prefers gzip to no coding:
// codings match whatever their case, "x-gzip" is gzip, "*" stands for every coding the field does
// not name, q=0 refuses, and no coding named means none. A malformed q drops its element.
func gzipWanted(fields []string) bool {
	gzipQ, identityQ, anyQ := -1.0, -1.0, -1.0 // -1: not named
	for _, field := range fields {
		for elem := range strings.SplitSeq(field, ",") {
			coding, params, _ := strings.Cut(elem, ";")
			q := 1.0
			for param := range strings.SplitSeq(params, ";") {
				if k, v, ok := strings.Cut(param, "="); ok && strings.EqualFold(strings.TrimSpace(k), "q") {
					f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
					if err != nil || !(f >= 0 && f <= 1) {
						f = -1
					}
					q = f
				}
			}
			if q < 0 {
				continue
			}
			switch strings.ToLower(strings.TrimSpace(coding)) {
			case "gzip", "x-gzip":
				gzipQ = max(gzipQ, q)
			case "identity":
				identityQ = max(identityQ, q)
			case "*":
				anyQ = max(anyQ, q)
			}
		}
	}
	if gzipQ < 0 {
		gzipQ = anyQ
	}
	if identityQ < 0 {
		identityQ = max(anyQ, 0) // acceptable unless refused, but the least wanted
	}
	return gzipQ > 0 && gzipQ >= identityQ
}

// current returns a fresh page (see fresh). A stale page is encoded anew before answering, and
// the scrapes that find it stale meanwhile wait for that one encoding. Past three quarters of the
// cache age, a page is renewed in the background while it goes on serving, so that scrapes coming
// steadily do not wait (the last quarter, 50 ms, is ten times a usual encoding).
func (h *Handler) current() (*page, error) {
	p, now := h.page.Load(), h.now()
	if h.fresh(p, now) {
		if now.Sub(p.at) >= h.age*3/4 {
			h.flight.DoChan("page", h.renew(p)) // nobody waits: the flight stores the page
		}
		return p, nil
	}
	v, err, _ := h.flight.Do("page", h.renew(p))
	if err != nil {
		return nil, err
	}
	return v.(*page), nil
}

// renew returns the flight that replaces the page seen: with a new encoding, unless a flight
// has just left a fresh one.
func (h *Handler) renew(seen *page) func() (any, error) {
	return func() (any, error) {
		if p := h.page.Load(); p != seen && h.fresh(p, h.now()) {
			return p, nil
		}
		p, err := h.encode()
		if err != nil {
			return nil, err
		}
		h.page.Store(p)
		return p, nil
	}
}

// fresh says whether p may be served now: it is younger than the cache age, and its sample is
// younger than one sampling interval or still the latest, so that a scrape never gets telemetry
// older than one interval when a newer sample exists (the simulated burn-in samples after every
// step, much more often than its interval: that alone does not make the page stale).
func (h *Handler) fresh(p *page, now time.Time) bool {
	if p == nil || now.Sub(p.at) >= h.age {
		return false
	}
	if h.sampler == nil || now.Sub(p.sampleAt) < h.sampler.Interval() {
		return true
	}
	return h.sampler.Latest().Samples == p.samples
}

// encode gathers and encodes the metrics, plain and gzipped.
func (h *Handler) encode() (*page, error) {
	p := &page{at: h.now()}
	if h.sampler != nil {
		// Read before Gather: a sample taken meanwhile only makes the page look older than it is.
		snap := h.sampler.Latest()
		p.sampleAt, p.samples = snap.At, snap.Samples
	}
	mfs, err := h.g.Gather()
	if err != nil && len(mfs) == 0 {
		return nil, err
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, err
		}
	}
	var zbuf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zbuf, gzip.BestSpeed)
	_, _ = zw.Write(buf.Bytes())
	if err := zw.Close(); err != nil {
		return nil, err
	}
	p.body, p.gz = buf.Bytes(), zbuf.Bytes()
	return p, nil
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
	return serve(ln, g, MaxConns), nil
}

// serve serves g on ln, closing idle connections past maxConns.
func serve(ln net.Listener, g prometheus.Gatherer, maxConns int) *Server {
	c := &conns{max: maxConns, idle: list.New(), at: map[net.Conn]*list.Element{}}
	s := &Server{ln: ln, done: make(chan error, 1), srv: &http.Server{
		Handler:           NewHandler(g),
		ConnState:         c.track,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    16 << 10,
	}}
	go func() { s.done <- s.srv.Serve(listener{ln, c}) }()
	return s
}

// conns counts the server's connections and keeps its idle keep-alive ones in the order they
// went idle, so that the longest-idle one can be closed to make room.
type conns struct {
	max  int
	mu   sync.Mutex
	n    int                        // open connections
	idle *list.List                 // idle connections, longest idle first
	at   map[net.Conn]*list.Element // each idle connection's element in idle
}

// track is the server's ConnState hook: each new connection past the bound closes the
// longest-idle one.
func (c *conns) track(conn net.Conn, state http.ConnState) {
	c.mu.Lock()
	if e, ok := c.at[conn]; ok {
		c.idle.Remove(e)
		delete(c.at, conn)
	}
	over := false
	switch state {
	case http.StateNew:
		c.n++
		over = c.n > c.max
	case http.StateIdle:
		c.at[conn] = c.idle.PushBack(conn)
	case http.StateClosed, http.StateHijacked:
		c.n--
	}
	c.mu.Unlock()
	if over {
		c.closeIdle()
	}
}

// closeIdle closes the longest-idle connection, if there is one.
func (c *conns) closeIdle() {
	c.mu.Lock()
	e := c.idle.Front()
	if e == nil {
		c.mu.Unlock()
		return
	}
	conn := c.idle.Remove(e).(net.Conn)
	delete(c.at, conn)
	c.mu.Unlock()
	_ = conn.Close() // its StateClosed follows from the server's goroutine and counts it out
}

// listener closes the longest-idle connection when accepting runs out of file descriptors
// (connections opened faster than the bound closes idle ones, or a descriptor limit under the
// bound), so that the server's next try, a few milliseconds later, gets one.
type listener struct {
	net.Listener
	c *conns
}

func (l listener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		l.c.closeIdle()
	}
	return conn, err
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

// Registry is a private registry and the sampler its telemetry collector reads (nil when none),
// so that the endpoint serving it encodes anew as soon as there is a newer sample.
type Registry struct {
	*prometheus.Registry
	sampler *Sampler
}

// NewRegistry returns a private registry with the telemetry collector of s (when not nil) and
// the benchmark figures.
func NewRegistry(s *Sampler) (*Registry, *Bench) {
	reg := &Registry{Registry: prometheus.NewRegistry(), sampler: s}
	if s != nil {
		reg.MustRegister(NewTelemetryCollector(s))
	}
	return reg, NewBench(reg.Registry)
}

// NewTelemetryRegistry returns a private registry with only the telemetry collector of s.
func NewTelemetryRegistry(s *Sampler) *Registry {
	reg := &Registry{Registry: prometheus.NewRegistry(), sampler: s}
	reg.MustRegister(NewTelemetryCollector(s))
	return reg
}
