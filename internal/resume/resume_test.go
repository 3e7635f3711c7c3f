package resume_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/platformkit/grpcbackoff/internal/logtail"
	"github.com/platformkit/grpcbackoff/internal/resume"
)

const (
	tail = logtail.LogTail_Tail_FullMethodName
	scan = logtail.LogTail_Scan_FullMethodName
	svc  = "/grpcbackoff.logtail.v1.LogTail/"
)

// next is the tests' rule: the token is the next offset to read, and a
// resume asks for the rest of the original range from there.
func next(name string, reopens *int) resume.Rule {
	return resume.New(name,
		func(_ int64, r *logtail.Record) int64 { return r.GetOffset() + 1 },
		func(req *logtail.TailRequest, next int64) (*logtail.TailRequest, error) {
			*reopens++
			if req.GetLimit() > 0 {
				left := req.GetOffset() + req.GetLimit() - next
				if left <= 0 {
					return nil, io.EOF
				}
				req.Limit = left
			}
			req.Offset = next
			return req, nil
		})
}

func TestState(t *testing.T) {
	var reopens int
	s := next(tail, &reopens).Start()
	orig := &logtail.TailRequest{Offset: 10, Limit: 5}
	if err := s.Sent(orig); err != nil {
		t.Fatal(err)
	}
	if req, o, err := s.Reopen(); req != any(orig) || o != resume.Reopen || err != nil || reopens != 0 {
		t.Errorf("Reopen() before any message = %v, %v, %v (%d calls of reopen); want the request itself, unchanged, without reopen", req, o, err, reopens)
	}
	if s.Delivered() {
		t.Error("Delivered() = true before any message")
	}
	m := new(logtail.Record)
	for off := int64(10); off < 13; off++ {
		m.Offset = off
		s.Received(m)
		m.Offset = -1 // the caller reuses its message: the token was made as it was received
	}
	req, o, err := s.Reopen()
	want := &logtail.TailRequest{Offset: 13, Limit: 2}
	if o != resume.Reopen || err != nil || !proto.Equal(req.(*logtail.TailRequest), want) {
		t.Errorf("Reopen() after offsets 10 to 12 = %v, %v, %v; want %v", req, o, err, want)
	}
	if !proto.Equal(orig, &logtail.TailRequest{Offset: 10, Limit: 5}) {
		t.Errorf("the original request became %v: reopen must get a copy", orig)
	}
	if req, _, _ := s.Reopen(); !proto.Equal(req.(*logtail.TailRequest), want) {
		t.Errorf("a second Reopen() = %v, want %v again, from the original", req, want)
	}
	for off := int64(13); off < 15; off++ {
		m.Offset = off
		s.Received(m)
	}
	if req, o, err := s.Reopen(); o != resume.Done || req != nil || err != nil {
		t.Errorf("Reopen() once the range is delivered = %v, %v, %v; want Done (the rule's io.EOF)", req, o, err)
	}
}

func TestStateRefusals(t *testing.T) {
	noRule := errors.New("no offset to resume from")
	cannot := resume.New(tail, func(_ int64, r *logtail.Record) int64 { return r.GetOffset() },
		func(*logtail.TailRequest, int64) (*logtail.TailRequest, error) { return nil, noRule })
	s := cannot.Start()
	if err := s.Sent(&logtail.Record{}); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), tail) || !strings.Contains(err.Error(), "*logtail.Record") {
		t.Errorf("Sent(a Record) = %v, want INTERNAL naming the rule and the type", err)
	}
	if _, o, _ := s.Reopen(); o != resume.Cannot {
		t.Errorf("Reopen() without a request kept = %v, want Cannot", o)
	}
	if err := s.Sent(&logtail.TailRequest{}); err != nil {
		t.Fatal(err)
	}
	s.Received(&logtail.Record{Offset: 1})
	if _, o, err := s.Reopen(); o != resume.Cannot || err != noRule {
		t.Errorf("Reopen() = %v, %v; want Cannot with the rule's error", o, err)
	}

	nilReq := resume.New(tail, func(_ int64, r *logtail.Record) int64 { return r.GetOffset() },
		func(*logtail.TailRequest, int64) (*logtail.TailRequest, error) { return nil, nil })
	s = nilReq.Start()
	_ = s.Sent(&logtail.TailRequest{})
	s.Received(&logtail.Record{})
	if _, o, err := s.Reopen(); o != resume.Invalid || status.Code(err) != codes.Internal || !strings.Contains(err.Error(), tail) {
		t.Errorf("Reopen() with a nil request = %v, %v; want Invalid, INTERNAL naming the rule", o, err)
	}

	var reopens int
	s = next(tail, &reopens).Start()
	_ = s.Sent(&logtail.TailRequest{})
	s.Received(&logtail.Record{Offset: 1})
	s.Received(&logtail.StatResponse{}) // not the rule's type: the token is lost
	s.Received(&logtail.Record{Offset: 2})
	if _, o, _ := s.Reopen(); o != resume.Cannot || reopens != 0 {
		t.Errorf("Reopen() after a message of another type = %v (%d reopens), want Cannot", o, reopens)
	}
}

// TestReceivedAllocatesNothing: recording a message costs the rule's
// function, no allocation of the library's (a value token).
func TestReceivedAllocatesNothing(t *testing.T) {
	var reopens int
	s := next(tail, &reopens).Start()
	_ = s.Sent(&logtail.TailRequest{})
	m := &logtail.Record{Offset: 7, Data: make([]byte, 1024)}
	if n := testing.AllocsPerRun(1000, func() { s.Received(m) }); n != 0 {
		t.Errorf("Received allocates %v times, want 0", n)
	}
}

func TestMethods(t *testing.T) {
	var reopens int
	files := protoregistry.GlobalFiles
	if got, err := resume.Methods(files, tail, next(tail, &reopens)); err != nil || len(got) != 1 || got[0] != tail {
		t.Errorf("Methods(Tail) = %v, %v; want [Tail]", got, err)
	}
	if got, err := resume.Methods(files, svc, next(svc, &reopens)); err != nil || strings.Join(got, " ") != tail+" "+scan {
		t.Errorf("Methods(the service) = %v, %v; want Tail and Scan, its server streams of the rule's types", got, err)
	}
	recordReq := resume.New("", func(int, *logtail.Record) int { return 0 },
		func(r *logtail.Record, _ int) (*logtail.Record, error) { return r, nil })
	dynamic := resume.New("", func(int, *dynamicpb.Message) int { return 0 },
		func(r *logtail.TailRequest, _ int) (*logtail.TailRequest, error) { return r, nil })
	iface := resume.New("", func(int, *logtail.Record) int { return 0 },
		func(r proto.Message, _ int) (proto.Message, error) { return r, nil })
	refused := []struct {
		name string
		r    resume.Rule
		want string
	}{
		{"/grpcbackoff.logtail.v1.LogTail/Sync", next("", &reopens), "is a bidi stream"},
		{"/grpcbackoff.logtail.v1.LogTail/Write", next("", &reopens), "is a client stream"},
		{"/grpcbackoff.logtail.v1.LogTail/Stat", next("", &reopens), "is unary"},
		{"/grpcbackoff.logtail.v1.LogTail/Follow", next("", &reopens), "has no method Follow"},
		{"/pkg.Unknown/Tail", next("", &reopens), "no descriptor of the service pkg.Unknown is registered"},
		{tail, recordReq, "takes grpcbackoff.logtail.v1.TailRequest and returns a stream of grpcbackoff.logtail.v1.Record; the rule's types are grpcbackoff.logtail.v1.Record and grpcbackoff.logtail.v1.Record"},
		{svc, recordReq, "no method of grpcbackoff.logtail.v1.LogTail is a server stream that takes grpcbackoff.logtail.v1.Record"},
		{tail, dynamic, "*dynamicpb.Message has no descriptor of its own"},
		{tail, iface, "is an interface"},
	}
	for _, tc := range refused {
		_, err := resume.Methods(files, tc.name, tc.r)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `WithResume("`+tc.name+`")`) {
			t.Errorf("Methods(%s) = %v, want an error naming the rule and saying %q", tc.name, err, tc.want)
		}
	}
}

func TestTable(t *testing.T) {
	var reopens int
	var tb resume.Table
	if tb.Of(tail) != nil || tb.Check(nil) != nil {
		t.Fatal("an empty Table has rules")
	}
	own, service := next(tail, &reopens), next(svc, &reopens)
	tb.Set(tail, own, []string{tail})
	tb.Set(svc, service, []string{tail, scan})
	if err := tb.Check(func(string) (bool, bool) { return false, false }); err != nil {
		t.Fatal(err)
	}
	if tb.Of(tail) != own || tb.Of(scan) != service || tb.Of("/grpcbackoff.logtail.v1.LogTail/Sync") != nil {
		t.Errorf("Of: Tail's own rule %v, Scan the service's %v, Sync none: got %v, %v, %v", own, service, tb.Of(tail), tb.Of(scan), tb.Of("/grpcbackoff.logtail.v1.LogTail/Sync"))
	}
	if n := testing.AllocsPerRun(100, func() { tb.Of(tail) }); n != 0 {
		t.Errorf("Of allocates %v times, want 0", n)
	}
	err := tb.Check(func(m string) (bool, bool) { return m == scan, true })
	if err == nil || !strings.Contains(err.Error(), `WithResume("`+svc+`"): `+scan+` is known not to be idempotent`) || strings.Contains(err.Error(), `WithResume("`+tail+`")`) {
		t.Errorf("Check with Scan not idempotent = %v, want the service's rule refused for Scan alone", err)
	}
	err = tb.Check(func(m string) (bool, bool) { return m == scan, false })
	if err == nil || !strings.Contains(err.Error(), `WithResume("`+svc+`"): `+scan+` is treated as a write, nothing marking it safe to send again`) ||
		!strings.Contains(err.Error(), "idempotency_level = NO_SIDE_EFFECTS") {
		t.Errorf("Check with Scan unmarked = %v, want the service's rule refused for Scan, saying how to mark it", err)
	}
}
