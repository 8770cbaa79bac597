package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/settle"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/startup"
)

// TestToStatus: each error a caller can meet, wrapped as the node wraps
// it, has its code; an unnamed one is Internal; a status passes through;
// only Unavailable names the leader in its message.
func TestToStatus(t *testing.T) {
	for _, tt := range []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("%w: %w", ErrRefusing, errors.New("removed")), codes.Unavailable},
		{sequencer.ErrBadCount, codes.InvalidArgument},
		{ErrBadRequest, codes.InvalidArgument},
		{layout.ErrInvalidLayout, codes.InvalidArgument},
		{ErrLayoutMismatch, codes.FailedPrecondition},
		{layout.ErrWrongWidth, codes.FailedPrecondition},
		{startup.ErrOtherCluster, codes.FailedPrecondition},
		{ErrPermissionDenied, codes.PermissionDenied},
		{ErrUnknownNode, codes.NotFound},
		{startup.ErrNodeExists, codes.AlreadyExists},
		{sequencer.ErrTimeExhausted, codes.OutOfRange},
		{sequencer.ErrAhead, codes.ResourceExhausted},
		{sequencer.ErrNotLeader, codes.Unavailable},
		{ErrNoLeader, codes.Unavailable},
		{ErrNotReady, codes.Unavailable},
		{ErrWrongCluster, codes.Unavailable},
		{raft.ErrLeadershipLost, codes.Unavailable},
		{settle.ErrExpired, codes.FailedPrecondition},
		{settle.ErrAbandoned, codes.FailedPrecondition},
		{settle.ErrCompleted, codes.FailedPrecondition},
		{settle.ErrUnknown, codes.NotFound},
		{settle.ErrTooManyOpen, codes.ResourceExhausted},
		{settle.ErrTTL, codes.InvalidArgument},
		{settle.ErrClusterVersion, codes.Unavailable},
		{api.ErrBadHandle, codes.InvalidArgument},
		{ErrVersionTooOld, codes.FailedPrecondition},
		{ErrJoinerMismatch, codes.FailedPrecondition},
		{ErrJoinerSilent, codes.Unavailable},
		{fsm.ErrGroupInUse, codes.FailedPrecondition},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{errors.New("disk on fire"), codes.Internal},
		{status.Error(codes.Aborted, "as it came"), codes.Aborted},
	} {
		err := ToStatus(context.Background(), fmt.Errorf("wrapped: %w", tt.err), "10.0.0.1:7000")
		if got := status.Code(err); got != tt.code {
			t.Errorf("%v: %v, want %v", tt.err, got, tt.code)
		}
		if hint := strings.Contains(err.Error(), "leader is at 10.0.0.1:7000"); hint != (tt.code == codes.Unavailable) {
			t.Errorf("%v: %q names the leader: %t", tt.err, err, hint)
		}
	}
	if ToStatus(context.Background(), nil, "x") != nil {
		t.Error("ToStatus(nil) is not nil")
	}
}
