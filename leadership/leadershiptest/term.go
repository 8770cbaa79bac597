// Package leadershiptest asks a node's Peer service, in tests, as a peer
// of package leadership would, so that tests of leadership and of server
// can check a voter's answers without a leader of their own.
package leadershiptest

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
)

// AskTerm opens a Term stream on conn, sends req and returns the first
// answer. A stream the node refuses may end before the send; its status
// then comes from the receive, so the error is always the node's answer
// (a status) where it gave one. The stream ends with ctx.
func AskTerm(ctx context.Context, conn grpc.ClientConnInterface, req *api.TermRequest) (*api.TermResponse, error) {
	st, err := api.NewPeerClient(conn).Term(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return st.Recv()
}
