package server

import (
	"errors"
	"testing"

	"github.com/seed-e8569b35/ordo/backup"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/startup"
)

// TestSentinelsAreThePackagesOwn: each of this package's errors that
// another package returns is that package's value, so a caller's
// errors.Is(err, server.ErrX) holds for what the other package returns.
// A copy made with errors.New would compile and never match.
func TestSentinelsAreThePackagesOwn(t *testing.T) {
	for _, tt := range []struct {
		name         string
		server, from error
	}{
		{"ErrNotLeader", ErrNotLeader, sequencer.ErrNotLeader},
		{"ErrBadCount", ErrBadCount, sequencer.ErrBadCount},
		{"ErrTimeExhausted", ErrTimeExhausted, sequencer.ErrTimeExhausted},
		{"ErrBadConfig", ErrBadConfig, startup.ErrBadConfig},
		{"ErrBadBackup", ErrBadBackup, backup.ErrBadBackup},
		{"ErrClusterAlive", ErrClusterAlive, backup.ErrClusterAlive},
		{"ErrHasState", ErrHasState, backup.ErrHasState},
		{"ErrBadRequest", ErrBadRequest, grpcapi.ErrBadRequest},
		{"ErrLayoutMismatch", ErrLayoutMismatch, grpcapi.ErrLayoutMismatch},
		{"ErrUnknownNode", ErrUnknownNode, grpcapi.ErrUnknownNode},
		{"ErrNotReady", ErrNotReady, grpcapi.ErrNotReady},
		{"ErrWrongCluster", ErrWrongCluster, grpcapi.ErrWrongCluster},
		{"ErrPermissionDenied", ErrPermissionDenied, grpcapi.ErrPermissionDenied},
	} {
		if !errors.Is(tt.from, tt.server) {
			t.Errorf("server.%s does not match the error its package returns (%v)", tt.name, tt.from)
		}
	}
}
