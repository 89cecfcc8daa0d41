package sqltest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/internal/sqlstore"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// SeedAttempts writes n attempts of task straight into s's tables in one INSERT … SELECT over a
// cross join of digits (the same statement on PostgreSQL and MySQL/MariaDB, no series function),
// all in state, a second apart, ending now: in one slot, numbered 1 … n (deep), or one in each of
// n slots "m0000000" … (a backfill's range). task is a plain word: it is written into the SQL.
func SeedAttempts(tb testing.TB, s *sqlstore.Store, task, slot, state string, n int, deep bool) {
	tb.Helper()
	if n <= 0 {
		return
	}
	var digits, sum []string
	for i, p := 0, 1; p < n; i, p = i+1, p*10 {
		digits = append(digits, fmt.Sprintf(`(SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
			UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) d%d`, i))
		sum = append(sum, fmt.Sprintf("%d * d%d.n", p, i))
	}
	if len(digits) == 0 { // n = 1
		digits, sum = []string{"(SELECT 0 AS n) d0"}, []string{"d0.n"}
	}
	num := strings.Join(sum, " + ")
	slotExpr, attempt := "CONCAT('m', LPAD(CAST("+num+" AS CHAR(8)), 8, '0'))", "1"
	if s.Flavor == sqlstore.Postgres {
		slotExpr = "'m' || LPAD(CAST(" + num + " AS text), 8, '0')"
	}
	if deep {
		slotExpr, attempt = "?", num+" + 1"
	}
	at := time.Now().UTC().Add(-time.Duration(n) * time.Second).Truncate(time.Second)
	q := s.Q(`INSERT INTO {p}attempts (task, slot, attempt, run_id, state, holder, token, started_at, ended_at, checkpoint, note)
		SELECT '` + task + `', ` + slotExpr + `, ` + attempt + `, CONCAT('` + task + `-', ` + num + `), '` + state + `', 'h', 1, ?, ?, '', ''
		FROM ` + strings.Join(digits, " CROSS JOIN ") + ` WHERE ` + num + ` < ` + strconv.Itoa(n))
	args := []any{at, at.Add(time.Millisecond)}
	if deep {
		args = append([]any{slot}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if _, err := s.DB.ExecContext(ctx, q, args...); err != nil {
		tb.Fatalf("seed %d attempts of %s: %v", n, task, err)
	}
}

// BenchDSN is base with ONCE_BENCH_PREFIX as its prefix when set (a ledger seeded by an earlier
// run, kept: seeding a million attempts takes a minute), else a fresh one.
func BenchDSN(tb testing.TB, base string) string {
	p := os.Getenv("ONCE_BENCH_PREFIX")
	if p == "" {
		return storetest.WithPrefix(tb, base)
	}
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatal(err)
	}
	q := u.Query()
	q.Set("prefix", p)
	u.RawQuery = q.Encode()
	return u.String()
}

// BenchmarkDeepSlot times Slot and Slots on a slot "" holding ONCE_BENCH_SLOT_ATTEMPTS attempts
// (20,000 by default), all succeeded (task "ok") or all failed, none resolved (task "fail": the
// failure count's worst case), beside a task "week" of 1,000 slots of one attempt each (a backfill's
// block). Each task is seeded once per prefix (BenchDSN), then the statistics are updated (analyze:
// "ANALYZE" or "ANALYZE TABLE").
func BenchmarkDeepSlot(b *testing.B, s *sqlstore.Store, analyze string) {
	n := storetest.DeepSlotAttempts()
	ctx := context.Background()
	seeded := false
	for _, t := range []struct {
		task, state string
		n           int
		deep        bool
	}{{"ok", "succeeded", n, true}, {"fail", "failed", n, true}, {"week", "succeeded", store.MaxSlotsRead, false}} {
		if st, err := s.Slot(ctx, t.task, map[bool]string{true: "", false: "m00000000"}[t.deep]); err != nil {
			b.Fatal(err)
		} else if st.Last == nil {
			SeedAttempts(b, s, t.task, "", t.state, t.n, t.deep)
			seeded = true
		}
	}
	if seeded {
		if _, err := s.DB.ExecContext(ctx, analyze+" "+s.Prefix+"attempts"); err != nil {
			b.Fatal(err)
		}
	}
	storetest.BenchmarkSlotReads(b, s, n)
}

// SlotsAgreeDeep writes slots straight into s's tables whose failures are near and past
// store.MaxFailures, of both failing states, resolved among them or not, and checks that Slots
// reads each as Slot does (MySQL/MariaDB's Slots counts them its own way, and leaves some to a
// second read in the same snapshot: sqlstore's slotsFailures), and that Slot counts what it should.
func SlotsAgreeDeep(t *testing.T, s *sqlstore.Store) {
	type run struct {
		state string
		n     int
	}
	cases := []struct {
		slot     string
		runs     []run
		resolved int // the attempt resolved, 0: none
		as       string
		want     int
	}{
		{"past", []run{{"failed", 1500}}, 0, "", 1000},
		{"resolved-late", []run{{"failed", 1500}}, 1400, "failed", 100},
		{"over-at-resolution", []run{{"failed", 1001}}, 1, "failed", 1000},
		{"over-before-resolution", []run{{"failed", 1001}}, 2, "failed", 999},
		{"mixed", []run{{"failed", 600}, {"unknown", 600}}, 0, "", 1000},
		{"unknown-resolved", []run{{"unknown", 1200}}, 300, "succeeded", 900},
		{"both-open", []run{{"unknown", 1100}, {"failed", 5}}, 1050, "failed", 55},
		{"few", []run{{"succeeded", 3}, {"failed", 2}}, 0, "", 2},
		{"few-resolved", []run{{"failed", 10}, {"unknown", 3}}, 4, "failed", 9},
		{"thousand", []run{{"failed", 1000}}, 0, "", 1000},
	}
	ctx := t.Context()
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	var asked []string
	for _, c := range cases {
		asked = append(asked, c.slot)
		var vals []string
		var args []any
		flush := func() {
			if len(vals) == 0 {
				return
			}
			if _, err := s.DB.ExecContext(ctx, s.Q(`INSERT INTO {p}attempts (task, slot, attempt, run_id, state, holder, token,
				started_at, ended_at, checkpoint, note, res_as, res_by, res_at) VALUES `+strings.Join(vals, ", ")), args...); err != nil {
				t.Fatal(err)
			}
			vals, args = nil, nil
		}
		number := 0
		for _, r := range c.runs {
			for range r.n {
				number++
				var as, by, when any
				if number == c.resolved {
					as, by, when = c.as, "bob", at
				}
				vals = append(vals, "(?, ?, ?, ?, ?, 'h', 1, ?, ?, '', '', ?, ?, ?)")
				args = append(args, "deep", c.slot, number, fmt.Sprintf("%s-%d", c.slot, number), r.state, at, at, as, by, when)
				if len(vals) == 500 {
					flush()
				}
			}
		}
		flush()
	}
	asked = append(asked, "none", "past")
	got, err := s.Slots(ctx, "deep", asked)
	if err != nil || len(got) != len(asked) {
		t.Fatalf("Slots: %d states, %v", len(got), err)
	}
	for i, sl := range asked {
		want, err := s.Slot(ctx, "deep", sl)
		if err != nil {
			t.Fatal(err)
		}
		if i < len(cases) && want.Failures != cases[i].want {
			t.Errorf("Slot(%s): %d failures, want %d", sl, want.Failures, cases[i].want)
		}
		if got[i].Failures != want.Failures || got[i].Last == nil != (want.Last == nil) ||
			want.Last != nil && (got[i].Last.Number != want.Last.Number || got[i].Last.State != want.Last.State || got[i].Waiting != want.Waiting) {
			t.Errorf("Slots: %s: %+v; Slot: %+v", sl, got[i], want)
		}
	}
}
