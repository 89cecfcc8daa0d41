package zk

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

var _ store.Inspector = (*Store)(nil)

// mntrTimeout bounds one four-letter-word exchange with one server.
const mntrTimeout = 2 * time.Second

// mntr asks the server at addr for its metrics (the mntr four-letter word) and returns them by name,
// or the server's one-line refusal as an error (4lw.commands.whitelist without mntr).
func mntr(ctx context.Context, addr string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, mntrTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	dl, _ := ctx.Deadline()
	_ = conn.SetDeadline(dl)
	if _, err := io.WriteString(conn, "mntr"); err != nil {
		return nil, err
	}
	m := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(conn, 1<<20))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			return nil, fmt.Errorf("%s", strings.TrimSpace(sc.Text()))
		}
		m[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("empty answer to mntr")
	}
	return m, nil
}

// forceSyncFinding tells from a server's metrics whether it fsyncs its transaction log. ZooKeeper
// shows forceSync nowhere (not in conf, envi or the admin server), but a server that logs with
// forceSync=no never times an fsync: writes were flushed (sync_processor_batch_size counted) while
// fsynctime counted none.
func forceSyncFinding(addr string, m map[string]string) store.Finding {
	n := func(k string) int64 { v, _ := strconv.ParseInt(m["zk_"+k], 10, 64); return v }
	batches, fsyncs := n("cnt_sync_processor_batch_size"), n("cnt_fsynctime")
	f := store.Finding{Check: "durability", Level: store.LevelOK}
	switch {
	case batches > 0 && fsyncs == 0:
		f.Level = store.LevelFail
		f.Message = fmt.Sprintf("zookeeper %s: %d writes to the transaction log since the server started and no fsync: it runs with forceSync=no, so a crash of its machine can lose grants and recorded outcomes (remove forceSync=no / -Dzookeeper.forceSync=no)", addr, batches)
	case batches == 0:
		f.Level = store.LevelInfo
		f.Message = fmt.Sprintf("zookeeper %s: no writes since the server started, so whether it fsyncs (forceSync) cannot be told yet", addr)
	default:
		f.Message = fmt.Sprintf("zookeeper %s: %d fsyncs of the transaction log since the server started (forceSync on): every write is on disk when it returns", addr, fsyncs)
	}
	return f
}

// Inspect asks every server of the DSN for its metrics (mntr) and tells from them whether it
// fsyncs its transaction log. Servers that do not allow mntr (4lw.commands.whitelist) are an info
// finding: forceSync cannot be seen then (docs/stores/zookeeper.md).
func (s *Store) Inspect(ctx context.Context) ([]store.Finding, error) {
	var out []store.Finding
	for _, addr := range s.servers {
		m, err := mntr(ctx, addr)
		if err != nil {
			out = append(out, store.Finding{Check: "durability", Level: store.LevelInfo, Message: fmt.Sprintf(
				"zookeeper %s: no metrics (mntr: %s), so whether it fsyncs its log (forceSync) cannot be seen: allow mntr in 4lw.commands.whitelist for doctor to check it, and make sure forceSync is not no",
				addr, strings.TrimSuffix(err.Error(), "."))})
			continue
		}
		out = append(out, forceSyncFinding(addr, m))
	}
	return append(out, s.CheckHistory(ctx)...), nil // the history index: kvstore
}
