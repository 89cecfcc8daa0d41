package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/once-run/once/store"
)

var _ store.Inspector = (*Store)(nil)

// durabilitySettings are the server settings that decide whether a commit survives a crash of the
// server's machine, in the order durability reports them.
var durabilitySettings = []string{"fsync", "synchronous_commit", "full_page_writes"}

// durability grades the settings in force for once's sessions (SHOW, so a DSN's options=-c … counts
// too). Every unsafe setting is one finding; all safe is one ok finding.
func durability(where string, m map[string]string) []store.Finding {
	var out []store.Finding
	bad := func(l store.Level, msg string) {
		out = append(out, store.Finding{Check: "durability", Level: l, Message: "postgres " + where + ": " + msg})
	}
	if m["fsync"] == "off" {
		bad(store.LevelFail, "fsync is off: a crash of the server's machine can lose or corrupt the run ledger and lease tokens, so a slot could run twice (set fsync = on)")
	}
	if m["synchronous_commit"] == "off" {
		bad(store.LevelWarn, "synchronous_commit is off: a crash can lose the last grants and recorded outcomes, so a token could be issued twice (set synchronous_commit = on, in the server or the role, not in the DSN)")
	}
	if m["full_page_writes"] == "off" {
		bad(store.LevelWarn, "full_page_writes is off: a crash of the server's machine in the middle of a page write can corrupt the run ledger unless the filesystem never tears a page (set full_page_writes = on)")
	}
	if len(out) == 0 {
		var kv []string
		for _, k := range durabilitySettings {
			kv = append(kv, k+" "+m[k])
		}
		out = append(out, store.Finding{Check: "durability", Level: store.LevelOK,
			Message: fmt.Sprintf("postgres %s: %s: every commit is on disk when it returns", where, strings.Join(kv, ", "))})
	}
	return out
}

// Inspect reports the settings that decide whether a recorded outcome survives a crash, as once's
// own sessions see them (a busy event's transaction turns synchronous_commit off for itself only,
// docs/stores/postgres.md). Asynchronous standbys are not seen here.
func (s *Store) Inspect(ctx context.Context) ([]store.Finding, error) {
	m := map[string]string{}
	for _, k := range durabilitySettings {
		var v string
		if err := s.DB.QueryRowContext(ctx, "SELECT current_setting($1)", k).Scan(&v); err != nil {
			return nil, s.d.MapError(err)
		}
		m[k] = v
	}
	return durability(s.d.where, m), nil
}
