// Package keys records business idempotency keys in the user's own database (PostgreSQL through pgx
// or database/sql, MySQL/MariaDB, SQLite), inside the caller's transaction.
//
// A job that writes an order for flow F first claims the key "flow:F" in the same transaction as the
// INSERT of the order. If the transaction commits, both the order and the claim exist; if it rolls
// back or the process dies, neither does. A re-run, a concurrent run or a person re-running by hand
// claims the key again and learns it is not new, so it skips the write. This is the side dedup table
// of the incident in docs/background.md done right: the table the seed added was written in its own
// transaction after the orders, so a crash between the two left orders without claims.
//
// Claims are bulk: one statement per batch of keys, not one per key (see Keys.Claim). Keys live in
// scopes, may carry a parameter fingerprint (the same key with another payload is ErrFingerprint), and
// are never forgotten unless the caller calls Forget. Checkpoints (SaveCheckpoint, LoadCheckpoint)
// store a job's progress marker in the same transaction as its writes.
//
// Validate and Lines are the key syntax shared with the `once keys` command.
package keys

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/once-run/once/store"
)

// MaxKeyLen is the longest key in bytes (store.MaxKeyLen: the syntax of a key is the stores' own).
const MaxKeyLen = store.MaxKeyLen

// ErrInvalidKey is wrapped by every error about a key's syntax (Validate, Lines, Claim); it is
// store.ErrInvalidKey.
var ErrInvalidKey = store.ErrInvalidKey

// Validate reports whether key is acceptable: 1 to MaxKeyLen bytes of valid UTF-8 with no control
// characters (C0 including newline, tab and NUL; DEL; C1). Keys are compared byte for byte; spaces
// are allowed and kept. The error is one line, wraps ErrInvalidKey and quotes a prefix of the key.
// It is store.ValidateKey, the rule every store applies.
func Validate(key string) error { return store.ValidateKey(key) }

// CheckEdges reports a key that starts or ends with whitespace or an invisible formatting
// character (a space, a no-break space, a BOM, a zero-width space). Validate accepts such keys,
// but "order-1 " is another key than "order-1": a caller reading ids from a CSV or a file edited by
// hand may call it to refuse them (the once keys CLI does). The error wraps ErrInvalidKey. It is
// store.CheckKeyEdges.
func CheckEdges(key string) error { return store.CheckKeyEdges(key) }

// quote prints at most 40 bytes of key, Go-quoted so control bytes are visible.
func quote(key string) string { return store.QuoteKey(key) }

// LineError is an error about one input line of Lines; Line counts from 1.
type LineError struct {
	Line int
	Err  error
}

// Error is "line N: cause".
func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns the cause (ErrInvalidKey, a read error or the callback's error).
func (e *LineError) Unwrap() error { return e.Err }

// Lines reads one key per line from r and calls fn for each, in order, with its 1-based line number.
// A line ends with "\n"; a "\r" before it is dropped (CRLF input); the last line may lack "\n".
// Empty lines are skipped. Memory is bounded: a line longer than MaxKeyLen is rejected as soon as that
// is known, without reading the rest of it. An invalid key (see Validate), a read error or an error
// from fn stops the reading and is returned as a *LineError naming the line.
func Lines(r io.Reader, fn func(lineNo int, key string) error) error {
	br := bufio.NewReaderSize(r, 64*1024)
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) || len(line) > MaxKeyLen+2 {
			return &LineError{n, fmt.Errorf("%w: line is longer than the %d-byte key limit (starts %s)",
				ErrInvalidKey, MaxKeyLen, quote(string(line)))}
		}
		if err != nil && err != io.EOF {
			return &LineError{n, fmt.Errorf("read keys: %w", err)}
		}
		key := line
		if len(key) > 0 && key[len(key)-1] == '\n' {
			key = key[:len(key)-1]
			if len(key) > 0 && key[len(key)-1] == '\r' {
				key = key[:len(key)-1]
			}
		}
		if len(key) > 0 {
			k := string(key)
			if verr := Validate(k); verr != nil {
				return &LineError{n, verr}
			}
			if ferr := fn(n, k); ferr != nil {
				return &LineError{n, ferr}
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

// MaxScopeLen is the longest scope, fingerprint, task or slot in bytes.
const MaxScopeLen = 255

// ErrFingerprint is wrapped by the error returned when a key is claimed again with a fingerprint
// other than the one stored with it: the same operation id with a different payload, which is a bug
// in the caller (the IETF Idempotency-Key draft answers it with 422).
var ErrFingerprint = errors.New("fingerprint mismatch")

// FingerprintError names the key whose fingerprint differs; it wraps ErrFingerprint.
type FingerprintError struct {
	Scope, Key   string
	Stored, Have string
}

// Error names the scope, the key and both fingerprints on one line.
func (e *FingerprintError) Error() string {
	return fmt.Sprintf("%v: key %s in scope %q was claimed with fingerprint %q, now %q; use a new key for a different payload",
		ErrFingerprint, quote(e.Key), e.Scope, e.Stored, e.Have)
}

// Unwrap returns ErrFingerprint.
func (e *FingerprintError) Unwrap() error { return ErrFingerprint }

// Fingerprint returns the hex SHA-256 of payload, a convenient Item.Fingerprint.
func Fingerprint(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:])
}

// validName checks a scope, fingerprint, task or slot: at most MaxScopeLen bytes, valid UTF-8, no
// control characters. Empty is allowed.
func validName(what, s string) error {
	if s == "" {
		return nil
	}
	if len(s) > MaxScopeLen {
		return fmt.Errorf("%w: %s %s is %d bytes, longer than the %d-byte limit", ErrInvalidKey, what, quote(s), len(s), MaxScopeLen)
	}
	if err := Validate(s); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Execer is the connection, pool or transaction Keys runs its statements on. Wrap a database/sql
// handle with SQL and a pgx one with Pgx. Claims and checkpoints belong in the caller's transaction
// (SQL(tx), Pgx(tx)); Ensure and Forget can run on a pool.
type Execer interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// Query runs a query; the caller closes the rows.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Rows is the part of *sql.Rows and pgx.Rows that Keys uses.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// SQLQueryer is satisfied by *sql.DB, *sql.Tx and *sql.Conn.
type SQLQueryer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// PgxQueryer is satisfied by pgx.Tx, *pgx.Conn and *pgxpool.Pool.
type PgxQueryer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// SQL adapts a database/sql handle (PostgreSQL through github.com/jackc/pgx/v5/stdlib, MySQL or
// MariaDB through github.com/go-sql-driver/mysql, SQLite through modernc.org/sqlite).
func SQL(q SQLQueryer) Execer { return sqlExec{q} }

// Pgx adapts a pgx v5 transaction, connection or pool (PostgreSQL dialect only).
func Pgx(q PgxQueryer) Execer { return pgxExec{q} }

type sqlExec struct{ q SQLQueryer }

func (s sqlExec) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	r, err := s.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

func (s sqlExec) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	r, err := s.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

type pgxExec struct{ q PgxQueryer }

func (p pgxExec) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	t, err := p.q.Exec(ctx, query, args...)
	return t.RowsAffected(), err
}

func (p pgxExec) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	r, err := p.q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Options configures Keys.
type Options struct {
	// Dialect of the database: Postgres, MySQL (also MariaDB) or SQLite. Required.
	Dialect Dialect
	// Table holds the keys; default "once_keys". Checkpoints live in Table+"_checkpoints". A name
	// is letters, digits and underscores, optionally schema-qualified ("app.once_keys"); see Schema.
	Table string
	// Batch is the number of keys per statement; default 1000, at most 5000.
	Batch int
}

// Keys claims idempotency keys in one table of the user's database. It holds no connection and is
// safe for concurrent use.
type Keys struct {
	d           dialect
	table, ckpt string
	batch       int
	mu          sync.Mutex
	stmts       map[stmtKey]string
	// returning is, on the MySQL dialect, whether the server is MariaDB (INSERT … RETURNING, 10.5+):
	// 0 not known yet, 1 yes, 2 no. Learned from SELECT VERSION() on the first claim.
	returning atomic.Int32
	// liteOld is, on SQLite, whether the last batch claimed was all old (see liteProbe).
	liteOld atomic.Bool
}

type stmtKey struct {
	kind string
	n    int
	fp   bool
}

// New validates o and returns a Keys. It does not touch the database; call Ensure or run the DDL
// from Schema first.
func New(o Options) (*Keys, error) {
	d, err := dialectOf(o.Dialect)
	if err != nil {
		return nil, err
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if err := ValidateTable(o.Table); err != nil {
		return nil, err
	}
	if o.Batch == 0 {
		o.Batch = 1000
	}
	if o.Batch < 1 || o.Batch > 5000 {
		return nil, fmt.Errorf("keys: batch %d out of range: use 1 to 5000", o.Batch)
	}
	return &Keys{d: d, table: o.Table, ckpt: o.Table + "_checkpoints", batch: o.Batch, stmts: map[stmtKey]string{}}, nil
}

// stmt returns the cached text of a statement built by mk.
func (k *Keys) stmt(key stmtKey, mk func() string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, ok := k.stmts[key]
	if !ok {
		s = mk()
		k.stmts[key] = s
	}
	return s
}

// Item is a key with an optional fingerprint of the operation's parameters (see Fingerprint).
type Item struct {
	Key string
	// Fingerprint, when not empty, is stored with a new key and compared with the stored one when
	// the key exists and was stored with a fingerprint.
	Fingerprint string
}

// Claim claims keys in scope inside tx and reports, in input order, which ones were new. A true
// means this transaction inserted the key: do the key's work in the same transaction, and the claim
// commits or rolls back with it. A false means the key was already claimed by a committed
// transaction (or by an earlier position of this call: duplicates in the input count once). If
// another transaction holds an uncommitted claim of the same key, Claim waits for it to finish, so
// concurrent claimers of overlapping sets claim their union exactly once.
//
// Keys are sent sorted, Options.Batch per statement (one statement per batch; MySQL 8 needs a second
// query when a batch is partly new; on SQLite a batch after an all-old one first selects its missing
// keys, and inserts only those). Every key is validated first (ErrInvalidKey, nothing sent).
// Errors from the database are returned as they are; a deadlock or serialization failure means the
// caller's transaction must be retried.
func (k *Keys) Claim(ctx context.Context, tx Execer, scope string, keys ...string) ([]bool, error) {
	items := make([]Item, len(keys))
	for i, key := range keys {
		items[i].Key = key
	}
	return k.ClaimItems(ctx, tx, scope, items)
}

// ClaimItems is Claim with fingerprints. When a key exists with another fingerprint, it returns a
// *FingerprintError (wrapping ErrFingerprint) naming the first such key in input order; the claims
// this call made are then still in tx, so roll the transaction back.
func (k *Keys) ClaimItems(ctx context.Context, tx Execer, scope string, items []Item) ([]bool, error) {
	if err := validName("scope", scope); err != nil {
		return nil, err
	}
	first := make(map[string]int, len(items))
	uniq := make([]string, 0, len(items))
	hasFP := false
	for i, it := range items {
		if err := Validate(it.Key); err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		if err := validName("fingerprint", it.Fingerprint); err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		if it.Fingerprint != "" {
			hasFP = true
		}
		if j, dup := first[it.Key]; dup {
			if f := items[j].Fingerprint; f != "" && it.Fingerprint != "" && f != it.Fingerprint {
				return nil, &FingerprintError{Scope: scope, Key: it.Key, Stored: f, Have: it.Fingerprint}
			}
			continue
		}
		first[it.Key] = i
		uniq = append(uniq, it.Key)
	}
	// Sorted keys lock index entries in one global order, so two claimers of overlapping batches
	// wait for each other instead of deadlocking.
	sort.Strings(uniq)
	now := time.Now().UnixMilli()
	out := make([]bool, len(items))
	fps := make([]string, 0, k.batch)
	var old []string // existing keys that carry a fingerprint to compare
	for lo := 0; lo < len(uniq); lo += k.batch {
		chunk := uniq[lo:min(lo+k.batch, len(uniq))]
		fps = fps[:0]
		if hasFP {
			for _, key := range chunk {
				fps = append(fps, items[first[key]].Fingerprint)
			}
		}
		fresh, err := k.d.claim(ctx, k, tx, scope, chunk, fps, now)
		if err != nil {
			return nil, fmt.Errorf("claim keys in %s: %w", k.table, err)
		}
		for i, key := range chunk {
			if fresh[i] {
				out[first[key]] = true
			} else if hasFP && fps[i] != "" {
				old = append(old, key)
			}
		}
	}
	if len(old) > 0 {
		if err := k.checkFingerprints(ctx, tx, scope, items, first, old); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (k *Keys) checkFingerprints(ctx context.Context, tx Execer, scope string, items []Item, first map[string]int, old []string) error {
	var bad *FingerprintError
	for lo := 0; lo < len(old); lo += k.batch {
		chunk := old[lo:min(lo+k.batch, len(old))]
		stored, err := k.d.fingerprints(ctx, k, tx, scope, chunk)
		if err != nil {
			return fmt.Errorf("read fingerprints from %s: %w", k.table, err)
		}
		for key, f := range stored {
			i := first[key]
			if f != "" && f != items[i].Fingerprint && (bad == nil || i < first[bad.Key]) {
				bad = &FingerprintError{Scope: scope, Key: key, Stored: f, Have: items[i].Fingerprint}
			}
		}
	}
	if bad != nil {
		return bad
	}
	return nil
}

// Forget deletes the keys of scope claimed more than olderThan ago and returns how many. Nothing
// is ever forgotten otherwise: a forgotten key can be claimed again, so forget only keys whose
// operations can no longer be repeated (for example flows older than any possible re-run).
func (k *Keys) Forget(ctx context.Context, db Execer, scope string, olderThan time.Duration) (int64, error) {
	if err := validName("scope", scope); err != nil {
		return 0, err
	}
	if olderThan <= 0 {
		return 0, fmt.Errorf("keys: forget older than %s: give a positive duration", olderThan)
	}
	cutoff := time.Now().Add(-olderThan).UnixMilli()
	n, err := db.Exec(ctx, k.d.rebind("DELETE FROM "+k.table+" WHERE scope = ? AND created_ms < ?"), scope, cutoff)
	if err != nil {
		return 0, fmt.Errorf("forget keys in %s: %w", k.table, err)
	}
	return n, nil
}

// Ensure creates the keys and checkpoints tables when they are missing (the DDL of Schema).
func (k *Keys) Ensure(ctx context.Context, db Execer) error {
	for _, s := range k.d.ddl(k.table, k.ckpt) {
		if _, err := db.Exec(ctx, s); err != nil {
			// Two processes creating the same PostgreSQL table at once can collide in the
			// catalog; the second attempt sees the table.
			if _, err2 := db.Exec(ctx, s); err2 != nil {
				return fmt.Errorf("create %s: %w", k.table, err)
			}
		}
	}
	return nil
}
