// Package server runs one Ordo node: the Raft group member that replicates
// the high-water mark, the sequencer that hands out ticks while this node
// leads (package sequencer), and the servers that clients and operators
// call. It owns the node's wiring, lifecycle and rules (membership,
// leading, refusing); every call is served by package grpcapi (and
// httpapi's routes, through it), which takes the node's parts and the
// node itself as small interfaces they satisfy directly. No request path
// runs through this package.
//
// Lifecycle: Open → Bootstrap or Join → serve → Close. Close hands over
// leadership first when this node leads.
//
// Every Raft connection starts with a cluster handshake (handshake.go),
// because Raft itself knows no cluster: a node on another cluster's data
// dir could win this cluster's elections with that cluster's log and
// overwrite its committed history. Both ends name their cluster and node;
// two clusters, or a dialer the configuration does not list, are refused,
// and a node whose voters answer, by a majority, for another cluster than
// its own refuses to serve. A node without a cluster id (its FSM has not
// applied an init) is let through by everyone: its log holds no
// reservation, because the init is the first entry a leader commits, so
// it has no high-water mark to impose; a node with state but no cluster
// id is one whose cluster never committed its init (or was created before
// cluster ids existed: then only node ids are checked).
package server

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/httpapi"
	"github.com/seed-e8569b35/ordo/internal/hostlimit"
	"github.com/seed-e8569b35/ordo/leadership"
	"github.com/seed-e8569b35/ordo/metrics"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/settle"
	"github.com/seed-e8569b35/ordo/startup"
)

// Peer names one member of the initial cluster.
type Peer struct {
	ID       string
	RaftAddr string
	GRPCAddr string
}

// Node is one running Ordo node.
type Node struct {
	cfg    Config
	logger hclog.Logger

	raft      *raft.Raft
	fsm       *fsm.FSM
	store     *raftboltdb.BoltStore
	snaps     *raft.FileSnapshotStore
	transport *raft.NetworkTransport
	seq       *sequencer.Sequencer
	// settler serves tracked reservations and W while this node leads.
	settler *settle.Settler
	// versionTried and versionWaits are lead's last attempt to raise the
	// cluster version and what it waited for (tryRaiseVersion; only the
	// lead goroutine touches them).
	versionTried time.Time
	versionWaits string

	grpcServer *grpc.Server
	grpcAddr   string
	// api serves every gRPC and HTTP call (package grpcapi).
	api *grpcapi.Server
	// health is the gRPC health service, kept equal to ready().
	health *health.Server
	// httpServer serves Config.HTTPAddr (nil when empty).
	httpServer *httpapi.Server
	httpAddr   string
	peers      *grpcapi.Peers
	// confirmer runs this node's confirmation rounds as a leader, and its
	// answers and promises as a voter (package leadership).
	confirmer *leadership.Confirmer
	// membershipMu makes membership changes one at a time.
	membershipMu sync.Mutex

	// bootstrapPeers are registered in the FSM by whichever of them leads
	// first, so every node can find every other's gRPC address.
	mu             sync.Mutex
	bootstrapPeers []Peer

	// registerMu is held through each registration of this node's gRPC
	// address, so a test that sets TestHooks.HoldAddress under it knows no
	// registration in flight overwrites the address it points the leader
	// at.
	registerMu sync.Mutex
	fatalOnce  sync.Once
	fatal      chan error
	refused    chan struct{}
	refuseErr  error

	// storedClusterID is the cluster id the data dir held at Open, so the
	// node can name its cluster before a leader is elected and the FSM
	// applies the log (see clusterID).
	storedClusterID string
	// storedAddrs are the members' gRPC addresses the data dir held at
	// Open: a node whose log is behind applies nothing until a leader
	// reaches it, and may need them to ask the cluster (clusterMembers).
	storedAddrs map[string]string
	// storedConfiguration reports whether the data dir held a Raft
	// configuration at Open: the node was a member once, and a later
	// configuration that does not list it means it was removed (see
	// watchMembership).
	storedConfiguration bool
	// raftIdentity is what the Raft stream layer's cluster handshake
	// says and checks, and what peers answered it.
	raftIdentity *raftIdentity

	// auth decides who may call what (package grpcapi), from Config's
	// TLS, AdminToken and AdminSubjects.
	auth    *grpcapi.Auth
	metrics *metrics.Metrics

	closeOnce sync.Once
	stop      chan struct{}
	wg        sync.WaitGroup
}

// logCacheSize is how many recent log entries the node keeps in memory
// for replication (raft.LogCache).
const logCacheSize = 512

// Open starts a node: Raft with its stores under cfg.DataDir, and the gRPC
// services on cfg.GRPCAddr. It does not create a cluster; call Bootstrap or
// Join, or neither when restarting with existing data.
func Open(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n := &Node{
		cfg:     cfg,
		logger:  cfg.Logger,
		fatal:   make(chan error, 1),
		refused: make(chan struct{}),
		stop:    make(chan struct{}),
	}
	n.peers = grpcapi.NewPeers(transportCredentials(cfg.TLS), n.ClusterID, cfg.AdminToken)
	n.auth = newAuth(n)
	if err := n.openRaft(); err != nil {
		n.closeSequencing()
		n.closeStores()
		return nil, err
	}
	if err := n.openGRPC(); err != nil {
		close(n.stop)
		n.raft.Shutdown()
		n.wg.Wait()
		n.closeSequencing()
		n.closeStores()
		return nil, err
	}
	// After openGRPC: it registers the address that sets.
	n.wg.Add(1)
	go n.watchMembership()
	if err := n.openHTTP(); err != nil {
		close(n.stop)
		n.grpcServer.Stop()
		n.raft.Shutdown()
		n.wg.Wait()
		n.closeSequencing()
		n.closeStores()
		return nil, err
	}
	return n, nil
}

func (n *Node) openRaft() error {
	if err := startup.PrepareDataDir(n.cfg.DataDir, n.logger); err != nil {
		return err
	}
	stored, err := startup.StoredState(n.cfg.DataDir)
	if err != nil {
		return err
	}
	n.storedClusterID, n.storedAddrs = stored.ClusterID, stored.Nodes
	conf, err := startup.StoredConfiguration(n.cfg.DataDir)
	if err != nil {
		return err
	}
	n.storedConfiguration = len(conf.Servers) > 0
	store, snaps, err := startup.OpenStores(n.cfg.DataDir, n.logger.Named("snapshot"))
	if err != nil {
		return err
	}
	n.store, n.snaps = store, snaps
	// Before Raft starts: the restart hold is read from its stable store.
	if n.confirmer, err = n.openConfirmer(store); err != nil {
		return err
	}
	// Before the stream layer: its handshake reads the cluster id, so the
	// FSM, from the first connection on.
	n.fsm = fsm.New(n.checkLayout, n.refuse)
	stream, err := newStreamLayer(n.cfg.RaftAddr, n.cfg.RaftAdvertise)
	if err != nil {
		return err
	}
	n.raftIdentity = newRaftIdentity(n.cfg.ID, n.ClusterID, n.logger.Named("transport"))
	stream.identity = n.raftIdentity
	// Peers hold a few connections each (Raft pools them); more from one
	// host is a leak or an attack.
	stream.Listener = hostlimit.Wrap(stream.Listener, maxRaftConnsPerHost, n.logger.Named("transport"))
	if n.cfg.TLS != nil {
		stream.useTLS(n.cfg.TLS.ServerConfig(n.logger.Named("transport"), true), n.cfg.TLS.ClientConfig())
	} else if !isLoopback(n.cfg.RaftAddr) || !isLoopback(n.cfg.GRPCAddr) {
		n.logger.Warn("serving PLAINTEXT on a non-loopback address (--insecure): anyone who can reach the raft port can rewrite the cluster's state",
			"raft", n.cfg.RaftAddr, "grpc", n.cfg.GRPCAddr)
	}
	// MaxRPCsInFlight 1 turns off pipelined replication. In hashicorp/raft
	// v1.7.3 a pipeline whose follower rejects an entry (a log that lost
	// entries) or stops answering can deadlock its replication goroutine,
	// and with it the leader's shutdown; the sequencer commits a few
	// reservations a second, which needs no pipeline.
	n.transport = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 3, MaxRPCsInFlight: 1, Timeout: 10 * time.Second, Logger: n.logger.Named("transport"),
	})
	// The sequencer exists before Raft starts: NewRaft may restore a
	// snapshot, and a layout mismatch found then stops the sequencer.
	var log sequencer.Log = raftLog{n}
	if n.cfg.TestHooks.UnsafeTrustReservation {
		log = &trustingLog{raftLog: raftLog{n}}
		n.logger.Error("UNSAFE: IDs are handed out without confirming leadership and can go out of order; tests only")
	}
	n.seq = sequencer.New(n.cfg.Layout, n.cfg.ReserveWindow, n.cfg.Clock, log, n.logger.Named("sequencer"),
		sequencer.Lease{Duration: n.cfg.Lease, Clock: leadership.LeaseClock})
	settleCfg := n.cfg.Reservations
	settleCfg.Wall = n.cfg.Clock
	if n.settler, err = settle.New(settleCfg, n.seq, raftLog{n}, n.fsm, n.logger.Named("settle")); err != nil {
		return err
	}
	rc := *n.cfg.Raft
	notify := make(chan bool, 8)
	rc.NotifyCh = notify
	// The leader reads each entry back to send it to every follower: the
	// cache serves those reads from memory, not from a bolt transaction.
	logs, err := raft.NewLogCache(logCacheSize, store)
	if err != nil {
		return fmt.Errorf("log cache: %w", err)
	}
	n.raft, err = raft.NewRaft(&rc, n.fsm, logs, store, n.snaps, n.transport)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	// The gauges read Raft, the FSM, the sequencer and the settler, which
	// exist from here; nothing counts before watchLeadership starts, below.
	n.metrics = metrics.New(n.raft, n.fsm, n.seq, n.settler, n.cfg.Layout, n.cfg.MetricsSequences)
	// NewRaft has read the configuration from the data dir: the handshake
	// checks peers against it from now on.
	n.refreshMembers()
	n.wg.Add(1)
	go n.watchLeadership(notify)
	return nil
}

// closeSequencing stops the settler and the sequencer, those that were
// opened.
func (n *Node) closeSequencing() {
	if n.settler != nil {
		n.settler.Close()
	}
	if n.seq != nil {
		n.seq.Close()
	}
}

func (n *Node) closeStores() {
	if n.transport != nil {
		n.transport.Close()
	}
	if n.store != nil {
		n.store.Close()
	}
}

// Metrics is this node's metrics, for serving them (the HTTP port) and
// for adding Raft's own (metrics.CollectRaft).
func (n *Node) Metrics() *metrics.Metrics { return n.metrics }

// ID returns the node's id.
func (n *Node) ID() string { return n.cfg.ID }

// RaftAddr returns the address the Raft transport listens on.
func (n *Node) RaftAddr() string { return string(n.transport.LocalAddr()) }

// GRPCAddr returns the address the gRPC services listen on.
func (n *Node) GRPCAddr() string { return n.grpcAddr }

// Fatal delivers the error that made this node refuse to serve, such as a
// layout that differs from the cluster's. The caller should shut down.
func (n *Node) Fatal() <-chan error { return n.fatal }

// Close bounds: the hand-over, and Raft's shutdown with everything that
// waits on it. Peers that stop answering must not keep a node from
// stopping (a SIGTERM, a test's cleanup).
const (
	closeTransferTimeout = 5 * time.Second
	closeRaftTimeout     = 10 * time.Second
)

// Close stops the node, handing leadership to another voter first when it
// leads, so clients see a short handover instead of an election timeout.
// It returns within about closeTransferTimeout + closeRaftTimeout whatever
// the peers do; if Raft has not stopped by then, it says so, and leaves
// the log store open rather than close it under a running goroutine.
func (n *Node) Close() error {
	first := false
	n.closeOnce.Do(func() { first = true })
	if !first {
		return nil
	}
	if n.raft.State() == raft.Leader && n.voters() > 1 {
		err := waitBounded(closeTransferTimeout, func() error { return n.handOver(n.raft.LeadershipTransfer) })
		if err != nil {
			n.logger.Warn("leadership transfer on close failed", "error", err)
		}
	}
	close(n.stop)
	// Probes see NOT_SERVING from now on, whatever comes.
	n.health.Shutdown()
	n.closeHTTP()
	stopped := make(chan struct{})
	go func() { n.grpcServer.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		n.grpcServer.Stop()
	}
	shutdown := n.raft.Shutdown()
	// Closing the transport's connections ends replication and term
	// rounds blocked on a peer that stopped answering.
	n.transport.Close()
	err := waitBounded(closeRaftTimeout, func() error {
		err := shutdown.Error()
		n.closeSequencing()
		n.wg.Wait()
		return err
	})
	n.confirmer.Close()
	n.peers.Close()
	if errors.Is(err, errWaitTimedOut) {
		n.logger.Error("raft did not stop in time; leaving its log store open", "waited", closeRaftTimeout)
		return fmt.Errorf("shut down raft: %w", err)
	}
	n.closeStores()
	if err != nil {
		return fmt.Errorf("shut down raft: %w", err)
	}
	return nil
}

// errWaitTimedOut is waitBounded's error when fn has not returned in time.
var errWaitTimedOut = errors.New("timed out")

// waitBounded runs fn and returns its error, or errWaitTimedOut after d,
// leaving fn to finish in the background.
func waitBounded(d time.Duration, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("%w after %s", errWaitTimedOut, d)
	}
}
