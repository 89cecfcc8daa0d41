// Package etcd is the etcd v3 store: etcd://[user:password@]host:port[,host:port…][/][?prefix=name].
//
// It speaks etcd's gRPC API over net/http's HTTP/2, with the protobuf messages written by hand
// (wire.go): linking the gRPC client would run the package init of grpc, protobuf and zap at every
// start of the once binary, whichever store it uses (see docs/stores/etcd.md).
//
// A lease is a key attached to an etcd lease of ceil(ttl) seconds, created by a transaction that
// requires the key's create revision to be 0. The fencing token is the revision of that transaction
// (the key's create revision), which strictly increases across the whole cluster. Expiry is etcd's:
// the leader revokes the lease and deletes the key. Lost(l) watches the key, so a revoked or
// expired lease reaches the lease keeper at once. The ledger is internal/kvstore with documents
// written by compare-and-swap transactions on their mod revision, fenced by the task's fence key,
// whose mod revision is the latest token.
package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

func init() {
	open := func(ctx context.Context, dsn string) (store.Store, error) { return Open(ctx, dsn) }
	store.Register("etcd", open, store.TakesPassword)
	store.Register("etcds", open, store.TakesPassword)
}

var (
	_ store.Store        = (*Store)(nil)
	_ store.LossNotifier = (*Store)(nil)
)

// Store is an etcd store. Safe for concurrent use.
type Store struct {
	c              *client
	p              string          // "/once/<prefix>/"
	where          string          // endpoints, for errors
	kvstore.Ledger                 // the run ledger (store.Ledger), written once for the KV stores
	*kvstore.Keys                  // business keys (store.Keys), written once for the KV stores (keys.go)
	ctx            context.Context // cancelled by Close: watches and background revokes
	cancel         context.CancelFunc
	wg             sync.WaitGroup

	mu    sync.Mutex
	idle  map[int64][]idleLease // etcd leases no key uses, by TTL, for reuse
	known map[int64]idleLease   // etcd leases a grant of this process is on, as it last restarted them (restarted)

	histBuilt atomic.Bool // the history index was seen built (history.go)
	kindBuilt atomic.Bool // the indexes of a kind were seen built (history.go)
}

// Open connects to etcd's gRPC API, authenticates when the DSN has a user, and checks that the
// cluster answers.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{c: c, p: "/once/" + cfg.Prefix + "/", where: strings.Join(cfg.Endpoints, ","), idle: map[int64][]idleLease{},
		known: map[int64]idleLease{}}
	s.Ledger = kvstore.NewLedger(kv{s})
	s.Keys = &kvstore.Keys{KV: keyKV{s}, Name: "etcd", Runs: kv{s}}
	pctx, cancel, bound := store.Connecting(ctx, cfg.Dial)
	defer cancel()
	fail := func(err error) (*Store, error) {
		s.c.close()
		if pctx.Err() != nil && ctx.Err() == nil {
			return nil, store.Unreached("etcd at "+s.where, bound)
		}
		if cut(err) {
			err = s.c.diagnose(pctx, s.c.eps[s.c.failed.Load()], err)
		}
		return nil, s.mapErr(err)
	}
	if cfg.Username != "" {
		if err := s.c.login(pctx); err != nil {
			return fail(err)
		}
	}
	// One read proves the endpoints, the API and the credentials.
	if _, err := s.c.get(pctx, s.p+"epoch"); err != nil {
		return fail(err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close stops the watches, revokes the idle etcd leases and closes connections. Leases held by
// callers are not released.
func (s *Store) Close() error {
	s.mu.Lock()
	var ids []int64
	for _, gs := range s.idle {
		for _, g := range gs {
			ids = append(ids, g.id)
		}
	}
	s.idle = map[int64][]idleLease{}
	s.mu.Unlock()
	if len(ids) > 0 {
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
		for _, id := range ids {
			_ = s.c.revoke(ctx, id)
		}
		cancel()
	}
	s.cancel()
	s.wg.Wait()
	s.c.close()
	return nil
}

// mapErr maps every error of the client to a store sentinel, in one line.
func (s *Store) mapErr(err error) error {
	if err == nil {
		return nil
	}
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	if errors.Is(err, errClosed) {
		return fmt.Errorf("%w: etcd at %s: %w", store.ErrUnavailable, s.where, errClosed)
	}
	var ae *apiError
	if errors.As(err, &ae) {
		switch {
		case ae.Code == codeNotFound && strings.Contains(ae.Message, "lease not found"):
			return fmt.Errorf("%w: etcd lease not found (expired or revoked)", store.ErrNotHeld)
		case ae.Code == codePermission, strings.Contains(ae.Message, "permission denied"):
			return fmt.Errorf("%w: etcd at %s: %s: the DSN's user may not use %s; grant its role readwrite on that prefix "+
				"(etcdctl role grant-permission ROLE --prefix=true readwrite %s)", store.ErrUnavailable, s.where, msg, s.p, s.p)
		case strings.Contains(ae.Message, "the server speaks TLS"):
			return fmt.Errorf("%w: etcd at %s serves TLS: use etcds://%s?ca=/path/ca.pem", store.ErrUnavailable, s.where, s.where)
		case ae.Code == codeUnimplemented:
			return fmt.Errorf("%w: etcd at %s: %s: is this an etcd 3.x client URL?", store.ErrUnavailable, s.where, msg)
		case ae.Code == codeUnauthenticated, strings.Contains(ae.Message, "authentication failed"),
			strings.Contains(ae.Message, "user name is empty"), strings.Contains(ae.Message, "authentication is not enabled"):
			return fmt.Errorf("%w: etcd at %s refused the credentials: %s; check user and password in the DSN", store.ErrUnavailable, s.where, msg)
		case ae.Code == codeUnavailable, ae.Code == codeDeadline:
			return fmt.Errorf("%w: etcd at %s: %s; check that the cluster is running and has a leader", store.ErrUnavailable, s.where, msg)
		}
		return fmt.Errorf("%w: etcd at %s: %s", store.ErrUnavailable, s.where, msg)
	}
	if why := tlsProblem(err); why != "" {
		return fmt.Errorf("%w: etcd at %s: %s", store.ErrUnavailable, s.where, why)
	}
	if strings.Contains(msg, "looked like an HTTP/1.1 header") {
		return fmt.Errorf("%w: etcd at %s answered in HTTP/1.1, not as etcd's gRPC API (HTTP/2): is this an etcd 3.x client URL?", store.ErrUnavailable, s.where)
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		hint := "check that the cluster is running and reachable"
		// A plain server closes a TLS hello (EOF) or, under load, resets it.
		if (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && s.c.scheme == "https://" {
			hint += ", and that it serves TLS (else use etcd://)"
		} else if errors.Is(err, io.EOF) {
			hint += ", and whether it serves TLS (then use etcds://…?ca=/path/ca.pem)"
		} else if !unreached(err) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			hint += " at an etcd 3.x client URL" // it closed the connection: it may not speak gRPC
		}
		return fmt.Errorf("%w: etcd at %s: %s; %s", store.ErrUnavailable, s.where, msg, hint)
	}
	return fmt.Errorf("%w: etcd at %s: %s", store.ErrUnavailable, s.where, msg)
}

func esc(s string) string { return url.PathEscape(s) }

func (s *Store) leaseKey(task string) string     { return s.p + "l/" + esc(task) }
func (s *Store) holderKey(task string) string    { return s.p + "h/" + esc(task) }
func (s *Store) fenceKey(task string) string     { return s.p + "f/" + esc(task) }
func (s *Store) docKey(task, slot string) string { return s.p + "d/" + esc(task) + "/" + esc(slot) }
func (s *Store) runKey(run string) string        { return s.p + "r/" + esc(run) }

// taskKey is the task's entry in the task index (Tasks): the name as it is, not escaped, so that
// the keys sort as the names do (an escaped '/' sorts before '-' and '.'); nothing follows it.
func (s *Store) taskKey(task string) string { return s.p + "t/" + task }

// waitKey is the slot's entry in the index of waiting slots (kvstore.KV.Waiting).
func (s *Store) waitKey(task, slot string) string { return s.p + "w/" + esc(task) + "/" + esc(slot) }

// runningKey is (task, slot)'s entry in the running index: the slots whose document has a running
// attempt (kvstore.RunningKV), a directory per task. runningMark, the task's name without the
// slash, says the task's index was built (a task first run by an older once has none until then).
func (s *Store) runningKey(task, slot string) string { return s.runningDir(task) + esc(slot) }
func (s *Store) runningDir(task string) string       { return s.runningMark(task) + "/" }
func (s *Store) runningMark(task string) string      { return s.p + "a/" + esc(task) }

// tlsProblem says what is wrong, and how to fix it, when err is a TLS handshake's failure; "" when
// it is not one.
func tlsProblem(err error) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var inv x509.CertificateInvalidError
	var rec tls.RecordHeaderError
	msg := err.Error()
	switch {
	case errors.As(err, &unknown):
		return "the server's certificate is not signed by a CA once trusts (" + unknown.Error() + "): give the CA's PEM file with ?ca=/path/ca.pem"
	case errors.As(err, &host):
		return "the server's certificate is not for this address (" + host.Error() + "): connect by a name the certificate has, or set ?server_name="
	case errors.As(err, &inv):
		return "the server's certificate is not valid (" + inv.Error() + "): renew it, or check the clock"
	case errors.As(err, &rec):
		return "the server does not speak TLS: use etcd:// instead of etcds://"
	case strings.Contains(msg, "tls: certificate required"), strings.Contains(msg, "tls: bad certificate"), strings.Contains(msg, "tls: unknown certificate authority"):
		return "the server refused the client certificate (" + msg[strings.LastIndex(msg, "tls: "):] + "): give one its CA signed with ?cert=/path/client.pem&key=/path/client.key"
	}
	return ""
}
