package httpapi

// Named sequences' routes: IDs of one sequence, through the node's gRPC
// path for a named sequence's Next (forwarded to the leader by a
// follower), rendered as the sequence's kind makes them; and its tracked
// reservations and W (reservations.go).

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/layout"
)

// The routes of a named sequence, as Config.Observe names them: one
// label for every name.
const (
	sequenceIDsRoute          = "/v1/sequences/{name}/ids"
	sequenceReservationsRoute = "/v1/sequences/{name}/reservations"
	sequenceCompleteRoute     = "/v1/sequences/{name}/reservations/complete"
	sequenceAbandonRoute      = "/v1/sequences/{name}/reservations/abandon"
	sequenceExtendRoute       = "/v1/sequences/{name}/reservations/extend"
	sequenceWatermarkRoute    = "/v1/sequences/{name}/watermark"
)

const sequencesPrefix = "/v1/sequences/"

// sequenceRoutes are the routes of a named sequence, longest suffix
// first.
var sequenceRoutes = []string{sequenceCompleteRoute, sequenceAbandonRoute, sequenceExtendRoute,
	sequenceReservationsRoute, sequenceWatermarkRoute, sequenceIDsRoute}

// sequenceInPath returns the route of a named sequence path has the form
// of, and its {name}, unchecked (it may be empty or hold slashes); ok is
// false when path is of none.
func sequenceInPath(path string) (route, name string, ok bool) {
	rest, ok := strings.CutPrefix(path, sequencesPrefix)
	if !ok {
		return "", "", false
	}
	for _, rt := range sequenceRoutes {
		suffix := strings.TrimPrefix(rt, sequencesPrefix+"{name}")
		if name, ok := strings.CutSuffix(rest, suffix); ok {
			return rt, name, true
		}
	}
	return "", "", false
}

// sequenceName is the {name} of a named sequence's route r was served
// on; a malformed one (the empty name would be the default sequence to
// the node) fails r, before the node is asked.
func (h *handler) sequenceName(w http.ResponseWriter, r *http.Request) (string, bool) {
	route, name, _ := sequenceInPath(r.URL.Path)
	if err := api.CheckSequenceName(name); err != nil {
		h.fail(w, r, fmt.Errorf("%w: %s: %w", errBadName, route, err))
		return "", false
	}
	return name, true
}

// sequenceIDs serves GET or POST /v1/sequences/{name}/ids?count=N: N IDs
// of the named sequence as /v1/ids answers them, decimal for a dense or
// 64-bit layout sequence, canonical text for a uuidv7 or ulid one.
func (h *handler) sequenceIDs(w http.ResponseWriter, r *http.Request) {
	name, ok := h.sequenceName(w, r)
	if !ok {
		return
	}
	count, err := countParam(r.URL.Query())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	// Asked first, so that an unknown sequence, or one this node cannot
	// render, burns no IDs.
	info, err := h.node.DescribeSequence(ctx, name)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	l, group, err := sequenceLayout(info)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	resp, err := h.node.NextInSequence(ctx, name, count, l.Wide())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	_, ids, err := render(l, group, resp.Runs, count)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, idsResponse{IDs: ids, Count: len(ids)})
}

// sequenceLayout is the layout and group a sequence's runs are rendered
// with: a dense sequence's values print as they are, as a 64-bit layout's
// IDs do. A dropped sequence is NotFound, as the node's Next answers.
func sequenceLayout(info *api.SequenceInfo) (layout.Layout, uint64, error) {
	switch {
	case info.Dropped:
		return layout.Layout{}, 0, status.Errorf(codes.NotFound, "no sequence %q: it was dropped; create it again with ordo sequence create", info.Name)
	case info.Kind == "dense":
		return layout.Layout{}, 0, nil
	}
	l, err := layout.Parse(info.Kind)
	if err != nil {
		// The node named a kind this binary does not know: its trouble (500).
		return layout.Layout{}, 0, status.Errorf(codes.Internal, "sequence %q is of kind %q: %v", info.Name, info.Kind, err)
	}
	return l, info.Group, nil
}
