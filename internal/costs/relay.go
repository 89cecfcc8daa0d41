package costs

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Relay is a loopback TCP relay to one server that counts round trips: a round trip starts each
// time a client sends after the server has sent (or sends first) on a connection. It reads no
// protocol, so it counts what the store's client does on the wire, whatever the store.
type Relay struct {
	ln       net.Listener
	upstream string
	// Trace, when set before the first connection, sees the first chunk of each round trip.
	Trace func([]byte)
	// Delay, when set before the first connection, holds each chunk that long before it is
	// forwarded, either way: a network whose round trip is twice that (BenchmarkRunRTT).
	Delay time.Duration
	// CutAnswerTo, when set before the first connection, picks a client chunk whose answer is
	// lost: the chunk is forwarded, and at the server's first chunk after it (the server has acted
	// on it) the relay closes the connection instead, as a network lost between a commit and its
	// answer. Only the first chunk it picks is cut.
	CutAnswerTo func([]byte) bool
	cutDone     atomic.Bool
	trips       atomic.Int64
	conns       atomic.Int64
	down        atomic.Int64 // bytes from the server
	wg          sync.WaitGroup
}

// NewRelay listens on a free 127.0.0.1 port and relays to upstream ("host:port") until Close.
func NewRelay(ctx context.Context, upstream string) (*Relay, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Relay{ln: ln, upstream: upstream}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the relay's "127.0.0.1:port".
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Trips is the number of round trips so far, Conns the connections opened, and Received the bytes
// the server sent.
func (r *Relay) Trips() int64    { return r.trips.Load() }
func (r *Relay) Conns() int64    { return r.conns.Load() }
func (r *Relay) Received() int64 { return r.down.Load() }

// Close stops listening and waits for the relayed connections to end (the clients close them).
func (r *Relay) Close() error {
	err := r.ln.Close()
	r.wg.Wait()
	return err
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", r.upstream)
		if err != nil {
			c.Close()
			continue
		}
		r.conns.Add(1)
		var turn atomic.Int32 // who spoke last: 0 nobody, 1 the client, 2 the server
		var cut atomic.Bool   // the server's next answer is not forwarded (CutAnswerTo)
		r.wg.Add(2)
		go r.pipe(c, up, func(b []byte) bool {
			if turn.Swap(1) != 1 {
				r.trips.Add(1)
				if r.Trace != nil {
					r.Trace(b)
				}
			}
			if r.CutAnswerTo != nil && !r.cutDone.Load() && r.CutAnswerTo(b) && r.cutDone.CompareAndSwap(false, true) {
				cut.Store(true)
			}
			return true
		})
		go r.pipe(up, c, func(b []byte) bool {
			turn.Store(2)
			r.down.Add(int64(len(b)))
			return !cut.Load()
		})
	}
}

// pipe copies from src to dst, calling spoke before each chunk it forwards, and closes both ends
// when either side ends, or when spoke says not to forward a chunk.
func (r *Relay) pipe(src, dst net.Conn, spoke func([]byte) bool) {
	defer r.wg.Done()
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !spoke(buf[:n]) {
				return
			}
			if r.Delay > 0 {
				time.Sleep(r.Delay)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or a closed connection: the exchange is over
			return
		}
	}
}
