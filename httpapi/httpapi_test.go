package httpapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/secure/securetest"
)

// fakeNode hands out IDs from a counter, split into runs of at most
// runLen, or fails with err.
type fakeNode struct {
	mu       sync.Mutex
	next     uint64
	runLen   uint64
	err      error // returned by every call but Ready
	notReady error
	counts   []uint32 // every count Next was asked for
	layout   layout.Layout
	group    uint64
	// short makes Next answer one ID fewer than asked (a broken leader).
	short bool
	// asked is every settle call, as "reserve 3 ttl=500", "complete
	// r1.5.2 ttl=0" or "watermark"; fate is what a decision answers.
	asked []string
	fate  api.Fate
	// reserveFate is what Reserve answers as the reservation's fate.
	reserveFate api.Fate
	// sequences are the named sequences DescribeSequence knows; seqNext
	// the next value or tick NextInSequence hands out of each, from the
	// sequence's Next; seqAsked each NextInSequence, as "books 3".
	sequences map[string]*api.SequenceInfo
	seqNext   map[string]uint64
	seqAsked  []string
}

func (f *fakeNode) DescribeSequence(ctx context.Context, name string) (*api.SequenceInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if info, ok := f.sequences[name]; ok {
		return info, nil
	}
	return nil, status.Errorf(codes.NotFound, "no sequence %q: create it with ordo sequence create", name)
}

func (f *fakeNode) NextInSequence(ctx context.Context, name string, count uint32, ticks bool) (*api.NextResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seqAsked = append(f.seqAsked, fmt.Sprintf("%s %d", name, count))
	if f.err != nil {
		return nil, f.err
	}
	info, ok := f.sequences[name]
	if !ok || info.Dropped {
		return nil, status.Errorf(codes.NotFound, "no sequence %q: create it with ordo sequence create", name)
	}
	if f.seqNext == nil {
		f.seqNext = map[string]uint64{}
	}
	if _, ok := f.seqNext[name]; !ok {
		f.seqNext[name] = info.Next
	}
	first := f.seqNext[name]
	f.seqNext[name] += uint64(count)
	return &api.NextResponse{Runs: []*api.IDRun{{First: first, Count: count, Step: 1}}}, nil
}

func (f *fakeNode) NextIDs(ctx context.Context, count uint32) (*api.NextResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts = append(f.counts, count)
	if f.err != nil {
		return nil, f.err
	}
	return &api.NextResponse{Runs: f.runsLocked(count), LeaderId: "n1", LeaderAddr: "127.0.0.1:7001"}, nil
}

func (f *fakeNode) runsLocked(count uint32) []*api.IDRun {
	if f.short {
		count--
	}
	var runs []*api.IDRun
	for left := uint64(count); left > 0; {
		n := min(left, f.runLen)
		runs = append(runs, &api.IDRun{First: f.next, Count: uint32(n), Step: 1})
		f.next += n + 1000 // a gap between runs, as across time units
		left -= n
	}
	return runs
}

func (f *fakeNode) Reserve(ctx context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	call := fmt.Sprintf("reserve %d ttl=%d", req.Count, req.TtlMs)
	if req.IdempotencyKey != "" {
		call += fmt.Sprintf(" key=%s caller=%s", req.IdempotencyKey, callerIn(ctx))
	}
	if req.Sequence != "" {
		call += " seq=" + req.Sequence
	}
	f.asked = append(f.asked, call)
	if f.err != nil {
		return nil, f.err
	}
	handle := api.Handle{First: f.next, Count: uint64(req.Count), Seq: req.Sequence}.String()
	ttl := req.TtlMs
	if ttl == 0 {
		ttl = 30_000 // the node's default
	}
	return &api.ReserveResponse{Handle: handle, Runs: f.runsLocked(req.Count), TtlMs: ttl, Fate: f.reserveFate}, nil
}

// callerIn is who the node's gRPC path takes a keyed call's caller to be
// from ctx: the certificate's subject (its peer's), else ordo-caller.
func callerIn(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
			return "cert:" + info.State.PeerCertificates[0].Subject.String()
		}
	}
	if v := metadata.ValueFromIncomingContext(ctx, api.CallerKey); len(v) > 0 {
		return "named:" + v[0]
	}
	return "none"
}

func (f *fakeNode) Decide(ctx context.Context, do fsm.Do, seq, handle string, ttlMs uint32) (*api.SettleResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	call := fmt.Sprintf("%s %s ttl=%d", do, handle, ttlMs)
	if seq != "" {
		call += " seq=" + seq
	}
	f.asked = append(f.asked, call)
	if f.err != nil {
		return nil, f.err
	}
	return &api.SettleResponse{Fate: f.fate, Watermark: 1<<60 + 7, WatermarkTick: 1<<59 + 3}, nil
}

func (f *fakeNode) Watermark(ctx context.Context, seq string) (*api.WatermarkResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	call := "watermark"
	if seq != "" {
		call += " seq=" + seq
	}
	f.asked = append(f.asked, call)
	if f.err != nil {
		return nil, f.err
	}
	return &api.WatermarkResponse{Watermark: 1<<60 + 9, WatermarkTick: 1<<59 + 5}, nil
}

func (f *fakeNode) Status(ctx context.Context) (*api.StatusResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &api.StatusResponse{
		LeaderId: "n1", LeaderAddr: "127.0.0.1:7001", Layout: "default", Group: 3,
		Nodes: []*api.NodeInfo{{Id: "n1", Role: "leader", Term: 7, HighWater: 1 << 60, Voter: true}},
	}, nil
}

func (f *fakeNode) Ready() error                                  { return f.notReady }
func (f *fakeNode) Leader() (id, addr string)                     { return "n1", "127.0.0.1:7001" }
func (f *fakeNode) ClusterLayout() (layout.Layout, uint64, error) { return f.layout, f.group, nil }

func newFake(t *testing.T) *fakeNode {
	t.Helper()
	// Above 2^53, where a JSON number would lose the low bits.
	return &fakeNode{next: 1<<60 + 1, runLen: 1 << 20, layout: mustLayout(t, "default")}
}

func mustLayout(t *testing.T, name string) layout.Layout {
	t.Helper()
	l, err := layout.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// get serves one request through Handler(node, cfg).
func get(t *testing.T, node Node, cfg Config, method, target string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	Handler(node, cfg).ServeHTTP(w, httptest.NewRequest(method, target, nil))
	return w
}

func decodeBody[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json (body %s)", ct, w.Body)
	}
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	return v
}

func TestHealthz(t *testing.T) {
	f := newFake(t)
	f.notReady = status.Error(codes.Unavailable, "no leader known") // alive all the same
	w := get(t, f, Config{}, http.MethodGet, "/healthz")
	if w.Code != http.StatusOK || decodeBody[map[string]string](t, w)["status"] != "ok" {
		t.Fatalf("healthz: %d %s", w.Code, w.Body)
	}
	if w := get(t, f, Config{}, http.MethodHead, "/healthz"); w.Code != http.StatusOK {
		t.Fatalf("HEAD healthz: %d", w.Code)
	}
}

func TestReadyz(t *testing.T) {
	f := newFake(t)
	w := get(t, f, Config{}, http.MethodGet, "/readyz")
	if w.Code != http.StatusOK || decodeBody[map[string]string](t, w)["status"] != "ready" {
		t.Fatalf("ready node: %d %s", w.Code, w.Body)
	}
	f.notReady = status.Error(codes.Unavailable, "no leader known")
	w = get(t, f, Config{}, http.MethodGet, "/readyz")
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("node not ready: %d %s, want 503", w.Code, w.Body)
	}
	e := decodeBody[errorResponse](t, w)
	if e.Error != "no leader known" || e.Code != "UNAVAILABLE" || e.LeaderAddr != "127.0.0.1:7001" {
		t.Fatalf("node not ready: body %+v", e)
	}
	if h := w.Header().Get(LeaderHeader); h != "127.0.0.1:7001" {
		t.Fatalf("%s header %q", LeaderHeader, h)
	}
}

func TestIDsAreStringsAndIncrease(t *testing.T) {
	f := newFake(t)
	f.runLen = 2 // several runs per request
	var last uint64
	for _, tt := range []struct {
		query string
		want  int
	}{{"", 1}, {"?count=5", 5}, {"?count=3&unknown=x", 3}} {
		w := get(t, f, Config{}, http.MethodGet, "/v1/ids"+tt.query)
		if w.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", tt.query, w.Code, w.Body)
		}
		if !strings.Contains(w.Body.String(), `"ids":["`) {
			t.Fatalf("%s: IDs are not JSON strings: %s", tt.query, w.Body)
		}
		body := decodeBody[idsResponse](t, w)
		if len(body.IDs) != tt.want || body.Count != tt.want || body.Decoded != nil {
			t.Fatalf("%s: %+v, want %d IDs and no decoding", tt.query, body, tt.want)
		}
		for _, s := range body.IDs {
			var id uint64
			if _, err := fmt.Sscan(s, &id); err != nil {
				t.Fatal(err)
			}
			if id <= last {
				t.Fatalf("%s: ID %d not above %d", tt.query, id, last)
			}
			last = id
		}
	}
	if last <= 1<<60 {
		t.Fatalf("IDs lost their high bits: last %d", last)
	}
}

func TestIDsDecode(t *testing.T) {
	f := newFake(t)
	// An ID the default layout makes at 2024-01-01T00:00:01.234Z, group 5,
	// sequence 9.
	f.next = f.layout.ID(1234<<f.layout.SeqBits|9, 5)
	w := get(t, f, Config{}, http.MethodGet, "/v1/ids?count=2&decode=true")
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	body := decodeBody[idsResponse](t, w)
	if len(body.Decoded) != 2 {
		t.Fatalf("decoded %+v, want 2", body.Decoded)
	}
	want := decodedID{ID: body.IDs[0], Time: "2024-01-01T00:00:01.234Z", Group: 5, Seq: 9}
	if body.Decoded[0] != want {
		t.Fatalf("decoded %+v, want %+v", body.Decoded[0], want)
	}
	if body.Decoded[1].ID != body.IDs[1] || body.Decoded[1].Seq != 10 {
		t.Fatalf("second decoded %+v", body.Decoded[1])
	}
	if w := get(t, f, Config{}, http.MethodGet, "/v1/ids?decode=false"); decodeBody[idsResponse](t, w).Decoded != nil {
		t.Fatalf("decode=false decoded: %s", w.Body)
	}
}

// TestIDsWide checks that under the 128-bit layouts /v1/ids renders the
// ticks the node answers as canonical text that sorts in issue order, with
// the node's group, and decodes them to the tick's time and counter.
func TestIDsWide(t *testing.T) {
	for _, name := range []string{"uuidv7", "ulid"} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.layout, f.group = mustLayout(t, name), 5
			f.runLen = 2
			// 2026-01-01T00:00:00.007Z, counter 32766: the batch crosses
			// into the next millisecond.
			f.next = uint64(1767225600007)<<f.layout.SeqBits | 32766
			w := get(t, f, Config{}, http.MethodGet, "/v1/ids?count=3&decode=true")
			if w.Code != http.StatusOK {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			body := decodeBody[idsResponse](t, w)
			if len(body.IDs) != 3 || len(body.Decoded) != 3 {
				t.Fatalf("%+v, want 3 IDs, decoded", body)
			}
			for i, s := range body.IDs {
				id, err := f.layout.ParseWide(s)
				if err != nil || f.layout.FormatWide(id) != s {
					t.Fatalf("ID %q is not canonical %s: %v", s, name, err)
				}
				p, err := f.layout.DecodeWide(id)
				if err != nil || p.Group != 5 || body.Decoded[i].Group != 5 || body.Decoded[i].Seq != p.Seq || body.Decoded[i].Time != p.Time.Format(rfc3339Milli) {
					t.Fatalf("ID %s decodes to %+v (%v), the reply says %+v", s, p, err, body.Decoded[i])
				}
				if i > 0 && s <= body.IDs[i-1] {
					t.Fatalf("ID %s does not sort above %s", s, body.IDs[i-1])
				}
			}
			if body.Decoded[0].Time != "2026-01-01T00:00:00.007Z" || body.Decoded[0].Seq != 32766 {
				t.Fatalf("first decoded %+v", body.Decoded[0])
			}
		})
	}
}

// TestIDsWidePastTheLastTick: a leader's tick above the layout's last
// would render with its time wrapped to 0, sorting below the IDs before
// it; /v1/ids answers 500 with none of the batch.
func TestIDsWidePastTheLastTick(t *testing.T) {
	f := newFake(t)
	f.layout = mustLayout(t, "ulid")
	f.next = f.layout.MaxTick()
	w := get(t, f, Config{}, http.MethodGet, "/v1/ids?count=2")
	if w.Code != http.StatusInternalServerError || strings.Contains(w.Body.String(), `"ids"`) {
		t.Fatalf("ticks %d and %d: %d %s, want 500 and no IDs", f.layout.MaxTick(), f.layout.MaxTick()+1, w.Code, w.Body)
	}
}

func TestIDsBadInput(t *testing.T) {
	f := newFake(t)
	for _, q := range []string{"count=0", "count=-1", "count=abc", "count=4294967296", "count=1.5", "decode=maybe", "count=", "count=2&count=5", "decode=", "decode=true&decode=false"} {
		w := get(t, f, Config{}, http.MethodGet, "/v1/ids?"+q)
		if w.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", q, w.Code, w.Body)
			continue
		}
		// The error names the parameter: count=2&count=5 and count= are
		// refused, not read as 2 and as 1.
		param, _, _ := strings.Cut(q, "=")
		if e := decodeBody[errorResponse](t, w); e.Code != "INVALID_ARGUMENT" || !strings.Contains(e.Error, param) {
			t.Errorf("%s: body %+v, want INVALID_ARGUMENT naming %s", q, e, param)
		}
	}
	if len(f.counts) != 0 {
		t.Fatalf("bad input reached the node: %v", f.counts)
	}
	// The node checks the range against its maximum; its refusal is a 400.
	f.err = status.Error(codes.InvalidArgument, "bad count: count 100001, want 1 to 100000")
	w := get(t, f, Config{}, http.MethodGet, "/v1/ids?count=100001")
	if w.Code != http.StatusBadRequest || f.counts[0] != 100001 {
		t.Fatalf("count above the maximum: %d %s (asked %v)", w.Code, w.Body, f.counts)
	}
}

func TestIDsFromABrokenLeader(t *testing.T) {
	f := newFake(t)
	f.short = true
	if w := get(t, f, Config{}, http.MethodGet, "/v1/ids?count=3"); w.Code != http.StatusInternalServerError {
		t.Fatalf("two IDs for three: %d %s, want 500", w.Code, w.Body)
	}
}

// TestErrorMapping: every code the node can answer maps to its HTTP
// status, and the leader is named when the node cannot serve.
func TestErrorMapping(t *testing.T) {
	for _, tt := range []struct {
		err    error
		status int
		code   string
	}{
		{status.Error(codes.InvalidArgument, "x"), 400, "INVALID_ARGUMENT"},
		{status.Error(codes.PermissionDenied, "x"), 403, "PERMISSION_DENIED"},
		{status.Error(codes.Unauthenticated, "x"), 401, "UNAUTHENTICATED"},
		{status.Error(codes.NotFound, "x"), 404, "NOT_FOUND"},
		{status.Error(codes.ResourceExhausted, "x"), 429, "RESOURCE_EXHAUSTED"},
		{status.Error(codes.Unavailable, "not the leader; leader is at 127.0.0.1:7001"), 503, "UNAVAILABLE"},
		{status.Error(codes.Canceled, "x"), 503, "CANCELED"},
		{status.Error(codes.DeadlineExceeded, "x"), 504, "DEADLINE_EXCEEDED"},
		{status.Error(codes.OutOfRange, "time field exhausted"), 500, "OUT_OF_RANGE"},
		{status.Error(codes.FailedPrecondition, "reservation expired: do not publish these IDs"), 409, "FAILED_PRECONDITION"},
		{status.Error(codes.Internal, "x"), 500, "INTERNAL"},
		{errors.New("not a status"), 500, "INTERNAL"},
	} {
		for _, call := range []struct{ method, path string }{
			{http.MethodGet, "/v1/ids"},
			{http.MethodGet, "/v1/status"},
			{http.MethodPost, "/v1/reservations?count=2"},
			{http.MethodPost, "/v1/reservations/complete?handle=r1.5.2"},
			{http.MethodPost, "/v1/reservations/abandon?handle=r1.5.2"},
			{http.MethodPost, "/v1/reservations/extend?handle=r1.5.2&ttl=1m"},
			{http.MethodGet, "/v1/watermark"},
			{http.MethodPost, "/v1/sequences/books/ids?count=2"},
		} {
			path := call.path
			f := newFake(t)
			f.err = tt.err
			w := get(t, f, Config{}, call.method, path)
			e := decodeBody[errorResponse](t, w)
			if w.Code != tt.status || e.Code != tt.code || e.Error == "" {
				t.Errorf("%s with %v: %d %+v, want %d %s", path, tt.err, w.Code, e, tt.status, tt.code)
			}
			named := w.Header().Get(LeaderHeader) == "127.0.0.1:7001" && e.LeaderID == "n1"
			if named != (tt.status == 503) {
				t.Errorf("%s with %v: leader named %v (header %q, body %+v)", path, tt.err, named, w.Header().Get(LeaderHeader), e)
			}
		}
	}
}

func TestStatus(t *testing.T) {
	w := get(t, newFake(t), Config{}, http.MethodGet, "/v1/status")
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	var body struct {
		LeaderID string `json:"leader_id"`
		Group    string `json:"group"`
		Nodes    []struct {
			ID        string `json:"id"`
			Term      string `json:"term"`
			HighWater string `json:"high_water"`
			Error     string `json:"error"`
			Voter     bool   `json:"voter"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("64-bit fields must be strings: %v in %s", err, w.Body)
	}
	if body.LeaderID != "n1" || body.Group != "3" || len(body.Nodes) != 1 {
		t.Fatalf("status %s", w.Body)
	}
	if n := body.Nodes[0]; n.ID != "n1" || n.Term != "7" || n.HighWater != "1152921504606846976" || !n.Voter {
		t.Fatalf("node %+v", n)
	}
	if !strings.Contains(w.Body.String(), `"error"`) {
		t.Fatalf("empty fields must be present: %s", w.Body)
	}
}

func TestRoutes(t *testing.T) {
	f := newFake(t)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ordo_ids_issued_total 3\n") })
	for _, tt := range []struct {
		cfg           Config
		method, path  string
		status        int
		code, allowed string
	}{
		{Config{}, http.MethodGet, "/nope", 404, "NOT_FOUND", ""},
		{Config{}, http.MethodGet, "/", 404, "NOT_FOUND", ""},
		{Config{}, http.MethodGet, "/metrics", 404, "NOT_FOUND", ""}, // none given
		{Config{}, http.MethodPost, "/v1/ids", 405, "METHOD_NOT_ALLOWED", "GET"},
		{Config{}, http.MethodHead, "/v1/ids", 405, "METHOD_NOT_ALLOWED", "GET"}, // HEAD would spend IDs
		{Config{}, http.MethodDelete, "/v1/status", 405, "METHOD_NOT_ALLOWED", "GET"},
		{Config{}, http.MethodPost, "/healthz", 405, "METHOD_NOT_ALLOWED", "GET, HEAD"},
		{Config{}, http.MethodGet, "/v1/reservations", 405, "METHOD_NOT_ALLOWED", "POST"}, // a crawler's GET must not reserve
		{Config{}, http.MethodGet, "/v1/reservations/complete?handle=r1.5.2", 405, "METHOD_NOT_ALLOWED", "POST"},
		{Config{}, http.MethodPut, "/v1/reservations/abandon?handle=r1.5.2", 405, "METHOD_NOT_ALLOWED", "POST"},
		{Config{}, http.MethodGet, "/v1/reservations/extend?handle=r1.5.2", 405, "METHOD_NOT_ALLOWED", "POST"},
		{Config{}, http.MethodPost, "/v1/watermark", 405, "METHOD_NOT_ALLOWED", "GET"},
		{Config{}, http.MethodGet, "/v1/reservations/", 404, "NOT_FOUND", ""},
		{Config{Metrics: metrics}, http.MethodGet, "/metrics", 200, "", ""},
	} {
		w := get(t, f, tt.cfg, tt.method, tt.path)
		if w.Code != tt.status {
			t.Errorf("%s %s: %d %s, want %d", tt.method, tt.path, w.Code, w.Body, tt.status)
			continue
		}
		if w.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%s %s: Cache-Control %q", tt.method, tt.path, w.Header().Get("Cache-Control"))
		}
		if tt.code != "" {
			if e := decodeBody[errorResponse](t, w); e.Code != tt.code {
				t.Errorf("%s %s: %+v, want code %s", tt.method, tt.path, e, tt.code)
			}
		}
		if got := w.Header().Get("Allow"); got != tt.allowed {
			t.Errorf("%s %s: Allow %q, want %q", tt.method, tt.path, got, tt.allowed)
		}
		if tt.status == 200 && !strings.Contains(w.Body.String(), "ordo_ids_issued_total") {
			t.Errorf("metrics: %s", w.Body)
		}
	}
	if len(f.counts) != 0 || len(f.asked) != 0 {
		t.Fatalf("a refused method reached the node: %v %v", f.counts, f.asked)
	}
}

func TestObserve(t *testing.T) {
	type seen struct {
		route string
		code  int
	}
	var got []seen
	cfg := Config{Observe: func(route string, code int, d time.Duration) { got = append(got, seen{route, code}) }}
	f := newFake(t)
	get(t, f, cfg, http.MethodGet, "/v1/ids?count=2")
	get(t, f, cfg, http.MethodGet, "/v1/ids?count=0")
	get(t, f, cfg, http.MethodGet, "/secret/path/1")
	want := []seen{{"/v1/ids", 200}, {"/v1/ids", 400}, {"other", 404}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("observed %v, want %v", got, want)
	}
}

// TestTLS: over TLS, /healthz and /readyz answer without a client
// certificate, IDs, status and metrics need one signed by the cluster CA,
// and a certificate from another CA is refused at the handshake.
func TestTLS(t *testing.T) {
	pki := securetest.New(t, "ordo-test-ca")
	node := securetest.MustLoad(t, pki.Node("ordo-node"))
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "m 1\n") })
	addr := listen(t, NewServer(newFake(t), Config{TLS: node.ServerConfig(nil, false), Metrics: metrics}))
	base := "https://" + addr
	clientFor := func(files secure.Files) *http.Client {
		tl := securetest.MustLoad(t, files)
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tl.ClientConfig()}}
	}
	withCert := clientFor(pki.Client("ordo-client"))
	noCert := clientFor(secure.Files{CA: pki.CAFile()})
	other := securetest.New(t, "another-ca").Client("stranger")
	other.CA = pki.CAFile()
	stranger := clientFor(other)

	for _, tt := range []struct {
		name   string
		c      *http.Client
		path   string
		status int
	}{
		{"no certificate", noCert, "/healthz", 200},
		{"no certificate", noCert, "/readyz", 200},
		{"no certificate", noCert, "/v1/ids", 403},
		{"no certificate", noCert, "/v1/status", 403},
		{"no certificate", noCert, "/metrics", 403},
		{"no certificate", noCert, "/v1/watermark", 403},
		{"no certificate", noCert, "/v1/sequences/books/ids", 403},
		{"client certificate", withCert, "/v1/ids?count=2", 200},
		{"client certificate", withCert, "/v1/status", 200},
		{"client certificate", withCert, "/metrics", 200},
		{"client certificate", withCert, "/v1/watermark", 200},
		{"client certificate", withCert, "/healthz", 200},
	} {
		resp, err := tt.c.Get(base + tt.path)
		if err != nil {
			t.Fatalf("%s %s: %v", tt.name, tt.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s: %d %s, want %d", tt.name, tt.path, resp.StatusCode, body, tt.status)
		}
		if tt.status == 403 && !strings.Contains(string(body), "PERMISSION_DENIED") {
			t.Errorf("%s %s: %s", tt.name, tt.path, body)
		}
	}
	if resp, err := stranger.Get(base + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("a certificate from another CA was let in: %d", resp.StatusCode)
	}
	// Plain HTTP on the TLS port gets nothing.
	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get("http://" + addr + "/v1/ids"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatalf("plain HTTP served IDs: %s", body)
		}
	}
}

// TestOptionalClientCertKeepsVerifying: relaxing the handshake never
// turns off the check of a certificate that is given.
func TestOptionalClientCertKeepsVerifying(t *testing.T) {
	called := 0
	base := &tls.Config{ClientAuth: tls.RequireAnyClientCert, VerifyConnection: func(tls.ConnectionState) error { called++; return errors.New("refused") }}
	c := optionalClientCert(base)
	if c.ClientAuth != tls.RequestClientCert || base.ClientAuth != tls.RequireAnyClientCert {
		t.Fatalf("ClientAuth %v (base %v)", c.ClientAuth, base.ClientAuth)
	}
	if err := c.VerifyConnection(tls.ConnectionState{}); err != nil || called != 0 {
		t.Fatalf("no certificate: %v, verify called %d times", err, called)
	}
	if err := c.VerifyConnection(tls.ConnectionState{PeerCertificates: make([]*x509.Certificate, 1)}); err == nil || called != 1 {
		t.Fatalf("a certificate: %v, verify called %d times", err, called)
	}
	if c := optionalClientCert(&tls.Config{}); c.ClientAuth != tls.VerifyClientCertIfGiven {
		t.Fatalf("without VerifyConnection: ClientAuth %v, want crypto/tls to verify", c.ClientAuth)
	}
}
