package keys_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/internal/keystest"
	"github.com/once-run/once/keys"
)

// each runs fn on every backend, and on MySQL twice: as the server is (MariaDB: INSERT … RETURNING)
// and as on MySQL 8 (INSERT IGNORE and the claim-id read-back).
func each(t *testing.T, fn func(t *testing.T, f *keystest.Fixture)) {
	for _, b := range keystest.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, keystest.NewFixture(t, b)) })
		if b.Dialect == keys.MySQL {
			t.Run(b.Name+"-readback", func(t *testing.T) {
				f := keystest.NewFixture(t, b)
				keys.WithoutReturning(f.K)
				fn(t, f)
			})
		}
	}
}

func TestClaimBasics(t *testing.T) {
	each(t, func(t *testing.T, f *keystest.Fixture) {
		ctx := ctxT(t, time.Minute)
		got, err := f.Claim(ctx, "s", []string{"b", "a", "b", "Ab", "a ", "订单"})
		if err != nil {
			t.Fatal(err)
		}
		// Input order, duplicates once; byte-exact (no case or trailing-space folding on MySQL).
		if want := []string{"b", "a", "Ab", "a ", "订单"}; !slices.Equal(got, want) {
			t.Fatalf("first claim = %q, want %q", got, want)
		}
		got, err = f.Claim(ctx, "s", []string{"c", "a", "b", "d"})
		if err != nil || !slices.Equal(got, []string{"c", "d"}) {
			t.Fatalf("second claim = %q, %v", got, err)
		}
		// Scopes are independent.
		got, err = f.Claim(ctx, "other", []string{"a"})
		if err != nil || !slices.Equal(got, []string{"a"}) {
			t.Fatalf("other scope = %q, %v", got, err)
		}
		// A rolled-back claim is no claim.
		boom := errors.New("boom")
		err = f.InTx(ctx, func(tx keys.Execer) error {
			ok, err := f.K.Claim(ctx, tx, "s", "e")
			if err != nil || !ok[0] {
				t.Fatalf("claim e = %v, %v", ok, err)
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatal(err)
		}
		got, err = f.Claim(ctx, "s", []string{"e"})
		if err != nil || !slices.Equal(got, []string{"e"}) {
			t.Fatalf("after rollback = %q, %v", got, err)
		}
		// Empty input, invalid keys.
		if got, err = f.Claim(ctx, "s", nil); err != nil || len(got) != 0 {
			t.Fatalf("empty = %q, %v", got, err)
		}
		if _, err = f.Claim(ctx, "s", []string{"ok", "bad\nkey"}); !errors.Is(err, keys.ErrInvalidKey) || !strings.Contains(err.Error(), "item 1") {
			t.Fatalf("invalid key: %v", err)
		}
		if _, err = f.Claim(ctx, "bad\x00scope", []string{"x"}); !errors.Is(err, keys.ErrInvalidKey) {
			t.Fatalf("invalid scope: %v", err)
		}
	})
}

func TestFingerprint(t *testing.T) {
	each(t, func(t *testing.T, f *keystest.Fixture) {
		ctx := ctxT(t, time.Minute)
		claim := func(items ...keys.Item) ([]bool, error) {
			var ok []bool
			err := f.InTx(ctx, func(tx keys.Execer) error {
				var err error
				ok, err = f.K.ClaimItems(ctx, tx, "pay", items)
				return err
			})
			return ok, err
		}
		fa, fb := keys.Fingerprint([]byte("amount=10")), keys.Fingerprint([]byte("amount=11"))
		if ok, err := claim(keys.Item{Key: "p1", Fingerprint: fa}, keys.Item{Key: "p2"}); err != nil || !ok[0] || !ok[1] {
			t.Fatalf("first = %v, %v", ok, err)
		}
		// Same key, same payload: not new, no error.
		if ok, err := claim(keys.Item{Key: "p1", Fingerprint: fa}); err != nil || ok[0] {
			t.Fatalf("same = %v, %v", ok, err)
		}
		// Same key, other payload: ErrFingerprint naming the key, and the transaction rolled back.
		_, err := claim(keys.Item{Key: "p3", Fingerprint: fa}, keys.Item{Key: "p1", Fingerprint: fb})
		var fe *keys.FingerprintError
		if !errors.Is(err, keys.ErrFingerprint) || !errors.As(err, &fe) || fe.Key != "p1" || fe.Stored != fa ||
			!strings.Contains(err.Error(), `"p1"`) {
			t.Fatalf("mismatch = %v", err)
		}
		if got, err := f.Claim(ctx, "pay", []string{"p3"}); err != nil || len(got) != 1 {
			t.Fatalf("p3 after the failed transaction = %q, %v", got, err)
		}
		// Stored without a fingerprint: nothing to compare.
		if ok, err := claim(keys.Item{Key: "p2", Fingerprint: fb}); err != nil || ok[0] {
			t.Fatalf("p2 = %v, %v", ok, err)
		}
		// Within one call.
		if _, err := claim(keys.Item{Key: "q", Fingerprint: fa}, keys.Item{Key: "q", Fingerprint: fb}); !errors.Is(err, keys.ErrFingerprint) {
			t.Fatalf("in-call mismatch = %v", err)
		}
	})
}

func TestForgetAndCheckpoint(t *testing.T) {
	each(t, func(t *testing.T, f *keystest.Fixture) {
		ctx := ctxT(t, time.Minute)
		if _, err := f.Claim(ctx, "s", []string{"a", "b"}); err != nil {
			t.Fatal(err)
		}
		if n, err := f.K.Forget(ctx, keys.SQL(f.DB), "s", time.Hour); err != nil || n != 0 {
			t.Fatalf("forget fresh = %d, %v", n, err)
		}
		if _, err := f.K.Forget(ctx, keys.SQL(f.DB), "s", 0); err == nil {
			t.Fatal("forget 0: want an error")
		}
		time.Sleep(5 * time.Millisecond)
		if n, err := f.K.Forget(ctx, keys.SQL(f.DB), "s", time.Millisecond); err != nil || n != 2 {
			t.Fatalf("forget old = %d, %v", n, err)
		}
		if got, err := f.Claim(ctx, "s", []string{"a"}); err != nil || len(got) != 1 {
			t.Fatalf("reclaim after forget = %q, %v", got, err)
		}

		if v, ok, err := f.K.LoadCheckpoint(ctx, keys.SQL(f.DB), "sync", "2026-11-29"); err != nil || ok || v != "" {
			t.Fatalf("load missing = %q %v %v", v, ok, err)
		}
		for _, v := range []string{"flow 100", "flow 200"} {
			if err := f.InTx(ctx, func(tx keys.Execer) error { return f.K.SaveCheckpoint(ctx, tx, "sync", "2026-11-29", v) }); err != nil {
				t.Fatal(err)
			}
		}
		// Rolled back with its writes.
		_ = f.InTx(ctx, func(tx keys.Execer) error {
			if err := f.K.SaveCheckpoint(ctx, tx, "sync", "2026-11-29", "flow 300"); err != nil {
				t.Fatal(err)
			}
			return errors.New("rollback")
		})
		if v, ok, err := f.K.LoadCheckpoint(ctx, keys.SQL(f.DB), "sync", "2026-11-29"); err != nil || !ok || v != "flow 200" {
			t.Fatalf("load = %q %v %v", v, ok, err)
		}
	})
}

// TestClaim100k: 100,000 keys claimed are all new; claimed again, none is.
func TestClaim100k(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	each(t, func(t *testing.T, f *keystest.Fixture) {
		ctx := ctxT(t, 5*time.Minute)
		ks := seq("k", 0, n)
		rand.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
		got, err := f.Claim(ctx, "bulk", ks)
		if err != nil || !slices.Equal(got, ks) {
			t.Fatalf("first claim: %d of %d new, %v", len(got), n, err)
		}
		got, err = f.Claim(ctx, "bulk", ks)
		if err != nil || len(got) != 0 {
			t.Fatalf("second claim: %d new, %v", len(got), err)
		}
	})
}

// TestConcurrentOverlap: two claimers of overlapping sets, in batches in their own transactions,
// claim the union exactly once between them.
func TestConcurrentOverlap(t *testing.T) {
	each(t, func(t *testing.T, f *keystest.Fixture) {
		ctx := ctxT(t, 5*time.Minute)
		a, b := seq("k", 0, 6000), seq("k", 3000, 9000) // overlap 3000..5999
		var mu sync.Mutex
		count := map[string]int{}
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for _, set := range [][]string{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for lo := 0; lo < len(set); lo += 500 {
					got, err := retry(ctx, func() ([]string, error) { return f.Claim(ctx, "c", set[lo:lo+500]) })
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					for _, k := range got {
						count[k]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if len(count) != 9000 {
			t.Fatalf("union claimed: %d keys, want 9000", len(count))
		}
		for k, c := range count {
			if c != 1 {
				t.Fatalf("key %s claimed %d times", k, c)
			}
		}
	})
}

// TestClaimWaitsForOther: a claim of a key that another transaction holds uncommitted waits for it,
// and is then new if that transaction rolled back and old if it committed, in a batch with other keys
// (a partly new batch).
func TestClaimWaitsForOther(t *testing.T) {
	each(t, func(t *testing.T, f *keystest.Fixture) {
		ctx := ctxT(t, time.Minute)
		for _, commit := range []bool{false, true} {
			key := map[bool]string{false: "rolled-back", true: "committed"}[commit]
			if _, err := f.Claim(ctx, "w", []string{"old-" + key}); err != nil {
				t.Fatal(err)
			}
			tx, err := f.DB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			ok, err := f.K.Claim(ctx, keys.SQL(tx), "w", key)
			if err != nil || !ok[0] {
				t.Fatalf("first claim of %s = %v, %v", key, ok, err)
			}
			type res struct {
				got []string
				err error
			}
			done := make(chan res, 1)
			go func() {
				got, err := f.Claim(ctx, "w", []string{"old-" + key, key, "new-" + key})
				done <- res{got, err}
			}()
			var r res
			early := false
			select {
			case r = <-done:
				early = true
				if f.B.Dialect != keys.SQLite { // SQLite: the second writer waits at BEGIN, or fails busy
					t.Fatalf("second claim did not wait for the first transaction: %q, %v", r.got, r.err)
				}
			case <-time.After(300 * time.Millisecond):
			}
			if commit {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			if !early {
				r = <-done
			}
			if f.B.Dialect == keys.SQLite && r.err != nil {
				t.Logf("SQLite: the second writer failed while the first held the write lock (%v), as it may", r.err)
				continue
			}
			want := []string{key, "new-" + key}
			if commit {
				want = want[1:]
			}
			if r.err != nil || !slices.Equal(r.got, want) {
				t.Fatalf("second claim after the first %s = %q, %v; want %q", key, r.got, r.err, want)
			}
		}
	})
}

// retry repeats fn when the database reports a deadlock or serialization failure, as a caller must.
func retry(ctx context.Context, fn func() ([]string, error)) ([]string, error) {
	for i := 0; ; i++ {
		got, err := fn()
		if err == nil || i == 5 || !retryable(err) {
			return got, err
		}
	}
}

func retryable(err error) bool {
	s := err.Error()
	return strings.Contains(s, "deadlock") || strings.Contains(s, "Deadlock") || strings.Contains(s, "40001") || strings.Contains(s, "40P01")
}

func TestSchema(t *testing.T) {
	for _, d := range []keys.Dialect{keys.Postgres, keys.MySQL, keys.SQLite} {
		s, err := keys.Schema(d, "")
		if err != nil || !strings.Contains(s, "CREATE TABLE IF NOT EXISTS once_keys ") || !strings.Contains(s, "once_keys_checkpoints") {
			t.Fatalf("Schema(%s) = %q, %v", d, s, err)
		}
	}
	for _, bad := range []string{"x;drop", "1abc", "a.b.c", "a-b", strings.Repeat("a", 51), ""} {
		if err := keys.ValidateTable(bad); err == nil {
			t.Errorf("ValidateTable(%q) = nil", bad)
		}
	}
	if _, err := keys.Schema("oracle", "t"); err == nil || !strings.Contains(err.Error(), "postgres, mysql or sqlite") {
		t.Fatalf("bad dialect: %v", err)
	}
	if _, err := keys.New(keys.Options{}); err == nil {
		t.Fatal("New without dialect: want an error")
	}
}

func TestValidateTableAccepts(t *testing.T) {
	for _, ok := range []string{"once_keys", "_t", "s.t", "Orders2", strings.Repeat("a", 50), strings.Repeat("a", 50) + "." + strings.Repeat("b", 50)} {
		if err := keys.ValidateTable(ok); err != nil {
			t.Errorf("ValidateTable(%q) = %v", ok, err)
		}
	}
}

// TestClaimOddKeys: keys and fingerprints whose JSON needs escaping (or that encoding/json would
// escape: U+2028, <, &) reach every database byte-exact: new once, then old, also on SQLite's path
// after an all-old batch (two calls of all-old keys, then a mixed one), and a stored fingerprint
// reads back as written.
func TestClaimOddKeys(t *testing.T) {
	odd := keys.OddKeys()
	each(t, func(t *testing.T, f *keystest.Fixture) {
		ctx := ctxT(t, time.Minute)
		half := odd[:len(odd)/2]
		if got, err := f.Claim(ctx, "s", half); err != nil || !slices.Equal(got, half) {
			t.Fatalf("first = %q, %v", got, err)
		}
		for range 2 {
			if got, err := f.Claim(ctx, "s", half); err != nil || len(got) != 0 {
				t.Fatalf("again = %q, %v", got, err)
			}
		}
		if got, err := f.Claim(ctx, "s", odd); err != nil || !slices.Equal(got, odd[len(odd)/2:]) {
			t.Fatalf("all = %q, %v; want %q", got, err, odd[len(odd)/2:])
		}
		fp := `"\` + "\u2028<&>😀"
		var items []keys.Item
		for _, k := range odd[:5] {
			items = append(items, keys.Item{Key: k, Fingerprint: fp})
		}
		for i, want := range []bool{true, false, false} {
			err := f.InTx(ctx, func(tx keys.Execer) error {
				ok, err := f.K.ClaimItems(ctx, tx, "fp", items)
				if err == nil && (len(ok) != len(items) || ok[0] != want || ok[4] != want) {
					t.Errorf("claim %d = %v, want all %v", i, ok, want)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		items[3].Fingerprint = "other"
		err := f.InTx(ctx, func(tx keys.Execer) error {
			_, err := f.K.ClaimItems(ctx, tx, "fp", items)
			return err
		})
		var fe *keys.FingerprintError
		if !errors.As(err, &fe) || fe.Key != odd[3] || fe.Stored != fp {
			t.Fatalf("other fingerprint: %v", err)
		}
	})
}
