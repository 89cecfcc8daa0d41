package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/once-run/once/internal/who"
	"github.com/once-run/once/job"
	"github.com/once-run/once/store"
)

type drillFlags struct {
	runFlags
	check       string
	allowNoSlot bool
}

// drillHolderPrefix starts the holder of every launch a drill makes; doctor leaves these out of
// its burst scan, since a drill is a burst on purpose.
const drillHolderPrefix = "drill-"

func (a *app) drillCmd() *cobra.Command {
	f := &drillFlags{}
	c := &cobra.Command{
		Use:   "drill [run flags] [--check CMD] -- COMMAND [ARG...]",
		Short: "Pre-launch test: launch COMMAND twice at once and once more after, and check for duplicates",
		Long: `The pre-launch drill. It launches "once run" with the given flags and COMMAND twice at the same
moment, then once more after both ended, on the real task and store (run it in a test environment),
and reports which launch ran and which were blocked (busy) or skipped, and why. Then it runs CMD
with sh -c (your duplicate count, for instance: exit 0 means no duplicates) and prints PASS or FAIL
with the figures.

PASS needs: at most one of the two simultaneous launches ran; the launch after them did not run the
slot again; every launch that ran succeeded; and CMD exited 0. Without --per, --schedule or --slot
once only stops overlapping runs: the third launch runs again, which is a FAIL unless
--allow-no-slot says that is what you want.

The launches run as holders drill-1/…, drill-2/…, drill-3/… so that history shows them (and doctor
does not count them as a double trigger). Exit status: 0 on PASS, 1 on FAIL, 64 on bad usage.`,
		Example: `  once drill --task sync-orders --per day --check 'psql -tAc "select count(*) - count(distinct order_id) from synced" | grep -qx 0' -- ./sync-orders`,
		Args:    cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 0 && len(args) > 0 {
				return usage("put the command after --: once drill --task %s [flags] -- %s", orDefault(f.task, "NAME"), args[0])
			}
			return a.drill(c.Context(), c.Flags(), f, args)
		},
	}
	fl := c.Flags()
	addRunFlags(fl, &f.runFlags, true)
	fl.StringVar(&f.check, "check", "", "after the launches, run this with sh -c; exit 0 means no duplicates")
	fl.BoolVar(&f.allowNoSlot, "allow-no-slot", false, "accept that without a slot a later launch runs again")
	return c
}

type launch struct {
	n       int
	holder  string
	code    int
	stderr  string
	entries []store.Entry // this launch's history, oldest first
	dur     time.Duration
}

// outcome is what the launch did: ran, blocked, skipped, review or unknown.
func (l *launch) outcome() (kind, detail string) {
	for _, e := range l.entries {
		switch e.State {
		case store.Busy:
			return "blocked", e.Note
		case store.Skipped:
			return "skipped", e.Note
		case store.Review:
			return "review", e.Note
		}
	}
	for _, e := range l.entries {
		if e.EndedAt != nil || e.State == store.Running {
			d := fmt.Sprintf("attempt %d, %s", e.Number, e.State)
			if e.ExitCode != nil {
				d += fmt.Sprintf(", exit %d", *e.ExitCode)
			}
			return "ran", d
		}
	}
	return "unknown", "no trace in history; its stderr: " + lastLine(l.stderr)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return "(empty)"
	}
	return s
}

// drill launches the run twice at once and once more after, reads what each did from history,
// runs the check, and judges: PASS (nil) or FAIL (exit 1).
func (a *app) drill(ctx context.Context, fs *pflag.FlagSet, f *drillFlags, args []string) error {
	if _, err := a.validate(&f.runFlags, args, "drill"); err != nil {
		return err
	}
	dsn, err := a.dsn()
	if err != nil {
		return err
	}
	s, err := a.openStore(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	base := f.holder
	if base == "" {
		// The default, with room for the prefix: a long user name is cut before the drill fails.
		base = who.HolderWithin(store.MaxHolderLen - len(drillHolderPrefix+"3/"))
	}
	// Launches run as drill-N/BASE: that must fit the limit too.
	if err := store.CheckName("--holder", drillHolderPrefix+"3/"+base, store.MaxHolderLen); err != nil {
		return usage("%v (once drill adds %q to it)", err, drillHolderPrefix+"N/")
	}
	self, err := os.Executable()
	if err != nil {
		self = "/proc/self/exe"
	}
	mark, err := historyMark(ctx, s, f.task)
	if err != nil {
		return err
	}
	ln := &launcher{a: a, ctx: ctx, self: self, fwd: forwardedFlags(fs), args: args, dsn: dsn, base: base}
	defer ln.forwardStops()()
	launches, err := ln.launchAll()
	if err != nil {
		return err
	}
	if sig := ln.stopped(); sig != 0 {
		return exit(128+int(sig), "drill: interrupted by %s: the launches were passed it and have ended; nothing was judged (see once history --task %s)", unix.SignalName(sig), f.task)
	}
	if err := traceLaunches(ctx, s, f.task, mark, launches); err != nil {
		return err
	}

	// Report.
	w := a.stdout
	slotDesc := drillSlot(f, launches)
	fmt.Fprintf(w, "once drill: task %s, %s, store %s\n", f.task, slotDesc, store.Redact(dsn))
	for _, l := range launches {
		kind, detail := l.outcome()
		when := "at the same moment"
		if l.n == 3 {
			when = "after both ended"
		}
		fmt.Fprintf(w, "  launch %d (%s): %-7s exit %d, %s: %s\n", l.n, when, kind, l.code, l.dur.Round(time.Millisecond), detail)
	}
	ran, fails, warns := judgeLaunches(f, launches)
	if f.check != "" {
		slotVal := "" // for "no slot"
		if v, ok := strings.CutPrefix(slotDesc, "slot "); ok {
			slotVal = v
		}
		if code := a.drillCheck(ctx, f, slotVal, dsn); code != 0 {
			fails = append(fails, fmt.Sprintf("the check exited %d", code))
		}
	}
	return a.drillVerdict(ran, fails, warns, f.check != "")
}

// forwardedFlags are the run flags the drill was given, for its launches: all but the drill's
// own, the holder (each launch has its own) and the store (by environment, see launcher.start).
func forwardedFlags(fs *pflag.FlagSet) []string {
	var fwd []string
	fs.Visit(func(fl *pflag.Flag) {
		switch fl.Name {
		case "check", "allow-no-slot", "holder", "store", "store-password-file", "log-format":
			return
		}
		fwd = append(fwd, "--"+fl.Name+"="+fl.Value.String())
	})
	return fwd
}

// launcher starts the drill's launches: this binary's `once run` with the forwarded flags, its
// own holder, the store by environment.
type launcher struct {
	a    *app
	ctx  context.Context
	self string // this binary
	fwd  []string
	args []string // COMMAND [ARG...]
	dsn  string
	base string // the holder each launch's own is made from: drill-N/BASE

	mu    sync.Mutex
	procs []*os.Process  // the launches started
	sig   syscall.Signal // the stop signal the drill got, 0 for none
}

// forwardStops passes a stop signal the drill gets (SIGINT, SIGTERM, SIGHUP, SIGQUIT, unless
// ignored at start) on to its launches, each a once run that stops its command and records the
// outcome, and starts no launch after it. Without it the drill died of the signal and left its
// launches running the command (a CI step's timeout, systemd's stop). It returns the undo.
func (ln *launcher) forwardStops() func() {
	sigs := make(chan os.Signal, 4)
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		if !signal.Ignored(s) {
			signal.Notify(sigs, s)
		}
	}
	go func() {
		for s := range sigs {
			ln.mu.Lock()
			ln.sig = s.(syscall.Signal)
			for _, p := range ln.procs {
				_ = p.Signal(s)
			}
			ln.mu.Unlock()
		}
	}()
	return func() { signal.Stop(sigs); close(sigs) }
}

// started notes a launch that started, and passes it a stop signal that came before.
func (ln *launcher) started(p *os.Process) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.procs = append(ln.procs, p)
	if ln.sig != 0 {
		_ = p.Signal(ln.sig)
	}
}

// stopped is the stop signal the drill got, 0 for none.
func (ln *launcher) stopped() syscall.Signal {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.sig
}

// started is a launch on its way.
type started struct {
	cmd *exec.Cmd
	l   *launch
	se  *bytes.Buffer
}

// launchAll makes launches 1 and 2 back to back — the same moment, as a double trigger would —
// and launch 3 once both have ended.
func (ln *launcher) launchAll() ([]*launch, error) {
	pair := []started{ln.prepare(1), ln.prepare(2)}
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, p := range pair {
		if err := p.cmd.Start(); err != nil {
			wg.Wait()
			return nil, fmt.Errorf("drill: start launch %d: %w", p.l.n, err)
		}
		ln.started(p.cmd.Process)
		wg.Add(1)
		go func() { defer wg.Done(); p.wait(t0) }()
	}
	wg.Wait()
	third := ln.prepare(3)
	if ln.stopped() != 0 {
		return []*launch{pair[0].l, pair[1].l}, nil
	}
	t3 := time.Now()
	if err := third.cmd.Start(); err != nil {
		return nil, fmt.Errorf("drill: start launch 3: %w", err)
	}
	ln.started(third.cmd.Process)
	third.wait(t3)
	return []*launch{pair[0].l, pair[1].l, third.l}, nil
}

// prepare makes launch n's command, not started.
func (ln *launcher) prepare(n int) started {
	a := ln.a
	l := &launch{n: n, holder: fmt.Sprintf("%s%d/%s", drillHolderPrefix, n, ln.base)}
	// The store goes by environment, not argv: ps shows argv to every local user.
	cargs := append([]string{"run", "--log-format", a.logFormat, "--holder", l.holder}, ln.fwd...)
	cmd := exec.CommandContext(ln.ctx, ln.self, append(append(cargs, "--"), ln.args...)...)
	var se bytes.Buffer
	cmd.Stdout, cmd.Stderr = a.rawStdout, &se
	cmd.Env = append(job.Environ(), a.storeEnv(ln.dsn)...)
	return started{cmd, l, &se}
}

// wait waits for the launch to end and notes its exit, stderr and duration since t0.
func (p started) wait(t0 time.Time) {
	err := p.cmd.Wait()
	p.l.dur = time.Since(t0)
	p.l.stderr = p.se.String()
	p.l.code = p.cmd.ProcessState.ExitCode()
	if err != nil && p.cmd.ProcessState == nil {
		p.l.code, p.l.stderr = -1, err.Error()
	}
}

// historyMark is the cursor of the task's newest history entry before the launches, "" when it
// has none: the launches' entries are those after it. An earlier drill's launches had the same
// holders when the base is fixed (--holder, ONCE_HOLDER), and their entries were read as this
// drill's (a launch that ran shown as blocked, a double run as a PASS).
func historyMark(ctx context.Context, s store.Store, task string) (string, error) {
	hist, err := s.History(ctx, store.HistoryQuery{Task: task, Limit: 1})
	if err != nil || len(hist) == 0 {
		return "", err
	}
	return hist[0].Cursor, nil
}

// traceLaunches gives each launch its entries of the task's history after the cursor mark ("":
// all of it), oldest first.
func traceLaunches(ctx context.Context, s store.Store, task, mark string, launches []*launch) error {
	hist, err := s.History(ctx, store.HistoryQuery{Task: task, Limit: 200, After: mark})
	if err != nil {
		return err
	}
	for i := len(hist) - 1; i >= 0; i-- {
		for _, l := range launches {
			if hist[i].Holder == l.holder {
				l.entries = append(l.entries, hist[i])
			}
		}
	}
	return nil
}

// drillSlot names the slot the launches used: "slot VALUE", or "no slot".
func drillSlot(f *drillFlags, launches []*launch) string {
	desc := "no slot"
	switch {
	case f.slot != "":
		desc = "slot " + f.slot
	case f.per != "" || f.schedule != "":
		for _, l := range launches {
			for _, e := range l.entries {
				if e.Slot != "" {
					desc = "slot " + e.Slot
				}
			}
		}
	}
	return desc
}

// judgeLaunches holds the launches to the drill's rules: ran maps each launch that ran to what
// it did; fails and warns are the lines to print.
func judgeLaunches(f *drillFlags, launches []*launch) (ran map[int]string, fails, warns []string) {
	ran = map[int]string{}
	for _, l := range launches {
		switch kind, detail := l.outcome(); kind {
		case "ran":
			ran[l.n] = detail
			if !strings.HasSuffix(detail, "succeeded, exit 0") {
				fails = append(fails, fmt.Sprintf("launch %d: COMMAND did not succeed (%s); fix it before the drill can vouch for it", l.n, detail))
			}
		case "unknown":
			fails = append(fails, fmt.Sprintf("launch %d left no trace in history (exit %d)", l.n, l.code))
		}
	}
	noSlot := f.slot == "" && f.per == "" && f.schedule == ""
	if _, ok1 := ran[1]; ok1 {
		if _, ok2 := ran[2]; ok2 {
			fails = append(fails, "both simultaneous launches ran: the guard did not block the second")
		}
	}
	if _, ok3 := ran[3]; ok3 && len(ran) > 1 {
		if noSlot {
			msg := "no slot is configured (--per, --schedule or --slot): once only stops overlapping runs, so the launch after both ended ran again; a double trigger after the job ends runs it twice"
			if f.allowNoSlot {
				warns = append(warns, msg+" (accepted: --allow-no-slot)")
			} else {
				fails = append(fails, msg+"; give a slot, or --allow-no-slot if that is what you want")
			}
		} else {
			fails = append(fails, "the launch after both ended ran the same slot again")
		}
	} else if noSlot {
		warns = append(warns, "no slot is configured (--per, --schedule or --slot): a second launch after the first ended would run again")
	}
	if len(ran) == 0 {
		warns = append(warns, "nothing ran (the slot was already done or needs review): the drill saw no block; drill on a fresh slot, e.g. --slot drill-"+time.Now().UTC().Format("20060102T150405"))
	}
	return ran, fails, warns
}

// drillCheck runs --check with sh -c, prints its exit and output, and returns its exit code (-1
// when it could not run).
func (a *app) drillCheck(ctx context.Context, f *drillFlags, slotVal, dsn string) int {
	w := a.stdout
	cmd := exec.CommandContext(ctx, "sh", "-c", f.check)
	cmd.Env = append(append(job.Environ(), "ONCE_TASK="+f.task, "ONCE_SLOT="+slotVal), a.storeEnv(dsn)...)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		code = -1
		if cmd.ProcessState != nil {
			code = cmd.ProcessState.ExitCode()
		}
	}
	fmt.Fprintf(w, "  check (sh -c %s): exit %d\n", shellQuote(f.check), code)
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line != "" {
			fmt.Fprintf(w, "    | %s\n", line)
		}
	}
	return code
}

// drillVerdict prints the warnings and PASS, or the failures and FAIL (exit 1).
func (a *app) drillVerdict(ran map[int]string, fails, warns []string, checked bool) error {
	w := a.stdout
	for _, m := range warns {
		fmt.Fprintf(w, "WARNING: %s\n", m)
	}
	if len(fails) > 0 {
		for _, m := range fails {
			fmt.Fprintf(w, "FAIL: %s\n", m)
		}
		fmt.Fprintf(w, "FAIL: %d of 3 launches ran\n", len(ran))
		return exit(1, "")
	}
	fmt.Fprintf(w, "PASS: %d of 3 launches ran; the others were blocked or skipped%s\n", len(ran), map[bool]string{true: "; check passed", false: ""}[checked])
	return nil
}
