package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
)

// eventsTick is 2026-03-01T00:00:00Z, counter 32766 under uuidv7 and
// ulid: a batch of three crosses into the next millisecond.
const eventsTick = uint64(1772323200000)<<15 | 32766

// withSequences is newFake with named sequences: books (dense from 100),
// flakes (twitter, group 3), events (uuidv7, group 7), logs (ulid, group
// 9) and gone (dropped). The cluster's own layout is the default, group
// 0: a sequence's IDs must be rendered with its own.
func withSequences(t *testing.T) *fakeNode {
	t.Helper()
	f := newFake(t)
	f.sequences = map[string]*api.SequenceInfo{
		"books":  {Name: "books", Kind: "dense", Start: 100, Next: 100},
		"flakes": {Name: "flakes", Kind: "twitter", Group: 3, Next: 1 << 62},
		"events": {Name: "events", Kind: "uuidv7", Group: 7, Next: eventsTick},
		"logs":   {Name: "logs", Kind: "ulid", Group: 9, Next: eventsTick},
		"gone":   {Name: "gone", Kind: "dense", Start: 1, Next: 5, Dropped: true},
	}
	return f
}

// TestSequenceIDs: GET and POST hand out IDs of the sequence the path
// names, as strings: a dense sequence's consecutive values, a 64-bit
// layout's IDs with every bit, and the default sequence is not asked.
func TestSequenceIDs(t *testing.T) {
	f := withSequences(t)
	for _, tt := range []struct {
		method, target string
		want           []string
	}{
		{http.MethodGet, "/v1/sequences/books/ids?count=3", []string{"100", "101", "102"}},
		{http.MethodPost, "/v1/sequences/books/ids", []string{"103"}},
		{http.MethodGet, "/v1/sequences/flakes/ids?count=2", []string{strconv.FormatUint(1<<62, 10), strconv.FormatUint(1<<62+1, 10)}},
	} {
		w := get(t, f, Config{}, tt.method, tt.target)
		if w.Code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", tt.method, tt.target, w.Code, w.Body)
		}
		body := decodeBody[idsResponse](t, w)
		if !slices.Equal(body.IDs, tt.want) || body.Count != len(tt.want) {
			t.Fatalf("%s %s: %+v, want IDs %q", tt.method, tt.target, body, tt.want)
		}
	}
	if want := []string{"books 3", "books 1", "flakes 2"}; !slices.Equal(f.seqAsked, want) || len(f.counts) != 0 {
		t.Fatalf("the node was asked %q (and the default sequence %v), want %q", f.seqAsked, f.counts, want)
	}
}

// TestSequenceIDsWide: a uuidv7 or ulid sequence's ticks are rendered as
// canonical text with the sequence's group, not the cluster's, and sort
// in issue order across a millisecond.
func TestSequenceIDsWide(t *testing.T) {
	for name, spec := range map[string]string{"events": "uuidv7", "logs": "ulid"} {
		t.Run(spec, func(t *testing.T) {
			f := withSequences(t)
			group := f.sequences[name].Group
			l := mustLayout(t, spec)
			w := get(t, f, Config{}, http.MethodGet, "/v1/sequences/"+name+"/ids?count=3")
			if w.Code != http.StatusOK {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			body := decodeBody[idsResponse](t, w)
			if len(body.IDs) != 3 || body.Count != 3 {
				t.Fatalf("%+v, want 3 IDs", body)
			}
			for i, s := range body.IDs {
				id, err := l.ParseWide(s)
				if err != nil || l.FormatWide(id) != s {
					t.Fatalf("ID %q is not canonical %s: %v", s, spec, err)
				}
				p, err := l.DecodeWide(id)
				if err != nil || p.Group != group || p.Tick != eventsTick+uint64(i) {
					t.Fatalf("ID %s decodes to %+v, %v; want group %d, tick %d", s, p, err, group, eventsTick+uint64(i))
				}
				if i > 0 && s <= body.IDs[i-1] {
					t.Fatalf("ID %s does not sort above %s", s, body.IDs[i-1])
				}
			}
		})
	}
}

// TestSequenceIDsBadInput: a malformed name (an empty one would be the
// default sequence) or count is a 400 that reaches no node; an unknown
// or dropped sequence is a 404 that burns no IDs; the node's NotFound
// for a sequence dropped meanwhile is a 404 too.
func TestSequenceIDsBadInput(t *testing.T) {
	f := withSequences(t)
	for _, target := range []string{
		"/v1/sequences//ids",
		"/v1/sequences/Books/ids",
		"/v1/sequences/-books/ids",
		"/v1/sequences/a%2Fb/ids",
		"/v1/sequences/a/b/ids",
		"/v1/sequences/" + fmt.Sprintf("%064d", 0) + "/ids",
		"/v1/sequences/books/ids?count=0",
		"/v1/sequences/books/ids?count=abc",
		"/v1/sequences/books/ids?count=",
		"/v1/sequences/books/ids?count=1&count=2",
	} {
		w := get(t, f, Config{}, http.MethodGet, target)
		if e := decodeBody[errorResponse](t, w); w.Code != http.StatusBadRequest || e.Code != "INVALID_ARGUMENT" || e.Error == "" {
			t.Errorf("%s: %d %+v, want 400 INVALID_ARGUMENT", target, w.Code, e)
		}
	}
	if len(f.seqAsked) != 0 || len(f.counts) != 0 {
		t.Fatalf("bad input reached the node: %q %v", f.seqAsked, f.counts)
	}
	for _, name := range []string{"ghost", "gone"} {
		w := get(t, f, Config{}, http.MethodGet, "/v1/sequences/"+name+"/ids?count=2")
		if e := decodeBody[errorResponse](t, w); w.Code != http.StatusNotFound || e.Code != "NOT_FOUND" || e.Error == "" {
			t.Errorf("sequence %s: %d %+v, want 404 NOT_FOUND", name, w.Code, e)
		}
	}
	if len(f.seqAsked) != 0 {
		t.Fatalf("IDs were asked of an unknown or dropped sequence: %q", f.seqAsked)
	}
	// Described live, then dropped before its IDs were asked for.
	f.sequences["late"] = &api.SequenceInfo{Name: "late", Kind: "dense", Next: 1}
	w := get(t, &droppedMeanwhile{fakeNode: f}, Config{}, http.MethodPost, "/v1/sequences/late/ids")
	if e := decodeBody[errorResponse](t, w); w.Code != http.StatusNotFound || e.Code != "NOT_FOUND" {
		t.Errorf("a sequence dropped meanwhile: %d %+v, want the node's NotFound as 404", w.Code, e)
	}
}

// droppedMeanwhile describes its sequences as its fakeNode does, but
// answers NotFound for their IDs: dropped after the description.
type droppedMeanwhile struct{ *fakeNode }

func (d *droppedMeanwhile) NextInSequence(ctx context.Context, name string, count uint32, ticks bool) (*api.NextResponse, error) {
	return nil, status.Errorf(codes.NotFound, "no sequence %q: create it with ordo sequence create", name)
}

// TestSequenceRoutes: only GET and POST are served (HEAD would spend
// IDs), paths near the route are not it, and Observe labels every name
// as the one route.
func TestSequenceRoutes(t *testing.T) {
	f := withSequences(t)
	for _, tt := range []struct {
		method, path string
		status       int
		allowed      string
	}{
		{http.MethodHead, "/v1/sequences/books/ids", 405, "GET, POST"},
		{http.MethodPut, "/v1/sequences/books/ids", 405, "GET, POST"},
		{http.MethodDelete, "/v1/sequences/books/ids", 405, "GET, POST"},
		{http.MethodGet, "/v1/sequences/books", 404, ""},
		{http.MethodGet, "/v1/sequences/books/ids/", 404, ""},
		{http.MethodGet, "/v1/sequences/ids", 404, ""},
		{http.MethodGet, "/v1/sequences/", 404, ""},
	} {
		w := get(t, f, Config{}, tt.method, tt.path)
		if w.Code != tt.status || w.Header().Get("Allow") != tt.allowed {
			t.Errorf("%s %s: %d (Allow %q) %s, want %d (Allow %q)", tt.method, tt.path, w.Code, w.Header().Get("Allow"), w.Body, tt.status, tt.allowed)
		}
	}
	if len(f.seqAsked) != 0 {
		t.Fatalf("a refused request reached the node: %q", f.seqAsked)
	}
	var seen []string
	cfg := Config{Observe: func(route string, code int, d time.Duration) { seen = append(seen, fmt.Sprint(route, " ", code)) }}
	get(t, f, cfg, http.MethodGet, "/v1/sequences/books/ids")
	get(t, f, cfg, http.MethodPost, "/v1/sequences/flakes/ids?count=2")
	get(t, f, cfg, http.MethodGet, "/v1/sequences/ghost/ids")
	want := []string{"/v1/sequences/{name}/ids 200", "/v1/sequences/{name}/ids 200", "/v1/sequences/{name}/ids 404"}
	if !slices.Equal(seen, want) {
		t.Fatalf("observed %q, want %q", seen, want)
	}
}
