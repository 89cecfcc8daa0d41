package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestLimitRunsTwoAtOnce: six once run --limit 2 started together, from six hosts, with --wait:
// never more than two commands run at once, two do, all six run and succeed, each recorded under
// its own slot (run-RUNID), and once status lists both holders while they run. Every store grants
// seats.
func TestLimitRunsTwoAtOnce(t *testing.T) {
	acrossStores(t, func(t *testing.T, b backend) {
		dsn := b.isolated()
		w := filepath.Join(t.TempDir(), "witness")
		const task, n = "limited", 6
		hosts := make([]*env, n)
		for i := range hosts {
			hosts[i] = host(t, fmt.Sprintf("h%d", i), dsn)
		}
		codes := make([]result, n)
		var wg sync.WaitGroup
		for i := range hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// --ttl 20s: the seats' semantics are tested here, not renewals; with 5 s a loaded CI
				// machine (load 5, SQLite's package committing beside it) let renewals go unanswered for
				// 3.3 s, and the runs stopped as they must (143), or lost their seat before starting (75).
				codes[i] = hosts[i].run("run", "--limit", "2", "--wait", "2m", "--task", task, "--ttl", "20s", "--",
					"sh", "-c", witnessScript(w, fmt.Sprint("r", i), "1"))
			}()
		}
		var status string
		waitFor(t, time.Minute, func() bool {
			r := hosts[0].run("status")
			status = r.stdout
			return strings.Contains(r.stdout, "LEASES (2)") || len(witnessSpans(t, w)) == n
		})
		wg.Wait()
		for i, r := range codes {
			if r.code != 0 {
				t.Fatalf("run %d exited %d: %s", i, r.code, r.stderr)
			}
		}
		sp := witnessSpans(t, w)
		if len(sp) != n {
			t.Fatalf("witness: %d commands ran, want %d: %v", len(sp), n, sp)
		}
		if most := overlap(sp); most != 2 {
			t.Fatalf("at most %d commands ran at once, want 2: %v", most, sp)
		}
		if !strings.Contains(status, "LEASES (2)") {
			t.Logf("status never caught both holders (loaded machine?): %s", status)
		}
		slots := map[string]bool{}
		for _, a := range hosts[0].history(task) {
			if a["state"] == "succeeded" && strings.HasPrefix(fmt.Sprint(a["slot"]), "run-") {
				slots[fmt.Sprint(a["slot"])] = true
			}
		}
		if len(slots) != n {
			t.Fatalf("history: %d succeeded attempts under run- slots, want %d", len(slots), n)
		}
		for _, a := range hosts[0].history(task) {
			if a["state"] == "succeeded" && a["limit"] != 2.0 {
				t.Fatalf("history: an attempt of a seat without its limit: %v", a)
			}
		}
		// Seats' attempts overlap on purpose: once doctor does not call that an incident.
		if r := hosts[0].run("doctor"); strings.Contains(r.stdout, "OVERLAP") || !strings.Contains(r.stdout, "no overlapping attempts") {
			t.Fatalf("doctor after seats' runs (exit %d): %s", r.code, r.stdout)
		}
	})
}

// overlap is the most witness spans running at one moment.
func overlap(sp map[string][2]int64) int {
	type ev struct {
		at    int64
		delta int
	}
	var evs []ev
	for _, s := range sp {
		evs = append(evs, ev{s[0], 1}, ev{s[1], -1})
	}
	sort.Slice(evs, func(i, j int) bool {
		return evs[i].at < evs[j].at || evs[i].at == evs[j].at && evs[i].delta < evs[j].delta
	})
	most, cur := 0, 0
	for _, e := range evs {
		if cur += e.delta; cur > most {
			most = cur
		}
	}
	return most
}

// TestLimitUsage: a --limit out of range, or with --replace, exits 64 with one line.
func TestLimitUsage(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--limit", "0"}, "--limit 0: give the number of holders"},
		{[]string{"--limit", "1001"}, "1 to 1000"},
		{[]string{"--limit", "-2"}, "--limit -2"},
		{[]string{"--limit", "2", "--replace"}, "--limit and --replace cannot be combined"},
	} {
		r := e.run(append(append([]string{"run", "--task", "t"}, c.args...), "--", "true")...)
		if r.code != 64 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("once run %v: exit %d, stderr %q; want 64 and one line with %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

// TestDaemonLimit: three daemons, a jobs file job with limit = 2 and overlap = buffer-one that
// runs 2.5 s every 2 s: every slot of the window runs exactly once (a slot that finds both seats
// taken, when the machine is slow to start commands, waits for one; with limit = 1 the backlog
// would grow and slots be skipped), never more than two at once, each with its own fencing token,
// and no daemon logs an error; on every store.
func TestDaemonLimit(t *testing.T) {
	acrossStores(t, func(t *testing.T, b backend) {
		dsn, dir := b.isolated(), t.TempDir()
		w := filepath.Join(dir, "witness")
		jobs := writeJobs(t, dir, "jobs.toml", fmt.Sprintf("[[job]]\nname = \"wide\"\nschedule = \"@every 2s\"\ntz = \"UTC\"\nttl = \"5s\"\nlimit = 2\noverlap = \"buffer-one\"\ncommand = %q\n",
			witnessScript(w, "${ONCE_SLOT}_${ONCE_FENCING_TOKEN}", "2.5")))
		var ds []*daemon
		for _, n := range []string{"node-a", "node-b", "node-c"} {
			ds = append(ds, startDaemon(t, host(t, n, dsn).atVolume(), n, "--jobs", jobs))
		}
		for _, d := range ds {
			d.waitLog("once daemon started", 20*time.Second)
		}
		from := time.Now().Add(time.Second)
		time.Sleep(20 * time.Second)
		to := time.Now().Add(-6 * time.Second) // a slot that waited for a seat may still be queued
		for _, d := range ds {
			if code := d.stop(syscall.SIGTERM, 20*time.Second); code != 0 {
				t.Errorf("daemon %s exited %d", d.name, code)
			}
		}
		sp := witnessSpans(t, w)
		slots, tokens := map[string]int{}, map[string]bool{}
		for name := range sp {
			sl, tok, _ := strings.Cut(name, "_")
			slots[sl]++
			if tokens[tok] {
				t.Fatalf("token %s given twice: %v", tok, sp)
			}
			tokens[tok] = true
		}
		if most := overlap(sp); most > 2 {
			t.Fatalf("%d commands ran at once, want at most 2: %v", most, sp)
		}
		for s := from.Truncate(2 * time.Second).Add(2 * time.Second); s.Before(to); s = s.Add(2 * time.Second) {
			if v := s.UTC().Format("2006-01-02T15:04:05-07:00"); slots[v] != 1 {
				t.Errorf("slot %s of the window ran %d times, want once (runs %v)", v, slots[v], sp)
			}
		}
		for _, d := range ds {
			if l := d.logText(); strings.Contains(l, "level=ERROR") {
				t.Errorf("daemon %s logged an error:\n%s", d.name, l)
			}
		}
		t.Logf("%d runs, at most %d at once", len(sp), overlap(sp))
	})
}
