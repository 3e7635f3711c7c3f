package googleclients_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/firestore/apiv1/firestorepb"
	"cloud.google.com/go/storage"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// serveLoopback serves srv on a loopback port until the test ends, behind a
// bufconntest.Proxy, which it returns.
func serveLoopback(t *testing.T, srv *grpc.Server) *bufconntest.Proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bufconntest.Serve(t, srv, lis)
	return bufconntest.NewProxy(t, lis.Addr().String())
}

// firestoreFake is a scripted Firestore: every document asked for exists,
// with field v = 1, and a query of any collection finds one document, d.
// The hand-written client (cloud.google.com/go/firestore) has no fake of its
// own.
type firestoreFake struct {
	firestorepb.UnimplementedFirestoreServer
}

func firestoreDoc(name string) *firestorepb.Document {
	ts := timestamppb.New(time.Unix(1e9, 0))
	return &firestorepb.Document{Name: name, CreateTime: ts, UpdateTime: ts,
		Fields: map[string]*firestorepb.Value{"v": {ValueType: &firestorepb.Value_IntegerValue{IntegerValue: 1}}}}
}

func (firestoreFake) BatchGetDocuments(req *firestorepb.BatchGetDocumentsRequest, stream firestorepb.Firestore_BatchGetDocumentsServer) error {
	for _, name := range req.GetDocuments() {
		if err := stream.Send(&firestorepb.BatchGetDocumentsResponse{ReadTime: timestamppb.Now(),
			Result: &firestorepb.BatchGetDocumentsResponse_Found{Found: firestoreDoc(name)}}); err != nil {
			return err
		}
	}
	return nil
}

func (firestoreFake) RunQuery(req *firestorepb.RunQueryRequest, stream firestorepb.Firestore_RunQueryServer) error {
	coll := req.GetStructuredQuery().GetFrom()[0].GetCollectionId()
	return stream.Send(&firestorepb.RunQueryResponse{ReadTime: timestamppb.Now(), Document: firestoreDoc(req.GetParent() + "/" + coll + "/d")})
}

// TestHandwrittenFirestore: the hand-written Firestore client's Get (its
// getAll loop over BatchGetDocuments) and a query's GetAll (RunQuery, whose
// generated client retries only the stream's opening), each refused with
// RESOURCE_EXHAUSTED twice, then failing with UNAVAILABLE twice. Get's
// UNAVAILABLE is the client's (getAll asks again for what it lacks), its
// RESOURCE_EXHAUSTED the library's; both of RunQuery's codes are the
// library's, until the stream commits. Each document arrives once.
func TestHandwrittenFirestore(t *testing.T) {
	t.Parallel()
	run := func(platform []option.ClientOption, suffix string, code codes.Code) (layers, int, error) {
		srv := grpc.NewServer()
		firestorepb.RegisterFirestoreServer(srv, firestoreFake{})
		proxy := serveLoopback(t, srv)
		proxy.FailWith(failFirst(suffix, 2, code))
		own := newOwnAttempts()
		c, err := firestore.NewClient(t.Context(), "p", counting(own, platform, proxy.Addr)...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		var docs []*firestore.DocumentSnapshot
		if suffix == "/BatchGetDocuments" {
			var d *firestore.DocumentSnapshot
			if d, err = c.Doc("c/d").Get(ctx); err == nil {
				docs = append(docs, d)
			}
		} else {
			docs, err = c.Collection("c").Documents(ctx).GetAll()
		}
		n := 0
		for _, d := range docs {
			if v, derr := d.DataAt("v"); derr == nil && v == int64(1) && d.Ref.Path == "projects/p/databases/(default)/documents/c/d" {
				n++
			}
		}
		return layers{proxy.Attempts(suffix), own.of(suffix)}, n, err
	}
	for _, tc := range []struct {
		suffix  string
		code    codes.Code
		clients bool // the code is the client's
	}{
		{"/BatchGetDocuments", codes.ResourceExhausted, false},
		{"/BatchGetDocuments", codes.Unavailable, true},
		{"/RunQuery", codes.ResourceExhausted, false},
		{"/RunQuery", codes.Unavailable, false},
	} {
		what := fmt.Sprintf("%s, %v ×2", tc.suffix[1:], tc.code)
		alone, _, errAlone := run(nil, tc.suffix, tc.code)
		opts, n, err := run(standard(t), tc.suffix, tc.code)
		t.Logf("%s: alone %v, err %v; options %v, err %v", what, alone, errAlone, opts, err)
		oneLayer(t, what+", options", opts, tc.clients)
		if err != nil || n != 1 {
			t.Errorf("%s, options: %d documents, err %v; want c/d once", what, n, err)
		}
	}
}

// storageFake is a scripted Cloud Storage over gRPC: ReadObject serves any
// object as "hello", BidiWriteObject takes an upload whole and counts it.
// Its messages are the client's own types (an internal package of
// cloud.google.com/go/storage), reached through the proto registry.
type storageFake struct {
	mu      sync.Mutex
	written map[string][]string // object name -> contents of each upload completed
}

const storageData = "hello"

// storageMessage returns a new message of the Storage API named name
// ("ReadObjectRequest"), as the client registered it.
func storageMessage(name string) protoreflect.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName("google.storage.v2." + name))
	if err != nil {
		panic(err)
	}
	return mt.New()
}

// get returns the field of m at path ("write_object_spec", "resource",
// "name"), its default if unset.
func get(m protoreflect.Message, path ...string) protoreflect.Value {
	for i, name := range path {
		v := m.Get(m.Descriptor().Fields().ByName(protoreflect.Name(name)))
		if i == len(path)-1 {
			return v
		}
		m = v.Message()
	}
	panic("get: empty path")
}

// storageReply returns a message of the Storage API named name, from JSON.
func storageReply(name, format string, args ...any) proto.Message {
	m := storageMessage(name).Interface()
	if err := protojson.Unmarshal(fmt.Appendf(nil, format, args...), m); err != nil {
		panic(err)
	}
	return m
}

func (f *storageFake) handle(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	switch method {
	case "/google.storage.v2.Storage/ReadObject":
		req := storageMessage("ReadObjectRequest")
		if err := ss.RecvMsg(req.Interface()); err != nil {
			return err
		}
		return ss.SendMsg(storageReply("ReadObjectResponse",
			`{"checksummedData": {"content": %q}, "metadata": {"bucket": %q, "name": %q, "generation": "1", "size": "%d"}}`,
			base64.StdEncoding.EncodeToString([]byte(storageData)), get(req, "bucket").String(), get(req, "object").String(), len(storageData)))
	case "/google.storage.v2.Storage/BidiWriteObject":
		var bucket, name string
		var data []byte
		for {
			req := storageMessage("BidiWriteObjectRequest")
			err := ss.RecvMsg(req.Interface())
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if n := get(req, "write_object_spec", "resource", "name").String(); n != "" {
				bucket, name = get(req, "write_object_spec", "resource", "bucket").String(), n
			}
			data = append(data, get(req, "checksummed_data", "content").Bytes()...)
			switch {
			case get(req, "finish_write").Bool():
				if name == "" {
					return status.Error(codes.InvalidArgument, "storageFake: no write_object_spec")
				}
				f.mu.Lock()
				f.written[name] = append(f.written[name], string(data))
				f.mu.Unlock()
				return ss.SendMsg(storageReply("BidiWriteObjectResponse",
					`{"resource": {"bucket": %q, "name": %q, "generation": "1", "size": "%d"}}`, bucket, name, len(data)))
			case get(req, "state_lookup").Bool() || get(req, "flush").Bool():
				if err := ss.SendMsg(storageReply("BidiWriteObjectResponse", `{"persistedSize": "%d"}`, len(data))); err != nil {
					return err
				}
			}
		}
	}
	return status.Errorf(codes.Unimplemented, "storageFake: %s", method)
}

// TestHandwrittenStorage: Storage over gRPC, its reads (ReadObject) and
// writes (BidiWriteObject) refused with RESOURCE_EXHAUSTED twice, then
// failing with UNAVAILABLE twice. The client retries both codes by itself
// (run, invoke.go) for a read and for a write with a precondition
// (DoesNotExist), and refuses them on purpose for a write without one: the
// library leaves every one to it, one attempt each, and nothing is written
// twice.
//
// The expectation for a write without a precondition is the library's
// statement of Storage (internal/cloudclients/handwritten.go: "refuses
// them on purpose"), to be confirmed: RESOURCE_EXHAUSTED ×2 is then
// recovered by nobody, as alone, though the server refused both attempts
// and Safety alone would retry them.
func TestHandwrittenStorage(t *testing.T) {
	type result struct {
		l       layers
		got     string
		written []string
		err     error
	}
	run := func(platform []option.ClientOption, suffix string, code codes.Code, precondition bool) result {
		fake := &storageFake{written: make(map[string][]string)}
		srv := grpc.NewServer(grpc.UnknownServiceHandler(fake.handle))
		proxy := serveLoopback(t, srv)
		proxy.FailWith(failFirst(suffix, 2, code))
		// The emulator setting keeps the client on loopback: no DirectPath,
		// no metrics exporter (as TestHeaders in package googleclients).
		t.Setenv("STORAGE_EMULATOR_HOST_GRPC", proxy.Addr)
		own := newOwnAttempts()
		c, err := storage.NewGRPCClient(t.Context(), counting(own, platform, proxy.Addr)...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The client's own backoff, shortened (1 s, doubling, by default):
		// who retries is what is measured, not how long it waits.
		c.SetRetry(storage.WithBackoff(gax.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}))
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		var res result
		o := c.Bucket("b").Object("o")
		if suffix == "/ReadObject" {
			var r *storage.Reader
			if r, res.err = o.NewReader(ctx); res.err == nil {
				var b []byte
				b, res.err = io.ReadAll(r)
				res.got = string(b)
				r.Close()
			}
		} else {
			if precondition {
				o = o.If(storage.Conditions{DoesNotExist: true})
			}
			w := o.NewWriter(ctx)
			_, res.err = io.WriteString(w, storageData)
			if err := w.Close(); res.err == nil {
				res.err = err
			}
		}
		res.l = layers{proxy.Attempts(suffix), own.of(suffix)}
		fake.mu.Lock()
		res.written = fake.written["o"]
		fake.mu.Unlock()
		return res
	}
	for _, tc := range []struct {
		suffix       string
		code         codes.Code
		precondition bool
		fails        bool // the client refuses to retry it
	}{
		{"/ReadObject", codes.ResourceExhausted, false, false},
		{"/ReadObject", codes.Unavailable, false, false},
		{"/BidiWriteObject", codes.ResourceExhausted, true, false},
		{"/BidiWriteObject", codes.Unavailable, true, false},
		{"/BidiWriteObject", codes.ResourceExhausted, false, true},
		{"/BidiWriteObject", codes.Unavailable, false, true},
	} {
		what := fmt.Sprintf("%s, %v ×2", tc.suffix[1:], tc.code)
		if tc.suffix == "/BidiWriteObject" {
			what += fmt.Sprintf(", precondition %t", tc.precondition)
		}
		alone := run(nil, tc.suffix, tc.code, tc.precondition)
		opts := run(standard(t), tc.suffix, tc.code, tc.precondition)
		t.Logf("%s: alone %v, err %v, written %q; options %v, err %v, written %q", what, alone.l, alone.err, alone.written, opts.l, opts.err, opts.written)
		oneLayer(t, what+", options", opts.l, true)
		switch {
		case tc.fails:
			if opts.err == nil || opts.l != alone.l || len(opts.written) != 0 {
				t.Errorf("%s, options: %v, err %v, written %q; want as alone (%v): the client's choice", what, opts.l, opts.err, opts.written, alone.l)
			}
		case opts.err != nil:
			t.Errorf("%s, options: %v; want success", what, opts.err)
		case tc.suffix == "/ReadObject" && opts.got != storageData:
			t.Errorf("%s, options: read %q, want %q", what, opts.got, storageData)
		case tc.suffix == "/BidiWriteObject" && (len(opts.written) != 1 || opts.written[0] != storageData):
			t.Errorf("%s, options: written %q, want %q once", what, opts.written, storageData)
		}
	}
}
