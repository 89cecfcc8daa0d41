package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/once-run/once/store"
)

var _ store.Inspector = (*Store)(nil)

// durability grades Redis's persistence settings (CONFIG GET append*) for the run ledger.
func durability(m map[string]string) (store.Level, string) {
	switch {
	case m["appendonly"] == "no":
		return store.LevelFail, "appendonly is off: a restart loses the run ledger and lease tokens (set appendonly yes, appendfsync always)"
	case m["appendfsync"] == "no":
		return store.LevelWarn, "appendfsync is no: a crash can lose the last seconds of the run ledger (set appendfsync always)"
	case m["appendfsync"] == "everysec":
		return store.LevelWarn, "appendfsync is everysec: a crash can lose the last second of the run ledger (set appendfsync always)"
	}
	return store.LevelOK, fmt.Sprintf("appendonly %s, appendfsync %s: every change is on disk when the call returns", m["appendonly"], m["appendfsync"])
}

// durabilityMessage is the one wording of a durability finding, in the warning Open logs and in
// Inspect's report, so that once doctor can tell them for one.
func durabilityMessage(addr, msg string) string { return "redis " + addr + ": " + msg }

// Inspect reports the persistence that decides whether the ledger survives a restart, and whether
// the server still holds the prefix's epoch marker (see ErrLedgerLost).
func (s *Store) Inspect(ctx context.Context) ([]store.Finding, error) {
	var out []store.Finding
	m, err := s.c.ConfigGet(ctx, "append*").Result()
	if err != nil {
		out = append(out, store.Finding{Check: "durability", Level: store.LevelInfo,
			Message: "redis " + s.addr + ": CONFIG is not allowed here, persistence could not be checked: make sure appendonly is yes with appendfsync always"})
	} else {
		lvl, msg := durability(m)
		out = append(out, store.Finding{Check: "durability", Level: lvl, Message: durabilityMessage(s.addr, msg)})
	}
	if f, ok := s.topology(ctx); ok {
		out = append(out, f)
	}
	return append(out, s.CheckHistory(ctx)...), nil // the history index: kvstore
}

// topology reports a cluster's or a Sentinel master's replicas, and what a failover can lose with
// the DSN's ?wait (docs/stores/redis.md, "Failover"). Nothing for one server.
func (s *Store) topology(ctx context.Context) (store.Finding, bool) {
	var what string
	replicas := 0
	switch s.mode {
	case ModeCluster:
		nodes, err := s.c.ClusterNodes(ctx).Result()
		if err != nil {
			return store.Finding{Check: "topology", Level: store.LevelWarn, Message: "redis " + s.addr + ": CLUSTER NODES failed: " + err.Error()}, true
		}
		masters := 0
		for _, line := range strings.Split(nodes, "\n") {
			switch f := strings.Fields(line); {
			case len(f) < 3:
			case strings.Contains(f[2], "master"):
				masters++
			case strings.Contains(f[2], "slave"):
				replicas++
			}
		}
		what = fmt.Sprintf("redis %s: %d masters, %d replicas", s.addr, masters, replicas)
	case ModeSentinel:
		info, err := s.c.Info(ctx, "replication").Result()
		if err != nil {
			return store.Finding{Check: "topology", Level: store.LevelWarn, Message: "redis " + s.addr + ": INFO replication failed: " + err.Error()}, true
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
				replicas, _ = strconv.Atoi(v)
			}
		}
		what = fmt.Sprintf("redis %s: %d replicas connected", s.addr, replicas)
	default:
		return store.Finding{}, false
	}
	switch {
	case replicas == 0:
		return store.Finding{Check: "topology", Level: store.LevelInfo, Message: what + ": no replica, so no failover either"}, true
	case s.wait == 0:
		return store.Finding{Check: "topology", Level: store.LevelWarn, Message: what + ": replication is asynchronous, so a failover can lose a lease granted " +
			"or a run recorded just before it and two hosts can run one slot; add ?wait=1 (or more) to the DSN to wait for replicas"}, true
	}
	return store.Finding{Check: "topology", Level: store.LevelInfo, Message: what + fmt.Sprintf(": grants and ledger writes wait for %d replicas (?wait)", s.wait)}, true
}

// warnPersistence warns (store.Warn: Open reads the settings once per process and server) when the
// persistence settings conf read (CONFIG GET append*) let a restart lose the ledger. CONFIG may be
// disabled (managed Redis): then nothing is said.
func (s *Store) warnPersistence(conf *goredis.MapStringStringCmd) {
	m, err := conf.Result()
	if err != nil {
		return
	}
	if lvl, msg := durability(m); lvl != store.LevelOK {
		store.Warn("durability", durabilityMessage(s.addr, msg))
	}
}

// checked remembers the servers whose persistence this process asked about (one CONFIG GET each).
var checked sync.Map
