// Package httpapi serves an Ordo node over HTTP/JSON, for the tools
// operators already use: curl, the health probes of load balancers and
// orchestrators, and Prometheus.
//
// It adds no way to IDs of its own. A request for IDs goes through the
// node's gRPC Next path (the sequencer, the leadership confirmation round,
// and on a follower one forward to the leader), and a request about
// tracked reservations or the settled mark through the gRPC path of the
// same call, so HTTP clients get every guarantee gRPC clients get. The package declares the small Node
// interface it needs; grpcapi.Server satisfies it.
package httpapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
)

// Node is what the handler needs of an Ordo node: *grpcapi.Server, the
// same calls gRPC serves. Its errors are gRPC status errors: the node
// maps errors to codes in one place (grpcapi.ToStatus) for gRPC and HTTP
// alike, and httpStatus maps codes to HTTP here. Any other error is a 500.
type Node interface {
	// NextIDs hands out count IDs through the same path as gRPC Next.
	NextIDs(ctx context.Context, count uint32) (*api.NextResponse, error)
	// Status is the cluster's status, as gRPC Admin/Status answers it.
	Status(ctx context.Context) (*api.StatusResponse, error)
	// Ready returns nil when the node can serve IDs now, and why not
	// otherwise.
	Ready() error
	// Leader is the leader's id and gRPC address, as far as the node
	// knows; empty when it knows none.
	Leader() (id, addr string)
	// ClusterLayout is the layout the node's IDs are made with, and the
	// group in them, as the cluster recorded them: a 128-bit layout's IDs
	// are rendered here, from ticks. An error (a node that does not know
	// them yet) is one the node's NextIDs would give.
	ClusterLayout() (layout.Layout, uint64, error)
	// Reserve opens a tracked reservation through the same path as gRPC
	// Reserve.
	Reserve(ctx context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error)
	// Decide completes, abandons or extends (ttlMs) the reservation
	// handle names in sequence seq ("" the default), through the same
	// path as gRPC Complete, Abandon and Extend.
	Decide(ctx context.Context, do fsm.Do, seq, handle string, ttlMs uint32) (*api.SettleResponse, error)
	// Watermark reads sequence seq's W ("" the default's) through the
	// same path as gRPC Watermark.
	Watermark(ctx context.Context, seq string) (*api.WatermarkResponse, error)
	// NextInSequence hands out count IDs of the named sequence name
	// through the same path as gRPC Next with NextRequest.sequence; ticks
	// says the sequence is of a 128-bit layout, whose runs then carry
	// ticks, which the handler renders with the group DescribeSequence
	// names.
	NextInSequence(ctx context.Context, name string, count uint32, ticks bool) (*api.NextResponse, error)
	// DescribeSequence reports the named sequence name, as gRPC
	// Admin/DescribeSequence answers it (a dropped one with Dropped set):
	// its kind says how to render its IDs. None is NotFound; one just
	// created is found on every node.
	DescribeSequence(ctx context.Context, name string) (*api.SequenceInfo, error)
}

// LeaderHeader names the leader's gRPC address in a reply that failed
// because this node cannot serve. HTTP addresses are not replicated, so it
// is the address gRPC clients use; HTTP clients need not follow it, since
// every node forwards requests for IDs to the leader.
const LeaderHeader = "Ordo-Leader"

// Defaults for Config.
const (
	// DefaultTimeout bounds the work of one request, as the node's
	// --rpc-timeout bounds a unary gRPC call.
	DefaultTimeout = 30 * time.Second
	// maxHeaderBytes caps a request's line and headers: every request here
	// is short, its arguments in the query. The handler refuses a longer
	// one with a JSON 431 (headerBytes).
	maxHeaderBytes = 16 << 10
	// readHeaderBytes is what net/http reads of a request's line and
	// headers before it refuses the request itself, with a plain-text 431
	// no handler can change: well above maxHeaderBytes, so that the
	// handler sees, and answers in JSON, every request but one of a
	// megabyte or more. It is net/http's default.
	readHeaderBytes = http.DefaultMaxHeaderBytes
	// headerTimeout bounds reading a request (the TLS handshake included),
	// so slow clients cannot hold connections.
	headerTimeout = 10 * time.Second
	// idleTimeout closes keep-alive connections nobody uses.
	idleTimeout = 2 * time.Minute
)

// Errors of this package, found before the node is asked. httpStatus is
// the one place that maps them, and the node's errors, to HTTP statuses.
var (
	// errNoRoute means the path is not served.
	errNoRoute = errors.New("no such path")
	// errMethod means the path is served, but not for this method.
	errMethod = errors.New("method not allowed")
	// errBadQuery means a query parameter has a bad value.
	errBadQuery = errors.New("bad query")
	// errNoCertificate means a path that needs a client certificate was
	// asked for without one (only with TLS: see Config.TLS).
	errNoCertificate = errors.New("this path needs a client certificate signed by the cluster CA")
	// errBadName means a sequence name in the path is malformed.
	errBadName = errors.New("bad path")
	// errTooLarge means the request line and headers are longer than
	// maxHeaderBytes.
	errTooLarge = errors.New("request too large")
)

// Config configures the HTTP server of one node.
type Config struct {
	// TLS, when set, is the node's server TLS configuration, as
	// secure.TLS.ServerConfig makes it: a client certificate required and
	// verified by VerifyConnection. The server relaxes it to ask for a
	// certificate without requiring one at the handshake (any certificate
	// given is still verified there, and a bad one refused), then
	// requires a verified certificate for every path except /healthz and
	// /readyz, so that probes without a client key can reach those.
	TLS *tls.Config
	// Metrics, when set, is served at /metrics (a client certificate is
	// needed with TLS, as for IDs: metrics show how many were issued).
	Metrics http.Handler
	// Observe, when set, is told of every request once answered: the
	// path for a served one (the METHOD_NOT_ALLOWED and certificate
	// refusals included), "other" for any other path so that labels stay
	// few, the HTTP status, and how long it took.
	Observe func(route string, code int, d time.Duration)
	// Timeout bounds the work of one request; zero means DefaultTimeout.
	Timeout time.Duration
	// Logger logs failed requests; nil means no logs.
	Logger hclog.Logger
}

// route is one served path.
type route struct {
	methods  []string
	needCert bool // with TLS: the caller must have presented a certificate
	serve    http.HandlerFunc
}

type handler struct {
	node    Node
	tls     bool
	observe func(route string, code int, d time.Duration)
	timeout time.Duration
	logger  hclog.Logger
	routes  map[string]route
}

// Handler serves node's HTTP API:
//
//	GET /healthz            200 while the process is alive
//	GET /readyz             200 when the node can serve IDs, else 503
//	GET /v1/ids?count=N     N IDs (1 by default) as JSON strings; &decode=true decodes each
//	GET /v1/status          the cluster's status, as gRPC Admin/Status
//	POST /v1/reservations?count=N&ttl=D           a tracked reservation of N IDs (Idempotency-Key: K keys it)
//	POST /v1/reservations/complete?handle=H       its writes committed
//	POST /v1/reservations/abandon?handle=H        its IDs will not be used
//	POST /v1/reservations/extend?handle=H&ttl=D   it lives D longer
//	GET /v1/watermark       the settled mark W
//	GET or POST /v1/sequences/{name}/ids?count=N  N IDs of the named sequence, rendered per its kind
//	POST /v1/sequences/{name}/reservations?count=N&ttl=D          a tracked reservation of the named sequence
//	POST /v1/sequences/{name}/reservations/complete?handle=H      (abandon, extend&ttl=D: as above)
//	GET /v1/sequences/{name}/watermark                            the named sequence's W
//	GET /metrics            cfg.Metrics, when set
//
// Errors are JSON {"error": "...", "code": "..."}: unknown paths (404) and
// methods (405), and a request line and headers over maxHeaderBytes (431)
// too. Only what net/http answers before any handler runs stays plain
// text: a request of readHeaderBytes or more, a malformed one, and the
// like (docs/api.md lists them).
func Handler(node Node, cfg Config) http.Handler {
	h := &handler{node: node, tls: cfg.TLS != nil, observe: cfg.Observe, timeout: cfg.Timeout, logger: cfg.Logger}
	if h.timeout <= 0 {
		h.timeout = DefaultTimeout
	}
	if h.logger == nil {
		h.logger = hclog.NewNullLogger()
	}
	probe, get, post := []string{http.MethodGet, http.MethodHead}, []string{http.MethodGet}, []string{http.MethodPost}
	h.routes = map[string]route{
		"/healthz":                  {methods: probe, serve: h.healthz},
		"/readyz":                   {methods: probe, serve: h.readyz},
		"/v1/ids":                   {methods: get, needCert: true, serve: h.ids},
		"/v1/status":                {methods: get, needCert: true, serve: h.status},
		"/v1/reservations":          {methods: post, needCert: true, serve: h.reserve},
		"/v1/reservations/complete": {methods: post, needCert: true, serve: h.decide(fsm.DoComplete)},
		"/v1/reservations/abandon":  {methods: post, needCert: true, serve: h.decide(fsm.DoAbandon)},
		"/v1/reservations/extend":   {methods: post, needCert: true, serve: h.decide(fsm.DoExtend)},
		"/v1/watermark":             {methods: get, needCert: true, serve: h.watermark},
		sequenceIDsRoute:            {methods: []string{http.MethodGet, http.MethodPost}, needCert: true, serve: h.sequenceIDs},
		sequenceReservationsRoute:   {methods: post, needCert: true, serve: h.reserve},
		sequenceCompleteRoute:       {methods: post, needCert: true, serve: h.decide(fsm.DoComplete)},
		sequenceAbandonRoute:        {methods: post, needCert: true, serve: h.decide(fsm.DoAbandon)},
		sequenceExtendRoute:         {methods: post, needCert: true, serve: h.decide(fsm.DoExtend)},
		sequenceWatermarkRoute:      {methods: get, needCert: true, serve: h.watermark},
	}
	if cfg.Metrics != nil {
		h.routes["/metrics"] = route{methods: probe, needCert: true, serve: cfg.Metrics.ServeHTTP}
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Every answer is fresh: a cached reply to /v1/ids would hand the
	// same IDs out twice.
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	name := r.URL.Path
	if route, _, ok := sequenceInPath(name); ok {
		name = route // one route, one label, whatever the name
	}
	rt, ok := h.routes[name]
	if h.observe != nil {
		start, rec := time.Now(), &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		if !ok {
			name = "other"
		}
		defer func() { h.observe(name, rec.code, time.Since(start)) }()
		w = rec
	}
	switch {
	case headerBytes(r) > maxHeaderBytes:
		h.fail(w, r, fmt.Errorf("%w: the request line and headers are %d bytes, and this node reads at most %d: shorten the URL's query or the headers",
			errTooLarge, headerBytes(r), maxHeaderBytes))
	case !ok:
		h.fail(w, r, fmt.Errorf("%w: %s", errNoRoute, r.URL.Path))
	case !contains(rt.methods, r.Method):
		w.Header().Set("Allow", strings.Join(rt.methods, ", "))
		h.fail(w, r, fmt.Errorf("%w: %s %s (allowed: %s)", errMethod, r.Method, r.URL.Path, strings.Join(rt.methods, ", ")))
	case rt.needCert && !h.authenticated(r):
		h.fail(w, r, fmt.Errorf("%w: %s", errNoCertificate, r.URL.Path))
	default:
		rt.serve(w, r)
	}
}

// headerBytes is about how many bytes r's request line and headers took on
// the wire, as net/http counts them against http.Server.MaxHeaderBytes.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	if r.Host != "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n + 2
}

// statusRecorder keeps the status a handler wrote, for Config.Observe.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// authenticated reports whether the caller may use the paths that need a
// client certificate. Without TLS nobody can be told apart, as on the gRPC
// port, so everybody may. With TLS a certificate given was verified at the
// handshake (VerifyConnection), so having one is enough: the same rule as
// gRPC's for asking for IDs and reading status.
func (h *handler) authenticated(r *http.Request) bool {
	return !h.tls || (r.TLS != nil && len(r.TLS.PeerCertificates) > 0)
}

func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	if err := h.node.Ready(); err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// idsResponse is the answer of /v1/ids. IDs are strings: a 64-bit ID read
// as a JSON number loses precision in JavaScript and many JSON tools.
type idsResponse struct {
	IDs     []string    `json:"ids"`
	Count   int         `json:"count"`
	Decoded []decodedID `json:"decoded,omitempty"`
}

// decodedID is one ID taken apart, as `ordo decode --json` prints it.
type decodedID struct {
	ID    string `json:"id"`
	Time  string `json:"time"` // RFC 3339, milliseconds, UTC: the start of the ID's time unit
	Group uint64 `json:"group"`
	Seq   uint64 `json:"seq"`
}

// rfc3339Milli is RFC 3339 with exactly three fractional digits, the
// resolution of every layout's time unit.
const rfc3339Milli = "2006-01-02T15:04:05.000Z07:00"

func (h *handler) ids(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	count, err := countParam(q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	decode, err := decodeParam(q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// Asked first, so that a node that cannot render burns no IDs.
	l, group, err := h.node.ClusterLayout()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	resp, err := h.node.NextIDs(ctx, count)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ids, strs, err := render(l, group, resp.Runs, count)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := idsResponse{IDs: strs, Count: len(strs)}
	if decode {
		out.Decoded = make([]decodedID, len(ids))
		for i, id := range ids {
			var p layout.Parts
			if l.Wide() {
				// The tick and group are at hand: no need to take the ID apart.
				p = l.TickParts(id, group)
			} else {
				p = l.Decode(id)
			}
			out.Decoded[i] = decodedID{ID: out.IDs[i], Time: p.Time.Format(rfc3339Milli), Group: p.Group, Seq: p.Seq}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// render lists the IDs of runs (ticks under a 128-bit layout), which must
// be want of them, and their text: the decimal ID, or the canonical text
// of a 128-bit one made with group.
func render(l layout.Layout, group uint64, runs []*api.IDRun, want uint32) ([]uint64, []string, error) {
	ids, err := expand(runs, uint64(want))
	if err != nil {
		return nil, nil, err
	}
	strs := make([]string, len(ids))
	if !l.Wide() {
		for i, id := range ids {
			strs[i] = strconv.FormatUint(id, 10)
		}
		return ids, strs, nil
	}
	wide, err := layout.RenderAll[[16]byte](l, ids, group)
	if err != nil {
		// The leader answered beyond the layout: IDs rendered from it
		// would not sort, and the trouble is the server's (500).
		return nil, nil, err
	}
	for i, id := range wide {
		strs[i] = l.FormatWide(id)
	}
	return ids, strs, nil
}

// What each query parameter wants, for the errors that name the fix.
const (
	countWant  = "a whole number from 1 to the node's maximum, 1 when left out"
	decodeWant = "true or false, false when left out"
	ttlWant    = "a duration of whole milliseconds from 1ms, such as 30s or 1500ms; the node's default when left out"
	handleWant = "the handle exactly as POST /v1/reservations answered it"
)

// param is the one value of the query parameter name, and whether it was
// given. Given twice it is refused rather than one value picked, since
// the caller meant one of them; given empty (count=) it is refused rather
// than read as left out, since it is more often a script's unset variable
// than a wish for the default.
func param(q url.Values, name, want string) (string, bool, error) {
	vs := q[name]
	switch {
	case len(vs) == 0:
		return "", false, nil
	case len(vs) > 1:
		return "", false, fmt.Errorf("%w: %s given %d times: give it once, %s", errBadQuery, name, len(vs), want)
	case vs[0] == "":
		return "", false, fmt.Errorf("%w: %s is empty: want %s", errBadQuery, name, want)
	}
	return vs[0], true, nil
}

func badParam(name, value, want string) error {
	return fmt.Errorf("%w: %s %q: want %s", errBadQuery, name, value, want)
}

// countParam is the count asked for, 1 when left out. It is parsed to 32
// bits, the width of the gRPC field; the node checks the range against
// its --max-count.
func countParam(q url.Values) (uint32, error) {
	s, ok, err := param(q, "count", countWant)
	if err != nil || !ok {
		return 1, err
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return 0, badParam("count", s, countWant)
	}
	return uint32(n), nil
}

func decodeParam(q url.Values) (bool, error) {
	s, ok, err := param(q, "decode", decodeWant)
	if err != nil || !ok {
		return false, err
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, badParam("decode", s, decodeWant)
	}
	return b, nil
}

// ttlParam is a reservation's TTL in milliseconds, the unit of the gRPC
// field; 0, the node's default, when left out. A TTL the field cannot
// carry exactly is refused rather than rounded: rounding down would
// expire a reservation before the caller expects.
func ttlParam(q url.Values) (uint32, error) {
	s, ok, err := param(q, "ttl", ttlWant)
	if err != nil || !ok {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Millisecond || d%time.Millisecond != 0 || d.Milliseconds() > math.MaxUint32 {
		return 0, badParam("ttl", s, ttlWant)
	}
	return uint32(d.Milliseconds()), nil
}

// handleParam is the reservation's handle, which every call on one needs.
// Its form is the node's to check, as gRPC's is.
func handleParam(q url.Values) (string, error) {
	s, ok, err := param(q, "handle", handleWant)
	if err == nil && !ok {
		err = fmt.Errorf("%w: handle is missing: want %s", errBadQuery, handleWant)
	}
	return s, err
}

// expand lists the IDs of runs, which must be want strictly increasing
// IDs (api.ExpandRuns): a forwarded answer is checked before it sizes an
// allocation, and one that fails is the leader's bug (500).
func expand(runs []*api.IDRun, want uint64) ([]uint64, error) {
	ids, err := api.ExpandRuns(runs, want)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "the leader's answer to a request of %d: %v", want, err)
	}
	return ids, nil
}

func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	resp, err := h.node.Status(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// The one status schema, which ordo status --json prints too.
	b, err := api.MarshalJSON(resp)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(append(b, '\n'))
}

// errorResponse is the body of every failed request.
type errorResponse struct {
	Error string `json:"error"`
	// Code is the gRPC code's name (UNAVAILABLE, INVALID_ARGUMENT, ...),
	// or NOT_FOUND and METHOD_NOT_ALLOWED for paths and methods not
	// served.
	Code string `json:"code"`
	// LeaderID and LeaderAddr name the leader (its gRPC address) when
	// this node cannot serve.
	LeaderID   string `json:"leader_id,omitempty"`
	LeaderAddr string `json:"leader_addr,omitempty"`
}

// httpStatus is the one place that maps an error to an HTTP status and
// a code: this package's own errors, then the node's gRPC codes.
func httpStatus(err error) (int, string) {
	switch {
	case errors.Is(err, errNoRoute):
		return http.StatusNotFound, "NOT_FOUND"
	case errors.Is(err, errMethod):
		return http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED"
	case errors.Is(err, errBadQuery), errors.Is(err, errBadName):
		return http.StatusBadRequest, codeName(codes.InvalidArgument)
	case errors.Is(err, errTooLarge):
		return http.StatusRequestHeaderFieldsTooLarge, codeName(codes.InvalidArgument)
	case errors.Is(err, errNoCertificate):
		return http.StatusForbidden, codeName(codes.PermissionDenied)
	}
	s, ok := status.FromError(err)
	if !ok {
		return http.StatusInternalServerError, codeName(codes.Internal)
	}
	code := http.StatusInternalServerError
	switch s.Code() {
	case codes.InvalidArgument:
		code = http.StatusBadRequest
	case codes.PermissionDenied:
		code = http.StatusForbidden
	case codes.Unauthenticated:
		code = http.StatusUnauthorized
	case codes.NotFound:
		code = http.StatusNotFound
	case codes.FailedPrecondition:
		// A reservation already expired, abandoned or completed: the
		// request conflicts with its fate, and a retry meets the same.
		code = http.StatusConflict
	case codes.ResourceExhausted:
		// Demand above what the layout holds, or too many open
		// reservations: back off and retry.
		code = http.StatusTooManyRequests
	case codes.Unavailable, codes.Canceled:
		// No leader, not the leader, not ready: retry, perhaps elsewhere.
		code = http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		code = http.StatusGatewayTimeout
	}
	// Everything else (Internal, OutOfRange: the layout's time field is
	// full, ...) is the server's trouble: 500.
	return code, codeName(s.Code())
}

// codeName is a gRPC code as protobuf's google.rpc.Code names it:
// codes.InvalidArgument is INVALID_ARGUMENT.
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// fail writes err as JSON. A reply the node could not serve names the
// leader, in the body and in LeaderHeader, to callers who may read
// status anyway.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	code, name := httpStatus(err)
	msg := err.Error()
	if s, ok := status.FromError(err); ok {
		msg = s.Message()
	}
	body := errorResponse{Error: msg, Code: name}
	if code == http.StatusServiceUnavailable && h.authenticated(r) {
		body.LeaderID, body.LeaderAddr = h.node.Leader()
		if body.LeaderAddr != "" {
			w.Header().Set(LeaderHeader, body.LeaderAddr)
		}
	}
	switch code {
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "1")
	}
	if code >= 500 && code != http.StatusServiceUnavailable {
		h.logger.Warn("request failed", "method", r.Method, "path", r.URL.Path, "from", r.RemoteAddr, "status", code, "error", msg)
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	// An error here is the client gone; nobody is left to tell.
	_ = json.NewEncoder(w).Encode(v)
}

// Server is the HTTP server of one node.
type Server struct {
	http *http.Server
	tls  bool
}

// NewServer returns a server of Handler(node, cfg) with bounded reads,
// writes, idle connections and headers. Call Serve, then Shutdown.
func NewServer(node Node, cfg Config) *Server {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	s := &Server{http: &http.Server{
		Handler:           Handler(node, cfg),
		ReadHeaderTimeout: headerTimeout,
		ReadTimeout:       headerTimeout,
		// A reply is written once the node answers, which takes at most
		// timeout; the margin is for writing it.
		WriteTimeout:   timeout + 5*time.Second,
		IdleTimeout:    idleTimeout,
		MaxHeaderBytes: readHeaderBytes,
	}}
	if cfg.Logger != nil {
		s.http.ErrorLog = cfg.Logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true, ForceLevel: hclog.Debug})
	}
	if cfg.TLS != nil {
		s.http.TLSConfig = optionalClientCert(cfg.TLS)
		s.tls = true
	}
	return s
}

// optionalClientCert relaxes a node's server TLS config so that a peer
// without a certificate completes the handshake (and can be told no per
// path), while a certificate that is given is verified as before.
func optionalClientCert(cfg *tls.Config) *tls.Config {
	c := cfg.Clone()
	verify := c.VerifyConnection
	if verify == nil {
		// Nothing of ours verifies: let crypto/tls do it against
		// ClientCAs, never RequestClientCert's unchecked certificate.
		c.ClientAuth = tls.VerifyClientCertIfGiven
		return c
	}
	c.ClientAuth = tls.RequestClientCert
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return nil
		}
		return verify(cs)
	}
	return c
}

// Serve serves on lis until Shutdown; it returns nil after Shutdown.
func (s *Server) Serve(lis net.Listener) error {
	var err error
	if s.tls {
		err = s.http.ServeTLS(lis, "", "")
	} else {
		err = s.http.Serve(lis)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting, lets requests in flight finish until ctx ends,
// then closes every connection.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	if err != nil {
		s.http.Close()
	}
	return err
}
