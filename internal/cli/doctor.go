package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/once-run/once/flock"
	"github.com/once-run/once/internal/trust"
	"github.com/once-run/once/internal/who"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
)

type doctorFlags struct {
	asJSON    bool
	scan      int
	full      bool // --scan given: the heavy checks too (store.WithFullCheck)
	burst     time.Duration
	maxOffset time.Duration
}

func (a *app) doctorCmd() *cobra.Command {
	f := &doctorFlags{}
	c := &cobra.Command{
		Use:   "doctor [--json]",
		Short: "Check the store, the clocks, leases, slots waiting for review or missed, unknown business keys, lock directory and history",
		Long: `Check what once depends on and what history shows:

  store       reachable, schema current
  durability  the settings that decide whether a recorded outcome survives a crash: SQLite's
              journal and sync (and whether its file is on a network filesystem), PostgreSQL's
              fsync/synchronous_commit/full_page_writes, MySQL's innodb_flush_log_at_trx_commit
              and sync_binlog, Redis' appendonly/appendfsync, etcd's version, alarms and
              members, ZooKeeper's fsyncs (through mntr, when the server allows it)
  files       SQLite: the ledger's directory, its files and the directories above them can be
              changed by this user and root only (or the ?group= members); else FAIL with the fix
  ledger      SQLite: the ledger's id and write count match its marker; a deleted, emptied,
              replaced or older file is a FAIL, with how to restore it or start a new ledger
  clock       offset between this host and the store's clock (lease expiry uses the store's)
  lease       leases held now; stale ones (held by a process of this host that is gone)
  stale       attempts still "running" whose holder's lease is gone (the next run marks them unknown)
  review      slots waiting for a person (once resolve)
  missed      slots missed in the last 30 days and not run since: once daemon found their fire
              time passed while no node ran them, outside the job's catch-up window; a warning
              per task with the once backfill that runs them (from the newest 100 missed events)
  keys        business keys left unknown (claimed two-phase by a run or effect that is gone
              without marking them done): a warning per scope naming the first five, with the
              once keys claim --reclaim-unknown that marks those that happened done (the first
              50 scopes, each up to 1000 keys)
  locks       ownership and mode of the lock directory $ONCE_HOME/locks, its files and the
              directories above it
  overlap     two attempts of one task that ran at the same time (must never happen)
  burst       several launches of one task within --burst from one host (a double trigger: two
              crontab lines, a timer and a cron entry), or several that ran the job; hosts that
              share a store and lost cleanly (busy, skipped) are the multi-host layout, not a
              burst; drill launches are not counted
  unicode     slots an older once recorded in a form other than Unicode NFC ("cafe\u0301"): a new
              run in one is refused; a WARN when one text was a slot in two encodings (it ran twice)
  history-index
              Redis, etcd, ZooKeeper: entries an older once wrote beside this one that the history
              index does not list, in the documents of each task's newest 16 entries; with --scan
              given, in every document (a slot only an older once writes is found only so)

Exit status: 0 when every finding is ok or info, 1 when any is warn or fail.`,
		Example: `  once doctor
  once doctor --json | jq '.findings[] | select(.level != "ok")'`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			f.full = c.Flags().Changed("scan")
			return a.doctor(c.Context(), f)
		},
	}
	fl := c.Flags()
	fl.BoolVar(&f.asJSON, "json", false, `print {"healthy":…,"store":…,"findings":[…]}`)
	fl.IntVar(&f.scan, "scan", 10000, "history entries to scan for overlaps and bursts, newest first; given, doctor also runs its heavy checks (Redis, etcd, ZooKeeper: the history-index check reads every document)")
	durationVar(fl, &f.burst, "burst", 10*time.Second, maxBurst, "launches of one task closer than this count as a burst")
	durationVar(fl, &f.maxOffset, "max-offset", time.Second, maxOffset, "clock offset to the store above which doctor warns")
	return c
}

type report struct {
	Healthy  bool            `json:"healthy"`
	Store    string          `json:"store"`
	Findings []store.Finding `json:"findings"`
}

func (r *report) add(check string, l store.Level, task, format string, a ...any) {
	r.Findings = append(r.Findings, store.Finding{Check: check, Level: l, Task: task, Message: fmt.Sprintf(format, a...)})
}

func (a *app) doctor(ctx context.Context, f *doctorFlags) error {
	if f.scan < 1 || f.burst <= 0 || f.maxOffset <= 0 {
		return usage("--scan, --burst and --max-offset must be positive")
	}
	dsn, err := a.dsn()
	if err != nil {
		return err
	}
	r := &report{Store: store.Redact(dsn)}
	log, err := a.logger()
	if err != nil {
		return err
	}
	ws := newWarnings(log.Handler())
	slog.SetDefault(slog.New(ws))
	a.doctorChecks(ctx, f, dsn, r)
	slog.SetDefault(log)
	r.Findings = ws.addTo(r.Findings)
	r.Healthy = true
	for _, x := range r.Findings {
		if x.Level == store.LevelWarn || x.Level == store.LevelFail {
			r.Healthy = false
		}
	}
	if f.asJSON {
		if err := writeJSON(a.stdout, r); err != nil {
			return err
		}
	} else {
		for _, x := range r.Findings {
			task := ""
			if x.Task != "" {
				task = "task " + cell(x.Task) + ": "
			}
			msg := cell(x.Message)
			if x.Command != "" {
				msg += " " + cell(x.Command)
			}
			fmt.Fprintf(a.stdout, "%-4s  %-10s  %s%s\n", strings.ToUpper(string(x.Level)), cell(x.Check), task, msg)
		}
		if r.Healthy {
			fmt.Fprintln(a.stdout, "healthy")
		} else {
			fmt.Fprintln(a.stdout, "problems found")
		}
	}
	if !r.Healthy {
		return exit(1, "")
	}
	return nil
}

// doctorChecks adds the findings in the order doctor prints them: the local lock directory (checked
// even when the store is down), then the store's own report, its clock, leases, slots waiting for
// review, slots missed, business keys left unknown and what history shows.
func (a *app) doctorChecks(ctx context.Context, f *doctorFlags, dsn string, r *report) {
	checkLocks(r)
	s, err := a.openStoreToRead(ctx, dsn)
	if err != nil {
		check := "store"
		switch {
		case errors.Is(err, trust.ErrUnsafe):
			check = "files"
		case errors.Is(err, sqlite.ErrGone):
			check = "ledger"
		}
		r.add(check, store.LevelFail, "", "%v", err)
		return
	}
	defer s.Close()
	r.add("store", store.LevelOK, "", "%s reachable, schema created or current", store.Redact(dsn))
	ictx := ctx
	if f.full {
		ictx = store.WithFullCheck(ctx)
	}
	inspectStore(ictx, s, dsn, r)
	storeNow := checkClock(ctx, s, f.maxOffset, r)
	leases, err := s.Leases(ctx)
	if err != nil {
		r.add("lease", store.LevelFail, "", "cannot list leases: %v", err)
		return
	}
	checkLeases(leases, r)
	a.checkReview(ctx, s, dsn, r)
	a.checkMissed(ctx, s, dsn, storeNow, r)
	a.checkKeys(ctx, s, dsn, r)
	hist, err := s.History(ctx, store.HistoryQuery{Limit: f.scan})
	if err != nil {
		r.add("history", store.LevelFail, "", "cannot read history: %v", err)
		return
	}
	r.add("history", store.LevelOK, "", "scanned %d entries (--scan %d)", len(hist), f.scan)
	staleRunning(ctx, s, hist, leases, r)
	overlaps(hist, storeNow, r)
	bursts(hist, f.burst, r)
	slotForms(hist, r)
}

// checkLocks reports on the lock directory: local, so checked even when the store is down.
func checkLocks(r *report) {
	h, err := home()
	if err != nil {
		r.add("locks", store.LevelWarn, "", "%v", err)
		return
	}
	dir := lockDir(h)
	if err := flock.Check(dir); err != nil {
		if owner, ok := othersHome(h, dir); ok {
			// Another user's ONCE_HOME, read by this one (a monitoring user): not a takeover to
			// undo with chown, which would stop its owner's runs.
			r.add("locks", store.LevelWarn, "", "%s and %s belong to uid %d, not this user (uid %d): this user can read the ledger, not run jobs here; fix: run jobs as uid %d, or give this user its own ONCE_HOME", h, dir, owner, os.Geteuid(), owner)
			return
		}
		r.add("locks", store.LevelFail, "", "%v", err)
	} else if _, err := os.Lstat(dir); err != nil {
		r.add("locks", store.LevelOK, "", "%s does not exist yet (created with mode 0700 on first run)", dir)
	} else {
		r.add("locks", store.LevelOK, "", "%s is private to uid %d", dir, os.Geteuid())
	}
}

// othersHome says whether home and its lock directory both belong to one other user, and which:
// one a reader trusts as that user's (not one anyone could have made in a sticky /tmp).
func othersHome(home, dir string) (uint32, bool) {
	var h, d unix.Stat_t
	if unix.Lstat(home, &h) != nil || unix.Lstat(dir, &d) != nil || h.Uid != d.Uid || h.Uid == uint32(os.Geteuid()) {
		return 0, false
	}
	if _, _, err := trust.Dir(home, trust.Policy{Reader: true, Owner: h.Uid}); err != nil {
		return 0, false
	}
	return h.Uid, true
}

// inspectStore adds the store's own report on its durability and health (store.Inspector).
func inspectStore(ctx context.Context, s store.Store, dsn string, r *report) {
	in, ok := s.(store.Inspector)
	if !ok {
		scheme, _ := store.Scheme(dsn)
		r.add("durability", store.LevelInfo, "", "%s stores do not report their durability here; see docs/stores", scheme)
		return
	}
	fs, err := in.Inspect(ctx)
	if err != nil {
		r.add("durability", store.LevelWarn, "", "could not inspect the store: %v", err)
	}
	r.Findings = append(r.Findings, fs...)
}

// checkClock compares the store's clock with this host's (the midpoint of the round trip against
// the store's answer) and returns the store's time, or this host's when the store cannot tell.
func checkClock(ctx context.Context, s store.Store, maxOff time.Duration, r *report) time.Time {
	c, ok := s.(store.Clock)
	if !ok {
		r.add("clock", store.LevelInfo, "", "this store cannot tell its time; lease expiry is measured by the store itself")
		return time.Now()
	}
	t0 := time.Now()
	st, err := c.Now(ctx)
	rtt := time.Since(t0)
	if err != nil {
		r.add("clock", store.LevelWarn, "", "could not read the store's clock: %v", err)
		return time.Now()
	}
	off := st.Sub(t0.Add(rtt / 2))
	dir := "ahead of"
	if off < 0 {
		dir = "behind"
	}
	lvl := store.LevelOK
	msg := fmt.Sprintf("the store's clock is %s %s this host's (round trip %s)", absDur(off), dir, rtt.Round(time.Microsecond))
	if absDur(off) > maxOff {
		lvl = store.LevelWarn
		msg += fmt.Sprintf("; above %s: fix NTP on this host or the store's; lease expiry uses the store's clock, --min-hold and log times use this host's", maxOff)
	}
	r.add("clock", lvl, "", "%s", msg)
	return st
}

// checkLeases lists the leases held now; one held by a process of this host that is gone is stale.
func checkLeases(leases []store.Lease, r *report) {
	host := who.Host()
	for _, l := range leases {
		if pid, ok := localPid(l.Holder, host); ok && !pidAlive(pid) {
			r.add("lease", store.LevelFail, l.Task, "stale lease: held by %s (token %d, run %s), a process of this host that is gone; it expires at %s, then the next run takes over and marks its attempt unknown",
				l.Holder, l.Token, l.RunID, l.Expires.Local().Format(time.RFC3339))
			continue
		}
		r.add("lease", store.LevelOK, l.Task, "held by %s (token %d, run %s) until %s", l.Holder, l.Token, l.RunID, l.Expires.Local().Format(time.RFC3339))
	}
}

// checkReview adds two findings per slot waiting for a person, each with its complete command.
func (a *app) checkReview(ctx context.Context, s store.Store, dsn string, r *report) {
	waiting, err := s.Waiting(ctx)
	if err != nil {
		r.add("review", store.LevelFail, "", "cannot list slots waiting for review: %v", err)
	}
	for _, w := range waiting {
		why := "waits for review"
		if w.Last != nil {
			why = fmt.Sprintf("attempt %d %s (holder %s) and the slot waits for review", w.Last.Number, w.Last.State, w.Last.Holder)
		}
		cmds := a.resolveCommands(dsn, w.Task, w.Slot)
		r.add("review", store.LevelWarn, w.Task, "slot %s: %s; to run it again:", w.Slot, why)
		r.Findings[len(r.Findings)-1].Command = cmds.Failed
		r.add("review", store.LevelInfo, w.Task, "slot %s: or, to mark it done:", w.Slot)
		r.Findings[len(r.Findings)-1].Command = cmds.Succeeded
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// localPid reads the pid of a default holder of this host: USER@HOST:PID, or HOST:PID as an older
// once wrote it (who.Parse).
func localPid(holder, host string) (int, bool) {
	_, h, pid, ok := who.Parse(holder)
	if i := strings.LastIndexByte(h, '/'); i >= 0 { // drill-N/HOST:PID, an older once drill's
		h = h[i+1:]
	}
	return pid, ok && h == host && pid > 0
}

func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// staleRunning reports attempts still running whose holder's lease is gone: those of the store's
// list of running attempts (store.RunningLister), whatever their age, and those of the history
// scanned.
func staleRunning(ctx context.Context, s store.Store, hist []store.Entry, leases []store.Lease, r *report) {
	held := store.LiveTokens(leases)
	var cands []store.Attempt
	seen := map[string]bool{}
	add := func(a store.Attempt) {
		if k := fmt.Sprintf("%q %q %d", a.Task, a.Slot, a.Number); a.State == store.Running && !seen[k] {
			seen[k] = true
			cands = append(cands, a)
		}
	}
	if rl, ok := s.(store.RunningLister); ok {
		if l, err := rl.RunningAttempts(ctx, store.MaxRunningList); err == nil {
			for _, a := range l.Attempts {
				add(a)
			}
		}
	}
	for _, e := range hist {
		add(e.Attempt)
	}
	for _, e := range cands {
		if held[e.Task][e.Token] {
			continue
		}
		// Re-read: it may have begun under a lease taken after we listed them.
		st, err := s.Slot(ctx, e.Task, e.Slot)
		if err != nil || st.Last == nil || st.Last.RunID != e.RunID || st.Last.State != store.Running {
			continue
		}
		if ls, err := s.Leases(ctx); err == nil && store.LiveTokens(ls)[e.Task][e.Token] {
			continue
		}
		r.add("stale", store.LevelFail, e.Task, "slot %q attempt %d (run %s, holder %s, token %d) is still running but its holder's lease is gone: the holder died or was cut off; the next run marks it unknown (once status prints the once resolve lines that settle it now)",
			e.Slot, e.Number, e.RunID, e.Holder, e.Token)
	}
}

// overlaps reports attempts of one task whose [start, end] intervals intersect, but for attempts of
// seats (once run --limit) of different slots (store.Concurrent); and seats' attempts running at once
// beyond the largest limit among them. Two attempts of different slots that record no limit, in a
// task with seats' attempts, are a warning: seats' attempts from before schema 6 record none.
func overlaps(hist []store.Entry, now time.Time, r *report) {
	byTask := map[string][]store.Attempt{}
	seats := map[string]bool{} // tasks with an attempt of a seat (once run --limit) in hist
	for _, e := range hist {
		switch e.State {
		case store.Running, store.Succeeded, store.Failed, store.Unknown:
			byTask[e.Task] = append(byTask[e.Task], e.Attempt)
			seats[e.Task] = seats[e.Task] || e.Limit >= 2
		}
	}
	end := func(a store.Attempt) time.Time {
		if a.EndedAt != nil {
			return *a.EndedAt
		}
		return now
	}
	found := 0
	for _, task := range sortedKeys(byTask) {
		as := byTask[task]
		sort.Slice(as, func(i, j int) bool { return as[i].StartedAt.Before(as[j].StartedAt) })
		var open []*store.Attempt // the attempts seen so far that have not ended by the current start
		for i := range as {
			a := &as[i]
			open = slices.DeleteFunc(open, func(p *store.Attempt) bool { return !a.StartedAt.Before(end(*p)) })
			for _, p := range open {
				if p.RunID != a.RunID && !store.Concurrent(*p, *a) {
					found++
					if seats[task] && p.Limit == 0 && a.Limit == 0 && p.Slot != a.Slot {
						r.add("overlap", store.LevelWarn, task, "attempts %d of slot %q (run %s, holder %s, %s–%s) and %d of slot %q (run %s, holder %s, %s–%s) ran at the same time and record no --limit, in a task that runs with --limit: seats' attempts recorded before the store's upgrade to schema 6 (or by an older once after it) carry no limit, so doctor cannot tell them from an overlap; if this task ran with --limit then, it is that (docs/operations.md), else report it",
							p.Number, p.Slot, p.RunID, p.Holder, fmtT(p.StartedAt), fmtT(end(*p)), a.Number, a.Slot, a.RunID, a.Holder, fmtT(a.StartedAt), fmtT(end(*a)))
						continue
					}
					r.add("overlap", store.LevelFail, task, "OVERLAP: attempt %d of slot %q (run %s, holder %s, token %d, %s–%s) and attempt %d of slot %q (run %s, holder %s, token %d, %s–%s) ran at the same time; this must never happen: check that every host uses the same store (--store/ONCE_STORE) and report it",
						p.Number, p.Slot, p.RunID, p.Holder, p.Token, fmtT(p.StartedAt), fmtT(end(*p)),
						a.Number, a.Slot, a.RunID, a.Holder, a.Token, fmtT(a.StartedAt), fmtT(end(*a)))
				}
			}
			open = append(open, a)
			if n, most := seatsAtOnce(open); n > most && most >= 2 {
				found++
				r.add("overlap", store.LevelFail, task, "OVERLAP: %d attempts of seats ran at once at %s (the latest: slot %q, run %s, holder %s, token %d), more than their limit %d; this must never happen: report it",
					n, fmtT(a.StartedAt), a.Slot, a.RunID, a.Holder, a.Token, most)
			}
		}
	}
	if found == 0 {
		r.add("overlap", store.LevelOK, "", "no overlapping attempts in %d tasks", len(byTask))
	}
}

// seatsAtOnce counts the attempts of seats among open, and the largest limit among them.
func seatsAtOnce(open []*store.Attempt) (n, most int) {
	for _, a := range open {
		if a.Limit >= 2 {
			n++
			most = max(most, a.Limit)
		}
	}
	return n, most
}

func fmtT(t time.Time) string { return t.Local().Format("2006-01-02T15:04:05.000Z07:00") }

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
