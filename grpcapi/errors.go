package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/grpcerr"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/leadership"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/settle"
	"github.com/seed-e8569b35/ordo/startup"
)

// Errors of this package. They are sentinels, not statuses: ToStatus is
// the one place that maps errors to gRPC codes, these and every other
// package's that a caller can meet; one it does not name is Internal.
// Package httpapi maps those codes on to HTTP, so both see one map.
var (
	// ErrPermissionDenied means the caller's identity does not allow the
	// call.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrWrongCluster means a call named another cluster than this node's
	// (api.ClusterIDKey): a stale address or leader hint now reaches a
	// node of another cluster. Callers move on, as from a node that is
	// down.
	ErrWrongCluster = errors.New("call meant for another cluster")
	// ErrBadRequest means a request carries a bad field, here an address
	// that cannot be parsed.
	ErrBadRequest = errors.New("bad request")
	// ErrNotReady means the cluster has not been initialised yet: the
	// node does not know its layout.
	ErrNotReady = errors.New("cluster not initialised")
	// ErrUnknownNode means an admin request names a node that is not a
	// member.
	ErrUnknownNode = errors.New("unknown node")
	// ErrLayoutMismatch means a joining node's layout or group differs
	// from the cluster's.
	ErrLayoutMismatch = errors.New("layout mismatch")
	// ErrNoLeader means no leader is known to forward to.
	ErrNoLeader = errors.New("no leader known")
	// ErrVersionTooOld means a joining node cannot read the cluster's
	// version (fsm.Reads), or does not say what it is (its layout).
	ErrVersionTooOld = errors.New("node too old for this cluster")
	// ErrJoinerSilent means the node a join names does not answer at its
	// gRPC address, or is still starting: it cannot be shown to be the
	// node to add, so it is not added. It may answer later.
	ErrJoinerSilent = errors.New("node to add does not answer")
	// ErrJoinerMismatch means the node at a join's gRPC address answers,
	// but not as the node the join describes (another id, another Raft
	// address, state of no known cluster), or as one that does not serve.
	ErrJoinerMismatch = errors.New("node to add answers as another")
	// ErrRefusing means this node will not serve (Node.Refusal says why);
	// other nodes may, so clients should move on.
	ErrRefusing = errors.New("this node refuses to serve")
)

// UnreachableError means a call to a peer failed because the peer could
// not be reached, or its connection broke: no answer came. Peers'
// connections fail so instead of with grpc-go's transport internals
// ("connection error: desc = \"transport: Error while dialing ..."). It
// is Unavailable, a status like any other peer call's error.
type UnreachableError struct {
	// Addr is the peer's gRPC address; Reason why it was not reached, in
	// a few words ("connection refused").
	Addr, Reason string
	err          error // the call's error, as grpc-go gave it
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("%s cannot be reached (%s)", e.Addr, e.Reason)
}

// Unwrap is the call's error, as grpc-go gave it.
func (e *UnreachableError) Unwrap() error { return e.err }

// GRPCStatus makes the error a status (codeOf's), so callers that read a
// peer call's code read it as before.
func (e *UnreachableError) GRPCStatus() *status.Status { return status.New(codeOf(e), e.Error()) }

// explainUnreachable is err, from a call to the peer at addr, as an
// UnreachableError when it is a transport failure (grpcerr.TransportReason).
func explainUnreachable(addr string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	s, ok := status.FromError(err)
	if !ok || s.Code() != codes.Unavailable {
		return err
	}
	reason, ok := grpcerr.TransportReason(s.Message())
	if !ok {
		return err
	}
	return &UnreachableError{Addr: addr, Reason: reason, err: err}
}

// ToStatus maps err to a gRPC status. A call that failed where another
// node could serve it names leaderAddr, when known: in the message, and in
// the trailer when ctx is a gRPC call's.
func ToStatus(ctx context.Context, err error, leaderAddr string) error {
	return toStatus(ctx, err, "", leaderAddr)
}

// toStatus is ToStatus, naming the leader by leaderID too when known.
func toStatus(ctx context.Context, err error, leaderID, leaderAddr string) error {
	if err == nil {
		return nil
	}
	var unreachable *UnreachableError
	if errors.As(err, &unreachable) {
		// A peer that could not be reached: what the caller can do.
		if leaderAddr != "" {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(api.LeaderAddrKey, leaderAddr))
		}
		return status.Error(codeOf(err), unreachableMessage(unreachable, leaderID, leaderAddr))
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if leaderAddr != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(api.LeaderAddrKey, leaderAddr))
	}
	code := codeOf(err)
	msg := err.Error()
	if code == codes.Unavailable && leaderAddr != "" {
		msg += "; leader is at " + leaderAddr
	}
	return status.Error(code, msg)
}

// unreachableMessage says which node this one could not reach, the leader
// when it is that, and what the caller can do.
func unreachableMessage(e *UnreachableError, leaderID, leaderAddr string) string {
	who := "node at " + e.Addr
	if e.Addr == leaderAddr {
		who = "leader at " + e.Addr
		if leaderID != "" {
			who = "leader " + leaderID + " at " + e.Addr
		}
	}
	return fmt.Sprintf("%s cannot be reached from this node (%s); retry, or see ordo status (GET /v1/status) for the cluster's view", who, e.Reason)
}

// codeOf is the gRPC code of err: Internal for an error no case names.
func codeOf(err error) codes.Code {
	var unreachable *UnreachableError
	switch {
	case errors.As(err, &unreachable):
		return codes.Unavailable
	case errors.Is(err, ErrRefusing):
		return codes.Unavailable
	case errors.Is(err, settle.ErrExpired), errors.Is(err, settle.ErrAbandoned), errors.Is(err, settle.ErrCompleted):
		return codes.FailedPrecondition
	case errors.Is(err, settle.ErrUnknown):
		return codes.NotFound
	case errors.Is(err, settle.ErrTooManyOpen):
		return codes.ResourceExhausted
	case errors.Is(err, settle.ErrTTL):
		// Not ResourceExhausted, which clients back off on and retry: no
		// retry of a TTL over the maximum can succeed.
		return codes.InvalidArgument
	case errors.Is(err, settle.ErrClusterVersion), errors.Is(err, fsm.ErrClusterVersion), errors.Is(err, fsm.ErrClaimTerm):
		return codes.Unavailable
	case errors.Is(err, fsm.ErrNoSequence):
		return codes.NotFound
	case errors.Is(err, fsm.ErrSequenceExists):
		return codes.AlreadyExists
	case errors.Is(err, fsm.ErrSequenceKind), errors.Is(err, fsm.ErrKeyReused), errors.Is(err, fsm.ErrGroupInUse):
		return codes.FailedPrecondition
	case errors.Is(err, fsm.ErrSequenceFull):
		return codes.OutOfRange
	case errors.Is(err, fsm.ErrTooManySequences):
		return codes.ResourceExhausted
	case errors.Is(err, fsm.ErrInvalid):
		return codes.InvalidArgument
	case errors.Is(err, sequencer.ErrBadCount), errors.Is(err, ErrBadRequest), errors.Is(err, api.ErrBadHandle), errors.Is(err, layout.ErrInvalidLayout), errors.Is(err, leadership.ErrMisdirected):
		return codes.InvalidArgument
	case errors.Is(err, ErrLayoutMismatch), errors.Is(err, fsm.ErrLayoutMismatch), errors.Is(err, ErrVersionTooOld), errors.Is(err, ErrJoinerMismatch), errors.Is(err, layout.ErrWrongWidth), errors.Is(err, startup.ErrClusterExists), errors.Is(err, startup.ErrOtherCluster):
		return codes.FailedPrecondition
	case errors.Is(err, ErrPermissionDenied):
		return codes.PermissionDenied
	case errors.Is(err, ErrUnknownNode):
		return codes.NotFound
	case errors.Is(err, startup.ErrNodeExists):
		return codes.AlreadyExists
	case errors.Is(err, sequencer.ErrTimeExhausted):
		return codes.OutOfRange
	case errors.Is(err, sequencer.ErrAhead):
		return codes.ResourceExhausted
	case errors.Is(err, sequencer.ErrNotLeader), errors.Is(err, ErrNoLeader), errors.Is(err, ErrNotReady), errors.Is(err, ErrWrongCluster), errors.Is(err, ErrJoinerSilent),
		errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrRaftShutdown),
		errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrAbortedByRestore):
		return codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Internal
}
