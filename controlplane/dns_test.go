package controlplane

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	grpcdns "google.golang.org/grpc/resolver/dns"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// dnsName is the name the DNS plane serves: an A record, 127.0.0.1, and the
// TXT record _grpc_config.cp.test. carrying the service config (gRFC A2).
const dnsName = "cp.test"

// dnsPlane is a DNS server of the test's own on 127.0.0.1 (UDP), and grpc-go's
// own DNS resolver pointed at it (dns://127.0.0.1:PORT/cp.test:PORT).
type dnsPlane struct {
	srv     *bufconntest.Server // on loopback TCP
	server  *dns.Server
	addr    string
	builder *dnsWatch

	mu     sync.Mutex
	sc     string // the service config of the TXT record; "" for no record
	gen    int    // incremented by Set
	served int    // the gen of the last TXT answer
}

// newDNS starts a DNS server answering for dnsName with srv's address and
// the service config sc; it stops when the test ends.
func newDNS(t testing.TB, srv *bufconntest.Server, sc string) *dnsPlane {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsPlane{srv: srv, addr: pc.LocalAddr().String(), sc: sc}
	started := make(chan struct{})
	d.server = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(d.answer), NotifyStartedFunc: func() { close(started) }}
	done := make(chan error, 1)
	go func() { done <- d.server.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("dns server: %v", err)
	}
	t.Cleanup(func() {
		_ = d.server.Shutdown()
		<-done
	})
	d.builder = &dnsWatch{Builder: grpcdns.NewBuilder(), updates: make(chan struct{}, 1)}
	return d
}

// answer serves A (127.0.0.1) for dnsName and TXT for its _grpc_config
// name; every other question gets no answer.
func (d *dnsPlane) answer(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	for _, q := range req.Question {
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 0, Rrtype: q.Qtype}
		switch {
		case q.Qtype == dns.TypeA && q.Name == dnsName+".":
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IPv4(127, 0, 0, 1)})
		case q.Qtype == dns.TypeTXT && q.Name == "_grpc_config."+dnsName+".":
			d.mu.Lock()
			sc := d.sc
			d.served = d.gen
			d.mu.Unlock()
			if sc != "" {
				m.Answer = append(m.Answer, &dns.TXT{Hdr: hdr, Txt: chunks(`grpc_config=[{"serviceConfig":` + sc + `}]`)})
			}
		}
	}
	_ = w.WriteMsg(m)
}

// chunks splits s into a TXT record's character-strings of 255 bytes at
// most; resolvers join them again.
func chunks(s string) []string {
	var out []string
	for len(s) > 255 {
		out = append(out, s[:255])
		s = s[255:]
	}
	return append(out, s)
}

// Target is the channel's target: grpc-go's DNS resolver asking this
// server for dnsName, the backend's port.
func (d *dnsPlane) Target() string {
	_, port, _ := net.SplitHostPort(d.srv.Addr())
	return fmt.Sprintf("dns://%s/%s:%s", d.addr, dnsName, port)
}

// Conn returns a channel to the backend through grpc-go's DNS resolver, with
// opts; it is closed when the test ends.
func (d *dnsPlane) Conn(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	base := []grpc.DialOption{grpc.WithResolvers(d.builder), grpc.WithTransportCredentials(insecure.NewCredentials())}
	return newClient(t, d.Target(), append(base, opts...)...)
}

// Set publishes the service config sc in the TXT record ("" removes the
// record), asks the resolver to resolve again and returns once it handed the
// channel a state read from the new record.
func (d *dnsPlane) Set(t testing.TB, sc string) {
	t.Helper()
	d.mu.Lock()
	d.sc = sc
	d.gen++
	gen := d.gen
	d.mu.Unlock()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for range 20 {
		select { // an update that came before the new record's
		case <-d.builder.updates:
		default:
		}
		d.builder.resolveNow()
		select {
		case <-d.builder.updates:
		case <-timeout.C:
			t.Fatalf("dns: no update of the channel within 10 s of publishing %s", sc)
		}
		d.mu.Lock()
		served := d.served
		d.mu.Unlock()
		if served >= gen {
			return // the resolver's lookups are sequential: this update read the new record
		}
	}
	t.Fatalf("dns: 20 updates of the channel, none from the record %s", sc)
}

// dnsWatch is grpc-go's DNS resolver builder, unchanged but for two handles
// the tests need: ResolveNow on the resolver it built, and a signal after
// each state it hands the channel.
type dnsWatch struct {
	resolver.Builder
	updates chan struct{}

	mu sync.Mutex
	r  resolver.Resolver
}

func (w *dnsWatch) Build(target resolver.Target, cc resolver.ClientConn, opts resolver.BuildOptions) (resolver.Resolver, error) {
	r, err := w.Builder.Build(target, &watchedConn{ClientConn: cc, updates: w.updates}, opts)
	w.mu.Lock()
	w.r = r
	w.mu.Unlock()
	return r, err
}

func (w *dnsWatch) resolveNow() {
	w.mu.Lock()
	r := w.r
	w.mu.Unlock()
	if r != nil {
		r.ResolveNow(resolver.ResolveNowOptions{})
	}
}

type watchedConn struct {
	resolver.ClientConn
	updates chan struct{}
}

func (c *watchedConn) UpdateState(s resolver.State) error {
	err := c.ClientConn.UpdateState(s)
	select {
	case c.updates <- struct{}{}:
	default:
	}
	return err
}
