package etcd

import (
	"context"
	"net"
	"strings"
	"sync"
)

// conns keeps the client's open connections by endpoint, so that a call that got no answer in
// its time can end them: a connection can go silent without being closed (a NAT or firewall that
// forgot it, a member frozen or failed over: no answer, no reset), and HTTP/2 gives it up only
// after its pings go unanswered (SendPingTimeout + PingTimeout), while every call meanwhile — a
// run's outcome, tried again and again — is sent on it and waits. Closing it makes the next call
// dial anew; the watches it carried end and are made again (Lost watches from the grant's token).
type conns struct {
	mu sync.Mutex
	by map[string]map[*trackedConn]struct{}
}

type trackedConn struct {
	net.Conn
	cs   *conns
	addr string
	once sync.Once
}

func (t *trackedConn) Close() error {
	t.once.Do(func() {
		t.cs.mu.Lock()
		delete(t.cs.by[t.addr], t)
		t.cs.mu.Unlock()
	})
	return t.Conn.Close()
}

// dial wraps d's DialContext for http.Transport: the connections it makes are kept by address.
func (cs *conns) dial(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		t := &trackedConn{Conn: c, cs: cs, addr: strings.ToLower(addr)} // the transport's address is lower case
		cs.mu.Lock()
		if cs.by == nil {
			cs.by = map[string]map[*trackedConn]struct{}{}
		}
		if cs.by[t.addr] == nil {
			cs.by[t.addr] = map[*trackedConn]struct{}{}
		}
		cs.by[t.addr][t] = struct{}{}
		cs.mu.Unlock()
		return t, nil
	}
}

// drop closes every connection to addr (an endpoint as the DSN wrote it).
func (cs *conns) drop(addr string) {
	cs.mu.Lock()
	var all []*trackedConn
	for t := range cs.by[strings.ToLower(addr)] {
		all = append(all, t)
	}
	cs.mu.Unlock()
	for _, t := range all {
		_ = t.Close()
	}
}
