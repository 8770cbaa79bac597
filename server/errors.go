package server

import (
	"errors"
)

// Errors of this package. Each error has one name, in the package that
// returns it: the node also returns sequencer's, grpcapi's, startup's and
// backup's, under their own names. grpcapi.ToStatus is the one place that
// maps errors to gRPC codes; none of these reaches a caller but as the
// reason a node refuses (grpcapi.ErrRefusing).
var (
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
