package httpapi

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seed-e8569b35/ordo/api"
)

// keys is the sorted field names of a JSON object.
func keys(t *testing.T, body []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	var out []string
	for k, v := range m {
		out = append(out, k)
		if k != "ttl_ms" && k != "ids" && !strings.HasPrefix(string(v), `"`) {
			t.Errorf("field %s is %s, want a string", k, v)
		}
	}
	slices.Sort(out)
	return out
}

// TestReserve: a reservation's handle, its IDs as strings in increasing
// order (several runs, above 2^53), and its TTL; count and ttl reach the
// node in its units, and leaving them out asks for 1 ID and the default
// TTL.
func TestReserve(t *testing.T) {
	f := newFake(t)
	f.runLen = 2
	first := f.next
	w := get(t, f, Config{}, http.MethodPost, "/v1/reservations?count=5&ttl=1m30s")
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if got := keys(t, w.Body.Bytes()); fmt.Sprint(got) != "[fate handle ids ttl_ms]" {
		t.Fatalf("fields %v: %s", got, w.Body)
	}
	body := decodeBody[reservationResponse](t, w)
	if body.Handle != (api.Handle{First: first, Count: 5}).String() || body.TTLMs != 90_000 || len(body.IDs) != 5 || body.Fate != "open" {
		t.Fatalf("%+v", body)
	}
	last := uint64(1 << 60)
	for _, s := range body.IDs {
		id, err := strconv.ParseUint(s, 10, 64)
		if err != nil || id <= last {
			t.Fatalf("ID %q not a decimal string above %d (%v)", s, last, err)
		}
		last = id
	}
	w = get(t, f, Config{}, http.MethodPost, "/v1/reservations")
	if body := decodeBody[reservationResponse](t, w); w.Code != http.StatusOK || len(body.IDs) != 1 || body.TTLMs != 30_000 {
		t.Fatalf("no parameters: %d %s, want one ID and the node's default TTL", w.Code, w.Body)
	}
	if want := []string{"reserve 5 ttl=90000", "reserve 1 ttl=0"}; !slices.Equal(f.asked, want) {
		t.Fatalf("node asked %q, want %q", f.asked, want)
	}
}

// TestReserveWide: under the 128-bit layouts a reservation's IDs are
// canonical text that takes apart to what /v1/ids renders for the same
// ticks (time, group, counter; the random bits differ), in issue order.
func TestReserveWide(t *testing.T) {
	for _, name := range []string{"uuidv7", "ulid"} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.layout, f.group, f.runLen = mustLayout(t, name), 5, 2
			// The batch crosses into the next millisecond.
			start := uint64(1767225600007)<<f.layout.SeqBits | 32766
			f.next = start
			w := get(t, f, Config{}, http.MethodPost, "/v1/reservations?count=3")
			if w.Code != http.StatusOK {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			reserved := decodeBody[reservationResponse](t, w).IDs
			f.next = start
			issued := decodeBody[idsResponse](t, get(t, f, Config{}, http.MethodGet, "/v1/ids?count=3&decode=true")).Decoded
			if len(reserved) != 3 || len(issued) != 3 {
				t.Fatalf("reserved %q, issued %+v", reserved, issued)
			}
			for i, s := range reserved {
				id, err := f.layout.ParseWide(s)
				if err != nil || f.layout.FormatWide(id) != s {
					t.Fatalf("ID %q is not canonical %s: %v", s, name, err)
				}
				p, _ := f.layout.DecodeWide(id)
				got := decodedID{ID: issued[i].ID, Time: p.Time.Format(rfc3339Milli), Group: p.Group, Seq: p.Seq}
				if got != issued[i] {
					t.Fatalf("reserved %s takes apart to %+v, /v1/ids renders the same tick as %+v", s, got, issued[i])
				}
				if i > 0 && s <= reserved[i-1] {
					t.Fatalf("ID %s does not sort above %s", s, reserved[i-1])
				}
			}
		})
	}
}

// TestReserveFromABrokenLeader: runs that do not hold the IDs asked for
// are the server's fault, and no ID is shown.
func TestReserveFromABrokenLeader(t *testing.T) {
	f := newFake(t)
	f.short = true
	w := get(t, f, Config{}, http.MethodPost, "/v1/reservations?count=3")
	if w.Code != http.StatusInternalServerError || strings.Contains(w.Body.String(), `"ids"`) {
		t.Fatalf("two IDs for three: %d %s, want 500 and no IDs", w.Code, w.Body)
	}
}

// TestDecide: each route does its own thing to the handle given (extend
// with its TTL in ms), and answers the fate by name and W as strings.
func TestDecide(t *testing.T) {
	fates := map[api.Fate]string{
		api.Fate_FATE_OPEN: "open", api.Fate_FATE_COMPLETED: "completed",
		api.Fate_FATE_ABANDONED: "abandoned", api.Fate_FATE_EXPIRED: "expired",
	}
	for _, tt := range []struct{ target, asked string }{
		{"/v1/reservations/complete?handle=r1.5.2", "complete r1.5.2 ttl=0"},
		{"/v1/reservations/abandon?handle=r1.5.2", "abandon r1.5.2 ttl=0"},
		{"/v1/reservations/extend?handle=r1.5.2&ttl=2m", "extend r1.5.2 ttl=120000"},
		{"/v1/reservations/extend?handle=r1.9.1", "extend r1.9.1 ttl=0"},
	} {
		for fate, name := range fates {
			f := newFake(t)
			f.fate = fate
			w := get(t, f, Config{}, http.MethodPost, tt.target)
			if w.Code != http.StatusOK {
				t.Fatalf("%s: %d %s", tt.target, w.Code, w.Body)
			}
			if got := keys(t, w.Body.Bytes()); fmt.Sprint(got) != "[fate watermark watermark_tick]" {
				t.Fatalf("%s: fields %v: %s", tt.target, got, w.Body)
			}
			body := decodeBody[decisionResponse](t, w)
			if body.Fate != name || body.Watermark != "1152921504606846983" || body.WatermarkTick != "576460752303423491" {
				t.Errorf("%s with %v: %+v", tt.target, fate, body)
			}
			if !slices.Equal(f.asked, []string{tt.asked}) {
				t.Errorf("%s: node asked %q, want %q", tt.target, f.asked, tt.asked)
			}
		}
	}
}

func TestWatermark(t *testing.T) {
	f := newFake(t)
	w := get(t, f, Config{}, http.MethodGet, "/v1/watermark")
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if got := keys(t, w.Body.Bytes()); fmt.Sprint(got) != "[watermark watermark_tick]" {
		t.Fatalf("fields %v: %s", got, w.Body)
	}
	if body := decodeBody[markResponse](t, w); body.Watermark != "1152921504606846985" || body.WatermarkTick != "576460752303423493" {
		t.Fatalf("%+v", body)
	}
}

// TestReservationsBadInput: a bad, repeated, empty or missing parameter
// is a 400 that says what to give, and the node is not asked.
func TestReservationsBadInput(t *testing.T) {
	const (
		reserve  = "/v1/reservations?"
		complete = "/v1/reservations/complete?"
		abandon  = "/v1/reservations/abandon?"
		extend   = "/v1/reservations/extend?handle=r1.5.2&"
	)
	for _, tt := range []struct{ target, says string }{
		{reserve + "count=2&count=5", "count given 2 times: give it once"},
		{reserve + "count=", "count is empty: want a whole number"},
		{reserve + "count=0", `count "0": want a whole number`},
		{reserve + "count=abc", `count "abc"`},
		{reserve + "count=4294967296", `count "4294967296"`},
		{reserve + "ttl=-1s", `ttl "-1s": want a duration`},
		{reserve + "ttl=0s", `ttl "0s"`},
		{reserve + "ttl=30", `ttl "30"`},
		{reserve + "ttl=soon", `ttl "soon"`},
		{reserve + "ttl=1500us", `ttl "1500us": want a duration of whole milliseconds`},
		{reserve + "ttl=2000h", `ttl "2000h"`}, // above the 32-bit field's ms
		{reserve + "ttl=", "ttl is empty"},
		{reserve + "ttl=1s&ttl=2s", "ttl given 2 times"},
		{complete, "handle is missing: want the handle exactly as"},
		{complete + "handle=", "handle is empty"},
		{complete + "handle=r1.5.2&handle=r1.9.1", "handle given 2 times"},
		{abandon, "handle is missing"},
		{abandon + "handle=", "handle is empty"},
		{extend + "ttl=-5s", `ttl "-5s"`},
		{extend + "ttl=", "ttl is empty"},
		{extend + "ttl=1m&ttl=2m", "ttl given 2 times"},
		{"/v1/reservations/extend?ttl=1m", "handle is missing"},
	} {
		f := newFake(t)
		w := get(t, f, Config{}, http.MethodPost, tt.target)
		if w.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tt.target, w.Code, w.Body)
			continue
		}
		if e := decodeBody[errorResponse](t, w); e.Code != "INVALID_ARGUMENT" || !strings.Contains(e.Error, tt.says) {
			t.Errorf("%s: %+v, want the error to say %q", tt.target, e, tt.says)
		}
		if len(f.asked) != 0 || len(f.counts) != 0 {
			t.Errorf("%s: bad input reached the node: %q", tt.target, f.asked)
		}
	}
}

// TestReservationRoutesNeedACertificate: with TLS, the reservation and
// watermark routes are refused without a client certificate, and the
// node is not asked.
func TestReservationRoutesNeedACertificate(t *testing.T) {
	f := newFake(t)
	for _, tt := range []struct{ method, target string }{
		{http.MethodPost, "/v1/reservations?count=1"},
		{http.MethodPost, "/v1/reservations/complete?handle=r1.5.2"},
		{http.MethodPost, "/v1/reservations/abandon?handle=r1.5.2"},
		{http.MethodPost, "/v1/reservations/extend?handle=r1.5.2"},
		{http.MethodGet, "/v1/watermark"},
	} {
		w := get(t, f, Config{TLS: &tls.Config{}}, tt.method, tt.target)
		if w.Code != http.StatusForbidden {
			t.Errorf("%s %s without a certificate: %d %s, want 403", tt.method, tt.target, w.Code, w.Body)
		}
	}
	if len(f.asked) != 0 {
		t.Fatalf("the node was asked: %q", f.asked)
	}
}

// TestReserveKeyed: the Idempotency-Key header keys a reservation; its
// caller is the Ordo-Caller header in plaintext (none: one namespace),
// the client certificate under TLS (the header then ignored), as gRPC
// takes them; a retry's fate comes back as the reservation stands.
func TestReserveKeyed(t *testing.T) {
	f := newFake(t)
	f.reserveFate = api.Fate_FATE_COMPLETED
	reserve := func(cfg Config, state *tls.ConnectionState, headers ...string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/v1/reservations?count=2", nil)
		for i := 0; i < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		req.TLS = state
		w := httptest.NewRecorder()
		Handler(f, cfg).ServeHTTP(w, req)
		return w
	}
	w := reserve(Config{}, nil, KeyHeader, "batch-9", CallerHeader, "billing")
	if body := decodeBody[reservationResponse](t, w); w.Code != http.StatusOK || body.Fate != "completed" {
		t.Fatalf("keyed reserve: %d %s, want the reservation, completed", w.Code, w.Body)
	}
	reserve(Config{}, nil, KeyHeader, "batch-9")
	cert := &x509.Certificate{}
	cert.Subject.CommonName = "writer-1"
	reserve(Config{TLS: &tls.Config{}}, &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}, KeyHeader, "batch-9", CallerHeader, "billing")
	reserve(Config{}, nil, CallerHeader, "billing") // unkeyed: no caller needed
	want := []string{
		"reserve 2 ttl=0 key=batch-9 caller=named:billing",
		"reserve 2 ttl=0 key=batch-9 caller=none",
		"reserve 2 ttl=0 key=batch-9 caller=cert:CN=writer-1",
		"reserve 2 ttl=0",
	}
	if !slices.Equal(f.asked, want) {
		t.Fatalf("node asked %q, want %q", f.asked, want)
	}
	if w := reserve(Config{}, nil, KeyHeader, "k", CallerHeader, "bad\x7fname"); w.Code != http.StatusBadRequest || len(f.asked) != len(want) {
		t.Fatalf("a caller name that is not printable ASCII: %d %s, want 400 and no call", w.Code, w.Body)
	}
	f.reserveFate = api.Fate_FATE_UNSPECIFIED
	if body := decodeBody[reservationResponse](t, reserve(Config{}, nil, KeyHeader, "k")); body.Fate != "unknown" {
		t.Fatalf("a keyed retry whose fate the cluster no longer knows: fate %q, want unknown", body.Fate)
	}
}
