package startup

import "errors"

// Errors of this package. grpcapi.ToStatus maps those a join can meet
// (ErrNodeExists, ErrClusterExists, ErrOtherCluster) to gRPC codes, so a
// peer or an admin call sees the same refusal a starting node logs.
var (
	// ErrBadConfig means a setting is invalid, or the settings given
	// cannot decide how the node starts (neither --bootstrap nor --join).
	// It is declared here, the lowest layer that refuses settings, and
	// packages server and backup return it too.
	ErrBadConfig = errors.New("invalid configuration")
	// ErrNodeExists means a join names an id or address already in use by
	// another member: on a starting node, that it lost its data and must
	// be removed before it joins again.
	ErrNodeExists = errors.New("node already exists")
	// ErrClusterUnknown means a node with an empty data dir could not ask
	// its cluster whether it is already a member, so it did not start.
	ErrClusterUnknown = errors.New("cluster cannot be asked")
	// ErrClusterExists means a node with an empty data dir was asked to
	// bootstrap a cluster that already hands out IDs.
	ErrClusterExists = errors.New("cluster already exists")
	// ErrOtherCluster means a data dir holds another cluster's state.
	ErrOtherCluster = errors.New("data dir belongs to another cluster")
	// ErrCorrupt means the data dir holds a Raft log that cannot be
	// trusted (damaged, truncated, or lost while snapshots remain), so the
	// node does not start.
	ErrCorrupt = errors.New("data dir is corrupt")
)
