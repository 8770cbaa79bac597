package server

import (
	"context"
	"fmt"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/settle"
)

// CreateSequence commits a named sequence's definition (grpcapi.Node).
func (n *Node) CreateSequence(ctx context.Context, req *api.CreateSequenceRequest) error {
	return n.defineSequence(ctx, fsm.Command{Op: fsm.OpCreateSequence, Sequence: req.Name, Kind: req.Kind, Group: req.Group, Start: req.Start,
		DistinctGroup: req.DistinctGroup})
}

// DropSequence commits a named sequence's drop (grpcapi.Node).
func (n *Node) DropSequence(ctx context.Context, name string) error {
	return n.defineSequence(ctx, fsm.Command{Op: fsm.OpDropSequence, Sequence: name})
}

// defineSequence commits c once the cluster reads it: a node of an older
// version would stop at it.
func (n *Node) defineSequence(ctx context.Context, c fsm.Command) error {
	if v := n.fsm.ClusterVersion(); v < fsm.SequencesVersion {
		return fmt.Errorf("%w: it is %d, named sequences need %d, which the leader records once every voter reports that it reads it: upgrade every node",
			settle.ErrClusterVersion, v, fsm.SequencesVersion)
	}
	_, err := n.applyCtx(ctx, c)
	return err
}
