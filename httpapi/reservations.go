package httpapi

// The settled order's routes: tracked reservations and the settled mark
// W, of the default sequence (/v1/reservations, /v1/watermark) and of a
// named one (/v1/sequences/{name}/reservations, .../watermark). Each goes
// through the node's gRPC path for the same call (forwarded to the leader
// by a follower), so HTTP callers get its guarantees and its errors.

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
)

// reservationResponse is the answer of POST /v1/reservations. IDs are
// rendered as /v1/ids renders them. Fate is "open", or for a keyed
// retry where the first call's reservation stands now.
type reservationResponse struct {
	Handle string   `json:"handle"`
	IDs    []string `json:"ids"`
	TTLMs  uint32   `json:"ttl_ms"`
	Fate   string   `json:"fate"`
}

// The headers of a keyed reservation: the key (as the IETF draft names
// it), and in plaintext the caller's name, as gRPC's ordo-caller
// metadata (under TLS the certificate's subject names the caller).
const (
	KeyHeader    = "Idempotency-Key"
	CallerHeader = "Ordo-Caller"
)

// keyedContext is ctx as the node's gRPC path reads a keyed call's caller
// from it, so that a key is one caller's over HTTP and gRPC alike: the
// client certificate (TLS) as the gRPC peer's, else the Ordo-Caller
// header as the ordo-caller metadata.
func keyedContext(ctx context.Context, r *http.Request) (context.Context, error) {
	if r.TLS != nil {
		return peer.NewContext(ctx, &peer.Peer{Addr: remoteAddr(r.RemoteAddr), AuthInfo: credentials.TLSInfo{State: *r.TLS}}), nil
	}
	name := r.Header.Get(CallerHeader)
	if name == "" {
		return ctx, nil
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return nil, fmt.Errorf("%w: %s %q: want printable ASCII", errBadQuery, CallerHeader, name)
		}
	}
	return metadata.NewIncomingContext(ctx, metadata.Pairs(api.CallerKey, name)), nil
}

// remoteAddr is a request's remote address as a net.Addr.
type remoteAddr string

func (a remoteAddr) Network() string { return "tcp" }
func (a remoteAddr) String() string  { return string(a) }

// markResponse is W, as an ID of a 64-bit layout (0 under a 128-bit
// one, as gRPC answers) and in ticks; strings, as IDs are everywhere.
type markResponse struct {
	Watermark     string `json:"watermark"`
	WatermarkTick string `json:"watermark_tick"`
}

// decisionResponse is the answer of a complete, abandon or extend: the
// reservation's fate and W after it.
type decisionResponse struct {
	Fate string `json:"fate"`
	markResponse
}

// sequenceOf is the named sequence of the route r was served on, "" for
// the default sequence's routes; a malformed name fails r.
func (h *handler) sequenceOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	if !strings.HasPrefix(r.URL.Path, sequencesPrefix) {
		return "", true
	}
	return h.sequenceName(w, r)
}

// reserveLayout is how a reservation's IDs are rendered: the cluster's
// layout and group, or a named sequence's (a dense one's values as they
// are). An error is the node's: an unknown or dropped sequence is
// NotFound.
func (h *handler) reserveLayout(ctx context.Context, seq string) (layout.Layout, uint64, error) {
	if seq == "" {
		return h.node.ClusterLayout()
	}
	info, err := h.node.DescribeSequence(ctx, seq)
	if err != nil {
		return layout.Layout{}, 0, err
	}
	return sequenceLayout(info)
}

func (h *handler) reserve(w http.ResponseWriter, r *http.Request) {
	seq, ok := h.sequenceOf(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	count, err := countParam(q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ttl, err := ttlParam(q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	// Asked first, so that a node that cannot render, or an unknown
	// sequence, opens nothing.
	l, group, err := h.reserveLayout(ctx, seq)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	key := r.Header.Get(KeyHeader)
	if key != "" {
		if ctx, err = keyedContext(ctx, r); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	resp, err := h.node.Reserve(ctx, &api.ReserveRequest{Count: count, TtlMs: ttl, IdempotencyKey: key, Sequence: seq})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// A reservation whose IDs cannot be rendered is left to expire: it
	// holds W back by its TTL, and nobody can complete it.
	_, ids, err := render(l, group, resp.Runs, count)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	fate := fateName(resp.Fate)
	switch {
	case resp.Fate == api.Fate_FATE_UNSPECIFIED && key == "":
		fate = "open" // a leader of an Ordo before keys names no fate
	case resp.Fate == api.Fate_FATE_UNSPECIFIED:
		fate = "unknown" // the cluster no longer knows it
	}
	writeJSON(w, http.StatusOK, reservationResponse{Handle: resp.Handle, IDs: ids, TTLMs: resp.TtlMs, Fate: fate})
}

// decide serves the route that does do to a reservation.
func (h *handler) decide(do fsm.Do) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		seq, ok := h.sequenceOf(w, r)
		if !ok {
			return
		}
		q := r.URL.Query()
		handle, err := handleParam(q)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		var ttl uint32
		if do == fsm.DoExtend {
			if ttl, err = ttlParam(q); err != nil {
				h.fail(w, r, err)
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
		defer cancel()
		resp, err := h.node.Decide(ctx, do, seq, handle, ttl)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, decisionResponse{Fate: fateName(resp.Fate), markResponse: mark(resp.Watermark, resp.WatermarkTick)})
	}
}

func (h *handler) watermark(w http.ResponseWriter, r *http.Request) {
	seq, ok := h.sequenceOf(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	resp, err := h.node.Watermark(ctx, seq)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, mark(resp.Watermark, resp.WatermarkTick))
}

func mark(id, tick uint64) markResponse {
	return markResponse{Watermark: strconv.FormatUint(id, 10), WatermarkTick: strconv.FormatUint(tick, 10)}
}

// fateName is the fate as the proto names it, without its prefix and in
// lower case: api.Fate_FATE_COMPLETED is "completed".
func fateName(f api.Fate) string {
	return strings.ToLower(strings.TrimPrefix(f.String(), "FATE_"))
}
