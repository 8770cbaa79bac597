package leadership

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
)

// Errors of this package. grpcapi.ToStatus maps them to gRPC codes,
// with everyone else's.
var (
	// ErrMisdirected means a term request named another node or another
	// cluster than the one that got it: it was sent to a stale address,
	// and whatever listens there must not answer for the voter.
	ErrMisdirected = errors.New("term request meant for another node")
	// ErrOtherCluster means a round failed because a majority of the
	// voters refused it as nodes of one other cluster: this node's state
	// names another cluster than the voters of its Raft configuration
	// hold, and it must not lead them. It comes wrapped with
	// sequencer.ErrNotLeader, as every failed round.
	ErrOtherCluster = errors.New("a majority of the voters belong to another cluster")
)

// Raft is what rounds need of this node's Raft. Package server implements
// it over *raft.Raft.
type Raft interface {
	// CurrentTerm is Raft's current term.
	CurrentTerm() uint64
	// Leads reports whether Raft says this node is the leader.
	Leads() bool
	// Leader is the id of the leader this node knows, "" if none.
	Leader() string
	// Voters lists the ids of the voters of the newest configuration, in
	// its order, this node's own included if it votes.
	Voters() ([]string, error)
}

// Node is what rounds need of the node beyond Raft: its cluster, where
// its peers listen, and how to reach them.
type Node interface {
	// ClusterID is the id of this node's cluster, "" while it has none.
	ClusterID() string
	// GRPCAddr is the address this node's own gRPC services listen on: a
	// voter recorded there is this node, not one to ask.
	GRPCAddr() string
	// NodeAddr is the gRPC address the cluster has recorded for node id.
	NodeAddr(id string) (string, bool)
	// Conn is a connection to the peer at addr. Every stream opened on it
	// must name this node's cluster, and carry what MayRelease asks of a
	// member, so that the voter can check both.
	Conn(addr string) (grpc.ClientConnInterface, error)
	// MayRelease reports whether the caller of the Term stream whose
	// context is ctx may release promises: only a member may, or a forged
	// release would free a promise a leader counts on.
	MayRelease(ctx context.Context) bool
}

// StableStore is where a node records the longest lease it may have
// promised, so that a restart does not forget it: Raft's stable store,
// which outlives the process. A key never set reads as 0, or as an
// error matching raftboltdb.ErrKeyNotFound.
type StableStore interface {
	// GetUint64 reads the value recorded under key.
	GetUint64(key []byte) (uint64, error)
	// SetUint64 records val under key, durably before it returns.
	SetUint64(key []byte, val uint64) error
}

// Config wires a Confirmer to its node.
type Config struct {
	// ID is this node's id: the voter it counts as, and the leader it
	// names in its rounds.
	ID string
	// Lease is the longest promise this node asks for as a leader and
	// gives as a voter; 0 turns the lease off.
	Lease time.Duration
	// Timeout bounds one round.
	Timeout time.Duration
	// Raft is this node's Raft; Node the rest of the node.
	Raft Raft
	Node Node
	// Store holds the restart hold (see StableStore).
	Store StableStore
	// Logger tells when a restart hold starts.
	Logger hclog.Logger
}

// Confirmer runs one node's side of leadership confirmation: as a leader,
// its rounds (Confirm) and the release of the promises it got (Release);
// as a voter, its answers (AnswerTerms) and the promises it gave.
type Confirmer struct {
	id      string
	lease   time.Duration
	timeout time.Duration
	raft    Raft
	node    Node
	// terms are the streams a leader asks voters' terms on, and rounds
	// numbers its rounds.
	terms  *termStreams
	rounds atomic.Uint64
	// promises are what this node promised leaders as a voter.
	promises *promises
}

// Open returns a node's Confirmer. It reads the longest lease the node
// may have promised before it last stopped from cfg.Store, and confirms
// no leader, itself included, until that long has passed (see the
// package comment); before the node may promise a longer lease than
// recorded, it records it, so a crash at any point is covered.
func Open(cfg Config) (*Confirmer, error) {
	p, err := openPromises(cfg.Store, cfg.Lease, cfg.Logger)
	if err != nil {
		return nil, err
	}
	return &Confirmer{
		id: cfg.ID, lease: cfg.Lease, timeout: cfg.Timeout,
		raft: cfg.Raft, node: cfg.Node,
		terms: newTermStreams(), promises: p,
	}, nil
}

// Close ends every Term stream this node opened as a leader; rounds after
// it fail with sequencer.ErrNotLeader.
func (c *Confirmer) Close() { c.terms.close() }
