package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Environment of the witness mode (set on the once process; once passes it on to its command).
const (
	EnvWitness = "CHAOS_WITNESS"  // "1" makes the chaos test binary run WitnessMain
	EnvDir     = "CHAOS_DIR"      // the shared witness directory of one trial
	EnvProc    = "CHAOS_PROC"     // the harness's id of the once process that runs this witness
	EnvWrites  = "CHAOS_WRITES"   // number of fenced writes after the entry (default 4)
	EnvSleep   = "CHAOS_SLEEP_MS" // total time spent between writes, in milliseconds (default 1000)
	EnvEscape  = "CHAOS_ESCAPE"   // "1": deaf to SIGTERM, and leave escapers holding the kernel lock
)

// escapersFile, in CHAOS_DIR, lists the escapers' pids, one a line.
const escapersFile = "escapers"

// Record kinds in the witness log.
const (
	KindEntry   = "entry"   // the command started (a fenced write)
	KindWrite   = "write"   // a fenced write
	KindExit    = "exit"    // the command ended by itself
	KindTerm    = "term"    // the command got SIGTERM and exits
	KindOverlap = "overlap" // the kernel lock was held by another execution at entry: two ran at once
)

// Record is one line of the witness log, appended under the register's lock so the file order is
// the order in which the fencing register saw the operations.
type Record struct {
	Kind    string `json:"k"`
	Proc    string `json:"proc"`
	RunID   string `json:"run"`
	Slot    string `json:"slot"`
	Attempt int    `json:"att"`
	Token   int64  `json:"tok"`
	PID     int    `json:"pid"`
	// OK: for entry and write, whether the register accepted the token (not lower than Max).
	OK bool `json:"ok"`
	// Max is the highest token the register had accepted before this record.
	Max  int64 `json:"max"`
	Time int64 `json:"t"` // wall clock, Unix nanoseconds
}

// WitnessMain is the command each once run executes in a trial: it takes a kernel flock (LOCK_NB)
// on CHAOS_DIR/held for its whole life and records an overlap loudly if it cannot; it writes its
// fencing token (ONCE_FENCING_TOKEN) to the register at entry and CHAOS_WRITES more times over
// CHAOS_SLEEP_MS; it records its exit (or SIGTERM). It returns the process exit code: 0, 3 when a
// write was rejected (a fenced resource refuses a stale holder, so the job fails), 143 on SIGTERM,
// 2 on a setup error.
func WitnessMain() int {
	w, err := newWitness()
	if err == nil {
		w.onTerm()
		var held *os.File
		if held, err = w.hold(); err == nil {
			defer held.Close()
			var rejected bool
			if rejected, err = w.run(held); err == nil && rejected {
				return 3
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "witness:", err)
		return 2
	}
	return 0
}

// witness is one execution of the witness command, configured by the environment once and the
// harness give it.
type witness struct {
	dir    string
	writes int
	sleep  time.Duration // between the first and the last write
	escape bool          // ignore SIGTERM and start escapers (the escape faults)
	base   Record
	reg    *register
}

func newWitness() (*witness, error) {
	dir := os.Getenv(EnvDir)
	tok, err := strconv.ParseInt(os.Getenv("ONCE_FENCING_TOKEN"), 10, 64)
	if dir == "" || err != nil {
		return nil, errors.New("CHAOS_DIR and ONCE_FENCING_TOKEN must be set")
	}
	w := &witness{dir: dir, reg: &register{dir: dir}, escape: os.Getenv(EnvEscape) == "1"}
	if w.writes, _ = strconv.Atoi(os.Getenv(EnvWrites)); w.writes <= 0 {
		w.writes = 4
	}
	sleepMS, _ := strconv.Atoi(os.Getenv(EnvSleep))
	if sleepMS <= 0 {
		sleepMS = 1000
	}
	w.sleep = time.Duration(sleepMS) * time.Millisecond
	att, _ := strconv.Atoi(os.Getenv("ONCE_ATTEMPT"))
	w.base = Record{Proc: os.Getenv(EnvProc), RunID: os.Getenv("ONCE_RUN_ID"), Slot: os.Getenv("ONCE_SLOT"),
		Attempt: att, Token: tok, PID: os.Getpid()}
	return w, nil
}

// onTerm records SIGTERM and exits 143, or, for the escape faults, ignores it.
func (w *witness) onTerm() {
	if w.escape {
		signal.Ignore(syscall.SIGTERM)
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() {
		<-sigs
		r := w.base
		r.Kind = KindTerm
		_ = w.reg.append(r)
		os.Exit(143)
	}()
}

// hold takes the kernel lock every execution takes for its life; finding it held is an overlap,
// recorded.
func (w *witness) hold() (*os.File, error) {
	held, err := os.OpenFile(filepath.Join(w.dir, "held"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			held.Close()
			return nil, fmt.Errorf("flock: %w", err)
		}
		fmt.Fprintf(os.Stderr, "WITNESS: OVERLAP: run %s (token %d) started while another execution held the lock\n", w.base.RunID, w.base.Token)
		r := w.base
		r.Kind = KindOverlap
		if err := w.reg.append(r); err != nil {
			held.Close()
			return nil, err
		}
	}
	return held, nil
}

// run makes the entry and the fenced writes, then records the exit; rejected is whether the
// register refused a write (a stale token).
func (w *witness) run(held *os.File) (rejected bool, err error) {
	for i := 0; i <= w.writes; i++ {
		if i > 0 {
			time.Sleep(w.sleep / time.Duration(w.writes))
		}
		r := w.base
		r.Kind = KindWrite
		if i == 0 {
			r.Kind = KindEntry
		}
		ok, err := w.reg.write(r)
		if err != nil {
			return false, err
		}
		rejected = rejected || !ok
		if i == 0 && w.escape {
			if err := startEscapers(w.dir, held); err != nil {
				return false, err
			}
		}
	}
	r := w.base
	r.Kind = KindExit
	return rejected, w.reg.append(r)
}

// register is the fencing-aware resource: a file holding the highest accepted token, guarded by a
// flock, with every operation appended to a log under the same lock.
type register struct{ dir string }

func (g *register) lock() (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(g.dir, "register"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// write accepts r.Token unless it is lower than the highest token accepted so far.
func (g *register) write(r Record) (bool, error) {
	f, err := g.lock()
	if err != nil {
		return false, err
	}
	defer f.Close() // releases the flock
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	max, _ := strconv.ParseInt(strings.TrimSpace(string(b[:n])), 10, 64)
	r.Max, r.OK = max, r.Token >= max
	if r.OK && r.Token > max {
		if err := f.Truncate(0); err != nil {
			return false, err
		}
		if _, err := f.WriteAt([]byte(strconv.FormatInt(r.Token, 10)), 0); err != nil {
			return false, err
		}
	}
	return r.OK, g.appendLocked(r)
}

// append logs a record that is not a fenced write.
func (g *register) append(r Record) error {
	f, err := g.lock()
	if err != nil {
		return err
	}
	defer f.Close()
	return g.appendLocked(r)
}

func (g *register) appendLocked(r Record) error {
	r.Time = time.Now().UnixNano()
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	lf, err := os.OpenFile(filepath.Join(g.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := lf.Write(append(b, '\n')); err != nil {
		lf.Close()
		return err
	}
	return lf.Close()
}

// ReadLog reads a trial's witness log in order.
func ReadLog(dir string) ([]Record, error) {
	f, err := os.Open(filepath.Join(dir, "log"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseLog(f)
}

// ParseLog parses witness records, one JSON object a line; it stops at the first bad line.
func ParseLog(rd io.Reader) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(rd)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return out, fmt.Errorf("witness log line %d: %w", len(out)+1, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// startEscapers leaves three processes deaf to SIGTERM that inherit held (the kernel lock) and append
// their pids to CHAOS_DIR/escapers: a double-forked setsid daemon (its own session and group,
// re-parented to the shim), a double-forked child that stays in the group (re-parented to the shim),
// and a background child of the witness. It returns when all three run.
func startEscapers(dir string, held *os.File) error {
	f := filepath.Join(dir, escapersFile)
	deaf := `trap "" TERM; echo $$ >> ` + f + `; exec sleep 3600`
	for _, script := range []string{
		`( setsid sh -c '` + deaf + `' & )`,
		`( sh -c '` + deaf + `' & )`,
		deaf,
	} {
		c := exec.Command("/bin/sh", "-c", script)
		c.ExtraFiles = []*os.File{held}
		if err := c.Start(); err != nil {
			return err
		}
		go func() { _ = c.Wait() }()
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if len(readPids(f)) >= 3 {
			return nil
		}
	}
	return fmt.Errorf("escapers did not start: %v", readPids(f))
}

// readPids reads a file of pids, one a line.
func readPids(path string) []int {
	b, _ := os.ReadFile(path)
	var out []int
	for _, s := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(s); err == nil {
			out = append(out, n)
		}
	}
	return out
}
