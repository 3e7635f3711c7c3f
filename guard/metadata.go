package guard

import (
	"context"
	"hash/maphash"
	"math"
	"net"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/guardcore"
)

// previousAttemptsKey is the request metadata that marks a retry: the
// number of attempts of the call made before this one (gRFC A6; the
// interceptor package's PreviousAttemptsKey).
const previousAttemptsKey = "grpc-previous-rpc-attempts"

// previousAttempts returns the count of the attempts before the one whose
// context is ctx: the first value of its previousAttemptsKey (see
// parseCount), 0 if it has none.
func previousAttempts(ctx context.Context) int64 {
	v := metadata.ValueFromIncomingContext(ctx, previousAttemptsKey)
	if len(v) == 0 {
		return 0
	}
	return parseCount(v[0])
}

// parseCount reads s as a count: a decimal of any length, after at most one
// "+", saturating at math.MaxInt64; 0 for anything else.
func parseCount(s string) int64 {
	s = strings.TrimPrefix(s, "+")
	if s == "" {
		return 0
	}
	var n int64
	for i := 0; i < len(s); i++ {
		d := int64(s[i]) - '0'
		if d < 0 || d > 9 {
			return 0
		}
		if n > (math.MaxInt64-d)/10 {
			n = math.MaxInt64
		} else {
			n = 10*n + d
		}
	}
	return n
}

// tiers are the values of grpcbackoff.CriticalityKey and the ranks the
// guard reads them as.
var tiers = [...]struct {
	name string
	rank guardcore.Rank
}{
	{grpcbackoff.CriticalitySheddable, guardcore.RankSheddable},
	{grpcbackoff.CriticalitySheddablePlus, guardcore.RankDefault},
	{grpcbackoff.CriticalityCritical, guardcore.RankCritical},
	{grpcbackoff.CriticalityCriticalPlus, guardcore.RankCritical},
}

// criticality returns the tier the attempt whose context is ctx says in its
// first value of grpcbackoff.CriticalityKey, case ignored, and its rank:
// "" and guardcore.RankDefault for none or an unknown value.
func criticality(ctx context.Context) (string, guardcore.Rank) {
	v := metadata.ValueFromIncomingContext(ctx, grpcbackoff.CriticalityKey)
	if len(v) == 0 {
		return "", guardcore.RankDefault
	}
	for _, t := range tiers {
		if strings.EqualFold(v[0], t.name) {
			return t.name, t.rank
		}
	}
	return "", guardcore.RankDefault
}

// clientKey returns the key of the (method, client) pair of the attempt
// whose context is ctx, for the method whose id is id: a hash of id and its
// peer's IP address and port (of id alone for a peer that is not a TCP
// address).
func (g *Guard) clientKey(ctx context.Context, id uint64) uint64 {
	var b [26]byte
	if p, ok := peer.FromContext(ctx); ok {
		if a, ok := p.Addr.(*net.TCPAddr); ok {
			copy(b[:16], a.IP)
			b[16], b[17] = byte(a.Port>>8), byte(a.Port)
		}
	}
	for i := range 8 {
		b[18+i] = byte(id >> (8 * i))
	}
	return maphash.Bytes(g.seed, b[:])
}
