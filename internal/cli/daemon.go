package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/once-run/once/internal/metrics"
	"github.com/once-run/once/internal/sdnotify"
	"github.com/once-run/once/internal/trust"
	"github.com/once-run/once/job"
	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/notify"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
	"github.com/once-run/once/supervise"
)

type daemonFlags struct {
	jobs, check, importCrontab string
	node                       string
	drain, maxOffset, poll     time.Duration
	logDir                     string
	tailSize                   int
	http                       httpFlags // --http: once serve inside the daemon
	// current is the jobs running now (reloads replace it), for the dashboard.
	current atomic.Pointer[[]scheduler.Job]
}

// Bounds of the daemon's durations.
const (
	maxDrain = 24 * time.Hour
	maxPoll  = time.Minute
	// minPoll: the node reads the store at every poll (a 0 was a panic once the daemon had
	// started, a nanosecond a loop on the store).
	minPoll = 100 * time.Millisecond
)

// checkDaemonDurations refuses what the scheduler would not do as asked: a --poll under minPoll,
// and a --drain or --max-clock-offset of 0, which the scheduler takes as its default (5m, 2s)
// without a word.
func checkDaemonDurations(f *daemonFlags) error {
	switch {
	case f.poll < minPoll:
		return usage("--poll %s is too short: give at least %s (the default is 2s); every poll reads the store", f.poll, minPoll)
	case f.drain == 0:
		return usage("--drain 0s would be the default, 5m: give how long running jobs get to end on SIGTERM, such as 30s (1ms stops them at once), or leave --drain out")
	case f.maxOffset == 0:
		return usage("--max-clock-offset 0s would be the default, 2s: give the largest clock offset at which this node fires, such as 500ms, or leave it out")
	}
	return nil
}

func (a *app) daemonCmd() *cobra.Command {
	f := &daemonFlags{}
	c := &cobra.Command{
		Use:   "daemon --jobs PATH [flags]",
		Short: "Run the jobs of a jobs file on this node of a fleet: every slot once across the fleet",
		Long: `Run the jobs of PATH (a *.toml jobs file, a *.crontab, or a directory of them: docs/jobs-file.md)
on this node. Every node of a fleet runs once daemon with the same jobs on the same store, and each
slot of each job runs at most once across the fleet, through the same guard as once run (lease,
fencing token, ledger, supervision); slots missed while every node was down run within the job's
catch-up window, older ones are recorded as missed (docs/daemon.md).

SIGHUP, or a change of PATH, reloads it: a bad file keeps the jobs running as they are and logs
what to fix. SIGTERM, SIGINT or SIGQUIT (after printing the goroutines' stacks) drains: no new slot fires, running jobs get --drain to end, then are
stopped (SIGTERM, SIGKILL after their grace) and their outcomes recorded; a second signal stops them
at once. Under systemd (Type=notify) it reports READY, RELOADING and STOPPING.

--check PATH validates a jobs file and prints its jobs and their next fire times, running nothing
(64 and file:line on a problem). --import-crontab FILE prints FILE as a TOML jobs file.`,
		Example: `  once daemon --jobs /etc/once/jobs.d --store postgres://once@db/once
  once daemon --check /etc/once/jobs.toml
  crontab -l > my.crontab && once daemon --import-crontab my.crontab > jobs.toml`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			switch n := countSet(f.jobs, f.check, f.importCrontab); {
			case n == 0:
				return usage("give --jobs PATH to run, --check PATH to validate, or --import-crontab FILE")
			case n > 1:
				return usage("--jobs, --check and --import-crontab are exclusive: give one")
			case f.check != "":
				return a.daemonCheck(f.check)
			case f.importCrontab != "":
				return a.importCrontab(f.importCrontab)
			}
			return a.daemon(c.Context(), f)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.jobs, "jobs", "", "the jobs file, or a directory of *.toml and *.crontab drop-ins")
	fl.StringVar(&f.check, "check", "", "validate this jobs file (or directory) and exit")
	fl.StringVar(&f.importCrontab, "import-crontab", "", "print this crontab as a TOML jobs file and exit")
	fl.StringVar(&f.node, "node", os.Getenv("ONCE_NODE"), "this node's name in leases and history (env ONCE_NODE; default user@hostname:pid)")
	durationVar(fl, &f.drain, "drain", 5*time.Minute, maxDrain, "on SIGTERM: how long running jobs get to end before they are stopped")
	durationVar(fl, &f.maxOffset, "max-clock-offset", 2*time.Second, time.Hour, "refuse to fire while this node's clock is off from the store's by more than this")
	durationVar(fl, &f.poll, "poll", 2*time.Second, maxPoll, "how often pause, trigger and the slots of other nodes are read, at least 100ms")
	fl.StringVar(&f.logDir, "log-dir", "", "keep each job's full output in DIR/NAME.log, rotated (default $ONCE_HOME/logs)")
	fl.IntVar(&f.tailSize, "tail-size", 64<<10, "bytes of each attempt's output kept in the store for once logs (0: none; at most 524288 kept)")
	f.http.add(fl, "http", "", "also serve the dashboard, the API and /metrics on this address (HOST:PORT), as once serve does")
	return c
}

func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

// loadJobs reads a jobs file (or directory) into the scheduler's jobs; a problem is a usage error
// (64) with file:line.
//
// The file, a directory's drop-ins and every directory above them must be changeable by root and
// this user only (internal/trust): whoever can write a jobs file runs commands as the daemon's user.
func loadJobs(path string) ([]scheduler.Job, error) {
	if err := trustJobs(path); err != nil {
		return nil, usage("jobs file: %v", err)
	}
	js, err := jobfile.Load(path)
	if err != nil {
		return nil, usage("%v", err)
	}
	out := make([]scheduler.Job, len(js))
	for i, j := range js {
		out[i] = scheduler.Job{Job: j}
	}
	return out, nil
}

// daemonCheck validates a jobs file: its jobs, schedules and next fire times, and commands not
// found in PATH and dirs that are not directories (warnings: the daemon's PATH and mounts may
// differ).
func (a *app) daemonCheck(path string) error {
	jobs, err := loadJobs(path)
	if err != nil {
		return err
	}
	now := time.Now()
	for _, j := range jobs {
		sp, err := j.Spec()
		if err != nil {
			return usage("%s: %v", j.Source, err)
		}
		nx := sp.Next(now)
		fmt.Fprintf(a.stdout, "%s\t%s\tnext %s\t(%s)\n", j.Name, j.Schedule, nx.Start.In(sp.Location()).Format(time.RFC3339), j.Source)
		if _, err := exec.LookPath(j.Command[0]); err != nil {
			fmt.Fprintf(a.stderr, "once: warning: %s: %s: command %s is not in this PATH\n", j.Source, j.Name, j.Command[0])
		}
		if fi, err := os.Stat(j.Dir); j.Dir != "" && (err != nil || !fi.IsDir()) {
			fmt.Fprintf(a.stderr, "once: warning: %s: %s: dir %s is not a directory here\n", j.Source, j.Name, j.Dir)
		}
	}
	fmt.Fprintf(a.stdout, "%s: %d jobs, ok\n", path, len(jobs))
	return nil
}

func (a *app) importCrontab(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return usage("cannot read the crontab: %v", err)
	}
	out, err := jobfile.ImportCrontab(filepath.Base(path)+suffixCrontab(path), data)
	if err != nil {
		return usage("%v", err)
	}
	_, err = a.rawStdout.Write(out)
	return err
}

// suffixCrontab lets a crontab named anything (crontab -l > mine) be imported: jobfile names
// the format by the suffix.
func suffixCrontab(path string) string {
	if strings.HasSuffix(path, ".crontab") {
		return ""
	}
	return ".crontab"
}

// daemon runs the scheduler until a stop signal, reloading on SIGHUP and on a change of the file.
func (a *app) daemon(ctx context.Context, f *daemonFlags) error {
	if f.tailSize < 0 {
		return usage("--tail-size %d is negative: give 0 (none) or a number of bytes", f.tailSize)
	}
	if err := checkDaemonDurations(f); err != nil {
		return err
	}
	if err := envNotEmpty("ONCE_NODE"); err != nil && f.node == "" {
		return err
	}
	if f.node != "" {
		if err := store.CheckName("--node (or ONCE_NODE)", f.node, store.MaxHolderLen); err != nil {
			return err
		}
	}
	log, err := a.serviceLogger()
	if err != nil {
		return err
	}
	jobs, err := loadJobs(f.jobs)
	if err != nil {
		return err
	}
	h, err := home()
	if err != nil {
		return err
	}
	s, dsn, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	sdnotify.Unsetenv() // the jobs' commands must not inherit NOTIFY_SOCKET
	logDir := f.logDir
	if logDir == "" {
		logDir = filepath.Join(h, "logs")
	} else if logDir, err = filepath.Abs(logDir); err != nil {
		return usage("--log-dir: %v", err)
	}
	// The jobs' output, which may hold secrets, in a directory only this user can change (and
	// read into): no file planted, no link followed, no FIFO to freeze a write on.
	if err := trust.OwnDir(logDir); err != nil {
		return usage("--log-dir: %v", err)
	}
	tail := f.tailSize
	if tail == 0 {
		tail = -1
	}
	sch, err := scheduler.New(scheduler.Config{Store: s, Jobs: jobs, Node: f.node, Logger: log, LockDir: lockDir(h), Shim: supervise.DefaultShim(),
		MaxClockOffset: f.maxOffset, Drain: f.drain, Poll: f.poll, LogDir: logDir, TailSize: tail,
		Env:            func() []string { return a.storeEnv(dsn) },
		Resolve:        func(task, sl string) *notify.Resolve { return a.resolveCommands(dsn, task, sl) },
		TracerProvider: a.tracerProvider()})
	if err != nil {
		return err
	}
	job.Adopt(log)
	f.current.Store(&jobs)
	if f.http.listen != "" {
		stopWeb, err := a.daemonWeb(ctx, s, dsn, f, fleetStats{sch}, log)
		if err != nil {
			return err
		}
		defer stopWeb()
	}
	return a.serveDaemon(ctx, sch, f, log, len(jobs), store.Redact(dsn))
}

// daemonWeb starts once serve's handler inside the daemon (--http) and returns what stops it:
// the dashboard shows the jobs running now, and the listener is checked before any job runs.
func (a *app) daemonWeb(ctx context.Context, s store.Store, dsn string, f *daemonFlags, fleet metrics.FleetStats, log *slog.Logger) (func(), error) {
	tok, err := f.http.token()
	if err != nil {
		return nil, err
	}
	ln, err := f.http.listener("--http", tok)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		jobs := func() []scheduler.Job { return *f.current.Load() }
		if err := a.runWeb(wctx, s, dsn, tok, jobs, fleet, ln, &f.http, log); err != nil {
			log.Error("the dashboard stopped; the jobs keep running", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// serveDaemon runs sch, handling signals and reloads, until it has drained.
func (a *app) serveDaemon(ctx context.Context, sch *scheduler.Scheduler, f *daemonFlags, log *slog.Logger, n int, dsn string) error {
	sigs := make(chan os.Signal, 4)
	// SIGQUIT drains too, after the goroutines' stacks: left to Go, it dumped them and exited 2
	// with the jobs' attempts running, each unknown (a slot for review) once its lease expired.
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGPIPE)
	defer signal.Stop(sigs)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- sch.Run(rctx) }()
	log.Info("once daemon started", "jobs", n, "node", sch.Node(), "store", dsn, "drain", f.drain.String())
	notifySystemd(log, sdnotify.Ready+"\n"+sdnotify.Status(fmt.Sprintf("running %d jobs", n)))
	var watchdog <-chan time.Time
	if iv, ok := sdnotify.WatchdogInterval(); ok {
		wt := time.NewTicker(iv / 2)
		defer wt.Stop()
		watchdog = wt.C
	}
	watch := newFileWatch(f.jobs)
	t := time.NewTicker(f.poll)
	defer t.Stop()
	stopping := false
	for {
		select {
		case err := <-done:
			return err
		case <-watchdog:
			notifySystemd(log, sdnotify.Watchdog)
		case <-t.C:
			if watch.changed() {
				a.reload(sch, f.jobs, &f.current, log, "the jobs file changed")
			} else if watch.restless() {
				log.Warn("the jobs file keeps changing: it is reloaded once it is the same at two polls in a row; send SIGHUP to reload it now",
					"path", f.jobs, "polls", restlessPolls, "poll", f.poll.String())
			}
		case sig := <-sigs:
			switch {
			case sig == syscall.SIGPIPE:
			case sig == syscall.SIGHUP:
				a.reload(sch, f.jobs, &f.current, log, "SIGHUP")
			case sig == syscall.SIGQUIT && !stopping:
				dumpGoroutines(a.rawStderr)
				fallthrough
			case !stopping:
				stopping = true
				log.Info("draining: no new slots; running jobs get the drain time", "signal", sig.String(), "drain", f.drain.String())
				notifySystemd(log, sdnotify.Stopping+"\n"+sdnotify.Status("draining"))
				stop()
			default:
				log.Warn("stopping running jobs now (second signal)", "signal", sig.String())
				sch.Hurry()
			}
		}
	}
}

// reload reads the jobs file again; a bad one keeps the running jobs and says what to fix.
func (a *app) reload(sch *scheduler.Scheduler, path string, current *atomic.Pointer[[]scheduler.Job], log *slog.Logger, why string) {
	notifySystemd(log, sdnotify.Reloading())
	defer notifySystemd(log, sdnotify.Ready)
	jobs, err := loadJobs(path)
	if err == nil {
		err = sch.Reload(jobs)
	}
	if err == nil && current != nil {
		current.Store(&jobs)
	}
	if err != nil {
		sch.ReloadFailed()
		var ee *exitError
		msg := err.Error()
		if errors.As(err, &ee) {
			msg = ee.msg
		}
		log.Error("reload refused; the jobs as they were keep running", "why", why, "err", msg)
		return
	}
	log.Info("reloaded", "why", why, "jobs", len(jobs))
}

// notifySystemd tells systemd (Type=notify) the daemon's state; a failure is logged once per call.
func notifySystemd(log *slog.Logger, state string) {
	if _, err := sdnotify.Notify(state); err != nil {
		log.Warn("cannot notify systemd", "err", err)
	}
}

// fileWatch tells when a jobs file, or a directory's drop-ins, changed: names, sizes, times. A
// change counts once the state is the same at two polls in a row: a file seen in the middle of
// its writing (truncated by an in-place write, a paste into `cat >` under way, a drop-in an editor
// renamed away for a moment) may be a valid file with fewer jobs, or none, and a reload of it
// would stop the jobs it lacks.
type fileWatch struct {
	path string
	last string // the state last reloaded (or found at start)
	seen string // the state at the previous poll
	// moving counts the polls in a row that found a change not settled yet: a file rewritten at
	// every poll (a tool that writes it in a loop) is never reloaded, and the daemon says so once.
	moving int
}

// restlessPolls is how many polls in a row a changed jobs file may keep changing before the daemon
// says it is not reloaded.
const restlessPolls = 5

func newFileWatch(path string) *fileWatch {
	w := &fileWatch{path: path}
	w.last = w.state()
	w.seen = w.last
	return w
}

func (w *fileWatch) state() string {
	fi, err := os.Stat(w.path)
	if err != nil {
		return "missing"
	}
	if !fi.IsDir() {
		return fmt.Sprint(fi.Size(), fi.ModTime().UnixNano(), fi.Mode())
	}
	entries, err := os.ReadDir(w.path)
	if err != nil {
		return "unreadable"
	}
	var b strings.Builder
	for _, e := range entries {
		if i, err := e.Info(); err == nil {
			fmt.Fprintf(&b, "%s %d %d\n", e.Name(), i.Size(), i.ModTime().UnixNano())
		}
	}
	return b.String()
}

func (w *fileWatch) changed() bool {
	s := w.state()
	settled := s == w.seen
	w.seen = s
	if settled || s == w.last {
		w.moving = 0
	} else {
		w.moving++
	}
	if s == w.last || !settled {
		return false
	}
	w.last = s
	return true
}

// restless reports, once per streak, that the file has kept changing for restlessPolls polls.
func (w *fileWatch) restless() bool { return w.moving == restlessPolls }

// trustJobs applies trust.Config to the jobs file or directory at path and to each drop-in of a
// directory that jobfile.Load would read.
func trustJobs(path string) error {
	if err := trust.Config(path); err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil || !fi.IsDir() {
		return nil // jobfile.Load says what is wrong with it
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		if jobfile.IsDropIn(e.Name()) {
			if err := trust.ConfigEntry(filepath.Join(path, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
