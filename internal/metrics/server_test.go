package metrics_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpubench/gpubench/internal/metrics"
	"github.com/gpubench/gpubench/internal/metrics/telemetry"
)

// scrape asks h for /metrics with the given Accept-Encoding fields.
func scrape(t *testing.T, h http.Handler, acceptEncoding ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, metrics.MetricsPath, nil)
	for _, v := range acceptEncoding {
		req.Header.Add("Accept-Encoding", v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	return rec
}

// The first scrape after a pause longer than the cache age gets what the registry holds now,
// not the page the previous scrape left.
func TestScrapeAfterPauseIsFresh(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_value", Help: "A value that changes."})
	reg.MustRegister(g)
	h := metrics.NewHandler(reg)
	g.Set(1)
	if body := scrape(t, h).Body.String(); !strings.Contains(body, "test_value 1\n") {
		t.Fatalf("first scrape:\n%s", body)
	}
	g.Set(2)
	time.Sleep(metrics.CacheAge)
	if body := scrape(t, h).Body.String(); !strings.Contains(body, "test_value 2\n") {
		t.Fatalf("scrape after %v: want test_value 2\n%s", metrics.CacheAge, body)
	}
}

// Past three quarters of the cache age, a scrape gets the page as is and has the next one encoded
// in the background, so that scrapes coming steadily do not wait for an encoding.
func TestPageRenewedAhead(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_value", Help: "A value that changes."})
	reg.MustRegister(g)
	var gathers atomic.Int64
	h := metrics.NewHandler(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		gathers.Add(1)
		return reg.Gather()
	}))
	var now atomic.Int64 // the handler's clock, in ns
	metrics.SetClock(h, func() time.Time { return time.Unix(0, now.Load()) })
	g.Set(1)
	scrape(t, h)
	g.Set(2)
	now.Add(int64(metrics.CacheAge * 3 / 4))
	if body := scrape(t, h).Body.String(); !strings.Contains(body, "test_value 1\n") {
		t.Fatalf("scrape past three quarters of the cache age: want the page as is (test_value 1)\n%s", body)
	}
	// The renewal runs on its own; wait for its page, the clock standing still.
	for i := 0; !strings.Contains(scrape(t, h).Body.String(), "test_value 2\n"); i++ {
		if i == 1000 {
			t.Fatalf("no page renewed in the background after %d scrapes (%d gathers)", i, gathers.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := gathers.Load(); n != 2 {
		t.Errorf("%d gathers; want 2", n)
	}
}

// stepSource's temperature is the number of polls so far.
type stepSource struct{ polls atomic.Int64 }

func (s *stepSource) Inventory() telemetry.Inventory {
	return telemetry.Inventory{Devices: []telemetry.Device{{Index: 0, UUID: "GPU-aaaa", NUMANode: -1}}}
}

func (s *stepSource) Sample() telemetry.Sample {
	g := telemetry.NewGPU(0)
	g.TemperatureCelsius = float64(s.polls.Add(1))
	return telemetry.Sample{GPUs: []telemetry.GPU{g}}
}

func (s *stepSource) Close() error { return nil }

// gate is a collector whose Collect counts its calls and, while the gate is shut, waits for it to
// open.
type gate struct {
	calls   atomic.Int64
	entered chan struct{} // receives a call that waits
	mu      sync.RWMutex  // held for writing while shut
}

func (g *gate) Describe(chan<- *prometheus.Desc) {}

func (g *gate) Collect(chan<- prometheus.Metric) {
	g.calls.Add(1)
	if !g.mu.TryRLock() {
		select {
		case g.entered <- struct{}{}:
		default: // one is enough
		}
		g.mu.RLock()
	}
	g.mu.RUnlock()
}

// A page whose sample is one sampling interval old is stale, however young the page, once a
// newer sample exists (a newer sample alone is not enough: the simulated burn-in samples after
// every step); the scrapes that find it stale at once all wait for one encoding, which serves
// them all the new sample.
func TestStaleScrapesShareOneEncoding(t *testing.T) {
	var now atomic.Int64 // the clock of the handler and the sampler, in ns
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	s := metrics.NewSampler(&stepSource{}, time.Second)
	metrics.SetSamplerClock(s, clock)
	s.Refresh()
	reg := metrics.NewTelemetryRegistry(s)
	gt := &gate{entered: make(chan struct{}, 1)}
	reg.MustRegister(gt)
	h := metrics.NewHandler(reg)
	metrics.SetCacheAge(h, time.Hour)
	metrics.SetClock(h, clock)
	temp := func(v int) string {
		return fmt.Sprintf(`gpubench_gpu_temperature_celsius{gpu="0",uuid="GPU-aaaa"} %d`+"\n", v)
	}
	if body := scrape(t, h).Body.String(); !strings.Contains(body, temp(1)) {
		t.Fatalf("first scrape:\n%s", body)
	}
	now.Add(int64(s.Interval() / 2))
	s.Refresh()
	if body := scrape(t, h).Body.String(); !strings.Contains(body, temp(1)) || gt.calls.Load() != 1 {
		t.Fatalf("scrape half an interval after the sample: %d gathers; want the page as is\n%s", gt.calls.Load(), body)
	}
	now.Add(int64(s.Interval() / 2))
	gt.mu.Lock()
	const n = 16
	bodies := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req := httptest.NewRequest(http.MethodGet, metrics.MetricsPath, nil)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			bodies[i] = rec.Body.String()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-gt.entered:
		time.Sleep(50 * time.Millisecond) // let the other scrapes find the page stale too
	case <-done: // all answered without a Gather: wrong, as the checks below say
	}
	gt.mu.Unlock()
	<-done
	for i, body := range bodies {
		if !strings.Contains(body, temp(2)) {
			t.Fatalf("scrape %d one interval after the first sample:\n%s", i, body)
		}
	}
	if got := gt.calls.Load(); got != 2 {
		t.Errorf("%d gathers for 2 pages; want 2", got)
	}
}

// A failed Gather is a 500 with the errors on one line, and the next scrape gathers again.
func TestGatherError(t *testing.T) {
	fail := true
	h := metrics.NewHandler(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if fail {
			return nil, prometheus.MultiError{errors.New("collector broke"), errors.New("another too")}
		}
		return prometheus.NewRegistry().Gather()
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, metrics.MetricsPath, nil))
	if body := rec.Body.String(); rec.Code != http.StatusInternalServerError ||
		!strings.Contains(body, "collector broke") || !strings.Contains(body, "another too") || strings.Count(body, "\n") != 1 {
		t.Fatalf("failing gather: %d %q; want 500 and both errors on one line", rec.Code, body)
	}
	fail = false
	scrape(t, h)
}

// Accept-Encoding is negotiated as RFC 9110 says.
func TestAcceptEncoding(t *testing.T) {
	h := metrics.NewHandler(prometheus.NewRegistry())
	for _, c := range []struct {
		name   string
		fields []string
		gzip   bool
	}{
		{"absent", nil, false},
		{"empty", []string{""}, false},
		{"gzip, as Prometheus and Go's client ask", []string{"gzip"}, true},
		{"browser", []string{"gzip, deflate, br, zstd"}, true},
		{"upper case", []string{"GZIP"}, true},
		{"mixed case", []string{"GZip;Q=0.5"}, true},
		{"x-gzip", []string{"x-gzip"}, true},
		{"refused", []string{"gzip;q=0"}, false},
		{"refused with spaces", []string{"gzip ; q = 0"}, false},
		{"refused with decimals", []string{"gzip;q=0.000"}, false},
		{"refused, upper-case Q", []string{"gzip;Q=0"}, false},
		{"refused among others", []string{"br, gzip;q=0, deflate"}, false},
		{"wildcard", []string{"*"}, true},
		{"refused wildcard", []string{"*;q=0"}, false},
		{"named beats wildcard", []string{"gzip;q=0, *"}, false},
		{"wildcard refused, gzip named", []string{"*;q=0, gzip"}, true},
		{"identity preferred", []string{"gzip;q=0.5, identity"}, false},
		{"identity refused", []string{"gzip;q=0.1, identity;q=0"}, true},
		{"tie goes to gzip", []string{"gzip;q=0.5, identity;q=0.5"}, true},
		{"low q still gzip", []string{"gzip;q=0.001"}, true},
		{"only other codings", []string{"deflate, br"}, false},
		{"identity only", []string{"identity"}, false},
		{"two fields", []string{"deflate", "gzip"}, true},
		{"two fields, refused", []string{"gzip;q=0", "*"}, false},
		{"malformed q dropped", []string{"gzip;q=x"}, false},
		{"q above 1 dropped", []string{"gzip;q=2"}, false},
		{"NaN dropped", []string{"gzip;q=NaN"}, false},
		{"other parameter", []string{"gzip;level=1"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := scrape(t, h, c.fields...)
			if got := rec.Header().Get("Content-Encoding") == "gzip"; got != c.gzip {
				t.Errorf("Accept-Encoding %q: gzip %v; want %v", c.fields, got, c.gzip)
			}
			if v := rec.Header().Get("Vary"); v != "Accept-Encoding" {
				t.Errorf("Vary %q", v)
			}
		})
	}
}

// fdBudget is a listener with a budget of file descriptors: past it, accepting fails with
// EMFILE and leaves the connection waiting in the backlog, as accept(2) does.
type fdBudget struct {
	net.Listener
	slots  chan struct{}
	emfile atomic.Int64 // accepts refused
}

func (l *fdBudget) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		l.emfile.Add(1)
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &budgetConn{Conn: c, release: sync.OnceFunc(func() { <-l.slots })}, nil
}

type budgetConn struct {
	net.Conn
	release func()
}

func (c *budgetConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// Idle keep-alive connections, many more than the bound and than the descriptors, cannot lock
// out a scraper: the longest-idle ones are closed to make room, past the bound or when the
// descriptors run out first, and the latest stays usable.
func TestIdleConnectionsMakeRoom(t *testing.T) {
	const fds, idle = 16, 48
	for _, c := range []struct {
		name     string
		maxConns int
	}{
		{"past the bound", 8},
		{"out of descriptors", 1 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			budget := &fdBudget{Listener: ln, slots: make(chan struct{}, fds)}
			srv := metrics.Serve(budget, prometheus.NewRegistry(), c.maxConns)
			defer srv.Close()
			// get sends one request on conn and reads the answer; the deadline only keeps a
			// failure from hanging the test.
			get := func(conn net.Conn, r *bufio.Reader) error {
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := fmt.Fprintf(conn, "GET /metrics HTTP/1.1\r\nHost: %s\r\n\r\n", srv.Addr()); err != nil {
					return err
				}
				resp, err := http.ReadResponse(r, nil)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					return err
				}
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
				return nil
			}
			conns := make([]net.Conn, idle)
			readers := make([]*bufio.Reader, idle)
			for i := range conns {
				conn, err := net.Dial("tcp", srv.Addr())
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				conns[i], readers[i] = conn, bufio.NewReader(conn)
				if err := get(conn, readers[i]); err != nil {
					t.Fatalf("keep-alive connection %d: %v", i, err)
				}
			}
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
			resp, err := client.Get("http://" + srv.Addr() + metrics.MetricsPath)
			if err != nil {
				t.Fatalf("fresh scrape after %d idle connections: %v", idle, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("fresh scrape: status %d", resp.StatusCode)
			}
			if err := get(conns[idle-1], readers[idle-1]); err != nil {
				t.Errorf("the latest idle connection was closed: %v", err)
			}
			if _, err := readers[0].ReadByte(); !errors.Is(err, io.EOF) {
				t.Errorf("the longest-idle connection: %v; want it closed (EOF)", err)
			}
			if n := budget.emfile.Load(); c.maxConns < fds && n > 0 {
				t.Errorf("%d accepts ran out of descriptors under the bound", n)
			}
		})
	}
}

// discard is a ResponseWriter that keeps only the headers.
type discard struct{ h http.Header }

func (d discard) Header() http.Header         { return d.h }
func (d discard) Write(p []byte) (int, error) { return len(p), nil }
func (d discard) WriteHeader(int)             {}

// BenchmarkScrape puts 50 scrapers asking for gzip on a registry the size of a simulated
// burn-in's (about 1,300 series), with a new sample every 100 ms, and reports the 99th
// percentile of the handler's time and the time of one encoding beside its throughput.
func BenchmarkScrape(b *testing.B) {
	s := metrics.NewSampler(&fakeSource{}, time.Second)
	s.Refresh()
	reg, bench := metrics.NewRegistry(s)
	for _, c := range []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "sendrecv"} {
		for size := int64(8); size <= 8<<30; size *= 4 {
			bench.Coll(c, size, 100, 90, 12.5)
		}
	}
	for i := range 8 {
		for j := range 8 {
			bench.P2P(i, j, 380)
		}
	}
	h := metrics.NewHandler(reg)
	req := httptest.NewRequest(http.MethodGet, metrics.MetricsPath, nil)
	t := time.Now()
	h.ServeHTTP(discard{http.Header{}}, req) // the first scrape encodes
	encode := time.Since(t)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				s.Refresh()
			}
		}
	}()
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(25) // x GOMAXPROCS 2 on the development machine
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest(http.MethodGet, metrics.MetricsPath, nil)
		req.Header.Set("Accept-Encoding", "gzip")
		w := discard{http.Header{}}
		var mine []time.Duration
		for pb.Next() {
			clear(w.h)
			t := time.Now()
			h.ServeHTTP(w, req)
			mine = append(mine, time.Since(t))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	}
	b.ReportMetric(float64(encode.Nanoseconds()), "encode-ns")
}

// stalled is a response writer whose client reads nothing: every Write blocks until released.
type stalled struct {
	h       http.Header
	writing chan struct{}
	release chan struct{}
}

func (s *stalled) Header() http.Header { return s.h }
func (s *stalled) WriteHeader(int)     {}
func (s *stalled) Write(p []byte) (int, error) {
	s.writing <- struct{}{}
	<-s.release
	return len(p), nil
}

// Clients that stop reading, as many as there are turns, do not keep a scrape that reads from
// being answered: writing the page holds no turn.
func TestStalledClientsHoldNoTurn(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_value", Help: "A value."}))
	h := metrics.NewHandler(reg)
	writing, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	for range metrics.MaxInFlight {
		wg.Go(func() {
			h.ServeHTTP(&stalled{h: http.Header{}, writing: writing, release: release}, httptest.NewRequest(http.MethodGet, metrics.MetricsPath, nil))
		})
		<-writing // each stalls in its write
	}
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, metrics.MetricsPath, nil))
		done <- rec
	}()
	select {
	case rec := <-done:
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "test_value 0\n") {
			t.Errorf("scrape beside stalled clients: %d\n%s", rec.Code, rec.Body)
		}
	case <-time.After(10 * time.Second): // only bounds the failure: the scrape waited for a turn
		t.Errorf("a scrape waited behind %d clients that read nothing", metrics.MaxInFlight)
	}
	close(release)
	wg.Wait()
}
