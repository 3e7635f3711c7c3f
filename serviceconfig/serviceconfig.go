// Package serviceconfig reads the retry configuration of a gRPC service config
// document (grpc/doc/service_config.md, gRFC A6), so that a team that
// configured grpc-go's built-in retry keeps its configuration with
// interceptor.WithServiceConfig:
//
//	sc, err := serviceconfig.Parse(doc)
//	...
//	r, err := interceptor.New(grpcbackoff.DefaultPolicy(), interceptor.WithServiceConfig(sc))
//
// # The mapping
//
// Before retry n (n ≥ 0) grpc-go v1.85 waits b·U[0.8, 1.2], with
// b = min(initialBackoff·backoffMultiplier^n, maxBackoff) (gRFC A6 as amended
// in 2024). A retryPolicy becomes the Policy that waits the same:
//
//	Initial        = min(initialBackoff, maxBackoff)
//	Multiplier     = backoffMultiplier
//	Max            = maxBackoff
//	Jitter         = 0
//	JitterFactor   = 0.2
//	MaxAttempts    = maxAttempts
//	AttemptTimeout = perAttemptRecvTimeout (0 when absent)
//	Codes          = retryableStatusCodes
//
// With initialBackoff "0.1s", maxBackoff "1s" and backoffMultiplier 2, both
// wait 80–120, 160–240, 320–480, 640–960, then 800–1200 ms. A Policy also
// honours RetryInfo beside pushback, and stops when a server asks for more
// than MaxHintDelay and 1.2·maxBackoff, or more than the deadline leaves.
//
// A hedgingPolicy becomes a grpcbackoff.Hedging: maxAttempts (required, used
// as given) is MaxAttempts, hedgingDelay (required, as grpc-java requires it)
// is Delay, nonFatalStatusCodes is NonFatalCodes. An entry's timeout becomes
// Method.Timeout.
//
// A6's retryThrottling is a bucket of maxTokens tokens: each failed attempt
// takes 1, each success gives back tokenRatio, and no retry is sent while it
// holds maxTokens/2 or less. A Throttle is a retry budget instead:
//
//	Burst      = max(1, ⌊maxTokens/2⌋)
//	Ratio      = min(tokenRatio, 1)
//	PerSecond  = 0
//	Reserve    = min(tokenRatio, 1)
//	MinReserve = 0
//	Window     = 10 s
//
// Both let about maxTokens/2 retries through when an outage starts and earn
// tokenRatio back per success (kept 10 s by the budget's reserve); the budget
// also earns tokenRatio per call started, so a total outage still gets some
// retries, where A6 sends none once the bucket is half empty.
//
// # Where Parse and grpc-go differ
//
// Parse gives a document grpc-go v1.85's verdict (each of Google's 467
// published service configs among them: 350 accepted, 117 refused for a
// retryPolicy without maxAttempts), and its retryPolicy grpc-go's meaning,
// except:
//
//   - maxAttempts is used as given; grpc-go caps it at 5.
//   - A backoffMultiplier below 1 is refused: a Policy cannot shrink delays.
//   - "OK" among retryableStatusCodes or nonFatalStatusCodes is refused;
//     grpc-go ignores it. So are retryableStatusCodes of nulls alone, which
//     grpc-go reads as OK: a retryPolicy that retries no code.
//   - A service or method containing "/" is refused; grpc-go builds a path
//     of it that names no method.
//   - Durations follow protobuf JSON: grpc-go also takes "+1s", and "1.-5s"
//     as 0.5 s; Parse refuses both.
//   - perAttemptRecvTimeout is read (grpc-go reads it only from xDS), and a
//     malformed one is refused.
//   - hedgingPolicy is read, and a malformed one refused: grpc-go does not
//     hedge, and ignores the field. An entry with a retryPolicy too is
//     retried, as grpc-go retries it, and its hedgingPolicy left out.
//   - The retryPolicy and hedgingPolicy of an entry without a name are
//     checked too, and retryThrottling without a methodConfig (grpc-go
//     checks neither).
//   - Parse reads no load-balancing or health-check field: grpc-go also
//     refuses a loadBalancingConfig that names no policy it knows.
//   - waitForReady, maxRequestMessageBytes and maxResponseMessageBytes are
//     checked as grpc-go checks them, and not read: grpc-go applies them to
//     its calls only if given the document too (grpc.WithDefaultServiceConfig,
//     with its own retry off).
//   - A timeout of "0s" means none here; grpc-go fails such calls at once.
//     A negative timeout is ignored by both.
//
// What interceptor.WithServiceConfig does with a Config differs from what
// grpc-go does with the document where its documentation says: methods no
// entry names, and a document without retryThrottling.
//
// A key given twice in one object is read as grpc-go reads it: every copy
// is decoded (a field of the wrong JSON type, a malformed duration or an
// unknown code in any copy is refused), two copies of an object (a
// retryPolicy given twice) merge field by field, the later winning, and of
// any other value the later copy wins; the merged values are then checked.
package serviceconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/a6"
)

// Config is the retry configuration of a gRPC service config
// document (grpc/doc/service_config.md, gRFC A6), as Parse
// reads it: the retryPolicy or hedgingPolicy of each methodConfig entry and
// retryThrottling.
// It lets a team that configured grpc-go's built-in retry keep its
// configuration; interceptor.WithServiceConfig applies it.
type Config struct {
	// Methods are the methodConfig entries that name at least one method,
	// in the order of the document.
	Methods []Method
	// Throttle is retryThrottling mapped onto a retry budget, nil if the
	// document has none (see Parse for the mapping).
	Throttle *grpcbackoff.Throttle
}

// Method is one methodConfig entry of a service config.
type Method struct {
	// Names are the methods the entry applies to, each either
	// "/pkg.Service/Method" (one method), "/pkg.Service/" (every method of a
	// service), or "" (every method no other entry names: the default). No
	// name appears in two entries. For a call, the method's own entry wins
	// over its service's, which wins over the default.
	Names []string
	// Policy is the entry's retryPolicy, mapped as the package
	// documentation says; nil if the entry has none, which means that its
	// methods are not retried.
	Policy *grpcbackoff.Policy
	// Hedging is the entry's hedgingPolicy, mapped as the package says; nil if
	// the entry has none, or has a retryPolicy too, which then applies, as
	// in grpc-go. An entry has a Policy or a Hedging, not both.
	Hedging *grpcbackoff.Hedging
	// Timeout is the entry's timeout: a bound on each call of its names,
	// retries included. 0 means none, as does a negative timeout.
	Timeout time.Duration
}

// Parse reads the retry configuration of a gRPC service config JSON
// document: methodConfig[].name, .retryPolicy, .hedgingPolicy and .timeout,
// and retryThrottling, mapped as the package documentation says. Other
// fields are checked only for their JSON types, as grpc-go checks them, and
// entries without a name are left out. Field names match case-insensitively,
// as in grpc-go.
//
// A name is {"service": "pkg.Service", "method": "Method"}: without a method
// it names a whole service, and {} (or null) the default entry; a name
// appears in one entry at most. maxAttempts is an integer of at least 2;
// durations are strings of decimal seconds with an "s" suffix ("0.1s");
// backoffMultiplier is a number of at least 1; status codes are upper-case
// names ("UNAVAILABLE") or numbers; maxTokens is in (0, 1000] and tokenRatio
// positive. A null anywhere means absent.
//
// Parse accepts what grpc-go v1.85 accepts, with the differences the package
// documentation lists. It returns every problem at once, each with its JSON
// path and value, e.g.
//
//	serviceconfig: methodConfig[0].retryPolicy.initialBackoff: "100ms" is not a duration like "0.1s"
func Parse(data []byte) (Config, error) {
	var sc Config
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return sc, fmt.Errorf("serviceconfig: service config is not valid JSON: %v (at offset %d)", se, se.Offset)
		}
		return sc, fmt.Errorf("serviceconfig: service config is not valid JSON: %v", err)
	}
	if absent(bytes.TrimSpace(data)) {
		return sc, nil // a null document, as grpc-go reads it: no configuration
	}
	p := &scParser{}
	var doc struct {
		Method          json.RawMessage `json:"methodConfig"`
		RetryThrottling json.RawMessage `json:"retryThrottling"`
	}
	if !p.object("service config", merged(data), &doc) {
		return sc, p.err()
	}
	sc.Methods = p.methods(doc.Method)
	sc.Throttle = p.throttle(doc.RetryThrottling)
	if err := p.err(); err != nil {
		return Config{}, err
	}
	if err := checkShape(data); err != nil {
		return Config{}, err
	}
	return sc, nil
}

// shape is the Go type grpc-go v1.85 decodes a service config into: a
// document it cannot decode (a field of the wrong JSON type, a malformed
// duration or an unknown code, even in the first copy of a key given twice,
// which encoding/json decodes too) is one grpc-go refuses. What grpc-go
// checks once decoded is checked by the parser, on the merged document.
type shape struct {
	LoadBalancingPolicy *string
	LoadBalancingConfig *json.RawMessage
	MethodConfig        *[]struct {
		Name                    *[]struct{ Service, Method string }
		WaitForReady            *bool
		Timeout                 *wireDuration
		MaxRequestMessageBytes  *int64
		MaxResponseMessageBytes *int64
		RetryPolicy             *struct {
			MaxAttempts          int
			InitialBackoff       wireDuration
			MaxBackoff           wireDuration
			BackoffMultiplier    float64
			RetryableStatusCodes []codes.Code
		}
	}
	RetryThrottling *struct {
		MaxTokens  float64
		TokenRatio float64
	}
	HealthCheckConfig *struct{ ServiceName *string }
}

// wireDuration decodes a duration as grpc-go v1.85 does while it decodes a
// service config: a string of optional "-", digits, optional "." and at most
// 9 digits, then "s", with a digit somewhere and at most 315 576 000 000
// seconds. Only its error matters.
type wireDuration struct{}

func (*wireDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	num, ok := strings.CutSuffix(s, "s")
	if !ok {
		return fmt.Errorf("malformed duration %q: missing seconds unit", s)
	}
	num = strings.TrimPrefix(num, "-")
	whole, frac, _ := strings.Cut(num, ".")
	if strings.Contains(frac, ".") || len(frac) > 9 || whole == "" && frac == "" {
		return fmt.Errorf("malformed duration %q", s)
	}
	for _, part := range []string{whole, frac} {
		if part == "" {
			continue
		}
		n, err := strconv.ParseInt(part, 10, 64)
		if err != nil {
			return fmt.Errorf("malformed duration %q: %v", s, err)
		}
		if part == whole && n > 315_576_000_000 {
			return fmt.Errorf("out of range: %q", s)
		}
	}
	return nil
}

// checkShape returns the error of decoding data as grpc-go does, if any.
func checkShape(data []byte) error {
	var sh shape
	if err := json.Unmarshal(data, &sh); err != nil {
		return fmt.Errorf("serviceconfig: service config: %v", err)
	}
	return nil
}

// scParser collects the problems of one document.
type scParser struct {
	errs  []error
	names map[string]int // method name -> the index of the entry naming it
}

func (p *scParser) bad(path, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("serviceconfig: %s: %s", path, fmt.Sprintf(format, args...)))
}

func (p *scParser) err() error { return errors.Join(p.errs...) }

// absent reports whether raw is missing or JSON null, which the service
// config treats alike.
func absent(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// object decodes the JSON object raw into dst, a struct of json.RawMessage
// fields, or reports that raw is not an object.
func (p *scParser) object(path string, raw json.RawMessage, dst any) bool {
	if !bytes.HasPrefix(bytes.TrimLeft(raw, " \t\r\n"), []byte("{")) {
		p.bad(path, "%s is not an object", scShow(raw))
		return false
	}
	if err := json.Unmarshal(raw, dst); err != nil { // only on bugs: raw is valid and fields are raw
		p.bad(path, "%v", err)
		return false
	}
	return true
}

// array decodes the JSON array raw, or reports that it is not an array.
func (p *scParser) array(path string, raw json.RawMessage) ([]json.RawMessage, bool) {
	var elems []json.RawMessage
	if !bytes.HasPrefix(bytes.TrimLeft(raw, " \t\r\n"), []byte("[")) || json.Unmarshal(raw, &elems) != nil {
		p.bad(path, "%s is not an array", scShow(raw))
		return nil, false
	}
	return elems, true
}

func (p *scParser) methods(raw json.RawMessage) []Method {
	if absent(raw) {
		return nil
	}
	entries, ok := p.array("methodConfig", raw)
	if !ok {
		return nil
	}
	var out []Method
	for i, e := range entries {
		path := fmt.Sprintf("methodConfig[%d]", i)
		if absent(e) {
			continue // a null entry, which grpc-go ignores
		}
		var entry struct {
			Name        json.RawMessage `json:"name"`
			RetryPolicy json.RawMessage `json:"retryPolicy"`
			Hedging     json.RawMessage `json:"hedgingPolicy"`
			Timeout     json.RawMessage `json:"timeout"`
		}
		if !p.object(path, e, &entry) {
			continue
		}
		timeout := p.timeout(path+".timeout", entry.Timeout)
		names := p.entryNames(path+".name", entry.Name, i)
		var pol *grpcbackoff.Policy
		if !absent(entry.RetryPolicy) {
			pol = p.retryPolicy(path+".retryPolicy", entry.RetryPolicy)
		}
		var hedging *grpcbackoff.Hedging
		if !absent(entry.Hedging) {
			hedging = p.hedgingPolicy(path+".hedgingPolicy", entry.Hedging)
			if !absent(entry.RetryPolicy) {
				hedging = nil // the retryPolicy applies, as in grpc-go, which ignores hedgingPolicy
			}
		}
		if len(names) > 0 {
			out = append(out, Method{Names: names, Policy: pol, Hedging: hedging, Timeout: timeout})
		}
	}
	return out
}

// entryNames reads the names of entry i, refusing names an earlier entry
// already has.
func (p *scParser) entryNames(path string, raw json.RawMessage, entry int) []string {
	if absent(raw) {
		return nil
	}
	elems, ok := p.array(path, raw)
	if !ok {
		return nil
	}
	var names []string
	for j, e := range elems {
		npath := fmt.Sprintf("%s[%d]", path, j)
		var n struct {
			Service json.RawMessage `json:"service"`
			Method  json.RawMessage `json:"method"`
		}
		if !absent(e) && !p.object(npath, e, &n) { // null is {}, as in grpc-go
			continue
		}
		service, ok1 := p.nameString(npath+".service", n.Service)
		method, ok2 := p.nameString(npath+".method", n.Method)
		if !ok1 || !ok2 {
			continue
		}
		var name string
		switch {
		case service == "" && method != "":
			p.bad(npath, "method %q needs a service", method)
			continue
		case service != "":
			name = "/" + service + "/" + method
		}
		if p.names == nil {
			p.names = make(map[string]int)
		}
		if prev, dup := p.names[name]; dup {
			what := strconv.Quote(name)
			if name == "" {
				what = "the default name {}"
			}
			p.bad(npath, "%s is already named by methodConfig[%d]", what, prev)
			continue
		}
		p.names[name] = entry
		names = append(names, name)
	}
	return names
}

// nameString reads the service or method of a name: a string without "/",
// where null means "".
func (p *scParser) nameString(path string, raw json.RawMessage) (string, bool) {
	if absent(raw) {
		return "", true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		p.bad(path, "%s is not a string", scShow(raw))
		return "", false
	}
	if strings.Contains(s, "/") {
		p.bad(path, "%q contains \"/\"", s)
		return "", false
	}
	return s, true
}

func (p *scParser) retryPolicy(path string, raw json.RawMessage) *grpcbackoff.Policy {
	var rp struct {
		MaxAttempts           json.RawMessage `json:"maxAttempts"`
		InitialBackoff        json.RawMessage `json:"initialBackoff"`
		MaxBackoff            json.RawMessage `json:"maxBackoff"`
		BackoffMultiplier     json.RawMessage `json:"backoffMultiplier"`
		RetryableStatusCodes  json.RawMessage `json:"retryableStatusCodes"`
		PerAttemptRecvTimeout json.RawMessage `json:"perAttemptRecvTimeout"`
	}
	if !p.object(path, raw, &rp) {
		return nil
	}
	before := len(p.errs)
	attempts := p.maxAttempts(path+".maxAttempts", rp.MaxAttempts)
	initial := p.duration(path+".initialBackoff", rp.InitialBackoff)
	maxBackoff := p.duration(path+".maxBackoff", rp.MaxBackoff)
	mult := p.multiplier(path+".backoffMultiplier", rp.BackoffMultiplier)
	cs := p.codes(path+".retryableStatusCodes", rp.RetryableStatusCodes)
	var perAttempt time.Duration
	if !absent(rp.PerAttemptRecvTimeout) {
		perAttempt = p.duration(path+".perAttemptRecvTimeout", rp.PerAttemptRecvTimeout)
	}
	if len(p.errs) > before {
		return nil
	}
	pol := a6.Policy(attempts, initial, maxBackoff, mult, cs)
	pol.AttemptTimeout = perAttempt
	return &pol
}

// hedgingPolicy reads a hedgingPolicy: maxAttempts and hedgingDelay are
// required, nonFatalStatusCodes defaults to none.
func (p *scParser) hedgingPolicy(path string, raw json.RawMessage) *grpcbackoff.Hedging {
	var hp struct {
		MaxAttempts         json.RawMessage `json:"maxAttempts"`
		HedgingDelay        json.RawMessage `json:"hedgingDelay"`
		NonFatalStatusCodes json.RawMessage `json:"nonFatalStatusCodes"`
	}
	if !p.object(path, raw, &hp) {
		return nil
	}
	before := len(p.errs)
	h := grpcbackoff.Hedging{MaxAttempts: p.maxAttempts(path+".maxAttempts", hp.MaxAttempts)}
	if dpath := path + ".hedgingDelay"; p.required(dpath, hp.HedgingDelay) {
		var s string
		if json.Unmarshal(hp.HedgingDelay, &s) != nil {
			p.bad(dpath, "%s is not a duration like \"0.1s\"", scShow(hp.HedgingDelay))
		} else if d, err := parseDuration(s); err != nil {
			p.bad(dpath, "%q %v", s, err)
		} else if d < 0 {
			p.bad(dpath, "%q must not be negative", s)
		} else {
			h.Delay = d
		}
	}
	if cpath := path + ".nonFatalStatusCodes"; !absent(hp.NonFatalStatusCodes) {
		if elems, ok := p.array(cpath, hp.NonFatalStatusCodes); ok {
			for i, e := range elems {
				if absent(e) {
					continue // null: no code, as in retryableStatusCodes
				}
				c, ok := p.code(fmt.Sprintf("%s[%d]", cpath, i), e)
				if ok && !containsCode(h.NonFatalCodes, c) {
					h.NonFatalCodes = append(h.NonFatalCodes, c)
				}
			}
		}
	}
	if len(p.errs) > before {
		return nil
	}
	return &h
}

func (p *scParser) required(path string, raw json.RawMessage) bool {
	if absent(raw) {
		p.errs = append(p.errs, fmt.Errorf("serviceconfig: %s is required", path))
		return false
	}
	return true
}

func (p *scParser) maxAttempts(path string, raw json.RawMessage) int {
	if !p.required(path, raw) {
		return 0
	}
	num, ok := p.jsonNumber(path, raw)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(num.String(), 10, 0)
	switch {
	case errors.Is(err, strconv.ErrRange):
		p.bad(path, "%s is out of range", num)
	case err != nil:
		p.bad(path, "%s is not an integer", num)
	case n < 2:
		p.bad(path, "%d must be at least 2", n)
	default:
		return int(n)
	}
	return 0
}

// timeout reads an entry's timeout: a duration, 0 when absent; a negative
// one counts as none, as grpc-go ignores it.
func (p *scParser) timeout(path string, raw json.RawMessage) time.Duration {
	if absent(raw) {
		return 0
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		p.bad(path, "%s is not a duration like \"0.1s\"", scShow(raw))
		return 0
	}
	d, err := parseDuration(s)
	if err != nil {
		p.bad(path, "%q %v", s, err)
		return 0
	}
	return max(d, 0)
}

func (p *scParser) duration(path string, raw json.RawMessage) time.Duration {
	if !p.required(path, raw) {
		return 0
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		p.bad(path, "%s is not a duration like \"0.1s\"", scShow(raw))
		return 0
	}
	d, err := parseDuration(s)
	switch {
	case err != nil:
		p.bad(path, "%q %v", s, err)
	case d <= 0:
		p.bad(path, "%q must be positive", s)
	default:
		return d
	}
	return 0
}

// maxDurationSeconds is the largest google.protobuf.Duration, about 10,000
// years.
const maxDurationSeconds = 315_576_000_000

// parseDuration reads the JSON form of a google.protobuf.Duration: an
// optional "-", decimal seconds with at most 9 fractional digits, and "s".
// Values beyond time.Duration saturate.
func parseDuration(s string) (time.Duration, error) {
	errNot := errors.New(`is not a duration like "0.1s"`)
	num, ok := strings.CutSuffix(s, "s")
	if !ok {
		return 0, errNot
	}
	neg := strings.HasPrefix(num, "-")
	num = strings.TrimPrefix(num, "-")
	whole, frac, _ := strings.Cut(num, ".")
	if (whole == "" && frac == "") || !scDigits(whole) || !scDigits(frac) {
		return 0, errNot
	}
	if len(frac) > 9 {
		return 0, errors.New("has more than 9 fractional digits")
	}
	var sec int64
	if whole != "" {
		var err error
		if sec, err = strconv.ParseInt(whole, 10, 64); err != nil || sec > maxDurationSeconds {
			return 0, errors.New("is out of range")
		}
	}
	ns, _ := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	var d time.Duration
	if sec > math.MaxInt64/int64(time.Second)-1 {
		d = math.MaxInt64
	} else {
		d = time.Duration(sec)*time.Second + time.Duration(ns)
	}
	if neg {
		d = -d
	}
	return d, nil
}

func scDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func (p *scParser) multiplier(path string, raw json.RawMessage) float64 {
	if !p.required(path, raw) {
		return 0
	}
	f, ok := p.number(path, raw)
	switch {
	case !ok:
	case f <= 0:
		p.bad(path, "%v must be positive", f)
	case f < 1:
		p.bad(path, "%v is less than 1: grpcbackoff cannot make delays shrink", f)
	default:
		return f
	}
	return 0
}

// jsonNumber reads a JSON number (json.Number alone would also take a
// string that holds one).
func (p *scParser) jsonNumber(path string, raw json.RawMessage) (json.Number, bool) {
	var num json.Number
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] == '"' || json.Unmarshal(raw, &num) != nil {
		p.bad(path, "%s is not a number", scShow(raw))
		return "", false
	}
	return num, true
}

func (p *scParser) number(path string, raw json.RawMessage) (float64, bool) {
	num, ok := p.jsonNumber(path, raw)
	if !ok {
		return 0, false
	}
	f, err := num.Float64()
	if err != nil {
		p.bad(path, "%s is out of range", num)
		return 0, false
	}
	return f, true
}

// codeNames are the status code names of the service config, indexed by
// code, as grpc-go's codes.Code.UnmarshalJSON reads them.
var codeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
	"INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

func (p *scParser) codes(path string, raw json.RawMessage) []codes.Code {
	if !p.required(path, raw) {
		return nil
	}
	elems, ok := p.array(path, raw)
	if !ok {
		return nil
	}
	if len(elems) == 0 {
		p.errs = append(p.errs, fmt.Errorf("serviceconfig: %s is empty: no code would be retried", path))
		return nil
	}
	var out []codes.Code
	nulls := 0
	for i, e := range elems {
		if absent(e) {
			nulls++
			continue // null: no code, which grpc-go takes for OK and ignores
		}
		c, ok := p.code(fmt.Sprintf("%s[%d]", path, i), e)
		if ok && !containsCode(out, c) { // grpc-go keeps a set: duplicates are harmless
			out = append(out, c)
		}
	}
	if nulls == len(elems) {
		p.errs = append(p.errs, fmt.Errorf("serviceconfig: %s holds only null: no code would be retried", path))
	}
	return out
}

func containsCode(cs []codes.Code, c codes.Code) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

func (p *scParser) code(path string, raw json.RawMessage) (codes.Code, bool) {
	var name string
	if json.Unmarshal(raw, &name) == nil {
		for c, n := range codeNames {
			if n == name {
				if c == 0 {
					p.bad(path, "%q is not an error", name)
					return 0, false
				}
				return codes.Code(c), true
			}
		}
		if upper := strings.ToUpper(name); upper != name && containsName(upper) {
			p.bad(path, "%q is not a status code name: names are upper case, like %q", name, upper)
		} else {
			p.bad(path, "%q is not a status code name like \"UNAVAILABLE\"", name)
		}
		return 0, false
	}
	var num json.Number // a string is handled above
	if json.Unmarshal(raw, &num) != nil {
		p.bad(path, "%s is not a status code name or number", scShow(raw))
		return 0, false
	}
	n, err := strconv.ParseUint(num.String(), 10, 32)
	switch {
	case err != nil || n >= uint64(len(codeNames)):
		p.bad(path, "%s is not a status code (1 to 16)", num)
	case n == 0:
		p.bad(path, "0 (OK) is not an error")
	default:
		return codes.Code(n), true
	}
	return 0, false
}

func containsName(s string) bool {
	for _, n := range codeNames {
		if n == s {
			return true
		}
	}
	return false
}

func (p *scParser) throttle(raw json.RawMessage) *grpcbackoff.Throttle {
	if absent(raw) {
		return nil
	}
	var rt struct {
		MaxTokens  json.RawMessage `json:"maxTokens"`
		TokenRatio json.RawMessage `json:"tokenRatio"`
	}
	if !p.object("retryThrottling", raw, &rt) {
		return nil
	}
	var maxTokens, ratio float64
	okTokens, okRatio := false, false
	if p.required("retryThrottling.maxTokens", rt.MaxTokens) {
		if maxTokens, okTokens = p.number("retryThrottling.maxTokens", rt.MaxTokens); okTokens && !(maxTokens > 0 && maxTokens <= 1000) {
			p.bad("retryThrottling.maxTokens", "%v is not in (0, 1000]", maxTokens)
			okTokens = false
		}
	}
	if p.required("retryThrottling.tokenRatio", rt.TokenRatio) {
		if ratio, okRatio = p.number("retryThrottling.tokenRatio", rt.TokenRatio); okRatio && !(ratio > 0) {
			p.bad("retryThrottling.tokenRatio", "%v must be positive", ratio)
			okRatio = false
		}
	}
	if !okTokens || !okRatio {
		return nil
	}
	return &grpcbackoff.Throttle{
		Ratio:      min(ratio, 1),
		PerSecond:  0,
		Burst:      max(1, int(maxTokens/2)),
		Reserve:    min(ratio, 1),
		MinReserve: 0,
		Window:     a6Window,
	}
}

// a6Window is how long the reserve a retryThrottling maps to keeps what
// successes earn: DefaultThrottle's Window.
const a6Window = 10 * time.Second

// scShow returns raw compacted and shortened, for an error message.
func scShow(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		b.Reset()
		b.Write(raw)
	}
	s := b.String()
	const limit = 40
	if utf8.RuneCountInString(s) > limit {
		r := []rune(s)
		s = string(r[:limit]) + "…"
	}
	return s
}
