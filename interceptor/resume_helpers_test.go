package interceptor_test

// The helpers of the resume tests (issue 43; resume_test.go and
// resume_tcp_test.go): the tests' resume rule for internal/logtail's Tail,
// and a caller that reads a stream to its end reusing one message, as
// callers do.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/logtail"
)

const (
	tailMethod  = logtail.LogTail_Tail_FullMethodName
	scanMethod  = logtail.LogTail_Scan_FullMethodName
	logService  = "/grpcbackoff.logtail.v1.LogTail/"
	recordBytes = 8 // logtail's default record size
)

// nextOffset is the tests' resume rule for a method of LogTail: the token
// is the offset after the last record received, and a resume asks for the
// rest of the original range from there (io.EOF once it is all delivered).
// It counts its calls.
type nextOffset struct {
	records, reopens atomic.Int64
}

func (n *nextOffset) option(name string) interceptor.Option {
	return interceptor.WithResume(name, n.record, n.reopen)
}

func (n *nextOffset) record(_ int64, r *logtail.Record) int64 {
	n.records.Add(1)
	return r.GetOffset() + 1
}

func (n *nextOffset) reopen(req *logtail.TailRequest, next int64) (*logtail.TailRequest, error) {
	n.reopens.Add(1)
	if req.Limit > 0 {
		left := req.Offset + req.Limit - next
		if left <= 0 {
			return nil, io.EOF
		}
		req.Limit = left
	}
	req.Offset = next
	return req, nil
}

// tailResult is what the caller of one Tail (or Scan) saw.
type tailResult struct {
	Stream  grpc.ClientStream
	Offsets []int64     // the offsets received, in order
	BadData error       // the first record whose data is not the log's
	Err     error       // how the stream ended; nil for io.EOF
	End     time.Time   // when RecvMsg returned the end
	Header  metadata.MD // Header() after the end
	Trailer metadata.MD // Trailer() after the end
}

// tailHow says what the caller does along the way.
type tailHow struct {
	Scan   bool                             // call Scan instead of Tail
	Size   int                              // the records' size (0: recordBytes)
	OnRecv func(n int, s grpc.ClientStream) // after the n-th record (from 1), if set
}

// runTail opens a Tail of req on c with opts and receives to the end into
// one message that it reuses, changing it after each receive as a caller
// may: the library must have read what it needs by then.
func runTail(ctx context.Context, c logtail.LogTailClient, req *logtail.TailRequest, how tailHow, opts ...grpc.CallOption) (r tailResult) {
	defer func() { r.End = time.Now() }()
	open := c.Tail
	if how.Scan {
		open = c.Scan
	}
	s, err := open(ctx, req, opts...)
	if err != nil {
		r.Err = err
		return r
	}
	r.Stream = s
	size := how.Size
	if size == 0 {
		size = recordBytes
	}
	m := new(logtail.Record)
	for {
		if err := s.RecvMsg(m); err != nil {
			if err != io.EOF {
				r.Err = err
			}
			r.Header, _ = s.Header()
			r.Trailer = s.Trailer()
			return r
		}
		r.Offsets = append(r.Offsets, m.GetOffset())
		if r.BadData == nil && !bytes.Equal(m.GetData(), logtail.Data(m.GetOffset(), size)) {
			r.BadData = fmt.Errorf("record %d has data %x, want %x", m.GetOffset(), m.GetData(), logtail.Data(m.GetOffset(), size))
		}
		m.Offset, m.Data = -1, m.Data[:0] // the caller reuses its message
		if how.OnRecv != nil {
			how.OnRecv(len(r.Offsets), s)
		}
	}
}

// checkRecords checks that the caller received the log's records from,
// from+1, … up to to (excluded), once each, in order, with their data.
func checkRecords(t *testing.T, r tailResult, from, to int64) {
	t.Helper()
	if want := logtail.Range(from, to); !slices.Equal(r.Offsets, want) {
		t.Errorf("received %d records %v, want %d, %d to %d once each, in order", len(r.Offsets), brief(r.Offsets), len(want), from, to-1)
	}
	if r.BadData != nil {
		t.Error(r.BadData)
	}
}

// brief shows a long list of offsets by its runs.
func brief(offs []int64) string {
	recs := make([]*logtail.Record, len(offs))
	for i, o := range offs {
		recs[i] = &logtail.Record{Offset: o}
	}
	if err := logtail.Check(recs, 0, 0, 0); err != nil {
		return err.Error()
	}
	return "[]"
}

// openStarts returns when each open reached the server, from start.
func openStarts(opens []logtail.Open, start time.Time) []time.Duration {
	out := make([]time.Duration, len(opens))
	for i, o := range opens {
		out[i] = o.At.Sub(start)
	}
	return out
}

// openOffsets returns the offset each open asked for.
func openOffsets(opens []logtail.Open) []int64 {
	out := make([]int64, len(opens))
	for i, o := range opens {
		out[i] = o.Offset
	}
	return out
}

// checkPreviousAttempts checks that open i of one call said it had i
// attempts before it (none on the first).
func checkPreviousAttempts(t *testing.T, opens []logtail.Open) {
	t.Helper()
	for i, o := range opens {
		var want []string
		if i > 0 {
			want = []string{strconv.Itoa(i)}
		}
		if got := o.MD.Get(interceptor.PreviousAttemptsKey); !slices.Equal(got, want) {
			t.Errorf("open %d: %s = %q, want %q", i, interceptor.PreviousAttemptsKey, got, want)
		}
	}
}

// newRetrier is interceptor.New that fails the test on an error.
func newRetrier(t *testing.T, p grpcbackoff.Policy, opts ...interceptor.Option) *interceptor.Retrier {
	t.Helper()
	r, err := interceptor.New(p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
