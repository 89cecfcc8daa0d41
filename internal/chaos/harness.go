package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Fault is a kind of fault injected into the first holder of a trial.
type Fault string

// Faults. Network faults and store restarts apply to networked stores only.
const (
	FaultNone       Fault = "none"          // three holders compete, nothing is injected
	FaultKillOnce   Fault = "kill9-once"    // kill -9 of the holder's once process
	FaultKillCmd    Fault = "kill9-cmd"     // kill -9 of the holder's command
	FaultPauseShort Fault = "pause<ttl"     // SIGSTOP of once's and the command's groups for ttl/2
	FaultPauseLong  Fault = "pause>ttl"     // SIGSTOP until another holder has run (> ttl)
	FaultRestart    Fault = "store-restart" // the store's server stopped for a ttl, then started
	FaultCut        Fault = "net-cut"       // the holder's connections closed and refused for 2 ttl
	FaultBlackhole  Fault = "net-blackhole" // the holder's bytes silently dropped for 2 ttl
	FaultReview     Fault = "kill9-review"  // kill -9 of once; the others use --on-unknown review
	FaultClockBack  Fault = "clock-behind"  // the holder's wall clock is SkewOffset behind
	FaultClockAhead Fault = "clock-ahead"   // a competing holder's (B's) wall clock is SkewOffset ahead

	// Escapers: the holder's command is deaf to SIGTERM and leaves three processes that inherit the
	// witness's kernel lock (a double-forked setsid daemon, a double-forked child re-parented to the
	// shim, a plain background child), each deaf to SIGTERM. Any of them alive when its once exits,
	// or when the next holder's command enters (an overlap on the kernel lock), breaks the promise.
	FaultEscapeExit Fault = "escape-exit"  // the command leaves its escapers and exits 0 by itself
	FaultEscapeTerm Fault = "escape-term"  // SIGTERM to the holder's once: killed after --grace
	FaultEscapeKill Fault = "escape-kill9" // kill -9 of the holder's once
	FaultEscapeLost Fault = "escape-lost"  // the holder loses its lease: its store is cut off for 2 ttl (SQLite: write-locked)
)

// escapeFaults are the faults whose first holder runs an escaping command.
var escapeFaults = map[Fault]bool{FaultEscapeExit: true, FaultEscapeTerm: true, FaultEscapeKill: true, FaultEscapeLost: true}

// Faults lists every fault that applies to a store (networked: whether it is reached over TCP;
// restart: whether a control script can stop and start its server).
func Faults(networked, restart bool) []Fault {
	fs := []Fault{FaultNone, FaultKillOnce, FaultKillCmd, FaultPauseShort, FaultPauseLong, FaultReview, FaultClockBack, FaultClockAhead,
		FaultEscapeExit, FaultEscapeTerm, FaultEscapeKill, FaultEscapeLost}
	if networked {
		fs = append(fs, FaultCut, FaultBlackhole)
	}
	if restart {
		fs = append(fs, FaultRestart)
	}
	return fs
}

// Backend is a store under test: its name (sqlite, postgres, …), DSN and, for a private server,
// the control script (ctl stop|start|restart).
type Backend struct{ Name, DSN, Ctl string }

// Networked reports whether the store is reached over TCP (and so can sit behind a Proxy).
func (b Backend) Networked() bool { return b.Name != "sqlite" }

// Config configures a Runner.
type Config struct {
	Once    string        // path of the once binary
	Skewed  string        // once built with BuildSkewed, for the clock faults
	Witness []string      // argv that runs WitnessMain (e.g. the test binary itself)
	Store   Backend       // the DSN must already carry an isolating ?prefix= when shared
	TTL     time.Duration // --ttl of every holder
	Grace   time.Duration // --grace of every holder
	Dir     string        // scratch directory
	Logf    func(format string, args ...any)
}

// Runner runs trials of one store with three simulated hosts, each with its own ONCE_HOME and
// (networked stores) its own Proxy.
type Runner struct {
	cfg   Config
	hosts [3]*simHost
	seq   int
}

type simHost struct {
	name, home, dsn string
	proxy           *Proxy
}

// NewRunner prepares the hosts and their proxies. Close releases them.
func NewRunner(ctx context.Context, cfg Config) (*Runner, error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	r := &Runner{cfg: cfg}
	for i, n := range []string{"host-a", "host-b", "host-c"} {
		h := &simHost{name: n, home: filepath.Join(cfg.Dir, n), dsn: cfg.Store.DSN}
		if cfg.Store.Networked() {
			u, err := url.Parse(cfg.Store.DSN)
			if err != nil || u.Host == "" {
				r.Close()
				return nil, fmt.Errorf("chaos: store %s: DSN has no host:port to proxy", cfg.Store.Name)
			}
			p, err := NewProxy(ctx, u.Host)
			if err != nil {
				r.Close()
				return nil, err
			}
			u.Host = p.Addr()
			h.proxy, h.dsn = p, u.String()
		}
		r.hosts[i] = h
	}
	return r, nil
}

// Close stops the proxies.
func (r *Runner) Close() {
	for _, h := range r.hosts {
		if h != nil && h.proxy != nil {
			h.proxy.Close()
		}
	}
}

// proc is one once process of a trial.
type proc struct {
	id         string
	cmd        *exec.Cmd
	start, end time.Time
	code       int
	done       chan struct{}
	stderr     string // file
}

func (r *Runner) launch(h *simHost, id, task, wdir string, sleep, skew time.Duration, escape bool, args ...string) (*proc, error) {
	argv := append([]string{"--log-format", "json", "run", "--task", task, "--slot", "s", "--holder", h.name + "/" + id,
		"--ttl", r.cfg.TTL.String(), "--grace", r.cfg.Grace.String()}, args...)
	argv = append(append(argv, "--"), r.cfg.Witness...)
	bin := r.cfg.Once
	if skew != 0 {
		if r.cfg.Skewed == "" {
			return nil, errors.New("chaos: a clock fault needs Config.Skewed (once built with BuildSkewed)")
		}
		bin = r.cfg.Skewed
	}
	c := exec.Command(bin, argv...)
	c.Env = []string{"ONCE_HOME=" + h.home, "ONCE_STORE=" + h.dsn, "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		EnvWitness + "=1", EnvDir + "=" + wdir, EnvProc + "=" + id, EnvWrites + "=4",
		EnvSleep + "=" + strconv.FormatInt(sleep.Milliseconds(), 10)}
	if skew != 0 {
		c.Env = append(c.Env, skewEnv(skew))
	}
	if escape {
		c.Env = append(c.Env, EnvEscape+"=1")
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group: a pause stops all of once
	p := &proc{id: id, cmd: c, done: make(chan struct{}), stderr: filepath.Join(wdir, id+".stderr")}
	f, err := os.Create(p.stderr)
	if err != nil {
		return nil, err
	}
	c.Stderr, c.Stdout = f, f
	p.start = time.Now()
	if err := c.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("chaos: start once: %w", err)
	}
	go func() {
		err := c.Wait()
		p.end = time.Now()
		f.Close()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.code = 128 + int(ws.Signal())
			}
		case err != nil:
			p.code = -1
		}
		close(p.done)
	}()
	return p, nil
}

func (p *proc) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

func (p *proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Outcome is what one trial showed.
type Outcome struct {
	Store string
	Fault Fault
	// Overlaps counts executions that started while another held the witness's kernel lock, not
	// counting Excused ones: a paused stale holder's, all of whose later writes were rejected.
	Overlaps, Excused int
	// StaleAccepted counts writes the register accepted from an execution after another execution
	// with an equal or higher token had entered (a stale holder or a reused token).
	StaleAccepted int
	// TokenOrder counts entries whose token was not higher than the previous entry's.
	TokenOrder int
	// Lost is set when the slot did not end succeeded (backed by a completed execution).
	Lost bool
	// ReviewBroken counts executions that ran after an unknown outcome under --on-unknown review
	// before the slot was resolved.
	ReviewBroken int
	// Linearizable is the porcupine verdict on the acquire/release history.
	Linearizable bool
	// Takeover is the time from the kill -9 of a holder to the next execution's entry (kill9-once).
	Takeover time.Duration
	// StaleStop is the time from SIGCONT to the stale command's death (pause>ttl).
	StaleStop time.Duration
	// Executions is the number of executions the witness saw.
	Executions int
	// Blocked is set when no other holder could run during a pause longer than the TTL.
	Blocked bool
	// LeaseLost is set when the faulted holder's once logged that it lost its lease (evidence
	// that the fault hit it).
	LeaseLost bool
	// StopMargin is, when another execution followed the faulted one, the time from the faulted
	// command's death to the next execution's entry (positive: stopped before the takeover ran).
	StopMargin time.Duration
	HasMargin  bool // StopMargin was measured
	// Escaped counts escapers (escape-* faults) alive when their once exited (kill9: 2 s after).
	Escaped int
	// Aborted says why the trial ended before its fault was injected (then nothing else is set).
	Aborted string
	// Problems describes each violation in one line.
	Problems []string
}

// OK reports whether the trial kept every promise.
func (o Outcome) OK() bool { return len(o.Problems) == 0 }

// StoreStalled starts a problem that is the store's unavailability, not a broken promise: an
// unfaulted holder lost its lease because the store did not answer its renewals in time.
const StoreStalled = "liveness (store stalled):"

// OnlyStoreStalled reports whether every problem of o is a store stall, so the trial may be run again.
func (o Outcome) OnlyStoreStalled() bool {
	for _, p := range o.Problems {
		if !strings.HasPrefix(p, StoreStalled) {
			return false
		}
	}
	return len(o.Problems) > 0
}

func (o *Outcome) problem(format string, args ...any) {
	o.Problems = append(o.Problems, fmt.Sprintf(format, args...))
}

// Trial runs one trial: host A starts the task's slot, B and C compete with --wait, the fault hits
// A, and the slot is then driven to success; the witness log is checked.
func (r *Runner) Trial(ctx context.Context, f Fault) (Outcome, error) {
	tr, err := r.newTrial(f)
	if err != nil {
		return tr.out, err
	}
	defer tr.cleanup()
	if err := tr.startHolders(ctx); err != nil || tr.out.Aborted != "" {
		return tr.out, err
	}
	tr.watchA()
	if err := tr.inject(ctx); err != nil {
		return tr.out, err
	}
	tr.collect()
	tr.review(ctx)
	if err := tr.complete(); err != nil {
		return tr.out, err
	}
	return tr.out, tr.judge()
}

// trial is the state of one Trial, step by step.
type trial struct {
	r        *Runner
	f        Fault
	out      Outcome
	task     string
	wdir     string
	ttl      time.Duration
	limit    time.Duration // how long any once of the trial may take to exit
	skew     map[string]time.Duration
	procs    []*proc
	a, b, c  *proc
	wpid     int            // the pid of A's command (its witness)
	faultAt  time.Time      // when the fault was injected
	aDead    chan time.Time // when A's command died
	aChecked chan struct{}  // closed once escLeft is known
	escLeft  []int          // escapers alive when A's once exited
	resolved time.Time      // when the review was resolved (FaultReview)
	final    *proc          // the last once that drove the slot to success
	end      time.Time
}

func (r *Runner) newTrial(f Fault) (*trial, error) {
	r.seq++
	tr := &trial{r: r, f: f, ttl: r.cfg.TTL, out: Outcome{Store: r.cfg.Store.Name, Fault: f, Takeover: -1, StaleStop: -1}}
	tr.limit = 8*tr.ttl + 30*time.Second
	tr.task = fmt.Sprintf("chaos-%d-%d", os.Getpid(), r.seq)
	tr.wdir = filepath.Join(r.cfg.Dir, tr.task)
	if err := os.MkdirAll(tr.wdir, 0o755); err != nil {
		return tr, err
	}
	for _, h := range r.hosts {
		if h.proxy != nil {
			h.proxy.Heal()
		}
	}
	// The clock faults run one holder on a binary whose wall clock is off by SkewOffset.
	tr.skew = map[string]time.Duration{}
	switch f {
	case FaultClockBack:
		tr.skew["A"] = -SkewOffset
	case FaultClockAhead:
		tr.skew["B"] = SkewOffset
	}
	return tr, nil
}

// cleanup leaves nothing of a failed trial behind.
func (tr *trial) cleanup() {
	for _, pid := range aliveEscapers(tr.wdir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, p := range tr.procs {
		select {
		case <-p.done:
		default:
			p.kill()
		}
	}
}

func (tr *trial) start(h *simHost, id string, sleep time.Duration, args ...string) (*proc, error) {
	p, err := tr.r.launch(h, id, tr.task, tr.wdir, sleep, tr.skew[id], id == "A" && escapeFaults[tr.f], args...)
	if err == nil {
		tr.procs = append(tr.procs, p)
	}
	return p, err
}

// startHolders starts A, waits for its command to enter, then starts B and C, which wait for it.
func (tr *trial) startHolders(ctx context.Context) error {
	policy := "rerun"
	if tr.f == FaultReview {
		policy = "review"
	}
	// A runs long enough for every fault to land while it holds the lease.
	a, err := tr.start(tr.r.hosts[0], "A", 3*tr.ttl, "--on-unknown", "rerun")
	if err != nil {
		return err
	}
	tr.a = a
	entryA, err := waitRecord(ctx, tr.wdir, 15*time.Second, func(rec Record) bool { return rec.Proc == "A" && rec.Kind == KindEntry })
	if err != nil {
		a.wait(time.Second)
		if b, _ := os.ReadFile(a.stderr); a.cmd.ProcessState != nil && strings.Contains(string(b), "lease lost") {
			// Fail-closed on an overloaded machine: A's renewals did not come back within 2/3 TTL of
			// its acquire, so once stopped the command before it reached the witness. Nothing ran;
			// the trial is counted as aborted, not as a trial of its fault.
			tr.out.Aborted = "the first holder lost its lease before its command entered (renewals too slow)"
			tr.r.cfg.Logf("%s %s trial %s aborted: %s", tr.r.cfg.Store.Name, tr.f, tr.task, tr.out.Aborted)
			return nil
		}
		return fmt.Errorf("holder A never started its command (exit %d): %w; %s", a.code, err, tail(a.stderr))
	}
	tr.wpid = entryA.PID
	wait := (4 * tr.ttl).String()
	if tr.b, err = tr.start(tr.r.hosts[1], "B", tr.ttl/2, "--on-unknown", policy, "--wait", wait); err != nil {
		return err
	}
	if tr.c, err = tr.start(tr.r.hosts[2], "C", tr.ttl/2, "--on-unknown", policy, "--wait", wait); err != nil {
		return err
	}
	time.Sleep(50 * time.Millisecond) // let B and C reach the store and find it busy
	return nil
}

// watchA notes when A's command dies and, for the escape faults, which escapers outlive A's once.
func (tr *trial) watchA() {
	tr.aChecked = make(chan struct{})
	tr.faultAt = time.Now()
	tr.aDead = make(chan time.Time, 1)
	go func() { tr.aDead <- waitDead(tr.wpid, 20*tr.ttl+60*time.Second) }()
	if !escapeFaults[tr.f] {
		close(tr.aChecked)
	}
}

// inject lands the fault on A.
func (tr *trial) inject(ctx context.Context) error {
	a := tr.a
	if escapeFaults[tr.f] {
		// The fault lands once the escapers run (the witness starts them right after its entry).
		if err := waitEscapers(ctx, tr.wdir, 10*time.Second); err != nil {
			close(tr.aChecked)
			return fmt.Errorf("holder A's escapers never started: %w; %s", err, tail(a.stderr))
		}
		go func() {
			<-a.done
			// The moment once reports the attempt over, no process of its run may be alive. (kill -9 of
			// once: its shim kills the run after once is gone, checked in collect.)
			if tr.f != FaultEscapeKill {
				tr.escLeft = aliveEscapers(tr.wdir)
			}
			close(tr.aChecked)
		}()
	}
	switch tr.f {
	case FaultNone, FaultClockBack, FaultClockAhead, FaultEscapeExit:
	case FaultEscapeTerm:
		_ = syscall.Kill(a.cmd.Process.Pid, syscall.SIGTERM)
	case FaultEscapeLost:
		return tr.r.cutOff(ctx, tr.r.hosts[0], 2*tr.ttl)
	case FaultKillOnce, FaultReview, FaultEscapeKill:
		_ = syscall.Kill(a.cmd.Process.Pid, syscall.SIGKILL)
	case FaultKillCmd:
		_ = syscall.Kill(tr.wpid, syscall.SIGKILL)
	case FaultPauseShort, FaultPauseLong:
		tr.pause(ctx)
	case FaultCut, FaultBlackhole:
		p := tr.r.hosts[0].proxy
		p.Set(map[Fault]Mode{FaultCut: Cut, FaultBlackhole: Blackhole}[tr.f])
		time.Sleep(2 * tr.ttl)
		p.Heal()
	case FaultRestart:
		if err := ctl(ctx, tr.r.cfg.Store.Ctl, "stop"); err != nil {
			return err
		}
		time.Sleep(tr.ttl)
		return ctl(ctx, tr.r.cfg.Store.Ctl, "start")
	}
	return nil
}

// pause stops A (once and its command) for less or more than the TTL, then wakes it; after a long
// pause the stale command must stop within --grace.
func (tr *trial) pause(ctx context.Context) {
	a, ttl := tr.a, tr.ttl
	wpg, _ := syscall.Getpgid(tr.wpid)
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGSTOP)
	if wpg > 0 {
		_ = syscall.Kill(-wpg, syscall.SIGSTOP)
	}
	other := func(rec Record) bool { return rec.Proc != "A" && rec.Kind == KindEntry }
	if tr.f == FaultPauseShort {
		time.Sleep(ttl / 2)
	} else if _, err := waitRecord(ctx, tr.wdir, 4*ttl+5*time.Second, other); err != nil {
		// Not a safety failure: with SQLite a holder paused inside a write transaction keeps the
		// database file locked, so nobody can take the lease until it wakes (a liveness cost).
		tr.out.Blocked = true
		tr.r.cfg.Logf("%s pause>ttl trial %s: no other holder could run during a %s pause", tr.r.cfg.Store.Name, tr.task, time.Since(tr.faultAt).Round(time.Millisecond))
	} else {
		time.Sleep(ttl / 4) // let the new holder's fenced writes land before the stale one wakes
	}
	wake := time.Now()
	if wpg > 0 {
		_ = syscall.Kill(-wpg, syscall.SIGCONT)
	}
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGCONT)
	if tr.f == FaultPauseLong {
		dead := waitDead(tr.wpid, tr.r.cfg.Grace+10*time.Second)
		tr.out.StaleStop = dead.Sub(wake)
		// --grace bounds the stop; the slack covers polling and a loaded machine's scheduling.
		if slack := 500 * time.Millisecond; tr.out.StaleStop > tr.r.cfg.Grace+slack {
			tr.out.problem("pause>ttl: the stale command ran %s after waking, more than --grace %s", tr.out.StaleStop.Round(time.Millisecond), tr.r.cfg.Grace)
		}
	}
}

// collect waits for A, B and C and checks what A left: escapers, a lost lease, liveness.
func (tr *trial) collect() {
	out, a := &tr.out, tr.a
	for _, p := range []*proc{a, tr.b, tr.c} {
		if !p.wait(tr.limit) {
			out.problem("once %s did not exit within %s; %s", p.id, tr.limit, tail(p.stderr))
			p.kill()
		}
	}
	<-tr.aChecked
	out.Escaped += len(tr.escLeft)
	if len(tr.escLeft) > 0 {
		out.problem("escapers %v of holder A were alive when its once exited %d", tr.escLeft, a.code)
	}
	if tr.f == FaultEscapeKill {
		// once died by SIGKILL: its shim kills the run; give it the parent-death grace.
		for _, pid := range aliveEscapers(tr.wdir) {
			if waitDead(pid, 2*time.Second); alive(pid) {
				out.Escaped++
				out.problem("escaper %d of holder A alive 2s after kill -9 of its once", pid)
			}
		}
	}
	logText, _ := os.ReadFile(a.stderr)
	out.LeaseLost = strings.Contains(string(logText), "lease lost")
	unfaulted := tr.f == FaultNone || tr.f == FaultClockBack || tr.f == FaultClockAhead || tr.f == FaultEscapeExit
	switch {
	case !unfaulted || a.code == 0:
	case strings.Contains(string(logText), "the store did not answer"):
		// The store itself stalled past the renew deadline (a loaded CI machine): failing closed is
		// right, and the caller runs the trial again rather than excusing it.
		out.problem("%s the first holder, not killed or paused, exited %d: the store did not answer its renewals; %s", StoreStalled, a.code, tail(a.stderr))
	default:
		out.problem("liveness: the first holder, not killed or paused, exited %d, want 0 (its command runs 3 TTL); %s", a.code, tail(a.stderr))
	}
}

// review: with FaultReview, B and C must stop at the unknown attempt (76), and a person resolves it.
func (tr *trial) review(ctx context.Context) {
	if tr.f != FaultReview {
		return
	}
	for _, p := range []*proc{tr.b, tr.c} {
		if p.code != 76 && p.code != 0 {
			tr.out.problem("review: once %s exited %d, want 76 (needs review); %s", p.id, p.code, tail(p.stderr))
		}
	}
	tr.resolved = time.Now()
	h := tr.r.hosts[2]
	rc := exec.CommandContext(ctx, tr.r.cfg.Once, "resolve", "--task", tr.task, "--slot", "s", "--as", "failed", "--note", "chaos")
	rc.Env = []string{"ONCE_HOME=" + h.home, "ONCE_STORE=" + h.dsn, "PATH=" + os.Getenv("PATH")}
	if o, err := rc.CombinedOutput(); err != nil {
		tr.out.problem("resolve: %v: %s", err, strings.TrimSpace(string(o)))
	}
}

// complete drives the slot to success: an idempotent job with --on-unknown rerun must get there.
func (tr *trial) complete() error {
	for i := 0; i < 4; i++ {
		p, err := tr.start(tr.r.hosts[2], fmt.Sprintf("F%d", i), tr.ttl/4, "--on-unknown", "rerun", "--wait", (3 * tr.ttl).String())
		if err != nil {
			return err
		}
		if !p.wait(tr.limit) {
			p.kill()
		}
		tr.final = p
		if p.code == 0 {
			break
		}
	}
	tr.end = time.Now()
	return nil
}

// judge checks the witness log against the fault (analyze), the faulted command's death against
// the next entry, and the slot's completion; a failed trial logs everything it saw.
func (tr *trial) judge() error {
	out := &tr.out
	recs, err := ReadLog(tr.wdir)
	if err != nil {
		return err
	}
	deadAt := <-tr.aDead
	analyze(out, recs, tr.procs, tr.f, tr.faultAt, tr.resolved, tr.end)
	for _, rec := range recs {
		if rec.Kind == KindEntry && rec.Proc != "A" {
			out.StopMargin, out.HasMargin = time.Duration(rec.Time-deadAt.UnixNano()), true
			break
		}
	}
	if out.HasMargin && out.StopMargin < 0 && tr.f != FaultPauseLong {
		out.problem("the faulted command was still running %s after the next execution started", -out.StopMargin)
	}
	if tr.final.code != 0 {
		out.Lost = true
		out.problem("lost slot: the final run exited %d; %s", tr.final.code, tail(tr.final.stderr))
	}
	if !out.OK() {
		tr.r.cfg.Logf("%s %s trial %s: %s", tr.r.cfg.Store.Name, tr.f, tr.task, strings.Join(out.Problems, "; "))
		for _, p := range tr.procs {
			tr.r.cfg.Logf("once %s exited %d:\n%s", p.id, p.code, tail(p.stderr))
		}
		b, _ := os.ReadFile(filepath.Join(tr.wdir, "log"))
		tr.r.cfg.Logf("witness log:\n%s", b)
	}
	return nil
}
