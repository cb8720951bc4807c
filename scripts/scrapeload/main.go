// Command scrapeload is a bounded load loop against a metrics endpoint: C scrapers, each
// scraping as fast as it is answered, for a fixed time; it prints requests, errors and latency
// percentiles. scripts/metrics-load.sh runs it against a simulated burn-in.
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:9400/metrics", "endpoint to scrape")
	conc := flag.Int("c", 200, "concurrent scrapers")
	dur := flag.Duration("d", 30*time.Second, "how long to scrape")
	flag.Parse()
	tr := &http.Transport{MaxIdleConnsPerHost: *conc, MaxConnsPerHost: *conc}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	end := time.Now().Add(*dur)
	var wg sync.WaitGroup
	for i := 0; i < *conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			bad := 0
			for time.Now().Before(end) {
				t := time.Now()
				// As Prometheus asks: gzip. The body is read, not inflated, so that the figures are
				// the endpoint's and not this client's.
				req, _ := http.NewRequest(http.MethodGet, *url, nil)
				req.Header.Set("Accept-Encoding", "gzip")
				resp, err := client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					bad++
					continue
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			lat = append(lat, mine...)
			errs += bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	fmt.Printf("scrapers %d, %v: %d scrapes (%.0f/s), %d errors, latency p50 %v p99 %v max %v\n",
		*conc, *dur, len(lat), float64(len(lat))/dur.Seconds(), errs, pct(0.5).Round(10*time.Microsecond),
		pct(0.99).Round(10*time.Microsecond), pct(1).Round(10*time.Microsecond))
	if errs > 0 {
		os.Exit(1)
	}
}
