package httpapi

import (
	"crypto/tls"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
)

// namedFake is a fake node with dense sequence "books" and a dropped one,
// "gone".
func namedFake(t *testing.T) *fakeNode {
	f := newFake(t)
	f.sequences = map[string]*api.SequenceInfo{
		"books": {Name: "books", Kind: "dense", Next: 1},
		"gone":  {Name: "gone", Kind: "dense", Next: 1, Dropped: true},
	}
	return f
}

// TestSequenceReservationRoutes: a named sequence's reservation, its
// decisions and its W go to the node with the sequence in the path; the
// handle names it; each route has one label whatever the name.
func TestSequenceReservationRoutes(t *testing.T) {
	f := namedFake(t)
	f.next = 7
	var routes []string
	cfg := Config{Observe: func(route string, code int, _ time.Duration) { routes = append(routes, route) }}
	w := get(t, f, cfg, http.MethodPost, "/v1/sequences/books/reservations?count=3&ttl=2s")
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	body := decodeBody[reservationResponse](t, w)
	if body.Handle != "s1.books.7.3" || !slices.Equal(body.IDs, []string{"7", "8", "9"}) || body.TTLMs != 2000 || body.Fate != "open" {
		t.Fatalf("%+v", body)
	}
	for _, target := range []string{
		"/v1/sequences/books/reservations/complete?handle=s1.books.7.3",
		"/v1/sequences/books/reservations/abandon?handle=s1.books.7.3",
		"/v1/sequences/books/reservations/extend?handle=s1.books.7.3&ttl=1m",
	} {
		if w := get(t, f, cfg, http.MethodPost, target); w.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", target, w.Code, w.Body)
		}
	}
	w = get(t, f, cfg, http.MethodGet, "/v1/sequences/books/watermark")
	if m := decodeBody[markResponse](t, w); w.Code != http.StatusOK || m.WatermarkTick != "576460752303423493" {
		t.Fatalf("watermark: %d %s", w.Code, w.Body)
	}
	want := []string{"reserve 3 ttl=2000 seq=books", "complete s1.books.7.3 ttl=0 seq=books", "abandon s1.books.7.3 ttl=0 seq=books",
		"extend s1.books.7.3 ttl=60000 seq=books", "watermark seq=books"}
	if !slices.Equal(f.asked, want) {
		t.Fatalf("node asked %q, want %q", f.asked, want)
	}
	wantRoutes := []string{sequenceReservationsRoute, sequenceCompleteRoute, sequenceAbandonRoute, sequenceExtendRoute, sequenceWatermarkRoute}
	if !slices.Equal(routes, wantRoutes) {
		t.Fatalf("routes observed %q, want %q", routes, wantRoutes)
	}
}

// TestSequenceReservationsBadInput: a malformed name is a 400, an unknown
// or dropped sequence a 404 before anything is reserved, a wrong method a
// 405; the node is asked nothing (but, for a Reserve, what the sequence
// is).
func TestSequenceReservationsBadInput(t *testing.T) {
	for _, tt := range []struct {
		method, target string
		code           int
		says           string
	}{
		{http.MethodPost, "/v1/sequences/Books/reservations", http.StatusBadRequest, "bad sequence name"},
		{http.MethodPost, "/v1/sequences//reservations", http.StatusBadRequest, "bad sequence name"},
		{http.MethodPost, "/v1/sequences/a/b/reservations/complete?handle=s1.a.1.1", http.StatusBadRequest, "bad sequence name"},
		{http.MethodGet, "/v1/sequences/-x/watermark", http.StatusBadRequest, "bad sequence name"},
		{http.MethodPost, "/v1/sequences/nope/reservations?count=1", http.StatusNotFound, "no sequence"},
		{http.MethodPost, "/v1/sequences/gone/reservations?count=1", http.StatusNotFound, "dropped"},
		{http.MethodPost, "/v1/sequences/books/reservations?count=0", http.StatusBadRequest, "count"},
		{http.MethodPost, "/v1/sequences/books/reservations/complete", http.StatusBadRequest, "handle is missing"},
		{http.MethodGet, "/v1/sequences/books/reservations", http.StatusMethodNotAllowed, "method not allowed"},
		{http.MethodPost, "/v1/sequences/books/watermark", http.StatusMethodNotAllowed, "method not allowed"},
	} {
		f := namedFake(t)
		w := get(t, f, Config{}, tt.method, tt.target)
		if w.Code != tt.code || !strings.Contains(w.Body.String(), tt.says) {
			t.Errorf("%s %s: %d %s, want %d saying %q", tt.method, tt.target, w.Code, w.Body, tt.code, tt.says)
		}
		if len(f.asked) != 0 {
			t.Errorf("%s %s: the node was asked %q", tt.method, tt.target, f.asked)
		}
	}
}

// TestSequenceReservationsNeedACertificate: with TLS, as the default
// sequence's routes.
func TestSequenceReservationsNeedACertificate(t *testing.T) {
	f := namedFake(t)
	for _, target := range []string{"/v1/sequences/books/reservations?count=1", "/v1/sequences/books/reservations/complete?handle=s1.books.1.1"} {
		if w := get(t, f, Config{TLS: &tls.Config{}}, http.MethodPost, target); w.Code != http.StatusForbidden {
			t.Errorf("%s without a certificate: %d %s, want 403", target, w.Code, w.Body)
		}
	}
	if w := get(t, f, Config{TLS: &tls.Config{}}, http.MethodGet, "/v1/sequences/books/watermark"); w.Code != http.StatusForbidden {
		t.Errorf("watermark without a certificate: %d", w.Code)
	}
	if len(f.asked) != 0 {
		t.Fatalf("the node was asked: %q", f.asked)
	}
}
