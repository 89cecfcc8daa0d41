// Package chaos is the fault-injection harness of issue 7: it runs the real once binary as several
// simulated hosts competing for one task on one store, injects faults (kill -9, SIGSTOP pauses, store
// restarts, network cuts and blackholes through a loopback proxy), and checks what once promises
// with an external witness: no two executions at once (a kernel flock held for the command's whole
// life), no stale write accepted (a fencing register that rejects lower tokens), no slot lost, and
// a porcupine linearizability check of the lease history. See docs/reliability.md.
package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
)

// Mode is what a Proxy does with traffic.
type Mode int

// Proxy modes.
const (
	Forward   Mode = iota // relay bytes both ways
	Cut                   // close every connection and refuse new ones (accept, then close at once)
	Blackhole             // accept, read and drop every byte, answer nothing
)

// String names the mode as in the figures: forward, cut, blackhole.
func (m Mode) String() string {
	switch m {
	case Forward:
		return "forward"
	case Cut:
		return "cut"
	case Blackhole:
		return "blackhole"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Proxy is a loopback TCP relay to one upstream address whose behaviour the test switches at run
// time. A connection silenced by Blackhole stays silent after Heal (a TCP connection across a long
// partition times out on its own); connections made after Heal are relayed again.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	mode  Mode
	open  chan struct{} // closed while bytes flow; a fresh, open one while frozen (Freeze)
	conns map[*link]struct{}
	wg    sync.WaitGroup
	done  chan struct{}
}

// link is one client connection and, when relayed, its upstream connection.
type link struct {
	client, up net.Conn
	silenced   bool
}

// NewProxy listens on a free 127.0.0.1 port and relays to upstream ("host:port") until Close.
func NewProxy(ctx context.Context, upstream string) (*Proxy, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos proxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: map[*link]struct{}{}, done: make(chan struct{}), open: make(chan struct{})}
	close(p.open)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's "127.0.0.1:port", to put in the client's DSN in place of the upstream's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Mode is the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Set switches the mode. Cut closes every open connection; Blackhole closes their upstream sides
// and leaves the clients unanswered; Forward relays connections made from now on.
func (p *Proxy) Set(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
	for l := range p.conns {
		switch m {
		case Cut:
			l.client.Close()
			if l.up != nil {
				l.up.Close()
			}
		case Blackhole:
			l.silenced = true
			if l.up != nil {
				l.up.Close()
			}
		}
	}
}

// Cut closes every connection and refuses new ones.
func (p *Proxy) Cut() { p.Set(Cut) }

// Blackhole silently drops every byte of every connection, old and new.
func (p *Proxy) Blackhole() { p.Set(Blackhole) }

// Heal relays new connections again.
func (p *Proxy) Heal() { p.Set(Forward) }

// Freeze stops every byte, both ways, on every relayed connection, old and new, and closes none:
// a partition that drops packets silently, as neither end can tell from a slow peer. A new
// connection is accepted (the loopback kernel does that) but not dialled upstream. Thaw lets the
// held bytes through on the same connections, as TCP's retransmissions do once a partition heals.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already frozen
	}
}

// Thaw ends a Freeze: the connections it held carry their bytes again.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// flowing waits until the proxy is not frozen; false when it was closed meanwhile.
func (p *Proxy) flowing() bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-p.done:
		return false
	}
}

// relay copies src to dst as io.Copy does, holding each chunk while the proxy is frozen.
func (p *Proxy) relay(dst io.Writer, src io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.flowing() {
				return net.ErrClosed
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			// A hang-up is a packet too: held while frozen, as the bytes before it.
			if !p.flowing() {
				return net.ErrClosed
			}
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		return nil
	default:
	}
	close(p.done)
	for l := range p.conns {
		l.client.Close()
		if l.up != nil {
			l.up.Close()
		}
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

// track registers l unless the proxy is closed or the mode changed to m' != want.
func (p *Proxy) track(l *link, want Mode) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
	}
	if p.mode != want {
		return false
	}
	l.silenced = want == Blackhole
	p.conns[l] = struct{}{}
	return true
}

func (p *Proxy) untrack(l *link) {
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
	l.client.Close()
	if l.up != nil {
		l.up.Close()
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.serve(c) }()
	}
}

func (p *Proxy) serve(c net.Conn) {
	l := &link{client: c}
	switch p.Mode() {
	case Cut:
		c.Close()
		return
	case Blackhole:
		if !p.track(l, Blackhole) {
			c.Close()
			return
		}
		defer p.untrack(l)
		_, _ = io.Copy(io.Discard, c)
		return
	}
	if !p.flowing() {
		c.Close()
		return
	}
	var d net.Dialer
	up, err := d.Dial("tcp", p.upstream)
	if err != nil {
		c.Close()
		return
	}
	l.up = up
	if !p.track(l, Forward) {
		c.Close()
		up.Close()
		return
	}
	defer p.untrack(l)
	toUp := make(chan struct{})
	go func() {
		defer close(toUp)
		if err := p.relay(up, c); err == nil {
			// The client hung up (or was killed): pass its FIN on, as a direct connection would,
			// so the server ends the session and rolls back its open transaction instead of
			// waiting for a next command, and for wait_timeout, with the rows it locked.
			if tc, ok := up.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
		// The upstream side is gone: drop what the client still sends until it hangs up.
		_, _ = io.Copy(io.Discard, c)
	}()
	_ = p.relay(c, up)
	p.mu.Lock()
	silenced := l.silenced
	p.mu.Unlock()
	if !silenced {
		c.Close()
	}
	<-toUp
}
