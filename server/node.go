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
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/httpapi"
	"github.com/seed-e8569b35/ordo/internal/hostlimit"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/leadership"
	"github.com/seed-e8569b35/ordo/metrics"
	"github.com/seed-e8569b35/ordo/sequencer"
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
		if n.seq != nil {
			n.seq.Close()
		}
		n.closeStores()
		return nil, err
	}
	if err := n.openGRPC(); err != nil {
		close(n.stop)
		n.raft.Shutdown()
		n.wg.Wait()
		n.seq.Close()
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
		n.seq.Close()
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
	rc := *n.cfg.Raft
	notify := make(chan bool, 8)
	rc.NotifyCh = notify
	n.raft, err = raft.NewRaft(&rc, n.fsm, store, store, n.snaps, n.transport)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	// The gauges read Raft, the FSM and the sequencer, which exist from
	// here; nothing counts before watchLeadership starts, below.
	n.metrics = metrics.New(n.raft, n.fsm, n.seq)
	// NewRaft has read the configuration from the data dir: the handshake
	// checks peers against it from now on.
	n.refreshMembers()
	n.wg.Add(1)
	go n.watchLeadership(notify)
	return nil
}

func (n *Node) closeStores() {
	if n.transport != nil {
		n.transport.Close()
	}
	if n.store != nil {
		n.store.Close()
	}
}

// ID returns the node's id.
func (n *Node) ID() string { return n.cfg.ID }

// RaftAddr returns the address the Raft transport listens on.
func (n *Node) RaftAddr() string { return string(n.transport.LocalAddr()) }

// GRPCAddr returns the address the gRPC services listen on.
func (n *Node) GRPCAddr() string { return n.grpcAddr }

// Fatal delivers the error that made this node refuse to serve, such as a
// layout that differs from the cluster's. The caller should shut down.
func (n *Node) Fatal() <-chan error { return n.fatal }

// Bootstrap creates a new cluster of peers, which must include this node.
// It does nothing when the data dir already holds Raft state, so the same
// command line can restart a node.
func (n *Node) Bootstrap(peers []Peer) error {
	has, err := raft.HasExistingState(n.store, n.store, n.snaps)
	if err != nil {
		return fmt.Errorf("check existing state: %w", err)
	}
	if has {
		n.logger.Info("data dir holds raft state; bootstrap ignored")
		return nil
	}
	var cfg raft.Configuration
	self := false
	for _, p := range peers {
		if p.ID == "" || p.RaftAddr == "" || p.GRPCAddr == "" {
			return fmt.Errorf("%w: bootstrap peer %+v lacks an id or address", startup.ErrBadConfig, p)
		}
		self = self || p.ID == n.cfg.ID
		cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
	}
	if !self {
		return fmt.Errorf("%w: bootstrap peers do not include this node %q", startup.ErrBadConfig, n.cfg.ID)
	}
	n.mu.Lock()
	n.bootstrapPeers = peers
	n.mu.Unlock()
	if err := n.raft.BootstrapCluster(cfg).Error(); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// BootstrapSingle creates a one-node cluster of this node, for tests and
// trying things out; others can join it.
func (n *Node) BootstrapSingle() error {
	return n.Bootstrap([]Peer{{ID: n.cfg.ID, RaftAddr: n.RaftAddr(), GRPCAddr: n.GRPCAddr()}})
}

// Join asks the cluster, through any of addrs (members' gRPC addresses),
// to add this node as a voter, trying each in turn until ctx ends. Errors
// that retrying cannot mend, such as a layout mismatch or an id in use,
// return at once.
func (n *Node) Join(ctx context.Context, addrs ...string) error {
	if len(addrs) == 0 {
		return fmt.Errorf("%w: no address to join through", startup.ErrBadConfig)
	}
	req := &api.JoinRequest{Id: n.cfg.ID, RaftAddr: n.RaftAddr(), GrpcAddr: n.grpcAddr, Layout: n.cfg.Layout.String(), Group: n.cfg.Group}
	hint := "" // the leader's address, when the last node asked named it
	for i := 0; ; i++ {
		// Raft gave this node the configuration: it was added, by an
		// earlier attempt whose reply was lost or from outside (ordo join).
		if member, _ := n.isMember(n.cfg.ID); member {
			return nil
		}
		addr, fromHint := addrs[i%len(addrs)], hint != ""
		if fromHint {
			addr, hint = hint, ""
			i--
		}
		conn, err := n.peers.Get(addr)
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, 2*nodeStatusTimeout)
		var trailer metadata.MD
		_, err = api.NewAdminClient(conn).Join(n.adminContext(actx), req, grpc.Trailer(&trailer))
		cancel()
		switch status.Code(err) {
		case codes.OK:
			return nil
		case codes.AlreadyExists:
			if member, _ := n.isMember(n.cfg.ID); member {
				return nil
			}
			return fmt.Errorf("join through %s: %w", addr, err)
		case codes.Unavailable, codes.DeadlineExceeded, codes.Internal:
		default:
			return fmt.Errorf("join through %s: %w", addr, err)
		}
		// A node joins through the leader (with TLS a follower does not
		// forward it): go there next.
		// Once at once; a hint that leads to another hint waits like
		// any retry, so two nodes naming each other cannot spin.
		if v := trailer.Get(api.LeaderAddrKey); len(v) > 0 && v[0] != addr {
			hint = v[0]
			if !fromHint {
				continue
			}
		}
		n.logger.Warn("join failed; retrying", "addr", addr, "error", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("join: %w (last error from %s: %v)", ctx.Err(), addr, err)
		case <-n.refused:
			return fmt.Errorf("join: %w", n.refuseErr)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

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
		n.seq.Close()
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

func (n *Node) voters() int {
	servers, _ := n.servers()
	c := 0
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}

// isMember reports whether id is in Raft's latest configuration, and
// whether that configuration has any servers at all.
func (n *Node) isMember(id string) (member, known bool) {
	servers, err := n.servers()
	if err != nil {
		return false, false
	}
	for _, s := range servers {
		if string(s.ID) == id {
			return true, true
		}
	}
	return false, len(servers) > 0
}

// memberRaftAddr returns the Raft address of member id in the Raft
// configuration, and whether id is a member.
func (n *Node) memberRaftAddr(id string) (string, bool) {
	servers, _ := n.servers()
	for _, s := range servers {
		if string(s.ID) == id {
			return string(s.Address), true
		}
	}
	return "", false
}

// checkAnswersAs asks the node at grpcAddr who it is, and returns nil only
// if it is member id of this node's cluster.
func (n *Node) checkAnswersAs(ctx context.Context, grpcAddr, id string) error {
	a := startup.NewAsker(n.cfg.TLS)
	defer a.Close()
	info, err := a.NodeStatus(ctx, grpcAddr)
	if err != nil {
		return fmt.Errorf("%w: %s cannot be asked who it is: %v", grpcapi.ErrBadRequest, grpcAddr, err)
	}
	if info.Id != id || info.ClusterId != n.ClusterID() {
		return fmt.Errorf("%w: %s answers as %q of cluster %q, not as member %q of cluster %q",
			grpcapi.ErrPermissionDenied, grpcAddr, info.Id, info.ClusterId, id, n.ClusterID())
	}
	return nil
}

// leaderConfirmsRemoved asks the other nodes it knows for the cluster's
// status (which a follower passes to the leader) and reports whether a
// leader of this node's cluster answered with a membership that lacks this
// node. Only such an answer proves it: the call names this cluster, so a
// node of another one now at a member's address refuses it, and a refusal,
// or an answer that does not name this cluster (grpcapi.AnsweredForCluster), is
// taken as "cannot tell", never as proof: watchMembership asks again.
func (n *Node) leaderConfirmsRemoved() bool {
	st, ok := n.clusterMembers()
	return ok && !slices.ContainsFunc(st.Nodes, func(m *api.NodeInfo) bool { return m.Id == n.cfg.ID })
}

// clusterMembers asks the other members of this node's Raft
// configuration, at their recorded gRPC addresses, for the cluster's
// status, and returns the first answer for this cluster that names a
// leader other than this node.
func (n *Node) clusterMembers() (*api.StatusResponse, bool) {
	for _, srv := range n.raftIdentity.members.get() {
		addr, known := n.fsm.NodeAddr(string(srv.ID))
		if !known {
			addr, known = n.storedAddrs[string(srv.ID)]
		}
		if string(srv.ID) == n.cfg.ID || !known {
			continue
		}
		conn, err := n.peers.Get(addr)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*nodeStatusTimeout)
		var header metadata.MD
		st, err := api.NewAdminClient(conn).Status(ctx, &api.StatusRequest{}, grpc.Header(&header))
		cancel()
		if err == nil && grpcapi.AnsweredForCluster(header, n.ClusterID()) && st.LeaderId != "" && st.LeaderId != n.cfg.ID {
			return st, true
		}
	}
	return nil, false
}

// checkLayout is called by the FSM whenever the cluster's layout becomes
// known. A node whose own layout differs must not serve: IDs made with two
// layouts do not sort as one sequence.
func (n *Node) checkLayout(l layout.Layout, group uint64) {
	if l == n.cfg.Layout && group == n.cfg.Group {
		return
	}
	n.refuse(fmt.Errorf("%w: this node is configured with layout %s group %d, but the cluster was created with layout %s group %d",
		grpcapi.ErrLayoutMismatch, n.cfg.Layout, n.cfg.Group, l, group))
}

func (n *Node) refuse(err error) {
	n.fatalOnce.Do(func() {
		if errors.Is(err, ErrRemoved) {
			n.logger.Info("this node was removed from the cluster; stopping")
		} else {
			n.logger.Error("refusing to serve", "error", err)
		}
		n.refuseErr = err
		close(n.refused)
		n.seq.StepDown()
		n.fatal <- err
	})
}

// refusal returns the error that made this node refuse to serve, or nil.
func (n *Node) Refusal() error {
	select {
	case <-n.refused:
		return n.refuseErr
	default:
		return nil
	}
}

// watchLeadership turns Raft's leadership notifications into the
// sequencer's lifecycle: each time this node wins, a lead loop runs until
// it loses.
func (n *Node) watchLeadership(notify <-chan bool) {
	defer n.wg.Done()
	var (
		cancel = context.CancelFunc(func() {})
		done   chan struct{}
	)
	stopLeading := func() {
		cancel()
		if done != nil {
			<-done
			done = nil
		}
		if !n.cfg.TestHooks.UnsafeTrustReservation {
			n.seq.StepDown()
		}
	}
	defer stopLeading()
	for {
		select {
		case <-n.stop:
			return
		case leader := <-notify:
			n.metrics.LeaderChanged()
			stopLeading()
			if !leader {
				n.logger.Info("lost leadership")
				n.confirmer.Release()
				continue
			}
			n.logger.Info("won leadership")
			ctx, c := context.WithCancel(context.Background())
			cancel, done = c, make(chan struct{})
			go func() { defer close(done); n.lead(ctx) }()
		}
	}
}

// watchMembership keeps this node's membership in order.
//
// It stops a node that was removed from the cluster: lingering, it would
// answer every client "no leader". Raft shuts itself down when a leader
// removes itself; a removed follower only sees a configuration without
// itself, which may not be committed (and a node catching up sees older
// ones without itself too), so the leader is asked to confirm.
//
// And a member that restarted on another gRPC address registers it with
// the leader (a leader records its own when it wins): until then the
// leader's term rounds and other nodes' forwarding dial the old one.
//
// It also keeps the Raft handshake's copy of the configuration fresh, and
// stops a node whose voters answer the handshake for another cluster.
func (n *Node) watchMembership() {
	defer n.wg.Done()
	check := time.NewTicker(200 * time.Millisecond)
	defer check.Stop()
	wasMember := false
	var lastRegister time.Time
	for {
		select {
		case <-n.stop:
			return
		case <-check.C:
		}
		n.refreshMembers()
		n.checkOtherCluster()
		n.admitListed()
		member, known := n.isMember(n.cfg.ID)
		switch {
		case n.raft.State() == raft.Shutdown:
			n.refuse(ErrRemoved)
			return
		case wasMember && n.raftIdentity.strangerTo.Swap(false) && n.leaderConfirmsRemoved():
			// Its peers refuse it as a stranger, and the leader does not
			// list it: it missed the entry that removed it, which the
			// leader stops sending once appended.
			n.refuse(ErrRemoved)
			return
		case member:
			wasMember = true
			if time.Since(lastRegister) >= time.Second && n.registerMoved() {
				lastRegister = time.Now()
			}
		case known && wasMember && n.leaderConfirmsRemoved():
			n.refuse(ErrRemoved)
			return
		}
	}
}

// registerMoved asks the leader to record this follower's gRPC address if
// the cluster knows another one; it reports whether it asked.
func (n *Node) registerMoved() bool {
	n.registerMu.Lock()
	defer n.registerMu.Unlock()
	if recorded, _ := n.fsm.NodeAddr(n.cfg.ID); recorded == n.grpcAddr || n.isLeader() || n.cfg.TestHooks.holdsAddress() {
		return false
	}
	_, addr := n.Leader()
	if addr == "" {
		return false
	}
	conn, err := n.peers.Get(addr)
	if err != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), nodeStatusTimeout)
	defer cancel()
	_, err = api.NewAdminClient(conn).Register(n.adminContext(ctx), &api.RegisterRequest{Id: n.cfg.ID, GrpcAddr: n.grpcAddr})
	if err != nil {
		n.logger.Warn("could not register this node's gRPC address with the leader; retrying", "leader", addr, "grpc_addr", n.grpcAddr, "error", err)
	} else {
		n.logger.Info("registered this node's gRPC address with the leader", "grpc_addr", n.grpcAddr)
	}
	return true
}

// lead keeps the sequencer serving while this node leads: Barrier so that
// every earlier entry is applied, record the layout if this is a new
// cluster, register addresses, then commit a fresh reservation. It starts
// over whenever the sequencer stops serving (a failed confirmation) while
// Raft still says this node leads.
func (n *Node) lead(ctx context.Context) {
	for ctx.Err() == nil {
		if n.Refusal() != nil {
			// Let a node that can serve lead instead.
			if err := n.handOver(n.raft.LeadershipTransfer); err != nil {
				n.logger.Warn("refusing node could not hand over leadership", "error", err)
				sleepCtx(ctx, time.Second)
			}
		} else if !n.seq.Serving() {
			// A refusal was logged as one, and is handed over next.
			if err := n.becomeReady(ctx); err != nil && ctx.Err() == nil && n.Refusal() == nil {
				n.logger.Warn("not ready to serve yet", "error", err)
			}
		} else {
			n.seq.RenewIfLow()
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// handOver ends the lease and releases the voters' promises before it
// transfers leadership with transfer, so the next leader need not wait
// them out.
func (n *Node) handOver(transfer func() raft.Future) error {
	n.seq.EndLease()
	n.confirmer.Release()
	err := transfer().Error()
	if err != nil && n.isLeader() {
		n.seq.ResumeLease()
	}
	return err
}

// changeMembership runs change, which adds or removes a voter, one at a
// time and only after a round in the current configuration. The lease
// argument (package leadership) needs every lease to be counted in the newest
// configuration or the one before it: the leader drops its own before
// the change, and the round, which voters that promised another leader
// hold back, waits out any other leader's, however it was counted.
func (n *Node) changeMembership(ctx context.Context, change func() raft.Future) error {
	n.membershipMu.Lock()
	defer n.membershipMu.Unlock()
	n.seq.DropLease()
	if _, err := n.confirm(ctx, false); err != nil {
		return fmt.Errorf("confirm leadership before changing membership: %w", err)
	}
	return change().Error()
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (n *Node) becomeReady(ctx context.Context) error {
	if err := n.raft.Barrier(n.cfg.ApplyTimeout).Error(); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	st := n.fsm.State()
	if st.Layout == nil {
		l := n.cfg.Layout
		id, err := fsm.NewClusterID()
		if err != nil {
			return err
		}
		if _, err := n.apply(fsm.Command{Op: fsm.OpInit, Layout: &l, Group: n.cfg.Group, ClusterID: id}); err != nil {
			return fmt.Errorf("record layout: %w", err)
		}
	}
	if err := n.Refusal(); err != nil {
		return err
	}
	if err := n.registerAddrs(st.Nodes); err != nil {
		return err
	}
	if err := n.forgetRemoved(); err != nil {
		return err
	}
	// A round before serving, so that a leader whose voters hold another
	// cluster refuses even if no client reaches it but through them
	// (they forward naming their cluster, which it refuses). Any other
	// failure is left to the rounds of the first requests, as before.
	if _, err := n.confirm(ctx, false); errors.Is(err, leadership.ErrOtherCluster) {
		return err
	}
	// The bootstrap list is registered once: a peer removed later must
	// not come back with this node's next term.
	n.mu.Lock()
	n.bootstrapPeers = nil
	n.mu.Unlock()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return n.seq.Lead(ctx, n.fsm.HighWater())
}

// registerAddrs records this node's and the bootstrap peers' gRPC
// addresses where the FSM lacks them or has another.
func (n *Node) registerAddrs(known map[string]string) error {
	n.mu.Lock()
	want := append([]Peer(nil), n.bootstrapPeers...)
	n.mu.Unlock()
	want = append(want, Peer{ID: n.cfg.ID, GRPCAddr: n.grpcAddr})
	for _, p := range want {
		if p.ID != n.cfg.ID && known[p.ID] != "" {
			continue // a peer's own registration wins over the bootstrap flag
		}
		if known[p.ID] == p.GRPCAddr {
			continue
		}
		if _, err := n.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: p.ID, GRPCAddr: p.GRPCAddr}); err != nil {
			return fmt.Errorf("register %s: %w", p.ID, err)
		}
		known[p.ID] = p.GRPCAddr
	}
	return nil
}

// forgetRemoved deletes the address entries of nodes that are not servers
// of the Raft configuration. A leader that removes itself steps down
// before it can delete its own entry, so the next leader does; left
// behind, the address would still be asked as a member's (a follower's
// removal check, a backup's members), and whatever listens there later,
// a node of another cluster, would seem to speak for this one. It holds
// membershipMu: under it the configuration read is committed, and a join
// records its address only after its server is in the configuration.
func (n *Node) forgetRemoved() error {
	n.membershipMu.Lock()
	defer n.membershipMu.Unlock()
	servers, err := n.servers()
	if err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	for _, id := range strayAddrs(n.fsm.State().Nodes, servers) {
		if _, err := n.apply(fsm.Command{Op: fsm.OpDeleteNode, NodeID: id}); err != nil {
			return fmt.Errorf("forget the address of removed node %s: %w", id, err)
		}
		n.logger.Info("forgot the address of a node that is no longer a member", "id", id)
	}
	return nil
}

// strayAddrs returns, sorted, the ids of nodes that have an address entry
// but are not servers of the configuration. An empty configuration says
// nothing about who is a member, so nothing is stray then.
func strayAddrs(nodes map[string]string, servers []raft.Server) []string {
	if len(servers) == 0 {
		return nil
	}
	var stray []string
	for id := range nodes {
		if !slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == id }) {
			stray = append(stray, id)
		}
	}
	slices.Sort(stray)
	return stray
}

// apply commits a command and returns the FSM's result.
func (n *Node) apply(c fsm.Command) (fsm.Result, error) {
	return n.applyCtx(context.Background(), c)
}

// applyCtx is apply, giving up on entering the log when ctx ends. Once in
// the log, an entry commits or fails with leadership; Raft has no way to
// withdraw it.
func (n *Node) applyCtx(ctx context.Context, c fsm.Command) (fsm.Result, error) {
	entry, err := fsm.Entry(c)
	if err != nil {
		return fsm.Result{}, err
	}
	timeout := n.cfg.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	f := n.raft.ApplyLog(entry, timeout)
	if err := f.Error(); err != nil {
		return fsm.Result{}, err
	}
	res, ok := f.Response().(fsm.Result)
	if !ok {
		return fsm.Result{}, fmt.Errorf("unexpected FSM response %T", f.Response())
	}
	return res, res.Err
}

// confirm runs a confirmation round (leadership.Confirmer.Confirm). A
// round that a majority of the voters refused as nodes of another cluster
// means this node's state names another cluster than the members it
// leads: it refuses to serve, and lead hands leadership over. It would
// otherwise keep winning elections it cannot serve in, its rounds failing
// for good.
func (n *Node) confirm(ctx context.Context, askLease bool) (sequencer.Confirmation, error) {
	c, err := n.confirmer.Confirm(ctx, askLease)
	if errors.Is(err, leadership.ErrOtherCluster) {
		n.refuse(fmt.Errorf("%w: %w. This node's data dir is another cluster's: stop it, move the data dir aside, "+
			"remove it from the cluster (ordo remove --id %s), and start it with an empty data dir and --join",
			startup.ErrOtherCluster, err, n.cfg.ID))
	}
	return c, err
}

// raftLog is the Sequencer's view of Raft.
type raftLog struct{ n *Node }

func (l raftLog) Reserve(ctx context.Context, upTo, clock uint64) (sequencer.Reservation, error) {
	start := time.Now()
	res, err := l.n.applyCtx(ctx, fsm.Command{Op: fsm.OpReserve, UpTo: upTo, Clock: clock})
	l.n.metrics.Reserved(time.Since(start), err)
	return sequencer.Reservation{Prev: res.Prev, HighWater: res.HighWater, ClockHigh: res.ClockHigh, PrevClock: res.PrevClock, Term: res.Term}, err
}

func (l raftLog) Confirm(ctx context.Context, askLease bool) (sequencer.Confirmation, error) {
	start := time.Now()
	c, err := l.n.confirm(ctx, askLease)
	l.n.metrics.Confirmed(time.Since(start), err)
	return c, err
}

// leader returns the leader's id and gRPC address, as far as this node
// knows.
func (n *Node) Leader() (id, addr string) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	if string(lid) == n.cfg.ID {
		return n.cfg.ID, n.grpcAddr
	}
	a, _ := n.fsm.NodeAddr(string(lid))
	return string(lid), a
}

// Leads reports whether this node serves the calls only a leader serves
// (grpcapi.Cluster): while Raft says it leads. Under
// TestHooks.UnsafeTrustReservation also while its sequencer still serves
// a reservation after Raft has moved on: the stale-leader bug
// (trustingLog).
func (n *Node) Leads() bool {
	return n.isLeader() || (n.cfg.TestHooks.UnsafeTrustReservation && n.seq.Serving())
}

// isLeader reports whether Raft says this node leads.
func (n *Node) isLeader() bool { return n.raft.State() == raft.Leader }
