//go:build linux

package metrics

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestRealPrometheus: a real Prometheus server scrapes the handler every 3 s; a run made in the
// store is in its PromQL answers, and so is an attempt left running by a holder that is gone
// (the gauge OnceHolderGone alerts on).
func TestRealPrometheus(t *testing.T) {
	bin := need(t, "prometheus", "prometheus")
	st, path := openStore(t)
	// A task failing since before its newest store.SuccessScan attempts, and before the collector's
	// first window: its last success is not known, and OnceNoRecentSuccess's expression (read from
	// the rules file) fires on it.
	base := time.Now().Add(-time.Hour).UnixMicro()
	seedRun(t, path, "flaky", "succeeded", 0, 1, base)
	seedRun(t, path, "flaky", "failed", 1, bootstrapScan+1, base)
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	noRecent := regexp.MustCompile(`alert: OnceNoRecentSuccess\s+expr: (.*)`).FindSubmatch(rules)
	if noRecent == nil {
		t.Fatalf("no OnceNoRecentSuccess expr in %s", rulesFile)
	}
	c := newCollector(t, Config{Store: st})
	var scrapes atomic.Int64
	h := c.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scrapes.Add(1)
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	api := startPrometheus(t, bin, strings.TrimPrefix(srv.URL, "http://"))

	// The collector's first scrape counts nothing that was in history before it: run after it.
	// Generous: under a whole suite's -race load on two cores a scrape took longer than its
	// 1 s timeout for a minute (a fresh-clone run), and Prometheus kept no sample.
	deadline := time.Now().Add(180 * time.Second)
	for scrapes.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("prometheus did not scrape the handler within 180 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	l := &ledger{tb: t, st: st}
	a := l.run("t", "", store.Succeeded)
	dead := l.acquire("dead", "host-dead", time.Minute)
	l.begin(dead, "s1")
	l.release(dead) // its grant is gone, the attempt is left running: a holder killed

	v := waitQuery(t, api, `once_attempts_total{task="t",state="succeeded"}`, 1, deadline)
	t.Logf("once_attempts_total = %v after %d scrapes", v, scrapes.Load())
	got := waitQuery(t, api, `once_task_last_success_timestamp_seconds{task="t"}`, ts(*a.EndedAt), deadline)
	if math.Abs(got-ts(*a.EndedAt)) > 1e-3 {
		t.Errorf("once_task_last_success_timestamp_seconds = %v, want %v", got, ts(*a.EndedAt))
	}
	waitQuery(t, api, `once_store_up`, 1, deadline)
	waitQuery(t, api, `max by (task) (once_task_holder_gone_attempts) > 0`, 1, deadline)
	waitQuery(t, api, `once_task_holder_gone_attempts{task="t"}`, 0, deadline)
	waitQuery(t, api, `once_task_last_success_unknown{task="flaky"}`, 1, deadline)
	if got := waitQuery(t, api, `count(`+string(noRecent[1])+`)`, 1, deadline); got != 1 {
		t.Errorf("OnceNoRecentSuccess's expression gives %v series, want flaky's", got)
	}
}

// startPrometheus runs prometheus scraping target every 3 s (a scrape may take seconds under
// load), on a free loopback port with its data in a temporary directory, and stops it at the end
// of the test. It returns the API's URL.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	conf := fmt.Sprintf("global:\n  scrape_interval: 3s\n  evaluation_interval: 1s\nscrape_configs:\n"+
		"  - job_name: once\n    scrape_interval: 3s\n    scrape_timeout: 3s\n    static_configs:\n      - targets: [%q]\n", target)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	var out bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:"+port)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus output:\n%s", tail(out.String(), 4000))
		}
	})
	api := "http://127.0.0.1:" + port
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("prometheus exited: %v\n%s", err, tail(out.String(), 4000))
		default:
		}
		if resp, err := http.Get(api + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return api
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready on %s within 30 s", api)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// waitQuery asks the Prometheus API for an instant vector of one sample until it is within
// 1e-3 of want, and returns the value; it fails at deadline.
func waitQuery(t *testing.T, api, q string, want float64, deadline time.Time) float64 {
	t.Helper()
	last := "no answer"
	for {
		v, err := query(api, q)
		if err == nil && math.Abs(v-want) <= 1e-3 {
			return v
		}
		if err != nil {
			last = err.Error()
		} else {
			last = strconv.FormatFloat(v, 'f', -1, 64)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s, want %v", q, last, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func query(api, q string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", api+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	switch {
	case r.Status != "success":
		return 0, fmt.Errorf("query failed: %s", r.Error)
	case len(r.Data.Result) != 1:
		return 0, fmt.Errorf("%d samples", len(r.Data.Result))
	}
	s, ok := r.Data.Result[0].Value[1].(string)
	if !ok {
		return 0, fmt.Errorf("value %v is not a string", r.Data.Result[0].Value[1])
	}
	return strconv.ParseFloat(s, 64)
}
