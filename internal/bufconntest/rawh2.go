package bufconntest

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// RawAnswer is what a RawServer does with one stream.
type RawAnswer struct {
	// Refuse resets the stream with REFUSED_STREAM: the server did not
	// process it (RFC 9113, 8.7).
	Refuse bool
	// GoAway sends GOAWAY with last stream ID 0, so that no stream of the
	// connection was processed, and closes the connection.
	GoAway bool
	// Headers sends response headers before the status; otherwise the
	// status goes alone, as a trailers-only response.
	Headers bool
	// Cut closes the connection, after the headers if Headers, without a
	// status.
	Cut bool
	// Reset resets the stream with this HTTP/2 error code (not NO_ERROR),
	// after the headers if Headers, which grpc-go turns into a status of
	// its own (ENHANCE_YOUR_CALM and FLOW_CONTROL_ERROR:
	// RESOURCE_EXHAUSTED), with no status from the server.
	Reset http2.ErrCode
	// AfterRequest answers once the request arrived whole (its
	// END_STREAM), as a handler that had it would; otherwise the answer
	// follows the request's headers.
	AfterRequest bool
	// Code and Message are the status. OK comes after headers and an empty
	// response message, as a unary call needs one.
	Code    codes.Code
	Message string
	// HTTPStatus, if set, answers as an HTTP hop that is not gRPC: this
	// :status alone, no content-type, ending the stream.
	HTTPStatus int
	// Trailer adds these fields, name then value, to the status's frame:
	// metadata, or a field gRPC's servers never send there (content-type
	// after headers, as a hop that copies its headers into its trailers
	// might).
	Trailer []string
}

// RawServer is a gRPC server written on HTTP/2 frames, which answers every
// stream as a script says: to make what grpc-go's own server never does
// (refuse a stream, send GOAWAY before processing anything) and to see every
// stream the client makes, including those grpc-go's transparent retry
// makes. It is safe for concurrent use.
type RawServer struct {
	lis    net.Listener
	answer func(conn, stream int) RawAnswer

	mu       sync.Mutex
	streams  []string // the method of each stream received, in order
	conns    int
	requests int // requests that arrived whole
}

// NewRawServer serves answer on lis (a loopback TCP or bufconn listener)
// until the test ends: stream n (from 0) of connection c (from 0) gets
// answer(c, n).
func NewRawServer(tb testing.TB, lis net.Listener, answer func(conn, stream int) RawAnswer) *RawServer {
	s := &RawServer{lis: lis, answer: answer}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			n := s.conns
			s.conns++
			s.mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				s.serve(c, n)
			})
		}
	})
	tb.Cleanup(func() {
		lis.Close()
		wg.Wait()
	})
	return s
}

// Streams returns the methods of the streams the server received, in order.
func (s *RawServer) Streams() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.streams...)
}

// Requests returns the number of requests that arrived whole (their
// END_STREAM), the streams the server could have applied.
func (s *RawServer) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// serve answers the streams of connection c, number n, until the client
// goes or an answer ends the connection.
func (s *RawServer) serve(c net.Conn, n int) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if fr.WriteSettings() != nil {
		return
	}
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	block := func(fields ...string) []byte {
		hbuf.Reset()
		for i := 0; i < len(fields); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return bytes.Clone(hbuf.Bytes())
	}
	// respond answers stream id as a says; false: the connection is done.
	respond := func(id uint32, a RawAnswer) bool {
		switch {
		case a.Refuse:
			return fr.WriteRSTStream(id, http2.ErrCodeRefusedStream) == nil
		case a.Reset != http2.ErrCodeNo && !a.Headers:
			return fr.WriteRSTStream(id, a.Reset) == nil
		case a.GoAway:
			fr.WriteGoAway(0, http2.ErrCodeNo, nil)
			return false
		case a.HTTPStatus != 0:
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block(":status", strconv.Itoa(a.HTTPStatus)), EndStream: true, EndHeaders: true}) == nil
		}
		status := append([]string{"grpc-status", strconv.Itoa(int(a.Code)), "grpc-message", a.Message}, a.Trailer...)
		start := []string{":status", "200", "content-type", "application/grpc"}
		var err error
		switch {
		case a.Headers || a.Code == codes.OK && !a.Cut:
			err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block(start...), EndHeaders: true})
			if err == nil && a.Cut {
				return false
			}
			if err == nil && a.Reset != http2.ErrCodeNo {
				return fr.WriteRSTStream(id, a.Reset) == nil
			}
			if err == nil && a.Code == codes.OK {
				err = fr.WriteData(id, false, []byte{0, 0, 0, 0, 0}) // an empty message
			}
			if err == nil {
				err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block(status...), EndStream: true, EndHeaders: true})
			}
		case a.Cut:
			return false
		default:
			err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block(append(start, status...)...), EndStream: true, EndHeaders: true})
		}
		return err == nil
	}
	// ended counts a request that arrived whole, and answers it if its
	// answer waited for it.
	pending := make(map[uint32]RawAnswer)
	ended := func(id uint32) bool {
		s.mu.Lock()
		s.requests++
		s.mu.Unlock()
		a, ok := pending[id]
		if !ok {
			return true
		}
		delete(pending, id)
		return respond(id, a)
	}
	stream := 0
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() && fr.WriteSettingsAck() != nil {
				return
			}
		case *http2.PingFrame:
			if !f.IsAck() && fr.WritePing(true, f.Data) != nil {
				return
			}
		case *http2.MetaHeadersFrame:
			s.mu.Lock()
			s.streams = append(s.streams, f.PseudoValue("path"))
			s.mu.Unlock()
			a := s.answer(n, stream)
			stream++
			if a.AfterRequest {
				pending[f.StreamID] = a
			} else if !respond(f.StreamID, a) {
				return
			}
			if f.StreamEnded() && !ended(f.StreamID) {
				return
			}
		case *http2.DataFrame:
			if n := len(f.Data()); n > 0 {
				fr.WriteWindowUpdate(0, uint32(n))
				fr.WriteWindowUpdate(f.StreamID, uint32(n))
			}
			if f.StreamEnded() && !ended(f.StreamID) {
				return
			}
		}
	}
}
