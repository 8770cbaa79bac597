package backup

import (
	"errors"
	"time"
)

// Errors of this package; an invalid option is startup.ErrBadConfig. A
// restore and a recovery run offline, so these reach only the command
// line, and grpcapi.ToStatus does not name them.
var (
	// ErrBadBackup means a backup file is damaged, of an unknown version,
	// or inconsistent.
	ErrBadBackup = errors.New("bad backup")
	// ErrClusterAlive means the cluster a backup was taken from still
	// answers: restoring it as a new cluster would let two clusters hand
	// out the same IDs.
	ErrClusterAlive = errors.New("the backed-up cluster is still running")
	// ErrHasState means a restore was asked to write over a data dir that
	// already holds Raft state.
	ErrHasState = errors.New("data dir already holds raft state")
)

// DefaultReserveWindow is the reserve window a restore takes for the old
// and the new cluster's when none is given: server.DefaultReserveWindow,
// which a server test checks it equals. It is repeated here because a
// restore must not import server.
const DefaultReserveWindow = 3 * time.Second
