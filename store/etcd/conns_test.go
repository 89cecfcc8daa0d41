package etcd

import (
	"context"
	"net"
	"testing"
	"time"
)

// drop closes the connections dialled to an endpoint, whatever the case the DSN wrote its host in
// (the transport dials it lower case), and only those.
func TestConnsDrop(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	var cs conns
	dial := cs.dial(&net.Dialer{Timeout: time.Second})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	a, err := dial(context.Background(), "tcp", "localhost:"+port)
	if err != nil {
		t.Fatal(err)
	}
	b, err := dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cs.drop("LocalHost:" + port)
	if _, err := a.Write([]byte("x")); err == nil {
		t.Error("a connection to the dropped endpoint is still open")
	}
	if _, err := b.Write([]byte("x")); err != nil {
		t.Errorf("a connection to another endpoint was closed: %v", err)
	}
	if n := len(cs.by["localhost:"+port]); n != 0 {
		t.Errorf("%d connections still kept after drop", n)
	}
}
