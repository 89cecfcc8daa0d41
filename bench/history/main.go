// Command history seeds a ledger with many attempts quickly and times what reads it: the store
// calls behind once status, once doctor, once history --task and once history (in-process: the
// store's own time, "server-side"), and the same commands of a built once binary (whole process).
//
//	go run ./bench/history seed -store DSN -shape minute|daily -n 1000000
//	go run ./bench/history time -store DSN -bin ./once [-runs 7]
//	go run ./bench/history drop -store DSN          (PostgreSQL, MySQL: drop the prefix's tables)
//	go run ./bench/history serve -store DSN [-runs 7]   (every page and API call of once serve, server time)
//	go run ./bench/history seed-keys -store DSN -n 1000000   (business keys for the keys pages; SQLite, PostgreSQL)
//
// Seeding writes rows straight into the store's tables (the schema is created first by opening
// the store the normal way): SQLite in one transaction of multi-row INSERTs, PostgreSQL with COPY,
// MySQL with multi-row INSERTs; Redis, etcd and ZooKeeper through the store's API. Only the columns every schema version has are written, so the same
// tool seeds a ledger for an older once (the "before" column of docs/benchmarks.md).
//
// Shapes (n attempts in all):
//
//	minute  one task "every-minute", one slot per minute (--per minute for n minutes); 1 % of the
//	        slots failed once before they succeeded, 2 % have a busy event
//	daily   10,000 tasks "daily-NNNNN", one slot per day for n/10,000 days, the same 1 % and 2 %
//	tasks   n/100 tasks of 100 daily slots (for the key-value stores, seeded through the store's API)
//
// The history ends now. Both end with two slots waiting for review (one unknown, one with attempts
// used up) and no lease.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/etcd"
	_ "github.com/once-run/once/store/mysql"
	_ "github.com/once-run/once/store/postgres"
	_ "github.com/once-run/once/store/redis"
	_ "github.com/once-run/once/store/sqlite"
	_ "github.com/once-run/once/store/zk"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dsn := fs.String("store", "", "store DSN (sqlite://…, postgres://…?prefix=…, mysql://…?prefix=…)")
	shape := fs.String("shape", "minute", "minute or daily")
	n := fs.Int("n", 1_000_000, "attempts to write")
	bin := fs.String("bin", "", "once binary to time (whole process); empty: in-process only")
	runs := fs.Int("runs", 7, "timed runs of each read (the median is reported)")
	_ = fs.Parse(os.Args[2:])
	if *dsn == "" {
		usage()
	}
	ctx := context.Background()
	var err error
	switch os.Args[1] {
	case "seed":
		err = seed(ctx, *dsn, *shape, *n)
	case "time":
		err = timeReads(ctx, *dsn, *bin, *runs)
	case "drop":
		err = drop(ctx, *dsn)
	case "serve":
		err = timeServe(ctx, *dsn, *runs)
	case "seed-keys":
		err = seedKeys(ctx, *dsn, *n)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "history:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: history seed|seed-keys|time|serve|drop -store DSN [-shape minute|daily] [-n N] [-bin once] [-runs R]")
	os.Exit(64)
}

// row is one attempt or event to write; times in unix microseconds.
type row struct {
	event                  bool
	task, slot, state, run string
	number                 int
	started, ended         int64
	exit                   int
}

// rows calls emit for every row of the shape, oldest first.
func rows(shape string, n int, emit func(row) error) error {
	var tasks, perTask int
	var step time.Duration
	switch shape {
	case "minute":
		tasks, perTask, step = 1, n, time.Minute
	case "daily":
		tasks, perTask, step = 10_000, max(1, n/10_000), 24*time.Hour
	case "tasks": // for the key-value stores, seeded through the API: 100 daily slots per task
		tasks, perTask, step = max(1, n/100), min(n, 100), 24*time.Hour
	default:
		return fmt.Errorf("shape %q: use minute or daily", shape)
	}
	// The history ends now, as a real one does (prune --older-than 30d then has 30 days to keep).
	base := time.Now().UTC().Truncate(step).Add(-time.Duration(perTask) * step)
	seq := 0
	for i := range perTask {
		at := base.Add(time.Duration(i) * step)
		for t := range tasks {
			task := "every-minute"
			slot := at.Format("2006-01-02T15:04")
			if shape != "minute" {
				task, slot = fmt.Sprintf("daily-%05d", t), at.Format("2006-01-02")
			}
			start := at.Add(time.Duration(t%3600) * time.Millisecond).UnixMicro()
			seq++
			number := 1
			if seq%100 == 0 { // 1 %: failed once, then succeeded
				if err := emit(row{task: task, slot: slot, state: "failed", run: fmt.Sprintf("r%d-1", seq), number: 1, started: start, ended: start + 2_000_000, exit: 1}); err != nil {
					return err
				}
				number, start = 2, start+5_000_000
			}
			if err := emit(row{task: task, slot: slot, state: "succeeded", run: fmt.Sprintf("r%d", seq), number: number, started: start, ended: start + 1_500_000}); err != nil {
				return err
			}
			if seq%50 == 0 { // 2 %: a second launch found it busy
				if err := emit(row{event: true, task: task, slot: slot, state: "busy", run: fmt.Sprintf("b%d", seq), started: start + 100}); err != nil {
					return err
				}
			}
		}
	}
	// Two slots waiting for review, after everything else.
	end := base.Add(time.Duration(perTask) * step)
	task := "every-minute"
	if shape != "minute" {
		task = "daily-00000"
	}
	w := end.UnixMicro()
	if err := emit(row{task: task, slot: "waiting-unknown", state: "unknown", run: "w1", number: 1, started: w, ended: w + 1_000_000}); err != nil {
		return err
	}
	if err := emit(row{task: task, slot: "waiting-review", state: "failed", run: "w2", number: 1, started: w + 2_000_000, ended: w + 3_000_000, exit: 1}); err != nil {
		return err
	}
	return emit(row{event: true, task: task, slot: "waiting-review", state: "review", run: "w3", number: 1, started: w + 4_000_000})
}

func seed(ctx context.Context, dsn, shape string, n int) error {
	s, err := store.Open(ctx, dsn) // creates (or upgrades) the schema the normal way
	if err != nil {
		return err
	}
	s.Close()
	began := time.Now()
	var count int
	scheme, _ := store.Scheme(dsn)
	switch scheme {
	case "sqlite":
		count, err = seedSQLite(ctx, dsn, shape, n)
	case "postgres", "postgresql":
		count, err = seedPostgres(ctx, dsn, shape, n)
	case "mysql":
		count, err = seedMySQL(ctx, dsn, shape, n)
	default:
		count, err = seedAPI(ctx, dsn, shape, n)
	}
	if err != nil {
		return err
	}
	fmt.Printf("seeded %d rows (%s, n=%d) in %s\n", count, shape, n, time.Since(began).Round(time.Millisecond))
	return nil
}

// timeReads reports the median of runs of each read, in-process and (with bin) whole-process.
func timeReads(ctx context.Context, dsn, bin string, runs int) error {
	s, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	task := "every-minute"
	for _, t := range []string{"daily-04242", "daily-00007"} {
		if h, err := s.History(ctx, store.HistoryQuery{Task: t, Limit: 1}); err == nil && len(h) > 0 {
			task = t
			break
		}
	}
	reads := storeReads(ctx, s, task)
	fmt.Println("| read | store calls (in-process) | their CPU time | whole process |")
	fmt.Println("|---|---|---|---|")
	for _, r := range reads {
		if err := r.fn(); err != nil { // warm
			return fmt.Errorf("%s: %w", r.name, err)
		}
		var cpu []time.Duration
		in := median(runs, func() error {
			c0 := cpuTime()
			err := r.fn()
			cpu = append(cpu, cpuTime()-c0)
			return err
		})
		sort.Slice(cpu, func(i, j int) bool { return cpu[i] < cpu[j] })
		whole := "-"
		if bin != "" {
			d := median(runs, func() error {
				c := exec.Command(bin, append([]string{"--store", dsn}, r.args...)...)
				c.Stdout, c.Stderr = nil, nil
				err := c.Run()
				if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 && r.name == "doctor" {
					return nil // doctor exits 1 on the seeded slots waiting for review
				}
				return err
			})
			whole = fmtDur(d)
		}
		fmt.Printf("| `once %s` | %s | %s | %s |\n", strings.Join(r.args, " "), fmtDur(in), fmtDur(cpu[len(cpu)/2]), whole)
	}
	return nil
}

// storeRead is one read timeReads times: the store calls behind a command, and the command.
type storeRead struct {
	name string
	fn   func() error
	args []string
}

// storeReads are the store calls behind once status (with its list of running attempts), doctor, history --task, history,
// history --kind busy and history --kind failed on s (task: a task of the ledger).
func storeReads(ctx context.Context, s store.Store, task string) []storeRead {
	return []storeRead{
		{"status", func() error {
			if _, err := s.Leases(ctx); err != nil {
				return err
			}
			if _, err := s.Waiting(ctx); err != nil {
				return err
			}
			if rl, ok := s.(store.RunningLister); ok {
				if _, err := rl.RunningAttempts(ctx, store.MaxRunningList); err != nil {
					return err
				}
			}
			_, err := s.History(ctx, store.HistoryQuery{Kind: store.Missed, Limit: 20})
			return err
		}, []string{"status"}},
		{"doctor", func() error {
			if _, err := s.Leases(ctx); err != nil {
				return err
			}
			if _, err := s.Waiting(ctx); err != nil {
				return err
			}
			if _, err := s.History(ctx, store.HistoryQuery{Kind: store.Missed, Limit: 100}); err != nil {
				return err
			}
			_, err := s.History(ctx, store.HistoryQuery{Limit: 10000})
			return err
		}, []string{"doctor"}},
		{"history --task", func() error {
			_, err := s.History(ctx, store.HistoryQuery{Task: task, Limit: 50})
			return err
		}, []string{"history", "--task", task}},
		{"history", func() error {
			_, err := s.History(ctx, store.HistoryQuery{Limit: 50})
			return err
		}, []string{"history"}},
		{"history --kind busy", func() error {
			_, err := s.History(ctx, store.HistoryQuery{Kind: store.Busy, Limit: 50})
			return err
		}, []string{"history", "--kind", "busy"}},
		{"history --kind failed", func() error {
			_, err := s.History(ctx, store.HistoryQuery{Kind: store.Failed, Limit: 50})
			return err
		}, []string{"history", "--kind", "failed"}},
	}
}

// cpuTime is this process's user and system CPU time so far: the store calls' own cost, which a
// busy machine stretches less than their wall time (the in-process client's share; a server
// store's own CPU is not in it).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(runs int, fn func() error) time.Duration {
	ds := make([]time.Duration, 0, runs)
	for range runs {
		t := time.Now()
		if err := fn(); err != nil {
			fmt.Fprintln(os.Stderr, "history:", err)
			os.Exit(1)
		}
		ds = append(ds, time.Since(t))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.1f ms", float64(d)/1e6)
}
