package logtail_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/internal/logtail"
)

// The Server is what the resume tests stand on: these tests check it with
// a plain grpc-go client, without the library.

// drain receives from s until it ends, and returns what it received and
// how it ended (nil for io.EOF).
func drain(s grpc.ServerStreamingClient[logtail.Record]) ([]*logtail.Record, error) {
	var recs []*logtail.Record
	for {
		r, err := s.Recv()
		if err == io.EOF {
			return recs, nil
		}
		if err != nil {
			return recs, err
		}
		recs = append(recs, r)
	}
}

func TestTailRanges(t *testing.T) {
	cases := []struct {
		offset, limit int64
		from, to      int64
	}{
		{0, 0, 0, 10},
		{3, 0, 3, 10},
		{3, 4, 3, 7},
		{8, 5, 8, 10},
		{10, 0, 10, 10},
	}
	for _, tc := range cases {
		synctest.Test(t, func(t *testing.T) {
			srv := logtail.NewServer(t, logtail.Options{Records: 10, Size: 5, Every: time.Second})
			c := srv.Client(t)
			start := time.Now()
			s, err := c.Tail(t.Context(), &logtail.TailRequest{Offset: tc.offset, Limit: tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			recs, err := drain(s)
			if err != nil {
				t.Fatalf("Tail(%d, %d) ended with %v", tc.offset, tc.limit, err)
			}
			if err := logtail.Check(recs, tc.from, tc.to, 5); err != nil {
				t.Errorf("Tail(%d, %d): %v", tc.offset, tc.limit, err)
			}
			if got, want := time.Since(start), time.Duration(tc.to-tc.from)*time.Second; got != want {
				t.Errorf("Tail(%d, %d) took %v, want %v (one record a second)", tc.offset, tc.limit, got, want)
			}
			if got := s.Trailer().Get(logtail.OpenKey); !slices.Equal(got, []string{"0"}) {
				t.Errorf("trailer %s = %q, want 0", logtail.OpenKey, got)
			}
			opens := srv.Opens()
			if len(opens) != 1 || opens[0].Offset != tc.offset || opens[0].Limit != tc.limit || opens[0].Sent != int(tc.to-tc.from) || opens[0].Err != nil {
				t.Errorf("Opens() = %+v, want the one open, its request and %d records sent", opens, tc.to-tc.from)
			}
		})
	}
}

func TestTailFaults(t *testing.T) {
	pushback := metadata.Pairs("grpc-retry-pushback-ms", "-1")
	synctest.Test(t, func(t *testing.T) {
		srv := logtail.NewServer(t, logtail.Options{Records: 100, Script: logtail.Faults(
			logtail.Fault{After: 30, Err: status.Error(codes.Unavailable, "down"), Trailer: pushback},
			logtail.Fault{Header: true, Err: status.Error(codes.ResourceExhausted, "busy")},
			logtail.Fault{After: 5, Hang: true},
		)})
		c := srv.Client(t)

		s, err := c.Tail(t.Context(), &logtail.TailRequest{})
		if err != nil {
			t.Fatal(err)
		}
		recs, err := drain(s)
		if status.Code(err) != codes.Unavailable || logtail.Check(recs, 0, 30, 8) != nil {
			t.Errorf("open 0: %d records then %v, want 30 then UNAVAILABLE", len(recs), err)
		}
		if got := s.Trailer().Get("grpc-retry-pushback-ms"); !slices.Equal(got, []string{"-1"}) {
			t.Errorf("open 0's pushback = %q, want -1", got)
		}

		s, err = c.Scan(t.Context(), &logtail.TailRequest{Offset: 30})
		if err != nil {
			t.Fatal(err)
		}
		md, err := s.Header()
		if err != nil || !slices.Equal(md.Get(logtail.OpenKey), []string{"1"}) {
			t.Errorf("open 1: Header() = %v, %v; want its headers first", md, err)
		}
		if recs, err := drain(s); status.Code(err) != codes.ResourceExhausted || len(recs) != 0 {
			t.Errorf("open 1: %d records then %v, want none then RESOURCE_EXHAUSTED", len(recs), err)
		}

		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		s, err = c.Tail(ctx, &logtail.TailRequest{})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if recs, err := drain(s); status.Code(err) != codes.DeadlineExceeded || len(recs) != 5 || time.Since(start) != time.Minute {
			t.Errorf("open 2: %d records then %v after %v, want 5, then the client's deadline after 1m", len(recs), err, time.Since(start))
		}

		opens := srv.Opens()
		if len(opens) != 3 || opens[1].Method != logtail.LogTail_Scan_FullMethodName || opens[1].Offset != 30 {
			t.Fatalf("Opens() = %+v, want three, the second a Scan from 30", opens)
		}
		synctest.Wait() // the hanging handler sees the client's deadline
		if opens := srv.Opens(); status.Code(opens[2].Err) != codes.DeadlineExceeded && status.Code(opens[2].Err) != codes.Canceled {
			t.Errorf("open 2 ended with %v on the server, want the client's end", opens[2].Err)
		}
	})
}

// TestTailRestart: what issue 43 measured, with a plain client: a stream
// of 1 000 records whose server restarts after sending 300 gives the caller
// those of them that reached it (a crash loses what was in flight), then
// UNAVAILABLE. The restarted server, on the same address, serves the rest
// to a new Tail from there.
func TestTailRestart(t *testing.T) {
	srv := logtail.NewServerTCP(t, logtail.Options{Records: 1000, Script: logtail.Faults(logtail.Fault{After: 300, Restart: true})})
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := c.Tail(ctx, &logtail.TailRequest{})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := drain(s)
	n := int64(len(recs))
	if status.Code(err) != codes.Unavailable || n > 300 || logtail.Check(recs, 0, n, 8) != nil {
		t.Fatalf("%d records then %v, want at most 300 then UNAVAILABLE", n, err)
	}
	t.Logf("the caller saw %d records, then %v", n, err)
	s, err = c.Tail(ctx, &logtail.TailRequest{Offset: n}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	rest, err := drain(s)
	if err != nil || logtail.Check(rest, n, 1000, 8) != nil {
		t.Errorf("the second Tail: %d records then %v, want %d and the end", len(rest), err, 1000-n)
	}
	if opens := srv.Opens(); len(opens) != 2 || opens[0].Sent != 300 || opens[0].Gen != 0 || opens[1].Gen != 1 {
		t.Errorf("Opens() = %+v, want two, 300 records sent on the first server, then the restarted one", opens)
	}
}

// TestTailGoAway: a drained server sends GOAWAY and goes on with the
// stream in flight, which fails Drain records later when the old server
// stops (the caller gets those that reached it); a stream opened after the
// GOAWAY reaches the new server.
func TestTailGoAway(t *testing.T) {
	srv := logtail.NewServerTCP(t, logtail.Options{Records: 1000, Script: logtail.Faults(logtail.Fault{After: 300, GoAway: true, Drain: 100})})
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := c.Tail(ctx, &logtail.TailRequest{})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := drain(s)
	n := int64(len(recs))
	if status.Code(err) != codes.Unavailable || n > 400 || logtail.Check(recs, 0, n, 8) != nil {
		t.Fatalf("%d records then %v, want at most 400 then UNAVAILABLE", n, err)
	}
	s, err = c.Tail(ctx, &logtail.TailRequest{Offset: n}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if rest, err := drain(s); err != nil || logtail.Check(rest, n, 1000, 8) != nil {
		t.Errorf("the second Tail: %d records then %v, want %d and the end", len(rest), err, 1000-n)
	}
	if opens := srv.Opens(); len(opens) != 2 || opens[0].Sent != 400 || opens[1].Gen != 1 {
		t.Errorf("Opens() = %+v, want 400 records sent by the drained server, then the second open on the new one", opens)
	}
}

func TestOtherKinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := logtail.NewServer(t, logtail.Options{Records: 10})
		c := srv.Client(t)
		if st, err := c.Stat(t.Context(), &logtail.StatRequest{}); err != nil || st.GetLength() != 10 {
			t.Errorf("Stat = %v, %v; want 10", st, err)
		}
		w, err := c.Write(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := w.Send(&logtail.Record{Offset: int64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		if res, err := w.CloseAndRecv(); err != nil || res.GetWritten() != 3 {
			t.Errorf("Write = %v, %v; want 3 written", res, err)
		}
		b, err := c.Sync(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(b.Send(&logtail.TailRequest{Offset: 8}), b.Send(&logtail.TailRequest{Offset: 2, Limit: 1}), b.CloseSend()); err != nil {
			t.Fatal(err)
		}
		var got []*logtail.Record
		for {
			r, err := b.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r)
		}
		if offs := logtail.Offsets(got); !slices.Equal(offs, []int64{8, 9, 2}) {
			t.Errorf("Sync sent %v, want [8 9 2]", offs)
		}
	})
}
