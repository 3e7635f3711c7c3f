package fleetbudget

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// proxy is a TCP proxy on 127.0.0.1 in front of a Redis server, which can
// slow its answers, cut every connection, or stand for a server that
// answers garbage. It stops at the test's end.
type proxy struct {
	ln       net.Listener
	upstream string

	mu      sync.Mutex
	delay   time.Duration
	down    bool
	garbage bool
	conns   []net.Conn
	stop    chan struct{}
}

func newProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, upstream: upstream, stop: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.serve(c) })
		}
	})
	t.Cleanup(func() {
		close(p.stop)
		ln.Close()
		p.cut()
		wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) set(f func(p *proxy)) {
	p.mu.Lock()
	f(p)
	p.mu.Unlock()
	if p.isDown() {
		p.cut()
	}
}

func (p *proxy) isDown() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.down }

// cut closes every connection.
func (p *proxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

func (p *proxy) track(cs ...net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, cs...)
	p.mu.Unlock()
}

func (p *proxy) serve(c net.Conn) {
	p.track(c)
	p.mu.Lock()
	down, garbage := p.down, p.garbage
	p.mu.Unlock()
	if down {
		c.Close()
		return
	}
	if garbage {
		answerGarbage(c)
		return
	}
	u, err := net.Dial("tcp", p.upstream)
	if err != nil {
		c.Close()
		return
	}
	p.track(u)
	go func() { io.Copy(u, c); u.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := u.Read(buf)
		if n > 0 {
			p.mu.Lock()
			d := p.delay
			p.mu.Unlock()
			if d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-p.stop:
					t.Stop()
				}
			}
			if _, err := c.Write(buf[:n]); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	c.Close()
}

// answerGarbage reads RESP commands from c and answers each with an array
// of two integers (HELLO with an error, as Redis 5 does; CLIENT with OK).
func answerGarbage(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "*") {
			return
		}
		var n int
		if _, err := fmtSscan(line[1:], &n); err != nil {
			return
		}
		var args []string
		for range n {
			hdr, err := r.ReadString('\n')
			if err != nil {
				return
			}
			var l int
			if _, err := fmtSscan(hdr[1:], &l); err != nil {
				return
			}
			b := make([]byte, l+2)
			if _, err := io.ReadFull(r, b); err != nil {
				return
			}
			args = append(args, string(bytes.TrimSuffix(b, []byte("\r\n"))))
		}
		reply := "*2\r\n:1\r\n:2\r\n"
		switch strings.ToUpper(args[0]) {
		case "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case "CLIENT", "PING":
			reply = "+OK\r\n"
		}
		if _, err := c.Write([]byte(reply)); err != nil {
			return
		}
	}
}

func fmtSscan(s string, n *int) (int, error) {
	return fmt.Sscan(strings.TrimSpace(s), n)
}
