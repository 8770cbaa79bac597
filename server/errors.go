package server

import (
	"context"
	"errors"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/leadership"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/startup"
)

// Errors of this package. Each error has one name, in the package that
// returns it: the node also returns sequencer's, grpcapi's, startup's and
// backup's, under their own names. toStatus is the one place that maps
// errors to gRPC codes, these and the other packages' that a caller can
// meet; one it does not name is Internal. Package grpcapi reaches it
// through grpcNode.ToStatus.
var (
	// ErrNoLeader means no leader is known to forward to.
	ErrNoLeader = errors.New("no leader known")
	// ErrRefusing means this node will not serve (see Node.Fatal); other
	// nodes may, so clients should move on.
	ErrRefusing = errors.New("this node refuses to serve")
	// ErrRemoved means Raft stopped because this node was removed from
	// the cluster; the node has nothing left to serve.
	ErrRemoved = errors.New("removed from the cluster")
	// ErrPeerRefused means a Raft connection was refused in its cluster
	// handshake (handshake.go), by this node or by the peer: a peer of
	// another cluster (then it wraps startup.ErrOtherCluster too), one the
	// Raft configuration does not list, or one of an older Ordo. To Raft
	// it is a peer that cannot be reached.
	ErrPeerRefused = errors.New("raft peer refused")

	// errNoHandshake means a Raft connection ended, or timed out, before
	// the first byte of its handshake.
	errNoHandshake = errors.New("no cluster handshake")
	// errRaftRPC means a Raft connection began with a Raft RPC instead of
	// the handshake: its dialer runs an Ordo older than the handshake.
	errRaftRPC = errors.New("a raft rpc where the cluster handshake belongs")
	// errNotOrdo means a Raft connection's handshake could not be read.
	errNotOrdo = errors.New("not an Ordo cluster handshake")
)

// toStatus maps an error to a gRPC status, attaching the leader hint.
func toStatus(ctx context.Context, err error, leaderAddr string) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if leaderAddr != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(api.LeaderAddrKey, leaderAddr))
	}
	code := codes.Internal
	switch {
	case errors.Is(err, ErrRefusing):
		code = codes.Unavailable
	case errors.Is(err, sequencer.ErrBadCount), errors.Is(err, grpcapi.ErrBadRequest), errors.Is(err, layout.ErrInvalidLayout), errors.Is(err, leadership.ErrMisdirected):
		code = codes.InvalidArgument
	case errors.Is(err, grpcapi.ErrLayoutMismatch), errors.Is(err, fsm.ErrLayoutMismatch), errors.Is(err, layout.ErrWrongWidth), errors.Is(err, startup.ErrClusterExists), errors.Is(err, startup.ErrOtherCluster):
		code = codes.FailedPrecondition
	case errors.Is(err, grpcapi.ErrPermissionDenied):
		code = codes.PermissionDenied
	case errors.Is(err, grpcapi.ErrUnknownNode):
		code = codes.NotFound
	case errors.Is(err, startup.ErrNodeExists):
		code = codes.AlreadyExists
	case errors.Is(err, sequencer.ErrTimeExhausted):
		code = codes.OutOfRange
	case errors.Is(err, sequencer.ErrAhead):
		code = codes.ResourceExhausted
	case errors.Is(err, sequencer.ErrNotLeader), errors.Is(err, ErrNoLeader), errors.Is(err, ErrRemoved), errors.Is(err, grpcapi.ErrNotReady), errors.Is(err, grpcapi.ErrWrongCluster),
		errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrRaftShutdown),
		errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrAbortedByRestore):
		code = codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	msg := err.Error()
	if code == codes.Unavailable && leaderAddr != "" {
		msg += "; leader is at " + leaderAddr
	}
	return status.Error(code, msg)
}
