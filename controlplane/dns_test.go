package controlplane

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// dnsName is the domain the DNS plane serves: for each name NAME under it an
// A record, 127.0.0.1, and the TXT record _grpc_config.NAME carrying the
// service config (gRFC A2).
const dnsName = "cp.test"

// dnsPlane is a DNS server of the test's own on 127.0.0.1 (UDP), and grpc-go's
// own DNS resolver pointed at it: channel i resolves ci.cp.test
// (dns://127.0.0.1:PORT/ci.cp.test:PORT), so that the server knows which
// channel's resolver asked.
type dnsPlane struct {
	srv    *bufconntest.Server // on loopback TCP
	server *dns.Server
	addr   string

	mu     sync.Mutex
	sc     string         // the service config of the TXT records; "" for none
	gen    int            // incremented by Set
	served map[string]int // name -> the gen of its last TXT answer
	chans  []*dnsWatch
}

// newDNS starts a DNS server answering for dnsName with srv's address and
// the service config sc; it stops when the test ends.
func newDNS(t testing.TB, srv *bufconntest.Server, sc string) *dnsPlane {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsPlane{srv: srv, addr: pc.LocalAddr().String(), sc: sc, served: map[string]int{}}
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
	return d
}

// answer serves A (127.0.0.1) for the names under dnsName and TXT for their
// _grpc_config names; every other question gets no answer.
func (d *dnsPlane) answer(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	for _, q := range req.Question {
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 0, Rrtype: q.Qtype}
		switch {
		case q.Qtype == dns.TypeA && strings.HasSuffix(q.Name, "."+dnsName+"."):
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IPv4(127, 0, 0, 1)})
		case q.Qtype == dns.TypeTXT && strings.HasPrefix(q.Name, "_grpc_config.") && strings.HasSuffix(q.Name, "."+dnsName+"."):
			d.mu.Lock()
			sc := d.sc
			d.served[strings.TrimPrefix(q.Name, "_grpc_config.")] = d.gen
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

// Conn returns a channel to the backend through grpc-go's DNS resolver, with
// opts; it is closed when the test ends.
func (d *dnsPlane) Conn(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	d.mu.Lock()
	w := &dnsWatch{Builder: resolver.Get("dns"), name: fmt.Sprintf("c%d.%s", len(d.chans), dnsName), updates: make(chan struct{}, 1)}
	d.chans = append(d.chans, w)
	d.mu.Unlock()
	_, port, _ := net.SplitHostPort(d.srv.Addr())
	target := fmt.Sprintf("dns://%s/%s:%s", d.addr, w.name, port)
	base := []grpc.DialOption{grpc.WithResolvers(w), grpc.WithTransportCredentials(insecure.NewCredentials())}
	return newClient(t, target, append(base, opts...)...)
}

// Set publishes the service config sc in the TXT records ("" removes them),
// asks each channel's resolver to resolve again and returns once each handed
// its channel a state read from the new record. (A channel that made no
// call yet has no resolver: it reads the new record when it starts.)
func (d *dnsPlane) Set(t testing.TB, sc string) {
	t.Helper()
	d.mu.Lock()
	d.sc = sc
	d.gen++
	gen, chans := d.gen, slices.Clone(d.chans)
	d.mu.Unlock()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for _, w := range chans {
		for i := 0; ; i++ {
			if i == 20 {
				t.Fatalf("dns: 20 updates of channel %s, none from the record %s", w.name, sc)
			}
			select { // an update that came before the new record's
			case <-w.updates:
			default:
			}
			if !w.resolveNow() {
				break
			}
			select {
			case <-w.updates:
			case <-timeout.C:
				t.Fatalf("dns: no update of channel %s within 10 s of publishing %s", w.name, sc)
			}
			d.mu.Lock()
			served := d.served[w.name+"."]
			d.mu.Unlock()
			if served >= gen {
				break // a resolver's lookups are sequential: this update read the new record
			}
		}
	}
}

// dnsWatch is grpc-go's DNS resolver builder, unchanged but for two handles
// the tests need: ResolveNow on the resolver it built, and a signal after
// each state it hands the channel.
type dnsWatch struct {
	resolver.Builder
	name    string // the name its channel resolves
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

// resolveNow asks the resolver to resolve again, and reports whether it
// has been built.
func (w *dnsWatch) resolveNow() bool {
	w.mu.Lock()
	r := w.r
	w.mu.Unlock()
	if r != nil {
		r.ResolveNow(resolver.ResolveNowOptions{})
	}
	return r != nil
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
