package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"time"

	"github.com/once-run/once/internal/web"
	"github.com/once-run/once/store"
)

// serveGoal is issue 15's bound on every page and API call, server time.
const serveGoal = 200 * time.Millisecond

// timeServe times every page and API call of once serve on the seeded store, in-process (the
// handler's own time: "server time"), the median of runs; the first run of each warms the caches
// and is not counted.
func timeServe(ctx context.Context, dsn string, runs int) error {
	s, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	srv, err := web.New(web.Config{Store: s, DSN: dsn})
	if err != nil {
		return err
	}
	h := srv.Handler()
	now := time.Now().UTC()
	day := url.Values{"from": {now.Add(-24 * time.Hour).Format(time.RFC3339)}, "to": {now.Format(time.RFC3339)}}.Encode()
	week := url.Values{"from": {now.Add(-7 * 24 * time.Hour).Format(time.RFC3339)}, "to": {now.Format(time.RFC3339)}}.Encode()
	// A page deep in the overview: the after= of the 100th page of 50 tasks.
	deep, err := store.ListTasks(ctx, s, "", store.MaxTasksPage)
	if err != nil {
		return err
	}
	after := ""
	if len(deep) > 0 {
		after = deep[len(deep)-1]
	}
	paths := []string{
		"/", "/?after=" + url.QueryEscape(after), "/api/v1/tasks", "/api/v1/tasks?limit=200&after=" + url.QueryEscape(after),
		"/api/v1/history", "/api/v1/history?limit=500", "/api/v1/history?kind=failed", "/api/v1/history?kind=busy",
		"/api/v1/history?task=daily-00042", "/api/v1/history?task=every-minute&kind=failed", "/api/v1/history?holder=nobody",
		"/api/v1/history?kind=attempts&from=" + url.QueryEscape(now.Add(-48*time.Hour).Format(time.RFC3339)),
		"/api/v1/review", "/review", "/api/v1/leases", "/leases", "/api/v1/running",
		"/timeline?" + day, "/api/v1/timeline?" + day, "/api/v1/timeline?task=daily-00042&" + week,
		"/slot?task=daily-00000&slot=waiting-review", "/api/v1/slot?task=daily-00000&slot=waiting-unknown", "/jobs",
		// Business keys (seed-keys): the scopes with their counts, and the unknown keys of the
		// largest scope (half of the keys).
		"/keys", "/api/v1/scopes", "/api/v1/scopes?limit=50", "/keys?scope=big&state=unknown",
		"/api/v1/keys?scope=big&state=unknown&limit=5000", "/api/v1/keys?scope=scope-042&cursor=key-000500000",
	}
	fmt.Printf("%-80s %10s %10s %s\n", "call", "median", "max", "status")
	worst := time.Duration(0)
	for _, p := range paths {
		var ds []time.Duration
		status := 0
		for i := 0; i <= runs; i++ {
			req := httptest.NewRequest("GET", p, nil).WithContext(ctx)
			req.Host = "127.0.0.1:8080" // a loopback request: reads are open
			w := httptest.NewRecorder()
			t0 := time.Now()
			h.ServeHTTP(w, req)
			d := time.Since(t0)
			_, _ = io.Copy(io.Discard, w.Result().Body)
			status = w.Code
			if i > 0 {
				ds = append(ds, d)
			}
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		med, mx := ds[len(ds)/2], ds[len(ds)-1]
		worst = max(worst, med)
		mark := ""
		if med > serveGoal {
			mark = "  OVER " + serveGoal.String()
		}
		if status != http.StatusOK {
			mark += fmt.Sprintf("  (status %d)", status)
		}
		shown := p
		if len(shown) > 80 {
			shown = shown[:77] + "..."
		}
		fmt.Printf("%-80s %10s %10s %d%s\n", shown, med.Round(10*time.Microsecond), mx.Round(10*time.Microsecond), status, mark)
	}
	fmt.Printf("slowest median: %s (goal %s)\n", worst.Round(10*time.Microsecond), serveGoal)
	return nil
}
