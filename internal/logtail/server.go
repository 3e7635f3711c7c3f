package logtail

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// OpenKey is the response header and trailer metadata that carries an
// open's number, from 0.
const OpenKey = "x-open"

// Fault says what an open of Tail or Scan does once it has sent After
// records of its range (or every record, if its range has fewer): fail
// with Err, hang, stop or restart the server, or drain it. An open without
// any of them sends its whole range and ends well.
type Fault struct {
	// After is the number of records sent before the fault.
	After int
	// Err ends the open with this error, its status details included.
	Err error
	// Trailer is added to the open's trailer (with Err: the server's
	// pushback, grpc-retry-pushback-ms).
	Trailer metadata.MD
	// Header sends the response headers first, before any record: with
	// After 0, an open that fails after its headers and no record.
	Header bool
	// Hang waits until the client ends the open.
	Hang bool
	// Stop stops the server for good, as a crash does: its connections
	// close, the calls in flight fail.
	Stop bool
	// Restart stops the server as Stop does and serves again on the same
	// address at once, on a new grpc.Server. NewServerTCP only.
	Restart bool
	// GoAway drains the server, as a rolling restart does: a new
	// grpc.Server takes the address, the old one sends GOAWAY and goes on
	// serving the calls in flight, and this open sends Drain more records
	// before the old server stops (the open then fails as a crash makes it).
	// NewServerTCP only.
	GoAway bool
	Drain  int
}

func (f Fault) faulty() bool { return f.Err != nil || f.Hang || f.Stop || f.Restart || f.GoAway }

// Fail returns the Fault of an open that fails with code c after n records.
func Fail(n int, c codes.Code) Fault {
	return Fault{After: n, Err: status.Error(c, "logtail: failed after "+strconv.Itoa(n)+" records")}
}

// A Script gives the Fault of open n (from 0) of Tail and Scan, numbered
// across both methods.
type Script func(n int) Fault

// Faults returns a Script in which open n has faults[n], and the opens past
// the end none.
func Faults(faults ...Fault) Script {
	return func(n int) Fault {
		if n < len(faults) {
			return faults[n]
		}
		return Fault{}
	}
}

// Options configure a Server.
type Options struct {
	// Records is the log's length.
	Records int
	// Size is the number of bytes of each record's data (Data); 0 means 8.
	Size int
	// Every, if positive, is waited before each record is sent: the log's
	// pace.
	Every time.Duration
	// Script says what each open of Tail and Scan does; nil: no fault.
	Script Script
}

// Open is what a Server saw of one open of Tail or Scan.
type Open struct {
	Method        string      // the full method name
	N             int         // the open's number, from 0, across Tail and Scan
	Gen           int         // the grpc.Server that served it: 0, then one more at each restart or drain
	Offset, Limit int64       // its request
	MD            metadata.MD // its request metadata
	At            time.Time   // when it reached the handler
	Sent          int         // records sent
	End           time.Time   // when the handler returned
	Err           error       // the handler's error; nil: the open ended well
}

// Server serves LogTail from one log of Options.Records records, record i
// at offset i with the data Data(i, Options.Size). Every open's trailer,
// and its response headers if it sends any (with its first record, or
// first with Fault.Header), carry OpenKey: an open that fails before its
// first record is otherwise a trailers-only response. Its Tail and Scan
// follow Options.Script; Stat, Write and Sync never fail. It is safe for
// concurrent use.
type Server struct {
	o     Options
	tb    testing.TB
	sopts []grpc.ServerOption
	tcp   bool
	addr  string
	dial  func(context.Context) (net.Conn, error)

	wg sync.WaitGroup // the servers' Serve goroutines, restarts and drains

	mu     sync.Mutex
	srv    *grpc.Server   // the current server
	lis    net.Listener   // its listener
	all    []*grpc.Server // every server started, stopped at the end
	gens   int            // servers started
	closed bool           // the test ended: no more restarts
	opens  []*Open
}

// NewServer starts a Server on a private bufconn listener, with opts; it
// stops when the test ends (inside the synctest bubble when called in
// one). Its Script must not Restart nor GoAway.
func NewServer(tb testing.TB, o Options, opts ...grpc.ServerOption) *Server {
	lis := bufconntest.Listen()
	s := newServer(tb, o, opts)
	s.addr, s.dial = "bufconn", lis.DialContext
	s.start(lis)
	return s
}

// NewServerTCP starts a Server on a loopback TCP port, for restarts and
// GOAWAY; it stops when the test ends.
func NewServerTCP(tb testing.TB, o Options, opts ...grpc.ServerOption) *Server {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := newServer(tb, o, opts)
	s.tcp, s.addr = true, lis.Addr().String()
	var d net.Dialer
	s.dial = func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", s.addr) }
	s.start(lis)
	return s
}

func newServer(tb testing.TB, o Options, opts []grpc.ServerOption) *Server {
	if o.Size == 0 {
		o.Size = 8
	}
	s := &Server{o: o, tb: tb, sopts: opts}
	tb.Cleanup(s.close)
	return s
}

// start serves lis with a new grpc.Server, unless the test ended.
func (s *Server) start(lis net.Listener) {
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.WaitForHandlers(true)}, s.sopts...)...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = lis.Close()
		return
	}
	RegisterLogTailServer(srv, &handler{s: s, srv: srv, gen: s.gens})
	s.gens++
	s.srv, s.lis = srv, lis
	s.all = append(s.all, srv)
	s.wg.Go(func() { _ = srv.Serve(lis) })
}

// close stops every server and waits for their goroutines and the
// restarts under way.
func (s *Server) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	for {
		s.mu.Lock()
		all := s.all
		s.all = nil
		s.mu.Unlock()
		if len(all) == 0 {
			break
		}
		for _, srv := range all {
			srv.Stop()
		}
	}
	s.wg.Wait()
}

// Addr is the address the Server listens on ("bufconn" for NewServer).
func (s *Server) Addr() string { return s.addr }

// Dialer dials the Server.
func (s *Server) Dialer() func(context.Context) (net.Conn, error) { return s.dial }

// Conn returns a connection to the Server with opts; it is closed when the
// test ends.
func (s *Server) Conn(tb testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	return bufconntest.Dial(tb, s.dial, opts...)
}

// Client returns a LogTail client on Conn(tb, opts...).
func (s *Server) Client(tb testing.TB, opts ...grpc.DialOption) LogTailClient {
	return NewLogTailClient(s.Conn(tb, opts...))
}

// Opens returns a copy of what the Server saw of every open of Tail and
// Scan, in order.
func (s *Server) Opens() []Open {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Open, len(s.opens))
	for i, o := range s.opens {
		out[i] = *o
	}
	return out
}

// Restart stops the server as a crash does and serves again on its address
// at once. NewServerTCP only.
func (s *Server) Restart() {
	if !s.tcp {
		panic("logtail: Restart needs a Server of NewServerTCP")
	}
	s.mu.Lock()
	old := s.srv
	s.mu.Unlock()
	old.Stop()
	s.listenAgain()
}

// listenAgain serves the address again on a new grpc.Server.
func (s *Server) listenAgain() {
	lis, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.tb.Errorf("logtail: listening again on %s: %v", s.addr, err)
		return
	}
	s.start(lis)
}

// drain hands the address to a new grpc.Server and sends GOAWAY from old,
// the current one, which goes on serving its calls in flight.
func (s *Server) drain(old *grpc.Server) {
	s.mu.Lock()
	lis := s.lis
	s.mu.Unlock()
	_ = lis.Close() // frees the address: old's Serve returns, its connections go on
	s.listenAgain()
	s.wg.Go(old.GracefulStop) // GOAWAY, then waits for the calls in flight
}

// Data returns the data of the record at offset: size bytes that depend on
// offset.
func Data(offset int64, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(offset>>(8*(i%8))) ^ byte(i)
	}
	return b
}

// handler is the LogTail service of one grpc.Server of s, number gen.
type handler struct {
	UnimplementedLogTailServer
	s   *Server
	srv *grpc.Server
	gen int
}

// Tail streams the records of the request's range, as the Script says.
func (h *handler) Tail(req *TailRequest, ss grpc.ServerStreamingServer[Record]) error {
	return h.tail(req, ss)
}

// Scan is Tail.
func (h *handler) Scan(req *TailRequest, ss grpc.ServerStreamingServer[Record]) error {
	return h.tail(req, ss)
}

func (h *handler) tail(req *TailRequest, ss grpc.ServerStreamingServer[Record]) (err error) {
	s := h.s
	ctx := ss.Context()
	method, _ := grpc.Method(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	o := &Open{Method: method, N: len(s.opens), Gen: h.gen, Offset: req.GetOffset(), Limit: req.GetLimit(), MD: md, At: time.Now()}
	s.opens = append(s.opens, o)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		o.End, o.Err = time.Now(), err
		s.mu.Unlock()
	}()
	var f Fault
	if s.o.Script != nil {
		f = s.o.Script(o.N)
	}
	mine := metadata.Pairs(OpenKey, strconv.Itoa(o.N))
	ss.SetTrailer(metadata.Join(mine, f.Trailer))
	if f.Header {
		if err := ss.SendHeader(mine); err != nil {
			return err
		}
	}
	if (f.Restart || f.GoAway) && !s.tcp {
		s.tb.Errorf("logtail: open %d restarts or drains a Server of NewServer", o.N)
		return status.Error(codes.Internal, "logtail: Restart and GoAway need NewServerTCP")
	}
	from, to := req.GetOffset(), int64(s.o.Records)
	if req.GetLimit() > 0 {
		to = min(to, from+req.GetLimit())
	}
	stopAt := -1 // with GoAway: the old server stops once this many records are sent
	for off := from; ; off++ {
		if f.faulty() && (o.Sent == f.After || off >= to) {
			switch {
			case f.GoAway:
				s.drain(h.srv)
				stopAt, f = o.Sent+f.Drain, Fault{} // Drain more records, then the stop
			case f.Stop, f.Restart:
				s.wg.Go(func() { // Stop waits for this handler, which it ends
					h.srv.Stop()
					if f.Restart {
						s.listenAgain()
					}
				})
				<-ctx.Done()
				return status.FromContextError(ctx.Err()).Err()
			case f.Hang:
				<-ctx.Done()
				return status.FromContextError(ctx.Err()).Err()
			default:
				return f.Err
			}
		}
		if o.Sent == stopAt || stopAt >= 0 && off >= to {
			s.wg.Go(h.srv.Stop) // the drained server stops, waiting for this handler
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}
		if off >= to {
			return nil
		}
		if err := bufconntest.Pause(ctx, s.o.Every); err != nil {
			return err
		}
		if o.Sent == 0 && !f.Header {
			// The headers go with the first record: an open that fails
			// before any is a trailers-only response.
			if err := ss.SetHeader(mine); err != nil {
				return err
			}
		}
		if err := ss.Send(&Record{Offset: off, Data: Data(off, s.o.Size)}); err != nil {
			return err
		}
		s.mu.Lock()
		o.Sent++
		s.mu.Unlock()
	}
}

// Stat returns the log's length.
func (h *handler) Stat(context.Context, *StatRequest) (*StatResponse, error) {
	return &StatResponse{Length: int64(h.s.o.Records)}, nil
}

// Write reads records up to the half-close and answers with their number.
func (h *handler) Write(ss grpc.ClientStreamingServer[Record, WriteResponse]) error {
	var n int64
	for {
		if _, err := ss.Recv(); err == io.EOF {
			return ss.SendAndClose(&WriteResponse{Written: n})
		} else if err != nil {
			return err
		}
		n++
	}
}

// Sync answers each request it reads with the records of its range.
func (h *handler) Sync(ss grpc.BidiStreamingServer[TailRequest, Record]) error {
	s := h.s
	for {
		req, err := ss.Recv()
		if err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		to := int64(s.o.Records)
		if req.GetLimit() > 0 {
			to = min(to, req.GetOffset()+req.GetLimit())
		}
		for off := req.GetOffset(); off < to; off++ {
			if err := ss.Send(&Record{Offset: off, Data: Data(off, s.o.Size)}); err != nil {
				return err
			}
		}
	}
}

// Offsets returns the offsets of recs, in order.
func Offsets(recs []*Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.GetOffset()
	}
	return out
}

// Range returns the offsets from, from+1, … up to to, excluded.
func Range(from, to int64) []int64 {
	var out []int64
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// Check reports whether recs are the log's records from, from+1, … up to
// to (excluded), once each, in order, with their data of size bytes; if
// not, it says how they differ.
func Check(recs []*Record, from, to int64, size int) error {
	if got, want := Offsets(recs), Range(from, to); !slices.Equal(got, want) {
		return fmt.Errorf("received %d records %s, want %d: %s", len(got), span(got), len(want), span(want))
	}
	for _, r := range recs {
		if !slices.Equal(r.GetData(), Data(r.GetOffset(), size)) {
			return fmt.Errorf("record %d has data %x, want %x", r.GetOffset(), r.GetData(), Data(r.GetOffset(), size))
		}
	}
	return nil
}

// span describes a list of offsets in brief: its runs of consecutive ones.
func span(offs []int64) string {
	if len(offs) == 0 {
		return "[]"
	}
	out := "["
	start := 0
	for i := 1; i <= len(offs); i++ {
		if i < len(offs) && offs[i] == offs[i-1]+1 {
			continue
		}
		if out != "[" {
			out += " "
		}
		if i-1 == start {
			out += strconv.FormatInt(offs[start], 10)
		} else {
			out += strconv.FormatInt(offs[start], 10) + "…" + strconv.FormatInt(offs[i-1], 10)
		}
		start = i
	}
	return out + "]"
}
