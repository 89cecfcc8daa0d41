package costs

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Relay is a loopback TCP relay to one server that counts round trips: a round trip starts each
// time a client sends after the server has sent (or sends first) on a connection. It reads no
// protocol, so it counts what the store's client does on the wire, whatever the store, with one
// exception: on a cleartext HTTP/2 connection (gRPC, etcd) a chunk made only of frames that
// acknowledge or pace the server (a SETTINGS or PING acknowledgement, WINDOW_UPDATE, RST_STREAM)
// starts none: the client waits for no answer to them. (etcd's gRPC server pings alongside its
// answers to estimate the bandwidth, and the client's acknowledgements would count as calls.)
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
		first, h2 := true, false
		r.wg.Add(2)
		go r.pipe(c, up, func(b []byte) bool {
			if first {
				first, h2 = false, bytes.HasPrefix(b, []byte(h2Preface))
			}
			if h2 && h2ControlOnly(b) {
				return true
			}
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

// h2Preface opens every HTTP/2 connection.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// h2ControlOnly reports whether b is whole HTTP/2 frames, each a SETTINGS or PING with the ACK
// flag, a WINDOW_UPDATE or a RST_STREAM.
func h2ControlOnly(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for len(b) > 0 {
		if len(b) < 9 {
			return false
		}
		n := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
		typ, flags := b[3], b[4]
		if len(b) < 9+n {
			return false
		}
		switch {
		case (typ == 0x4 || typ == 0x6) && flags&0x1 != 0, typ == 0x8, typ == 0x3:
		default:
			return false
		}
		b = b[9+n:]
	}
	return true
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
