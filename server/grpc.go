package server

import (
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/internal/hostlimit"
	"github.com/seed-e8569b35/ordo/startup"
)

// nodeStatusTimeout bounds asking one peer for its status: the same
// bound a starting node's questions have, and grpcapi's Status keeps.
const nodeStatusTimeout = startup.NodeStatusTimeout

// openGRPC serves package grpcapi's services on Config.GRPCAddr, with
// grpcapi's options and interceptors, this node's TLS, and the health and
// reflection services.
func (n *Node) openGRPC() error {
	lis, err := net.Listen("tcp", n.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen for gRPC: %w", err)
	}
	n.grpcAddr = lis.Addr().String()
	if n.cfg.GRPCAdvertise != "" {
		n.grpcAddr = n.cfg.GRPCAdvertise
	} else if lis.Addr().(*net.TCPAddr).IP.IsUnspecified() {
		lis.Close()
		return badField("GRPCAddr", "%q binds every interface: give {GRPCAdvertise}, the address peers and clients reach this node at", n.cfg.GRPCAddr)
	}
	n.api = grpcapi.NewServer(grpcapi.Config{
		ID: n.cfg.ID, RaftAddr: n.RaftAddr(), GRPCAddr: n.grpcAddr,
		Layout: n.cfg.Layout, Group: n.cfg.Group, MaxCount: n.cfg.MaxCount, RPCTimeout: n.cfg.RPCTimeout,
	}, grpcapi.Parts{
		Node: n, Raft: n.raft, State: n.fsm, IDs: n.seq, Settle: n.settleAPI(), Voter: n.confirmer,
		Peers: n.peers, Meter: n.metrics, Auth: n.auth, Stop: n.stop,
	})
	opts := n.api.Options()
	if n.cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(n.cfg.TLS.ServerConfig(n.logger.Named("grpc"), false))))
	}
	n.grpcServer = grpc.NewServer(opts...)
	lis = hostlimit.Wrap(lis, n.cfg.MaxConnsPerHost, n.logger.Named("grpc"))
	n.api.Register(n.grpcServer)
	hs := n.newHealth()
	healthpb.RegisterHealthServer(n.grpcServer, hs)
	reflection.Register(n.grpcServer)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.grpcServer.Serve(lis); err != nil {
			n.logger.Named("grpc").Error("gRPC server stopped", "error", err)
		}
	}()
	return nil
}
