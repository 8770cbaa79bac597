package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
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
	path := filepath.Join(dataDir, "raft.db")
	store, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		return false, fmt.Errorf("open raft log: %w", err)
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dataDir, DefaultSnapshotRetain, hclog.NewNullLogger())
	if err != nil {
		return false, fmt.Errorf("open snapshot store: %w", err)
	}
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

// CheckJoin asks the cluster, through the first of addrs that answers,
// whether self is already a member: a member with an empty data dir lost
// its data and must be removed first. A cluster that cannot be asked is
// no reason to refuse; Join itself will wait for it.
func CheckJoin(ctx context.Context, self string, addrs []string, t *secure.TLS) error {
	for _, addr := range addrs {
		var members []*api.NodeInfo
		err := withAdmin(addr, t, func(a api.AdminClient) error {
			ctx, cancel := context.WithTimeout(ctx, 2*nodeStatusTimeout)
			defer cancel()
			st, err := a.Status(ctx, &api.StatusRequest{})
			if err == nil {
				members = st.Nodes
			}
			return err
		})
		if err != nil {
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
	return nil
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
