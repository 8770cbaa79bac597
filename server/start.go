package server

import (
	"context"

	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/startup"
)

// Entry is what a node is told about its cluster on its command line;
// DecideStart passes it to package startup, which owns the decision.
type Entry struct {
	// Bootstrap is the initial members (--bootstrap); may be empty. It
	// is also what Node.Bootstrap is given when the decision is to
	// bootstrap.
	Bootstrap []Peer
	// Join is where to ask to join (--join): members' gRPC addresses or a
	// service in front of them; may be empty.
	Join []string
	// ClusterID, when set, is the only cluster whose data dir this node
	// starts on (--cluster-id).
	ClusterID string
	// ForceBootstrap bootstraps the list without asking its peers
	// (--force-bootstrap): for an operator who knows the cluster of the
	// list never ran, or is gone for good with every copy of its data.
	ForceBootstrap bool
}

// DecideStart decides, before Raft starts, how the node of cfg enters its
// cluster: startup.DecideStart, on cfg validated and with its defaults.
// The caller then calls Open and, as returned, Bootstrap, Join, or
// neither.
func DecideStart(ctx context.Context, cfg Config, e Entry) (startup.Start, error) {
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	cfg = cfg.withDefaults()
	se := startup.Entry{Join: e.Join, ClusterID: e.ClusterID, ForceBootstrap: e.ForceBootstrap}
	for _, p := range e.Bootstrap {
		se.Bootstrap = append(se.Bootstrap, startup.Peer{ID: p.ID, GRPCAddr: p.GRPCAddr})
	}
	return startup.DecideStart(ctx, startupSelf(cfg), se)
}

// startupSelf is the node of cfg (validated, with defaults) as package
// startup asks and answers for it: its answers are served with the same
// limits as the serving node's.
func startupSelf(cfg Config) startup.Self {
	return startup.Self{
		ID: cfg.ID, DataDir: cfg.DataDir, GRPCAddr: cfg.GRPCAddr,
		TLS: cfg.TLS, Logger: cfg.Logger, ServerOptions: grpcapi.ServerOptions(),
	}
}
