package cloudclients

// Hand-maintained: what the hand-written clients of cloud.google.com/go retry
// in their own code, beside or instead of their generated CallOptions (which
// retries.txt holds). Each entry was read from the client's source at
// the version named in its source, and is recognized by the gccl/ token that
// client adds to x-goog-api-client (TestHeaders in the googleclients module
// measures it). An entry states every code left to the client for that
// method: those its loop retries, and those it refuses on purpose; a code
// retried only when the server sent RetryInfo is in hinted, not in codes.
// Keep handEntries sorted by method.
//
// Not listed, as their generated CallOptions say what they retry:
//   - op.Wait (cloud.google.com/go/longrunning v1.5.0, Operation.Poll in
//     longrunning.go): each poll is one GetOperation of the OperationsClient
//     (lroauto), retried as its CallOptions say (UNAVAILABLE); an error ends
//     Wait. Its calls carry the LRO client's own gapic/ token (gapic/1.5.0),
//     which tells them from a service client's GetOperation mixin (rules.go,
//     mixinRule).
//   - Spanner's unary calls (ExecuteSql, BeginTransaction, CreateSession,
//     BatchCreateSessions…) go through the generated client with its default
//     CallOptions; Commit is listed for its transaction's rerun.
//   - Firestore's RunQuery and RunAggregationQuery (query.go,
//     aggregation_query.go): the generated client's retry, which covers only
//     the opening of the stream (opening in the generated data's terms: a
//     stream whose CallOptions retry some code).
//   - Bigtable's hand-written AdminClient (admin.go, adminRetryOptions:
//     DEADLINE_EXCEEDED, UNAVAILABLE, ABORTED) calls the BigtableTableAdmin
//     methods of the generated data, which holds its generated client's codes.

// handEntry is what one hand-written client's own code retries for one
// method.
type handEntry struct {
	method  string // full gRPC method
	codes   uint32 // left to the client: retried by its loop, or refused on purpose; bit 1<<code
	hinted  uint32 // retried by its loop only when the error carries RetryInfo
	opening bool   // a stream whose loop covers only its opening; false: the loop resumes the whole stream
	// exactlyOnce are codes left to the client too on a Pub/Sub subscription
	// with exactly-once delivery (the subscriber's acks, pubsub.go).
	exactlyOnce uint32
	source      string // the client, its version, and where the loop is
}

// Codes, as bits, for the entries below.
const (
	bCanceled           = 1 << 1
	bUnknown            = 1 << 2
	bDeadlineExceeded   = 1 << 4
	bFailedPrecondition = 1 << 9
	bResourceExhausted  = 1 << 8
	bAborted            = 1 << 10
	bInternal           = 1 << 13
	bUnavailable        = 1 << 14
	bUnauthenticated    = 1 << 16
	bEvery              = 1<<17 - 2 // codes 1 to 16
)

var handEntries = [...]handEntry{
	// Bigtable data client, cloud.google.com/go/bigtable v1.58.0 (gccl/1.58.0,
	// no gapic/ token): bigtable.go, newRetryOption and clientOnlyRetry:
	// DEADLINE_EXCEEDED, UNAVAILABLE, ABORTED, and INTERNAL with an RST_STREAM
	// or unexpected-EOF message; bigtableRetryer.Retry retries any error that
	// carries RetryInfo, whatever its code, after the server's delay.
	{method: "/google.bigtable.v2.Bigtable/CheckAndMutateRow", // not idempotent: no retry option (Table.Apply, bigtable.go)
		codes: 0, source: "Bigtable data client's Table.Apply (bigtable.go), v1.58.0: CheckAndMutateRow is never retried"},
	{method: "/google.bigtable.v2.Bigtable/ExecuteQuery", // clientOnlyExecuteQueryRetry (query.go): also FAILED_PRECONDITION for an expired query, re-prepared
		codes: bDeadlineExceeded | bUnavailable | bAborted | bInternal | bFailedPrecondition, hinted: bEvery,
		source: "Bigtable data client's ExecuteQuery loop (query.go, resumes from its resume token), v1.58.0"},
	{method: "/google.bigtable.v2.Bigtable/MutateRow", // retried only when every SetCell has its timestamp (mutationsAreRetryable): refused on purpose otherwise
		codes: bDeadlineExceeded | bUnavailable | bAborted | bInternal, hinted: bEvery,
		source: "Bigtable data client's Table.Apply (bigtable.go; idempotent mutations only), v1.58.0"},
	{method: "/google.bigtable.v2.Bigtable/MutateRows", // retries only the entries that failed (apply_bulk.go)
		codes: bDeadlineExceeded | bUnavailable | bAborted | bInternal, hinted: bEvery,
		source: "Bigtable data client's ApplyBulk loop (apply_bulk.go, resends the failed entries), v1.58.0"},
	{method: "/google.bigtable.v2.Bigtable/PingAndWarm",
		codes: 0, source: "Bigtable data client's PingAndWarm (client.go), v1.58.0: never retried"},
	{method: "/google.bigtable.v2.Bigtable/PrepareQuery",
		codes: bDeadlineExceeded | bUnavailable | bAborted | bInternal, hinted: bEvery,
		source: "Bigtable data client's PrepareStatement (query.go), v1.58.0"},
	{method: "/google.bigtable.v2.Bigtable/ReadModifyWriteRow", // not idempotent: no retry option
		codes: 0, source: "Bigtable data client's ApplyReadModifyWrite (read_modify_write.go), v1.58.0: never retried"},
	{method: "/google.bigtable.v2.Bigtable/ReadRows", // resumes after the last row received (Table.readRows)
		codes: bDeadlineExceeded | bUnavailable | bAborted | bInternal, hinted: bEvery,
		source: "Bigtable data client's ReadRows loop (bigtable.go, resumes after the last row), v1.58.0"},
	{method: "/google.bigtable.v2.Bigtable/SampleRowKeys", // starts over, dropping the keys received
		codes: bDeadlineExceeded | bUnavailable | bAborted | bInternal, hinted: bEvery,
		source: "Bigtable data client's SampleRowKeys loop (sample_row_keys.go, starts over), v1.58.0"},

	// Firestore, cloud.google.com/go/firestore v1.29.2 (gccl/1.29.2 beside the
	// generated client's gapic/1.29.2).
	{method: "/google.firestore.v1.Firestore/BatchGetDocuments", // Client.getAll (client.go): 5 attempts, asks again for the documents not received; not in a transaction (the transaction reruns)
		codes:  bUnavailable | bInternal | bDeadlineExceeded,
		source: "Firestore's getAll loop (client.go, asks again for the missing documents), v1.29.2"},
	{method: "/google.firestore.v1.Firestore/Listen", // watchStream.recv (watch.go): reopens from its resume token on every code isPermanentWatchError spares; waits its Max after RESOURCE_EXHAUSTED
		codes:  bUnknown | bDeadlineExceeded | bResourceExhausted | bInternal | bUnavailable | bUnauthenticated,
		source: "Firestore's watch stream (watch.go, reopens from its resume token), v1.29.2"},

	// Pub/Sub, cloud.google.com/go/pubsub/v2 v2.8.1 (gccl/2.8.1 beside the
	// generated clients' gapic/2.8.1).
	{method: "/google.pubsub.v1.Publisher/Publish", // publishRetryer (service.go) over the CallOptions' codes; refuses INTERNAL "invalid UTF-8" on purpose
		codes:  bCanceled | bUnknown | bDeadlineExceeded | bResourceExhausted | bAborted | bInternal | bUnavailable,
		source: "Pub/Sub publisher's publishRetryer (publisher.go, service.go), v2.8.1"},
	{method: "/google.pubsub.v1.Subscriber/Acknowledge", // the CallOptions' UNAVAILABLE; with exactly-once delivery, retryAcks (iterator.go) retries exactlyOnceDeliveryTemporaryRetryErrors for 600 s; without it, sendAck sends once
		codes:       bUnavailable,
		exactlyOnce: bDeadlineExceeded | bResourceExhausted | bAborted | bInternal | bUnavailable,
		source:      "Pub/Sub subscriber's acks (iterator.go: sendAck, retryAcks with exactly-once delivery), v2.8.1"},
	{method: "/google.pubsub.v1.Subscriber/ModifyAckDeadline", // as Acknowledge: sendModAck, retryModAcks
		codes:       bUnavailable,
		exactlyOnce: bDeadlineExceeded | bResourceExhausted | bAborted | bInternal | bUnavailable,
		source:      "Pub/Sub subscriber's modacks (iterator.go: sendModAck, retryModAcks with exactly-once delivery), v2.8.1"},
	{method: "/google.pubsub.v1.Subscriber/StreamingPull", // pullStream (pullstream.go): reopens the stream on defaultRetryer's codes (service.go); streamingPullRetryer refuses RESOURCE_EXHAUSTED on Recv on purpose (google-cloud-go issue 1166)
		codes:  bUnknown | bDeadlineExceeded | bResourceExhausted | bAborted | bInternal | bUnavailable,
		source: "Pub/Sub subscriber's StreamingPull loop (pullstream.go, reopens the stream; RESOURCE_EXHAUSTED refused on purpose), v2.8.1"},

	// Spanner data client, cloud.google.com/go/spanner v1.96.1 (gccl/1.96.1
	// beside the generated client's gapic/1.96.1).
	{method: "/google.spanner.v1.Spanner/Commit", // the CallOptions' UNAVAILABLE and RESOURCE_EXHAUSTED; ABORTED reruns the transaction (runWithRetryOnAbortedOrFailedInlineBegin, retry.go)
		codes:  bUnavailable | bResourceExhausted | bAborted,
		source: "Spanner's CallOptions and its transaction rerun on ABORTED (retry.go), v1.96.1"},
	{method: "/google.spanner.v1.Spanner/ExecuteStreamingSql", // resumableStreamDecoder.next (read.go): UNAVAILABLE, INTERNAL with a known message; RESOURCE_EXHAUSTED only with the server's delay (spannerRetryer, retry.go)
		codes: bUnavailable | bInternal, hinted: bResourceExhausted,
		source: "Spanner's resumable stream (read.go, resumes from its resume token), v1.96.1"},
	{method: "/google.spanner.v1.Spanner/StreamingRead",
		codes: bUnavailable | bInternal, hinted: bResourceExhausted,
		source: "Spanner's resumable stream (read.go, resumes from its resume token), v1.96.1"},

	// Storage over gRPC, cloud.google.com/go/storage v1.69.0 (storage.NewGRPCClient;
	// gccl/1.69.0, and gccl-invocation-id/… gccl-attempt-count/N per attempt):
	// its calls turn the generated client's retry off (gax.WithRetry(nil),
	// grpc_client.go) and run in run (invoke.go), which retries ShouldRetry's
	// codes, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INTERNAL, UNAVAILABLE, for
	// an idempotent call, and refuses them on purpose for another (a write
	// without preconditions, RetryIdempotent).
	{method: "/google.storage.v2.Storage/BidiReadObject", // reopens at the offset reached (grpc_reader_multi_range.go, grpc_client.go)
		codes:  bDeadlineExceeded | bResourceExhausted | bInternal | bUnavailable,
		source: "Storage's gRPC reader (grpc_client.go, reopens at the offset reached), v1.69.0"},
	{method: "/google.storage.v2.Storage/BidiWriteObject", // a resumable upload resumes from the persisted size (grpc_writer.go)
		codes:  bDeadlineExceeded | bResourceExhausted | bInternal | bUnavailable,
		source: "Storage's gRPC writer (grpc_writer.go, resumes an upload from its persisted size), v1.69.0"},
	{method: "/google.storage.v2.Storage/DeleteObject",
		codes:  bDeadlineExceeded | bResourceExhausted | bInternal | bUnavailable,
		source: "Storage's run (invoke.go), v1.69.0"},
	{method: "/google.storage.v2.Storage/GetBucket",
		codes:  bDeadlineExceeded | bResourceExhausted | bInternal | bUnavailable,
		source: "Storage's run (invoke.go), v1.69.0"},
	{method: "/google.storage.v2.Storage/GetObject",
		codes:  bDeadlineExceeded | bResourceExhausted | bInternal | bUnavailable,
		source: "Storage's run (invoke.go), v1.69.0"},
	{method: "/google.storage.v2.Storage/ListObjects",
		codes:  bDeadlineExceeded | bResourceExhausted | bInternal | bUnavailable,
		source: "Storage's run (invoke.go), v1.69.0"},
	{method: "/google.storage.v2.Storage/QueryWriteStatus",
		codes:  bDeadlineExceeded | bResourceExhausted | bInternal | bUnavailable,
		source: "Storage's run (invoke.go), v1.69.0"},
	{method: "/google.storage.v2.Storage/ReadObject", // reopens at the offset reached (gRPCReadObjectReader.reopenStream, grpc_reader.go)
		codes:  bDeadlineExceeded | bResourceExhausted | bInternal | bUnavailable,
		source: "Storage's gRPC reader (grpc_reader.go, reopens at the offset reached), v1.69.0"},
	{method: "/google.storage.v2.Storage/StartResumableWrite",
		codes:  bDeadlineExceeded | bResourceExhausted | bInternal | bUnavailable,
		source: "Storage's run (invoke.go), v1.69.0"},
	{method: "/google.storage.v2.Storage/UpdateObject",
		codes:  bDeadlineExceeded | bResourceExhausted | bInternal | bUnavailable,
		source: "Storage's run (invoke.go), v1.69.0"},
	{method: "/google.storage.v2.Storage/WriteObject",
		codes:  bDeadlineExceeded | bResourceExhausted | bInternal | bUnavailable,
		source: "Storage's gRPC writer (grpc_writer.go), v1.69.0"},
}
