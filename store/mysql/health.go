package mysql

import (
	"context"
	"fmt"

	"github.com/once-run/once/store"
)

var _ store.Inspector = (*Store)(nil)

// flushSettings says what the server loses with each innodb_flush_log_at_trx_commit other than 1.
var flushSettings = map[string]string{
	"0": "a crash of the server can lose the last second of grants and recorded outcomes",
	"2": "a crash of the server's machine can lose the last second of grants and recorded outcomes",
}

// durability grades InnoDB's log flushing and, when the binary log is on, its sync. Every unsafe
// setting is one finding; all safe is one ok finding.
func durability(where, flush, syncBinlog string, logBin bool) []store.Finding {
	var out []store.Finding
	bad := func(msg string) {
		out = append(out, store.Finding{Check: "durability", Level: store.LevelWarn, Message: "mysql " + where + ": " + msg})
	}
	if flush != "1" {
		what, ok := flushSettings[flush]
		if !ok {
			what = "commits may not be on disk when they return"
		}
		bad(fmt.Sprintf("innodb_flush_log_at_trx_commit is %s: %s, so a token could be issued twice (set innodb_flush_log_at_trx_commit = 1)", flush, what))
	}
	if logBin && syncBinlog != "1" {
		bad(fmt.Sprintf("sync_binlog is %s with the binary log on: a crash of the server's machine can drop the last transactions from the binary log, so a replica promoted after it lacks grants and outcomes the primary gave (set sync_binlog = 1)", syncBinlog))
	}
	if len(out) == 0 {
		binlog := "binary log off"
		if logBin {
			binlog = "sync_binlog " + syncBinlog
		}
		out = append(out, store.Finding{Check: "durability", Level: store.LevelOK,
			Message: fmt.Sprintf("mysql %s: innodb_flush_log_at_trx_commit %s, %s: every commit is on disk when it returns", where, flush, binlog)})
	}
	return out
}

// Inspect reports the server settings that decide whether a recorded outcome survives a crash.
// Replication (asynchronous replicas, failover) is not seen here: docs/stores/mysql.md.
func (s *Store) Inspect(ctx context.Context) ([]store.Finding, error) {
	var flush, syncBinlog string
	var logBin bool
	err := s.DB.QueryRowContext(ctx, "SELECT @@GLOBAL.innodb_flush_log_at_trx_commit, @@GLOBAL.sync_binlog, @@GLOBAL.log_bin").Scan(&flush, &syncBinlog, &logBin)
	if err != nil {
		return nil, s.d.MapError(err)
	}
	return durability(s.d.where, flush, syncBinlog, logBin), nil
}
