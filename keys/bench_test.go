package keys_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/once-run/once/internal/keystest"
	"github.com/once-run/once/keys"
)

// BenchmarkClaim measures bulk claim throughput in batches of 1,000 keys (one transaction each)
// against, in the same run on the same database: the floor, a raw multi-row INSERT … ON CONFLICT DO
// NOTHING (MySQL: INSERT IGNORE) into a bare table with one unique column; the row floor, the same
// raw INSERT of the rows a claim writes (scope, key, time, and on MySQL a claim id) into a keys table;
// and the naive loop, one INSERT per key (one transaction per 1,000). Metrics: keys/s of each, claim
// as % of each floor, claim as % of the floor by CPU time (%floor_cpu: this process's, so on SQLite
// the database's too; on a loaded machine steadier than wall time), and claim as a multiple of naive. The naive loop handles every tenth batch only
// (it is slow) and is timed on those; the other batches are claimed untimed so the table grows as in
// the other runs.
//
// ONCE_KEYS_BENCH_N sets the number of keys (default 100,000); ONCE_KEYS_BENCH_METHODS the methods
// run (default "claim,floor,row,naive"; the ratios need claim and the floor in question). The 1M run:
//
//	ONCE_KEYS_BENCH_N=1000000 go test -run '^$' -bench BenchmarkClaim -benchtime 1x ./keys/
//
// ONCE_KEYS_BENCH_PAIRED=1 runs the methods side by side instead of one after the other (naive is
// left out): each on its own table as before, but batch by batch, the methods taking turns in a
// rotating order, each batch timed alone. A change in the machine's load then falls on every method
// alike, where one after the other a busy minute lands on one method only (on a shared 2-core VM the
// sequential ratios swing 2× between runs). The tables then share the server's cache, as they do
// not one after the other.
func BenchmarkClaim(b *testing.B) {
	n := 100_000
	if s := os.Getenv("ONCE_KEYS_BENCH_N"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1000 {
			b.Fatalf("ONCE_KEYS_BENCH_N=%q: want an integer >= 1000", s)
		}
	}
	methods := map[string]bool{}
	for _, m := range strings.Split(cmp.Or(os.Getenv("ONCE_KEYS_BENCH_METHODS"), "claim,floor,row,naive"), ",") {
		if m != "claim" && m != "floor" && m != "row" && m != "naive" {
			b.Fatalf("ONCE_KEYS_BENCH_METHODS: unknown method %q (claim, floor, row, naive)", m)
		}
		methods[m] = true
	}
	paired := os.Getenv("ONCE_KEYS_BENCH_PAIRED") == "1"
	if paired {
		delete(methods, "naive")
	}
	all := make([]string, n)
	for i := range all {
		all[i] = fmt.Sprintf("%016x", mix(uint64(i)))
	}
	for _, be := range keystest.Backends() {
		if be.Name == "postgres" {
			continue // PostgreSQL runs through pgx; database/sql differs only in the driver
		}
		b.Run(be.Name, func(b *testing.B) {
			for _, dup := range []int{0, 50, 100} {
				b.Run(fmt.Sprintf("dup=%d%%", dup), func(b *testing.B) {
					rate, cpuRate := map[string]float64{}, map[string]float64{}
					for i := 0; i < b.N; i++ {
						if paired {
							wall, cpu := benchPaired(b, be, methods, all, dup)
							for m := range wall {
								rate[m] += wall[m] / float64(b.N)
								cpuRate[m] += cpu[m] / float64(b.N)
							}
							continue
						}
						for _, m := range []string{"claim", "floor", "row", "naive"} {
							if methods[m] {
								wall, cpu := benchOne(b, be, m, all, dup)
								rate[m] += wall / float64(b.N)
								cpuRate[m] += cpu / float64(b.N)
							}
						}
					}
					b.ReportMetric(0, "ns/op")
					for _, m := range []string{"claim", "floor", "row", "naive"} {
						if methods[m] && rate[m] > 0 {
							b.ReportMetric(rate[m], m+"_keys/s")
						}
					}
					if methods["claim"] && methods["floor"] {
						b.ReportMetric(100*rate["claim"]/rate["floor"], "%floor")
						b.ReportMetric(100*cpuRate["claim"]/cpuRate["floor"], "%floor_cpu")
					}
					if methods["claim"] && methods["row"] {
						b.ReportMetric(100*rate["claim"]/rate["row"], "%row")
					}
					if methods["claim"] && methods["naive"] {
						b.ReportMetric(rate["claim"]/rate["naive"], "x_naive")
					}
				})
			}
		})
	}
}

func mix(x uint64) uint64 { // splitmix64: distinct, well spread keys
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// benchOne claims all (with dup% of them already present) by method and returns keys per second of
// wall-clock time and of this process's CPU time (user and system: on SQLite the database's work,
// on a server the client's only), which a loaded machine disturbs less.
func benchOne(b *testing.B, be keystest.Backend, method string, all []string, dup int) (float64, float64) {
	b.StopTimer()
	run := methodRunner(b, be, method)
	if pre := preloaded(all, dup); len(pre) > 0 {
		if method == "naive" {
			run("claim", pre) // the same table state, loaded the fast way
		} else {
			run(method, pre)
		}
	}
	if method == "naive" {
		// Every tenth batch goes through the naive loop and is timed; the others are claimed
		// untimed, so the table grows exactly as in the other runs.
		var timed, cpu time.Duration
		n := 0
		for lo := 0; lo < len(all); lo += 1000 {
			chunk := all[lo:min(lo+1000, len(all))]
			if (lo/1000)%10 != 9 {
				run("claim", chunk)
				continue
			}
			b.StartTimer()
			t0, c0 := time.Now(), cpuTime()
			run("naive", chunk)
			timed, cpu = timed+time.Since(t0), cpu+cpuTime()-c0
			b.StopTimer()
			n += len(chunk)
		}
		return float64(n) / timed.Seconds(), float64(n) / cpu.Seconds()
	}
	b.StartTimer()
	t0, c0 := time.Now(), cpuTime()
	run(method, all)
	el, cpu := time.Since(t0), cpuTime()-c0
	b.StopTimer()
	return float64(len(all)) / el.Seconds(), float64(len(all)) / cpu.Seconds()
}

// benchPaired is benchOne for every method of methods at once (ONCE_KEYS_BENCH_PAIRED): each on
// its own table, preloaded alike, then batch by batch, the methods taking turns in an order that
// rotates by one each batch, each batch timed alone. It returns keys per second of wall-clock and
// of CPU time per method.
func benchPaired(b *testing.B, be keystest.Backend, methods map[string]bool, all []string, dup int) (map[string]float64, map[string]float64) {
	b.StopTimer()
	var names []string
	var runs []func(string, []string)
	for _, m := range []string{"claim", "floor", "row"} {
		if methods[m] {
			names, runs = append(names, m), append(runs, methodRunner(b, be, m))
		}
	}
	pre := preloaded(all, dup)
	for lo := 0; lo < len(pre); lo += 1000 {
		for i, run := range runs {
			run(names[i], pre[lo:min(lo+1000, len(pre))])
		}
	}
	el, cpu := make([]time.Duration, len(runs)), make([]time.Duration, len(runs))
	b.StartTimer()
	for lo := 0; lo < len(all); lo += 1000 {
		chunk := all[lo:min(lo+1000, len(all))]
		for j := range runs {
			i := (j + lo/1000) % len(runs)
			t0, c0 := time.Now(), cpuTime()
			runs[i](names[i], chunk)
			el[i], cpu[i] = el[i]+time.Since(t0), cpu[i]+cpuTime()-c0
		}
	}
	b.StopTimer()
	wall, cpuRate := map[string]float64{}, map[string]float64{}
	for i, m := range names {
		wall[m] = float64(len(all)) / el[i].Seconds()
		cpuRate[m] = float64(len(all)) / cpu[i].Seconds()
	}
	return wall, cpuRate
}

// preloaded is the part of all that is present before the timed claim: every other key at 50 %
// duplicates, all at 100 %.
func preloaded(all []string, dup int) []string {
	var pre []string
	for i, k := range all {
		if dup == 100 || dup > 0 && i%2 == 0 {
			pre = append(pre, k)
		}
	}
	return pre
}

// methodRunner opens a fresh keys table (and for the floor its bare table) and returns a function
// that writes keys by a method, 1,000 per transaction.
func methodRunner(b *testing.B, be keystest.Backend, method string) func(method string, ks []string) {
	f := keystest.NewFixture(b, be)
	ctx := context.Background()
	floor := f.Table + "_floor"
	if method == "floor" {
		col := map[keys.Dialect]string{keys.Postgres: "text", keys.SQLite: "TEXT", keys.MySQL: "VARBINARY(1024)"}[be.Dialect]
		if _, err := f.DB.Exec("CREATE TABLE " + floor + " (k " + col + " PRIMARY KEY)"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _, _ = f.DB.Exec("DROP TABLE IF EXISTS " + floor) })
	}
	return func(method string, ks []string) {
		for lo := 0; lo < len(ks); lo += 1000 {
			chunk := ks[lo:min(lo+1000, len(ks))]
			err := f.InTx(ctx, func(tx keys.Execer) error {
				switch method {
				case "claim":
					_, err := f.K.Claim(ctx, tx, "bench", chunk...)
					return err
				case "floor":
					_, err := tx.Exec(ctx, floorInsert(be.Dialect, floor, len(chunk)), strArgs(chunk)...)
					return err
				case "row":
					_, err := tx.Exec(ctx, rowInsert(be.Dialect, f.Table, len(chunk)), strArgs(chunk)...)
					return err
				default:
					q := naiveInsert(be.Dialect, f.Table)
					for _, k := range chunk {
						if _, err := tx.Exec(ctx, q, "bench", k); err != nil {
							return err
						}
					}
					return nil
				}
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func strArgs(ks []string) []any {
	out := make([]any, len(ks))
	for i, k := range ks {
		out[i] = k
	}
	return out
}

func floorInsert(d keys.Dialect, table string, n int) string {
	var b strings.Builder
	if d == keys.MySQL {
		b.WriteString("INSERT IGNORE INTO " + table + " (k) VALUES ")
	} else {
		b.WriteString("INSERT INTO " + table + " (k) VALUES ")
	}
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		if d == keys.Postgres {
			fmt.Fprintf(&b, "($%d)", i+1)
		} else {
			b.WriteString("(?)")
		}
	}
	if d != keys.MySQL {
		b.WriteString(" ON CONFLICT DO NOTHING")
	}
	return b.String()
}

// rowInsert is floorInsert with the row a claim writes, into the keys table: scope, key and time (and
// on MySQL a claim id), as constants but for the key, so that it binds what the floor binds.
func rowInsert(d keys.Dialect, table string, n int) string {
	var b strings.Builder
	switch d {
	case keys.MySQL:
		b.WriteString("INSERT IGNORE INTO " + table + " (scope, ikey, created_ms, claim_id) VALUES ")
	default:
		b.WriteString("INSERT INTO " + table + " (scope, ikey, created_ms) VALUES ")
	}
	const now int64 = 1764000000000 // a constant: the statement text is the same for every batch
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		switch d {
		case keys.Postgres:
			fmt.Fprintf(&b, "('bench',$%d,%d)", i+1, now)
		case keys.MySQL:
			fmt.Fprintf(&b, "('bench',?,%d,X'0123456789abcdef0123456789abcdef')", now)
		default:
			fmt.Fprintf(&b, "('bench',?,%d)", now)
		}
	}
	if d != keys.MySQL {
		b.WriteString(" ON CONFLICT DO NOTHING")
	}
	return b.String()
}

// naiveInsert is one key per statement into the same keys table.
func naiveInsert(d keys.Dialect, table string) string {
	switch d {
	case keys.Postgres:
		return "INSERT INTO " + table + " (scope, ikey, created_ms) VALUES ($1, $2, 0) ON CONFLICT DO NOTHING"
	case keys.MySQL:
		return "INSERT IGNORE INTO " + table + " (scope, ikey, created_ms, claim_id) VALUES (?, ?, 0, X'00000000000000000000000000000000')"
	}
	return "INSERT INTO " + table + " (scope, ikey, created_ms) VALUES (?, ?, 0) ON CONFLICT DO NOTHING"
}
