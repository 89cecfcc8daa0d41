package postgres

import (
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/once-run/once/store"
)

// TestTasksCollation: when the leases' task column compares in a natural-language collation (as
// every column of a database created with LC_COLLATE en_US.UTF-8 does), Tasks still pages in byte
// order: it compares in the "C" collation. The test servers' databases are C, so the column is
// given an ICU collation here.
func TestTasksCollation(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	dsn := withPrefix(t, serverDSN(t))
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if q, err := s.TasksQuery(ctx); err != nil || strings.Contains(q, "COLLATE") {
		t.Fatalf("tasks query on a C database: %s, %v; want the column as it is (its primary key)", q, err)
	}
	_, err = s.DB.ExecContext(ctx, s.Q(`ALTER TABLE {p}leases ALTER COLUMN task TYPE text COLLATE "und-x-icu"`))
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "42704" {
		t.Skipf("the server has no ICU collations: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(ctx, dsn); err != nil { // a store asks for the collation once
		t.Fatal(err)
	}
	defer s.Close()
	names := []string{"a", "A", "b", "B", "a-b", "ab", "a/b", "a0", "a_b"}
	for _, n := range names {
		if _, err := s.Acquire(ctx, store.AcquireRequest{Task: n, Holder: "h", RunID: "r", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(names)
	var natural []string
	rows, err := s.DB.QueryContext(ctx, s.Q(`SELECT task FROM {p}leases ORDER BY task`))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		natural = append(natural, n)
	}
	rows.Close()
	if slices.Equal(natural, names) {
		t.Fatalf("the column's own order is byte order (%q): the test shows nothing", natural)
	}
	if q, err := s.TasksQuery(ctx); err != nil || !strings.Contains(q, `COLLATE "C"`) {
		t.Fatalf("tasks query on an ICU column: %s, %v", q, err)
	}
	var got []string
	for after := ""; ; {
		page, err := s.Tasks(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		after = page[len(page)-1]
	}
	if !slices.Equal(got, names) {
		t.Fatalf("Tasks in pages of 2 = %q, want byte order %q (the column orders %q)", got, names, natural)
	}
	// What docs/stores/postgres.md tells such a database's owner: an index in "C" makes a page a
	// range of it again.
	if _, err := s.DB.ExecContext(ctx, s.Q(`CREATE INDEX {p}leases_task_c ON {p}leases (task COLLATE "C")`)); err != nil {
		t.Fatal(err)
	}
	conn, err := s.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET enable_seqscan = off"); err != nil { // 9 rows: priced as a big table's
		t.Fatal(err)
	}
	q, _ := s.TasksQuery(ctx)
	var plan string
	if err := conn.QueryRowContext(ctx, "EXPLAIN (FORMAT JSON) "+q, "a", 2).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, `"Index Name": "`+s.Prefix+`leases_task_c"`) || strings.Contains(plan, "Seq Scan") || strings.Contains(plan, `"Sort"`) {
		t.Fatalf("a page with the index in \"C\": %s", plan)
	}
}

// TestByteOrder: the collations whose order is byte order, by provider and locale.
func TestByteOrder(t *testing.T) {
	for _, c := range []struct {
		provider, locale string
		want             bool
	}{
		{"c", "C", true}, {"c", "POSIX", true}, {"c", "C.UTF-8", true}, {"c", "C.utf8", true}, {"b", "C.UTF-8", true},
		{"b", "", true}, {"c", "en_US.UTF-8", false}, {"c", "de_DE", false}, {"i", "und", false}, {"i", "C", false},
		{"d", "", false}, {"c", "", false},
	} {
		if got := byteOrder(c.provider, c.locale); got != c.want {
			t.Errorf("byteOrder(%q, %q) = %v, want %v", c.provider, c.locale, got, c.want)
		}
	}
}
