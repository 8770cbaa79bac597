package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/secure"
)

// A node whose data dir is empty may be new, or may have lost its data.
// If it lost it, it must not start Raft as the member it was: as soon as
// Raft runs, the leader replicates to it and it counts as a voter while
// its log is still empty, and with such a vote a candidate that missed
// committed reservations can win, and hand out IDs again. The checks
// below run before Open, so that Raft never starts on such a node; the
// operator removes it (ordo remove) and lets it join as a new member.

// HasState reports whether dataDir holds Raft state, without starting Raft.
func HasState(dataDir string) (bool, error) {
	if _, err := os.Stat(dataDir); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	store, snaps, err := openStores(dataDir, hclog.NewNullLogger())
	if err != nil {
		return false, err
	}
	defer store.Close()
	return raft.HasExistingState(store, store, snaps)
}

// CheckBootstrap asks the other peers of a bootstrap list whether the
// cluster already hands out IDs; if one does, self (with an empty data
// dir) lost its data or comes too late to bootstrap. Peers that do not
// answer are taken to be starting too.
func CheckBootstrap(ctx context.Context, self string, peers []Peer, t *secure.TLS) error {
	ctx, cancel := context.WithTimeout(ctx, nodeStatusTimeout)
	defer cancel()
	found := make(chan string, len(peers))
	var wg sync.WaitGroup
	for _, p := range peers {
		if p.ID == self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = withAdmin(p.GRPCAddr, t, func(a api.AdminClient) error {
				info, err := a.NodeStatus(ctx, &api.NodeStatusRequest{})
				if err == nil && info.HighWater > 0 {
					found <- p.ID
				}
				return err
			})
		}()
	}
	wg.Wait()
	close(found)
	if id, ok := <-found; ok {
		return fmt.Errorf("%w: peer %s already serves this cluster, but this node's data dir is empty; "+
			"if it lost its data, remove it (ordo remove --id %s) and start it with --join", ErrClusterExists, id, self)
	}
	return nil
}

// CheckJoin asks the cluster, through addrs, whether self is already a
// member: a member with an empty data dir lost its data and must be
// removed first. It fails closed: until one of addrs answers with the
// members (which takes a leader), it keeps asking, and when ctx ends
// first it refuses, because a node that cannot tell must not start Raft:
// if it is a member, the leader would count it as a voter with an empty
// log.
func CheckJoin(ctx context.Context, self string, addrs []string, t *secure.TLS) error {
	if len(addrs) == 0 {
		return fmt.Errorf("%w: no address to ask whether %q is already a member", ErrBadConfig, self)
	}
	var last error
	for {
		for _, addr := range addrs {
			var members []*api.NodeInfo
			err := withAdmin(addr, t, func(a api.AdminClient) error {
				ctx, cancel := context.WithTimeout(ctx, 2*nodeStatusTimeout)
				defer cancel()
				st, err := a.Status(ctx, &api.StatusRequest{})
				if err == nil && st.LeaderId == "" {
					err = errors.New("no leader known")
				}
				if err == nil {
					members = st.Nodes
				}
				return err
			})
			if err != nil {
				last = fmt.Errorf("%s: %w", addr, err)
				continue
			}
			for _, m := range members {
				if m.Id == self {
					return fmt.Errorf("%w: %q is already a member at %s, but its data dir is empty; "+
						"if it lost its data, remove it first (ordo remove --id %s), then join again", ErrNodeExists, self, m.RaftAddr, self)
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: cannot ask the cluster whether %q is already a member, so it must not start with an empty data dir (last error: %v)",
				ErrClusterUnknown, self, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// withAdmin runs fn with a one-off admin client for addr.
func withAdmin(addr string, t *secure.TLS, fn func(api.AdminClient) error) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(transportCredentials(t)))
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer conn.Close()
	return fn(api.NewAdminClient(conn))
}

// StoredState replays what dataDir holds, the latest snapshot and the log
// after it, into a scratch FSM, without starting Raft: which cluster the
// data belongs to, and its members' gRPC addresses.
func StoredState(dataDir string) (fsm.State, error) {
	store, snaps, err := openStores(dataDir, hclog.NewNullLogger())
	if err != nil {
		return fsm.State{}, err
	}
	defer store.Close()
	scratch := fsm.New(nil)
	var after uint64
	if metas, err := snaps.List(); err != nil {
		return fsm.State{}, fmt.Errorf("list snapshots: %w", err)
	} else if len(metas) > 0 {
		_, rc, err := snaps.Open(metas[0].ID)
		if err != nil {
			return fsm.State{}, fmt.Errorf("open snapshot %s: %w", metas[0].ID, err)
		}
		if err := scratch.Restore(rc); err != nil {
			return fsm.State{}, fmt.Errorf("snapshot %s: %w", metas[0].ID, err)
		}
		after = metas[0].Index
	}
	first, err := store.FirstIndex()
	if err != nil {
		return fsm.State{}, fmt.Errorf("read raft log: %w", err)
	}
	last, err := store.LastIndex()
	if err != nil {
		return fsm.State{}, fmt.Errorf("read raft log: %w", err)
	}
	for i := max(first, after+1); first > 0 && i <= last; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			return fsm.State{}, fmt.Errorf("read raft log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand {
			scratch.Apply(&l) // a command it refuses changes nothing, as in Raft
		}
	}
	return scratch.State(), nil
}

// CheckCluster refuses to start on a data dir that belongs to another
// cluster: one whose recorded cluster id differs from expected (when
// given), or from the id any of its recorded members reports. A node
// started on another cluster's data could otherwise take part in this
// cluster's elections with that cluster's log, and its high-water mark.
// Members that do not answer, or have no id yet, prove nothing.
func CheckCluster(ctx context.Context, self, dataDir, expected string, t *secure.TLS) error {
	st, err := StoredState(dataDir)
	if err != nil {
		return err
	}
	if st.ClusterID == "" {
		return nil // the first leader has not recorded one yet
	}
	if expected != "" && st.ClusterID != expected {
		return fmt.Errorf("%w: the data dir %s holds cluster %s, this node is configured for cluster %s",
			ErrOtherCluster, dataDir, st.ClusterID, expected)
	}
	ctx, cancel := context.WithTimeout(ctx, nodeStatusTimeout)
	defer cancel()
	theirs := make(chan string, len(st.Nodes))
	var wg sync.WaitGroup
	for id, addr := range st.Nodes {
		if id == self || addr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = withAdmin(addr, t, func(a api.AdminClient) error {
				info, err := a.NodeStatus(ctx, &api.NodeStatusRequest{})
				if err == nil && info.ClusterId != "" && info.ClusterId != st.ClusterID {
					theirs <- fmt.Sprintf("%s at %s reports cluster %s", id, addr, info.ClusterId)
				}
				return err
			})
		}()
	}
	wg.Wait()
	close(theirs)
	if other, ok := <-theirs; ok {
		return fmt.Errorf("%w: the data dir %s holds cluster %s, but member %s; was the data dir copied from another cluster?",
			ErrOtherCluster, dataDir, st.ClusterID, other)
	}
	return nil
}
