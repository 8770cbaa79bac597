package grpcapi

import (
	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// Peer implements api.PeerServer, the calls only members make of each
// other. Auth lets only nodes open them.
type Peer struct {
	api.UnimplementedPeerServer
	srv *Server
}

// Term implements api.PeerServer: a voter's answers to a leader's rounds
// (leadership.Confirmer.AnswerTerms). It returns when the node closes, so
// that a leader's stream never holds up a graceful stop.
func (p *Peer) Term(stream grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error {
	done := make(chan error, 1)
	go func() { done <- p.srv.Voter.AnswerTerms(stream) }()
	select {
	case err := <-done:
		return ToStatus(stream.Context(), err, "")
	case <-p.srv.Stop:
		return ToStatus(stream.Context(), sequencer.ErrNotLeader, "")
	}
}
