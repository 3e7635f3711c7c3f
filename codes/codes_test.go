package codes

import (
	"math"
	"slices"
	"testing"

	grpccodes "google.golang.org/grpc/codes"
)

// allCodes lists every code defined by the gRPC spec, 0 through 16.
func allCodes() []grpccodes.Code {
	out := make([]grpccodes.Code, 0, maxCode)
	for c := grpccodes.OK; c < maxCode; c++ {
		out = append(out, c)
	}
	return out
}

func TestToHTTP(t *testing.T) {
	tests := []struct {
		code grpccodes.Code
		want int
	}{
		{grpccodes.OK, 200},
		{grpccodes.Canceled, 499},
		{grpccodes.Unknown, 500},
		{grpccodes.InvalidArgument, 400},
		{grpccodes.DeadlineExceeded, 504},
		{grpccodes.NotFound, 404},
		{grpccodes.AlreadyExists, 409},
		{grpccodes.PermissionDenied, 403},
		{grpccodes.ResourceExhausted, 429},
		{grpccodes.FailedPrecondition, 400},
		{grpccodes.Aborted, 409},
		{grpccodes.OutOfRange, 400},
		{grpccodes.Unimplemented, 501},
		{grpccodes.Internal, 500},
		{grpccodes.Unavailable, 503},
		{grpccodes.DataLoss, 500},
		{grpccodes.Unauthenticated, 401},
		// Outside 0..16: treated as UNKNOWN.
		{grpccodes.Code(17), 500},
		{grpccodes.Code(100), 500},
		{grpccodes.Code(math.MaxUint32), 500},
	}
	covered := make(map[grpccodes.Code]bool)
	for _, tt := range tests {
		covered[tt.code] = true
		if got := ToHTTP(tt.code); got != tt.want {
			t.Errorf("ToHTTP(%v) = %d, want %d", tt.code, got, tt.want)
		}
	}
	for _, c := range allCodes() {
		if !covered[c] {
			t.Errorf("ToHTTP table does not cover %v", c)
		}
	}
}

func TestFromHTTP(t *testing.T) {
	tests := []struct {
		status int
		want   grpccodes.Code
	}{
		// Statuses with a code of their own.
		{200, grpccodes.OK},
		{400, grpccodes.InvalidArgument},
		{401, grpccodes.Unauthenticated},
		{403, grpccodes.PermissionDenied},
		{404, grpccodes.NotFound},
		{409, grpccodes.Aborted},
		{412, grpccodes.FailedPrecondition},
		{416, grpccodes.OutOfRange},
		{429, grpccodes.ResourceExhausted},
		{499, grpccodes.Canceled},
		{500, grpccodes.Internal},
		{501, grpccodes.Unimplemented},
		{503, grpccodes.Unavailable},
		{504, grpccodes.DeadlineExceeded},

		// Unlisted 2xx: OK.
		{201, grpccodes.OK},
		{204, grpccodes.OK},
		{299, grpccodes.OK},

		// Unlisted 4xx: FAILED_PRECONDITION.
		{402, grpccodes.FailedPrecondition},
		{405, grpccodes.FailedPrecondition},
		{408, grpccodes.FailedPrecondition},
		{410, grpccodes.FailedPrecondition},
		{418, grpccodes.FailedPrecondition},
		{422, grpccodes.FailedPrecondition},
		{431, grpccodes.FailedPrecondition},
		{451, grpccodes.FailedPrecondition},
		{498, grpccodes.FailedPrecondition},

		// Unlisted 5xx: INTERNAL.
		{502, grpccodes.Internal},
		{505, grpccodes.Internal},
		{511, grpccodes.Internal},
		{599, grpccodes.Internal},

		// 1xx and 3xx: UNKNOWN.
		{100, grpccodes.Unknown},
		{101, grpccodes.Unknown},
		{199, grpccodes.Unknown},
		{300, grpccodes.Unknown},
		{301, grpccodes.Unknown},
		{304, grpccodes.Unknown},
		{399, grpccodes.Unknown},

		// Not valid HTTP statuses: UNKNOWN.
		{math.MinInt, grpccodes.Unknown},
		{-500, grpccodes.Unknown},
		{-150, grpccodes.Unknown},
		{-1, grpccodes.Unknown},
		{0, grpccodes.Unknown},
		{5, grpccodes.Unknown},
		{99, grpccodes.Unknown},
		{600, grpccodes.Unknown},
		{999, grpccodes.Unknown},
		{math.MaxInt, grpccodes.Unknown},
	}
	for _, tt := range tests {
		if got := FromHTTP(tt.status); got != tt.want {
			t.Errorf("FromHTTP(%d) = %v, want %v", tt.status, got, tt.want)
		}
	}
}

// TestFromHTTPToHTTPRoundTrip checks FromHTTP(ToHTTP(c)) for every code. It
// returns c, except where code.proto maps several codes to one status.
func TestFromHTTPToHTTPRoundTrip(t *testing.T) {
	lossy := map[grpccodes.Code]grpccodes.Code{
		grpccodes.Unknown:            grpccodes.Internal,        // 500
		grpccodes.DataLoss:           grpccodes.Internal,        // 500
		grpccodes.AlreadyExists:      grpccodes.Aborted,         // 409
		grpccodes.FailedPrecondition: grpccodes.InvalidArgument, // 400
		grpccodes.OutOfRange:         grpccodes.InvalidArgument, // 400
	}
	for _, c := range allCodes() {
		want, ok := lossy[c]
		if !ok {
			want = c
		}
		h := ToHTTP(c)
		if got := FromHTTP(h); got != want {
			t.Errorf("FromHTTP(ToHTTP(%v)) = FromHTTP(%d) = %v, want %v", c, h, got, want)
		}
	}
}

// TestToHTTPFromHTTPRoundTrip checks ToHTTP(FromHTTP(s)) for every status
// that has a code of its own. It returns s, except for 412 and 416, whose
// codes ToHTTP sends to 400.
func TestToHTTPFromHTTPRoundTrip(t *testing.T) {
	tests := []struct {
		status int
		want   int
	}{
		{200, 200},
		{400, 400},
		{401, 401},
		{403, 403},
		{404, 404},
		{409, 409},
		{412, 400},
		{416, 400},
		{429, 429},
		{499, 499},
		{500, 500},
		{501, 501},
		{503, 503},
		{504, 504},
	}
	for _, tt := range tests {
		c := FromHTTP(tt.status)
		if got := ToHTTP(c); got != tt.want {
			t.Errorf("ToHTTP(FromHTTP(%d)) = ToHTTP(%v) = %d, want %d", tt.status, c, got, tt.want)
		}
	}
}

func TestFromTransportHTTP(t *testing.T) {
	tests := []struct {
		status int
		want   grpccodes.Code
	}{
		// grpc-go's HTTPStatusConvTab.
		{400, grpccodes.Internal},
		{401, grpccodes.Unauthenticated},
		{403, grpccodes.PermissionDenied},
		{404, grpccodes.Unimplemented},
		{429, grpccodes.Unavailable},
		{502, grpccodes.Unavailable},
		{503, grpccodes.Unavailable},
		{504, grpccodes.Unavailable},

		// Everything else is UNKNOWN, including 200 and the 5xx that
		// Google's mapping treats specially.
		{200, grpccodes.Unknown},
		{204, grpccodes.Unknown},
		{302, grpccodes.Unknown},
		{409, grpccodes.Unknown},
		{412, grpccodes.Unknown},
		{499, grpccodes.Unknown},
		{500, grpccodes.Unknown},
		{501, grpccodes.Unknown},
		{505, grpccodes.Unknown},
		// The spec maps 431 to INTERNAL; grpc-go v1.85.0 does not.
		{431, grpccodes.Unknown},
		// 1xx: grpc-go skips these headers; no code of its own.
		{100, grpccodes.Unknown},
		{103, grpccodes.Unknown},
		// Not valid HTTP statuses.
		{math.MinInt, grpccodes.Unknown},
		{-1, grpccodes.Unknown},
		{0, grpccodes.Unknown},
		{600, grpccodes.Unknown},
		{math.MaxInt, grpccodes.Unknown},
	}
	for _, tt := range tests {
		if got := FromTransportHTTP(tt.status); got != tt.want {
			t.Errorf("FromTransportHTTP(%d) = %v, want %v", tt.status, got, tt.want)
		}
	}
}

func TestForHTTPStatuses(t *testing.T) {
	fiveXXOr429 := []grpccodes.Code{
		grpccodes.Unknown,
		grpccodes.DeadlineExceeded,
		grpccodes.ResourceExhausted,
		grpccodes.Unimplemented,
		grpccodes.Internal,
		grpccodes.Unavailable,
		grpccodes.DataLoss,
	}
	tests := []struct {
		name     string
		statuses []int
		want     []grpccodes.Code
	}{
		{"5xx and 429", []int{Class5xx, 429}, fiveXXOr429},
		{"429 and 5xx", []int{429, Class5xx}, fiveXXOr429},
		{"5xx listed and 429", []int{500, 501, 502, 503, 504, 429}, fiveXXOr429},
		{"duplicates", []int{429, Class5xx, 503, 429, Class5xx}, fiveXXOr429},
		{"5xx", []int{Class5xx}, []grpccodes.Code{
			grpccodes.Unknown,
			grpccodes.DeadlineExceeded,
			grpccodes.Unimplemented,
			grpccodes.Internal,
			grpccodes.Unavailable,
			grpccodes.DataLoss,
		}},
		{"4xx", []int{Class4xx}, []grpccodes.Code{
			grpccodes.Canceled,
			grpccodes.InvalidArgument,
			grpccodes.NotFound,
			grpccodes.AlreadyExists,
			grpccodes.PermissionDenied,
			grpccodes.ResourceExhausted,
			grpccodes.FailedPrecondition,
			grpccodes.Aborted,
			grpccodes.OutOfRange,
			grpccodes.Unauthenticated,
		}},
		{"2xx", []int{Class2xx}, []grpccodes.Code{grpccodes.OK}},
		{"200 twice", []int{200, 200}, []grpccodes.Code{grpccodes.OK}},
		{"400", []int{400}, []grpccodes.Code{
			grpccodes.InvalidArgument,
			grpccodes.FailedPrecondition,
			grpccodes.OutOfRange,
		}},
		{"500", []int{500}, []grpccodes.Code{
			grpccodes.Unknown,
			grpccodes.Internal,
			grpccodes.DataLoss,
		}},
		{"409", []int{409}, []grpccodes.Code{grpccodes.AlreadyExists, grpccodes.Aborted}},
		{"499", []int{499}, []grpccodes.Code{grpccodes.Canceled}},
		{"503", []int{503}, []grpccodes.Code{grpccodes.Unavailable}},
		{"every class", []int{Class1xx, Class2xx, Class3xx, Class4xx, Class5xx}, allCodes()},

		// Nothing matches.
		{"no arguments", nil, nil},
		{"empty", []int{}, nil},
		{"502 is never produced", []int{502}, nil},
		{"412 is never produced", []int{412}, nil},
		{"1xx and 3xx", []int{Class1xx, Class3xx}, nil},
		{"not a status or class", []int{0, 6, -5, 99, 600}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ForHTTPStatuses(tt.statuses...)
			if !slices.Equal(got, tt.want) {
				t.Errorf("ForHTTPStatuses(%v) = %v, want %v", tt.statuses, got, tt.want)
			}
			if len(tt.want) == 0 && got != nil {
				t.Errorf("ForHTTPStatuses(%v) = %#v, want nil", tt.statuses, got)
			}
		})
	}
}

// TestForHTTPStatusesMatchesToHTTP checks ForHTTPStatuses against ToHTTP for
// every single status from 0 to 999 and every class.
func TestForHTTPStatusesMatchesToHTTP(t *testing.T) {
	for s := 0; s < 1000; s++ {
		var want []grpccodes.Code
		for _, c := range allCodes() {
			h := ToHTTP(c)
			if h == s || (s >= 1 && s <= 5 && h/100 == s) {
				want = append(want, c)
			}
		}
		if got := ForHTTPStatuses(s); !slices.Equal(got, want) {
			t.Errorf("ForHTTPStatuses(%d) = %v, want %v", s, got, want)
		}
	}
}

func TestForHTTPStatusesReturnsFreshSlice(t *testing.T) {
	first := ForHTTPStatuses(Class5xx, 429)
	for i := range first {
		first[i] = grpccodes.OK
	}
	second := ForHTTPStatuses(Class5xx, 429)
	if slices.Contains(second, grpccodes.OK) || len(second) != 7 {
		t.Errorf("ForHTTPStatuses(Class5xx, 429) = %v after modifying an earlier result, want 7 codes without OK", second)
	}
}
