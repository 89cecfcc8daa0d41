package cli

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

func TestHolderHost(t *testing.T) {
	for in, want := range map[string]string{
		"web1:4121": "web1", "web1": "web1", "sync-orders-2912-x7k": "sync-orders-2912-x7k", "a:b:12": "a:b",
		"host:pid": "host:pid", ":12": ":12", "h:99999999999": "h:99999999999", "drill-1/web1:3": "drill-1/web1",
		// The default since holders name the user; an older once's HOST:PID above reads as before.
		"alice@web1:4121": "web1", "alice(root)@web1:4121": "web1", "54321@web1:7": "web1", "alice@corp@web1:1": "web1",
		"drill-1/alice@web1:3": "web1", "alice@web1": "alice@web1", "alice@:12": "alice@:12",
	} {
		if got := holderHost(in); got != want {
			t.Errorf("holderHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// The doctor's burst rule: hosts that share a store and lose cleanly are the multi-host layout; one
// host launching twice, or two launches that both ran, is a burst.
func TestBursts(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ran := func(task, holder string, token int64, ms int) store.Entry {
		return store.Entry{Attempt: store.Attempt{Task: task, Slot: "s", Holder: holder, Token: token, State: store.Succeeded, StartedAt: at(ms), RunID: "r"}}
	}
	ev := func(task, holder string, kind store.State, token int64, ms int) store.Entry {
		return store.Entry{Attempt: store.Attempt{Task: task, Slot: "s", Holder: holder, Token: token, State: kind, StartedAt: at(ms), RunID: holder}}
	}
	day := 24 * 3600 * 1000
	for _, c := range []struct {
		name string
		hist []store.Entry
		want string // "" for no burst
	}{
		{"two hosts, one busy", []store.Entry{ran("t", "web1:10", 1, 0), ev("t", "web2:20", store.Busy, 0, 30)}, ""},
		{"two hosts, one skipped", []store.Entry{ran("t", "web1:10", 1, 0), ev("t", "web2:20", store.Skipped, 2, 900)}, ""},
		{"three hosts, busy, skipped, review", []store.Entry{ran("t", "web1:10", 1, 0), ev("t", "web2:20", store.Busy, 0, 5),
			ev("t", "web3:30", store.Skipped, 2, 2000), ev("t", "web4:40", store.Review, 3, 2500)}, ""},
		{"the two-host layout, night after night", []store.Entry{ran("t", "web1:10", 1, 0), ev("t", "web2:20", store.Busy, 0, 10),
			ran("t", "web2:21", 2, day), ev("t", "web1:11", store.Skipped, 3, day+700), ran("t", "web1:12", 4, 2*day), ev("t", "web2:22", store.Busy, 0, 2*day+3)}, ""},
		{"pods", []store.Entry{ran("t", "sync-29120-abc", 1, 0), ev("t", "sync-29120-def", store.Busy, 0, 40)}, ""},
		{"one host, two crontab lines", []store.Entry{ran("t", "web1:10", 1, 0), ev("t", "web1:11", store.Busy, 0, 3)}, "launched 2 times from host web1 within 3ms"},
		{"one host, a second trigger after", []store.Entry{ran("t", "web1:10", 1, 0), ev("t", "web1:11", store.Skipped, 2, 5000)}, "launched 2 times from host web1"},
		{"one host, a second trigger that skipped before the lease", []store.Entry{ran("t", "web1:10", 1, 0), ev("t", "web1:11", store.Skipped, 0, 5000)}, "launched 2 times from host web1"},
		{"two hosts, one skipped before the lease", []store.Entry{ran("t", "web1:10", 1, 0), ev("t", "web2:20", store.Skipped, 0, 900)}, ""},
		{"one host among others", []store.Entry{ran("t", "web1:10", 1, 0), ev("t", "web2:20", store.Busy, 0, 1), ev("t", "web1:11", store.Busy, 0, 2)},
			"launched 3 times from host web1"},
		{"one host, root's crontab and alice's", []store.Entry{ran("t", "root@web1:10", 1, 0), ev("t", "alice@web1:11", store.Busy, 0, 3)},
			"(holders alice@web1:11, root@web1:10)"},
		{"one host, an older once and this one", []store.Entry{ran("t", "web1:10", 1, 0), ev("t", "root@web1:11", store.Busy, 0, 3)}, "launched 2 times from host web1"},
		{"two hosts, one user", []store.Entry{ran("t", "root@web1:10", 1, 0), ev("t", "root@web2:20", store.Busy, 0, 30)}, ""},
		{"two hosts that both ran", []store.Entry{ran("t", "web1:10", 1, 0), ran("t", "web2:20", 2, 1500)}, "ran 2 times within 1.5s"},
		{"drill", []store.Entry{ran("t", "drill-1/web1:10", 1, 0), ev("t", "drill-2/web1:11", store.Busy, 0, 1)}, ""},
		{"outside the window", []store.Entry{ran("t", "web1:10", 1, 0), ran("t", "web1:11", 2, 10000)}, ""},
		{"a hundred launches from one host: five holders named", hundred(ran, ev), "launched 100 times from host web1 within 99ms at 2026-11-29T02:00:00.000Z (holders web1:1000, web1:1001, web1:1002, web1:1003, web1:1004 and 95 more)"},
	} {
		r := &report{}
		bursts(c.hist, 10*time.Second, r)
		if len(r.Findings) != 1 {
			t.Fatalf("%s: %v", c.name, r.Findings)
		}
		f := r.Findings[0]
		switch {
		case c.want == "" && f.Level != store.LevelOK:
			t.Errorf("%s: a burst: %s", c.name, f.Message)
		case c.want != "" && (f.Level != store.LevelWarn || !strings.Contains(f.Message, c.want)):
			t.Errorf("%s: %s %q, want WARN with %q", c.name, f.Level, f.Message, c.want)
		}
	}
}

// once doctor's stale lease: a default holder of this host whose pid is gone, in this once's form
// and in an older once's; another host's, or a name given with --holder, is never judged.
func TestLocalPid(t *testing.T) {
	for _, c := range []struct {
		holder string
		pid    int
		ok     bool
	}{
		{"web1:4121", 4121, true},
		{"alice@web1:4121", 4121, true},
		{"alice(root)@web1:4121", 4121, true},
		{"54321@web1:7", 7, true},
		{"drill-2/web1:3", 3, true},
		{"drill-2/alice@web1:3", 3, true},
		{"alice@web2:4121", 0, false},
		{"web2:4121", 0, false},
		{"web1", 0, false},
		{"alice@web1", 0, false},
		{"web1:0", 0, false},
		{"web1:x", 0, false},
	} {
		pid, ok := localPid(c.holder, "web1")
		if ok != c.ok || (ok && pid != c.pid) {
			t.Errorf("localPid(%q) = %d %v, want %d %v", c.holder, pid, ok, c.pid, c.ok)
		}
	}
	if pid, ok := localPid(once.DefaultHolder(), hostname()); !ok || pid != os.Getpid() {
		t.Errorf("localPid(%q) = %d %v: this process's own holder", once.DefaultHolder(), pid, ok)
	}
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return h
}

// hundred is a contended launch: one run and 99 busy launches of one task from one host.
func hundred(ran func(string, string, int64, int) store.Entry, ev func(string, string, store.State, int64, int) store.Entry) []store.Entry {
	h := []store.Entry{ran("t", "web1:1000", 1, 0)}
	for i := 1; i < 100; i++ {
		h = append(h, ev("t", fmt.Sprintf("web1:%d", 1000+i), store.Busy, 0, i))
	}
	return h
}
