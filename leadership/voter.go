package leadership

import (
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/recv"
)

// AnswerTerms is a voter's side of the Term stream: it answers each
// request with this node's current term, and ends the stream with an
// error matching ErrMisdirected if a request names another node or
// another cluster. It returns nil when the leader ends the stream.
// Package server's Term RPC calls it, and maps the error to a gRPC code.
func (c *Confirmer) AnswerTerms(stream grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error {
	return recv.Each(stream.Recv, func(req *api.TermRequest) error {
		if cluster := c.node.ClusterID(); req.NodeId != c.id || req.ClusterId != cluster {
			return fmt.Errorf("%w: asked for node %q of cluster %q, this is node %q of cluster %q",
				ErrMisdirected, req.NodeId, req.ClusterId, c.id, cluster)
		}
		var granted time.Duration
		if req.Release {
			// A forged release would free a promise a leader counts on.
			if c.node.MayRelease(stream.Context()) {
				c.promises.release(req.LeaderId, req.Term, req.Round)
			}
		} else {
			// A promise goes only to the leader this voter knows, in its
			// own term: a deposed leader cannot keep renewing one and
			// hold the next leader back, and nobody else can get one.
			known := func() bool {
				leader := c.raft.Leader()
				return req.Term == c.raft.CurrentTerm() && leader == req.LeaderId
			}
			var ask time.Duration
			if known() {
				ask = time.Duration(req.LeaseMs) * time.Millisecond
			}
			// While this node has promised another leader, the answer
			// waits: an answer is a confirmation. The wait may outlast
			// req.Term, so confirm asks known again before it promises.
			var err error
			if granted, err = c.promises.confirm(stream.Context(), req.LeaderId, req.Term, req.Round, ask, known); err != nil {
				return err
			}
		}
		resp := &api.TermResponse{Term: c.raft.CurrentTerm(), NodeId: c.id, Round: req.Round, LeaseMs: uint32(granted.Milliseconds())}
		return stream.Send(resp)
	})
}
