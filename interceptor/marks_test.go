package interceptor_test

import "github.com/platformkit/grpcbackoff/interceptor"

// testService states the methods of grpc.testing.TestService idempotent, as
// a user states those of a service of theirs (interceptor.WithSafety): its
// descriptor says nothing of their safety, and their names are no standard
// reads, so that a Retrier without it treats them as writes, not resent
// after a failure that may have applied. The tests of how calls are retried
// state it; those of what a write gets do not.
var testService = interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent)
