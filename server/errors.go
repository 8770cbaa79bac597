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
	"github.com/seed-e8569b35/ordo/backup"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/leadership"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/startup"
)

// Errors of this package. toStatus is the one place that maps them, and
// those of the packages it uses (sequencer.ErrAhead,
// leadership.ErrMisdirected, grpcapi's, startup's and backup's, ...), to
// gRPC codes; package grpcapi reaches it through grpcNode.ToStatus.
var (
	// ErrNotLeader means this node cannot hand out IDs now: it is not the
	// leader, or it is a leader that has not yet committed its first
	// reservation, or it just lost a confirmation round. It is
	// sequencer.ErrNotLeader, which the sequencer returns, so one
	// errors.Is matches both.
	ErrNotLeader = sequencer.ErrNotLeader
	// ErrNoLeader means no leader is known to forward to.
	ErrNoLeader = errors.New("no leader known")
	// ErrBadCount means a request asked for 0 IDs or more than the
	// maximum. It is sequencer.ErrBadCount, as ErrNotLeader is.
	ErrBadCount = sequencer.ErrBadCount
	// ErrBadRequest means an admin request carries a bad field. It is
	// grpcapi.ErrBadRequest, which authorization returns for an address
	// it cannot parse, so one errors.Is matches both.
	ErrBadRequest = grpcapi.ErrBadRequest
	// ErrTimeExhausted means the layout's time field is full: no more IDs
	// can be made with this layout. It is sequencer.ErrTimeExhausted, as
	// ErrNotLeader is.
	ErrTimeExhausted = sequencer.ErrTimeExhausted
	// ErrLayoutMismatch means a node's configured layout or group differs
	// from the one the cluster was created with. It is
	// grpcapi.ErrLayoutMismatch, the Admin service's error for a Join,
	// which this node's addMember returns.
	ErrLayoutMismatch = grpcapi.ErrLayoutMismatch
	// ErrUnknownNode means an admin request names a node that is not a
	// member. It is grpcapi.ErrUnknownNode, the Admin service's error,
	// which this node's Admin calls (admin.go) return.
	ErrUnknownNode = grpcapi.ErrUnknownNode
	// ErrNotReady means the cluster has not been initialised yet. It is
	// grpcapi.ErrNotReady, which the Layout RPC returns.
	ErrNotReady = grpcapi.ErrNotReady
	// ErrRefusing means this node will not serve (see Node.Fatal); other
	// nodes may, so clients should move on.
	ErrRefusing = errors.New("this node refuses to serve")
	// ErrRemoved means Raft stopped because this node was removed from
	// the cluster; the node has nothing left to serve.
	ErrRemoved = errors.New("removed from the cluster")
	// ErrBadConfig means a Config field is invalid. It is
	// startup.ErrBadConfig, which the start decision returns for flags
	// that cannot decide it, so one errors.Is matches both.
	ErrBadConfig = startup.ErrBadConfig
	// ErrBadBackup means a backup file is damaged, of an unknown version,
	// or inconsistent. It is backup.ErrBadBackup, which package backup
	// returns, so one errors.Is matches both names.
	ErrBadBackup = backup.ErrBadBackup
	// ErrClusterAlive means the cluster a backup was taken from still
	// answers: restoring it as a new cluster would let two clusters hand
	// out the same IDs. It is backup.ErrClusterAlive.
	ErrClusterAlive = backup.ErrClusterAlive
	// ErrHasState means a restore was asked to write over a data dir that
	// already holds Raft state. It is backup.ErrHasState.
	ErrHasState = backup.ErrHasState
	// ErrWrongCluster means a call named another cluster than this node's
	// (api.ClusterIDKey): a stale address or leader hint now reaches a
	// node of another cluster. Callers move on, as from a node that is
	// down. It is grpcapi.ErrWrongCluster, which the interceptor that
	// checks the cluster id returns.
	ErrWrongCluster = grpcapi.ErrWrongCluster
	// ErrPermissionDenied means the caller's identity does not allow the
	// call. It is grpcapi.ErrPermissionDenied, which authorization
	// (grpcapi.Auth) returns.
	ErrPermissionDenied = grpcapi.ErrPermissionDenied
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
	case errors.Is(err, ErrBadCount), errors.Is(err, ErrBadRequest), errors.Is(err, layout.ErrInvalidLayout), errors.Is(err, leadership.ErrMisdirected):
		code = codes.InvalidArgument
	case errors.Is(err, ErrLayoutMismatch), errors.Is(err, fsm.ErrLayoutMismatch), errors.Is(err, layout.ErrWrongWidth), errors.Is(err, startup.ErrClusterExists), errors.Is(err, startup.ErrOtherCluster):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrPermissionDenied):
		code = codes.PermissionDenied
	case errors.Is(err, ErrUnknownNode):
		code = codes.NotFound
	case errors.Is(err, startup.ErrNodeExists):
		code = codes.AlreadyExists
	case errors.Is(err, ErrTimeExhausted):
		code = codes.OutOfRange
	case errors.Is(err, sequencer.ErrAhead):
		code = codes.ResourceExhausted
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrNoLeader), errors.Is(err, ErrRemoved), errors.Is(err, ErrNotReady), errors.Is(err, ErrWrongCluster),
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
