package main

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Issue 12: doctor knows the multi-host layout. Two simulated hosts (each its own ONCE_HOME, so its
// own local locks) share one SQLite ledger, and both crontabs fire every job: one host runs it,
// the other finds it busy or the slot done. That is healthy. One host triggering a job twice, or
// two hosts both running a job without a slot, is a burst.
func TestDoctorTwoHosts(t *testing.T) {
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "shared.db")
	web1, web2 := newEnv(t), newEnv(t)
	on := func(e *env, holder string, args ...string) func() result {
		return func() result {
			return e.run(append([]string{"run", "--store", dsn, "--holder", holder}, args...)...)
		}
	}
	// Both hosts' crontab lines fire at the same moment.
	together := func(a, b func() result) (ra, rb result) {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); ra = a() }()
		go func() { defer wg.Done(); rb = b() }()
		wg.Wait()
		return ra, rb
	}
	awayFromMidnight(t)
	args := []string{"--task", "nightly", "--per", "day", "--", "sleep", "0.3"}
	ra, rb := together(on(web1, "web1:100", args...), on(web2, "web2:200", args...))
	if codes := []int{ra.code, rb.code}; !(codes[0] == 0 && codes[1] == 75 || codes[0] == 75 && codes[1] == 0) {
		t.Fatalf("exits %v, want one 0 and one 75\n%s%s", codes, ra.stderr, rb.stderr)
	}
	// A host whose cron fires later finds the slot done.
	if r := on(web1, "web1:101", "--task", "report", "--per", "day", "--", "true")(); r.code != 0 {
		t.Fatalf("report on web1: %d %s", r.code, r.stderr)
	}
	if r := on(web2, "web2:201", "--task", "report", "--per", "day", "-v", "--", "true")(); r.code != 0 || !strings.Contains(r.stderr, "skipped") {
		t.Fatalf("report on web2: %d, want skipped\n%s", r.code, r.stderr)
	}
	r := web1.run("doctor", "--store", dsn)
	if r.code != 0 || !strings.Contains(r.stdout, "OK    burst") {
		t.Fatalf("doctor on the two-host layout: exit %d, want 0 and no burst\n%s%s", r.code, r.stdout, r.stderr)
	}

	// One host double-triggered: two crontab lines (or a cron entry and a timer) on web1.
	on(web1, "web1:102", "--task", "dup", "--slot", "d", "--", "true")()
	on(web1, "web1:104", "--task", "dup", "--slot", "d", "--", "true")()
	// Without a slot, every host's trigger runs the job.
	on(web1, "web1:103", "--task", "noslot", "--", "true")()
	on(web2, "web2:203", "--task", "noslot", "--", "true")()
	r = web2.run("doctor", "--store", dsn)
	for _, want := range []string{"task dup: launched 2 times from host web1 within", "task noslot: ran 2 times within"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("doctor lacks %q", want)
		}
	}
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.Contains(l, "burst") && (strings.Contains(l, "task nightly") || strings.Contains(l, "task report")) {
			t.Errorf("the layout's task reported as a burst: %s", l)
		}
	}
	if r.code != 1 || t.Failed() {
		t.Fatalf("doctor: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
