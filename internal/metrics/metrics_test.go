package metrics_test

import (
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpubench/gpubench/internal/golden"
	"github.com/gpubench/gpubench/internal/metrics"
	"github.com/gpubench/gpubench/internal/metrics/telemetry"
)

// fakeSource reports two GPUs with fixed figures; the second sample brings an XID on GPU 1.
type fakeSource struct{ polls int }

func (f *fakeSource) Inventory() telemetry.Inventory {
	return telemetry.Inventory{DriverVersion: "580.65.06", CUDAVersion: "13.0", Devices: []telemetry.Device{
		{Index: 0, UUID: "GPU-aaaa", Name: "NVIDIA H100 80GB HBM3", PCIBusID: "0000:18:00.0", NUMANode: 0, MemoryBytes: 85520809984, BaseSMClockHz: 1590e6, NVLinks: 1},
		{Index: 1, UUID: "GPU-bbbb", Name: "NVIDIA H100 80GB HBM3", PCIBusID: "0000:2a:00.0", NUMANode: -1, MemoryBytes: 85520809984, BaseSMClockHz: telemetry.Unknown},
	}}
}

func (f *fakeSource) Sample() telemetry.Sample {
	f.polls++
	s := telemetry.Sample{Durations: map[string]time.Duration{"gpu": 3 * time.Millisecond, "xid": time.Millisecond}}
	g := telemetry.NewGPU(0)
	g.TemperatureCelsius, g.SlowdownTempCelsius, g.PowerWatts, g.PowerLimitWatts = 61, 87, 612.5, 700
	g.EnergyJoules, g.SMClockHz, g.MemoryClockHz, g.Utilization, g.MemoryUtilization = 123456.789, 1980e6, 2619e6, 0.97, 0.55
	g.MemoryUsedBytes, g.ECCCorrected, g.ECCUncorrected = 4<<30, 2, 0
	g.RemappedRowsCorrected, g.RemappedRowsUncorr, g.RemapFailed, g.PCIeReplays = 1, 0, 0, 3
	g.ClockReasons, g.ReasonsKnown = telemetry.ReasonHWThermal|telemetry.ReasonSWPowerCap, true
	g.Links = []telemetry.Link{{Link: 0, Up: true, Errors: [4]float64{1, 0, 2, 0}}}
	s.GPUs = append(s.GPUs, g, telemetry.NewGPU(1)) // GPU 1 reports nothing
	if f.polls == 2 {
		s.XIDs = []telemetry.XID{{GPU: 1, Code: 48, At: time.Minute}, {GPU: 1, Code: 48, At: 2 * time.Minute}}
		s.Errors = map[string]error{"gpu": errors.New("GPU 1: not supported")}
	}
	return s
}

func (f *fakeSource) Close() error { return nil }

func sampled(t *testing.T) (*metrics.Sampler, *metrics.Bench, func() string) {
	t.Helper()
	s := metrics.NewSampler(&fakeSource{}, time.Second)
	reg, bench := metrics.NewRegistry(s)
	s.Refresh()
	s.Refresh()
	return s, bench, func() string {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, mf := range mfs {
			if err := encodeText(&b, mf); err != nil {
				t.Fatal(err)
			}
		}
		return b.String()
	}
}

// The exposition of a known sample, byte for byte, with the sample time fixed.
func TestExpositionGolden(t *testing.T) {
	_, bench, text := sampled(t)
	bench.Coll("allreduce", 1<<30, 361.25, 192.5, 5577.3)
	bench.P2P(0, 1, 380.1)
	bench.CheckFailed("bandwidth", 2)
	bench.Miscompares(1)
	bench.Pass()
	bench.State(true, 7200, 60)
	bench.Verdict("0", "xid", "pass")
	bench.Verdict("1", "xid", "fail")
	out := text()
	// The sample's wall time is the one line that changes from run to run.
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "gpubench_last_sample_timestamp_seconds ") {
			l = "gpubench_last_sample_timestamp_seconds <time>"
		}
		lines = append(lines, l)
	}
	golden.Check(t, "exposition.golden", strings.Join(lines, "\n"))
}

// client_golang's linter finds nothing to say about any of gpubench's metrics.
func TestLint(t *testing.T) {
	s, bench, _ := sampled(t)
	reg, _ := metrics.NewRegistry(s)
	bench.Coll("allreduce", 8, 1, 1, 1)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	// The benchmark figures, filled in, from their own registry.
	reg2, b2 := metrics.NewRegistry(nil)
	b2.Coll("allreduce", 8, 1, 1, 1)
	b2.P2P(0, 1, 1)
	b2.CheckFailed("data", 1)
	b2.Verdict("all", "data", "fail")
	problems, err = testutil.GatherAndLint(reg2)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// XIDs accumulate per GPU and number; a collector's failure shows as success 0.
func TestSamplerAccumulates(t *testing.T) {
	s, _, _ := sampled(t)
	snap := s.Latest()
	if snap.Samples != 2 || snap.XIDCounts[[2]int{1, 48}] != 2 || len(snap.XIDs) != 2 {
		t.Fatalf("snapshot %+v; want 2 samples and XID 48 twice on GPU 1", snap)
	}
	s.Refresh()
	if got := s.Latest(); got.XIDCounts[[2]int{1, 48}] != 2 || got.Samples != 3 || got.Sample.Errors != nil {
		t.Fatalf("after a third poll %+v; the counts stay and the error clears", got)
	}
	if got := metrics.NewSampler(&fakeSource{}, time.Nanosecond).Interval(); got != metrics.MinInterval {
		t.Errorf("interval %v; want it clamped to %v", got, metrics.MinInterval)
	}
}

// Only GET /metrics and /health are served; the body is the registry's, gzipped on request;
// the server's timeouts are set.
func TestServer(t *testing.T) {
	s, _, _ := sampled(t)
	reg, _ := metrics.NewRegistry(s)
	srv, err := metrics.Listen("127.0.0.1:0", reg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base := "http://" + srv.Addr()
	get := func(method, path string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		tr := &http.Transport{DisableCompression: true}
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r io.Reader = resp.Body
		if resp.Header.Get("Content-Encoding") == "gzip" {
			if r, err = gzip.NewReader(resp.Body); err != nil {
				t.Fatal(err)
			}
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	resp, body := get("GET", "/metrics", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `gpubench_gpu_temperature_celsius{gpu="0",uuid="GPU-aaaa"} 61`) {
		t.Fatalf("GET /metrics: %d\n%s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	resp, zbody := get("GET", "/metrics", map[string]string{"Accept-Encoding": "gzip"})
	if resp.Header.Get("Content-Encoding") != "gzip" || zbody != body {
		t.Errorf("gzipped scrape differs (encoding %q)", resp.Header.Get("Content-Encoding"))
	}
	if resp, body := get("GET", "/health", nil); resp.StatusCode != 200 || body != "ok\n" {
		t.Errorf("GET /health: %d %q", resp.StatusCode, body)
	}
	for _, c := range []struct{ method, path string }{{"GET", "/"}, {"GET", "/debug/pprof/"}, {"GET", "/metrics/x"}} {
		if resp, _ := get(c.method, c.path, nil); resp.StatusCode != 404 {
			t.Errorf("%s %s: %d; want 404", c.method, c.path, resp.StatusCode)
		}
	}
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		if resp, _ := get(m, "/metrics", nil); resp.StatusCode != 405 {
			t.Errorf("%s /metrics: %d; want 405", m, resp.StatusCode)
		}
	}
}

// noEvents is fakeSource without an NVML event set: its XIDs cannot be read.
type noEvents struct{ fakeSource }

func (n *noEvents) Sample() telemetry.Sample {
	s := n.fakeSource.Sample()
	s.XIDs, s.Errors = nil, map[string]error{"xid": errors.New("no NVML event set")}
	return s
}

// The watched XIDs' series exist at 0 for every GPU before any XID, so that increase() sees the
// first one; the XID that comes counts in its series, and a source that cannot read XIDs claims
// no 0.
func TestWatchedXIDsStartAtZero(t *testing.T) {
	xids := func(src telemetry.Source, polls int) map[string]float64 {
		s := metrics.NewSampler(src, time.Second)
		reg, _ := metrics.NewRegistry(s)
		for range polls {
			s.Refresh()
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "gpubench_gpu_xid_errors_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				l := map[string]string{}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				got[l["gpu"]+"/"+l["xid"]] = m.GetCounter().GetValue()
			}
		}
		return got
	}
	before, after := xids(&fakeSource{}, 1), xids(&fakeSource{}, 2)
	for _, gpu := range []string{"0", "1"} {
		for _, x := range metrics.WatchedXIDs {
			k := gpu + "/" + strconv.Itoa(x)
			if v, ok := before[k]; !ok || v != 0 {
				t.Errorf("before any XID, GPU %s XID %d: %v (exported %v); want 0", gpu, x, v, ok)
			}
		}
	}
	if len(before) != 2*len(metrics.WatchedXIDs) || len(after) != len(before) || after["1/48"] != 2 || after["0/48"] != 0 {
		t.Errorf("%d series before, %d after (GPU 1 XID 48 at %v); want %d both times and 2", len(before), len(after), after["1/48"], 2*len(metrics.WatchedXIDs))
	}
	if got := xids(&noEvents{}, 1); len(got) != 0 {
		t.Errorf("XIDs unreadable: %v; want no series", got)
	}
}
