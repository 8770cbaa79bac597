package httpapi

// Named sequences' route: IDs of one sequence, through the node's gRPC
// path for a named sequence's Next (forwarded to the leader by a
// follower), rendered as the sequence's kind makes them.

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

// sequenceIDsRoute is the route of a named sequence's IDs, as
// Config.Observe names it: one label for every name.
const sequenceIDsRoute = "/v1/sequences/{name}/ids"

const (
	sequencesPrefix = "/v1/sequences/"
	idsSuffix       = "/ids"
)

// sequenceInPath returns the {name} of a path of sequenceIDsRoute's form,
// unchecked (it may be empty or hold slashes), and whether path has it.
func sequenceInPath(path string) (string, bool) {
	if len(path) < len(sequencesPrefix)+len(idsSuffix) || !strings.HasPrefix(path, sequencesPrefix) || !strings.HasSuffix(path, idsSuffix) {
		return "", false
	}
	return path[len(sequencesPrefix) : len(path)-len(idsSuffix)], true
}

// sequenceIDs serves GET or POST /v1/sequences/{name}/ids?count=N: N IDs
// of the named sequence as /v1/ids answers them, decimal for a dense or
// 64-bit layout sequence, canonical text for a uuidv7 or ulid one.
func (h *handler) sequenceIDs(w http.ResponseWriter, r *http.Request) {
	name, _ := sequenceInPath(r.URL.Path)
	// An empty name would be the default sequence to the node: refused
	// here, with every other malformed one, before the node is asked.
	if err := api.CheckSequenceName(name); err != nil {
		h.fail(w, r, fmt.Errorf("%w: %s: %w", errBadName, sequenceIDsRoute, err))
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
	resp, err := h.node.NextInSequence(ctx, name, count)
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
