package grpcapi

import (
	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// PeerNode is what the Peer service needs of a node: its voter's side of
// leadership confirmation (package leadership), and when it closes.
type PeerNode interface {
	Node
	// AnswerTerms answers a leader's term rounds on stream until it ends
	// (leadership.Confirmer.AnswerTerms).
	AnswerTerms(stream grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error
	// Stop is closed when the node closes.
	Stop() <-chan struct{}
}

// Peer implements api.PeerServer, the calls only members make of each
// other. Auth lets only nodes open them.
type Peer struct {
	api.UnimplementedPeerServer
	n PeerNode
}

// NewPeer returns the Peer service of node n.
func NewPeer(n PeerNode) *Peer { return &Peer{n: n} }

// Term implements api.PeerServer: a voter's answers to a leader's rounds.
// It returns when the node closes, so that a leader's stream never holds
// up a graceful stop.
func (p *Peer) Term(stream grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error {
	done := make(chan error, 1)
	go func() { done <- p.n.AnswerTerms(stream) }()
	select {
	case err := <-done:
		return p.n.ToStatus(stream.Context(), err, "")
	case <-p.n.Stop():
		return p.n.ToStatus(stream.Context(), sequencer.ErrNotLeader, "")
	}
}
