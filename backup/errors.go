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

// Rules are what a restored or recovered node must satisfy as the serving
// node would, and where its new cluster id comes from: server keeps these
// rules, so package backup asks for them rather than copy them (a node
// restored under an id or address the server refuses could never serve).
// server.BackupRules provides them.
type Rules interface {
	// CheckNodeID refuses an id a node cannot serve under.
	CheckNodeID(id string) error
	// CheckDialAddr refuses an address other nodes could not dial.
	CheckDialAddr(addr string) error
	// NewClusterID returns a random id for a new cluster.
	NewClusterID() (string, error)
}
