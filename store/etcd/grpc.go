package etcd

// gRPC over Go's HTTP/2: a call is a POST of one framed message to /service/Method with content type
// application/grpc; the answers come back framed the same way, and the call's status in the
// trailers (or, for an error before any answer, in the headers).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// maxAnswer bounds one answer message: a length prefix above it is refused before anything is
// allocated for it.
const maxAnswer = 256 << 20

// frame is a gRPC message: a flag byte (0, not compressed), the length, the protobuf.
func frame(m pbMsg) []byte {
	b := m.marshalPB(make([]byte, 5, 128))
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-5))
	return b
}

// exchange calls method with in and reads the first answer into out, from the first endpoint that
// gives one, and returns the call for the rest of its answers. A call fails over to the next
// endpoint when it could not be sent, or on any transport error or unavailable member when idem (a
// read, or a write that may safely be applied twice). An expired auth token is renewed and the call
// made again: etcd refuses it before the call is applied. The first answer is part of the attempt
// because an error status may come in the trailers after no answer (etcd over TLS serves gRPC
// through Go's HTTP/2 server, which does so).
func (c *client) exchange(ctx context.Context, method string, in pbMsg, out pbOut, idem bool) (*stream, error) {
	body := frame(in)
	authed := false
	n := len(c.eps)
	start := int(c.cur.Load())
	var last error
	for i := 0; i < n; i++ {
		idx := (start + i) % n
		resp, err := c.post(ctx, c.eps[idx], method, body, true)
		if err == nil {
			err = accepted(resp)
		}
		if err == nil {
			st := &stream{resp: resp, method: method}
			if err = st.next(out); err == nil {
				c.cur.Store(int32(idx))
				return st, nil
			}
			st.close()
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("etcd: %s answered nothing: %w", method, io.ErrUnexpectedEOF)
			}
		}
		c.failed.Store(int32(idx))
		if ctx.Err() != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// No answer in the call's time: the connection may have gone silent, and the
				// next calls would wait on it too (conns).
				c.conns.drop(c.eps[idx])
			}
			return nil, ctx.Err()
		}
		var ae *apiError
		if errors.As(err, &ae) {
			if ae.Code == codeUnauthenticated && c.user != "" && !authed && strings.Contains(ae.Message, "invalid auth token") {
				// The token expired (simple tokens live 5 minutes idle): get a new one, try again.
				authed = true
				if aerr := c.authenticate(ctx, c.eps[idx]); aerr != nil {
					return nil, aerr
				}
				i--
				continue
			}
			if ae.Code != codeUnavailable || !idem {
				return nil, err
			}
		} else if !idem && !unreached(err) {
			return nil, err
		}
		last = err
	}
	return nil, last
}

func (c *client) post(ctx context.Context, ep, method string, body []byte, auth bool) (*http.Response, error) {
	if c.closed.Load() {
		return nil, errClosed
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.scheme+ep+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header["Content-Type"] = []string{"application/grpc"}
	req.Header["Te"] = []string{"trailers"}
	if method == mWatch {
		// Cancel the watch when the member loses its leader (clientv3.WithRequireLeader).
		req.Header["Hasleader"] = []string{"true"}
	}
	if auth {
		c.tokMu.Lock()
		tok := c.token
		c.tokMu.Unlock()
		if tok != "" {
			req.Header["Token"] = []string{tok}
		}
	}
	return c.hc.Do(req)
}

// accepted checks the head of an answer: a gRPC answer (HTTP 200, application/grpc) that is not
// an error without a body (gRPC's "trailers-only" answer puts the status in the headers). On an
// error the body is closed.
func accepted(resp *http.Response) error {
	ct := resp.Header.Get("Content-Type")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "application/grpc") {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &apiError{Code: -1, Status: resp.StatusCode, Message: fmt.Sprintf(
			"not etcd's gRPC API (HTTP %d, %q: %s): is this an etcd 3.x client URL?", resp.StatusCode, ct, strings.TrimSpace(string(b)))}
	}
	if err := grpcStatus(resp.Header); err != nil {
		resp.Body.Close()
		return err
	}
	return nil
}

// grpcStatus is the error a gRPC status in h says, or nil for OK or no status.
func grpcStatus(h http.Header) error {
	s := h.Get("Grpc-Status")
	if s == "" || s == "0" {
		return nil
	}
	code, err := strconv.Atoi(s)
	if err != nil {
		code = -1
	}
	msg := h.Get("Grpc-Message")
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m // gRPC percent-encodes the message
	}
	if msg == "" {
		msg = fmt.Sprintf("gRPC status %s", s)
	}
	return &apiError{Code: code, Message: msg, Status: http.StatusOK}
}

// call is a unary call: in, then the one answer into out.
func (c *client) call(ctx context.Context, method string, in pbMsg, out pbOut, idem bool) error {
	st, err := c.exchange(ctx, method, in, out, idem)
	if err != nil {
		return err
	}
	defer st.close()
	return st.end()
}

// stream reads the answers of a streamed call (watch), one gRPC message each.
type stream struct {
	resp   *http.Response
	method string
	head   [5]byte
}

// next decodes the next answer into out. At the end of the stream it returns the call's error
// status, or io.EOF when the call ended well.
func (s *stream) next(out pbOut) error {
	if _, err := io.ReadFull(s.resp.Body, s.head[:]); err != nil {
		if err == io.EOF {
			return s.status()
		}
		return err
	}
	if s.head[0] != 0 {
		return fmt.Errorf("etcd: %s: a compressed answer (flag %d), which this client did not ask for", s.method, s.head[0])
	}
	n := binary.BigEndian.Uint32(s.head[1:])
	if n > maxAnswer {
		return fmt.Errorf("etcd: %s: a %d-byte answer, over this client's limit of %d bytes", s.method, n, maxAnswer)
	}
	// Read as it comes, not into n bytes made at once: a length alone allocates nothing.
	buf, err := io.ReadAll(io.LimitReader(s.resp.Body, int64(n)))
	if err != nil {
		return err
	}
	if len(buf) < int(n) {
		return io.ErrUnexpectedEOF
	}
	if err := out.unmarshalPB(buf); err != nil {
		return fmt.Errorf("etcd: reading %s: %w", s.method, err)
	}
	return nil
}

// status is the error the trailers of an ended stream carry; io.EOF when it ended well.
func (s *stream) status() error {
	if err := grpcStatus(s.resp.Trailer); err != nil {
		return err
	}
	if s.resp.Trailer.Get("Grpc-Status") == "" {
		return fmt.Errorf("etcd: %s: the answer ended without a gRPC status: %w", s.method, io.ErrUnexpectedEOF)
	}
	return io.EOF
}

// end reads the rest of a call that has given its answer, and its status.
func (s *stream) end() error {
	var d discard
	for {
		err := s.next(d)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (s *stream) close() { _ = s.resp.Body.Close() }
