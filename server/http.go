package server

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/httpapi"
	"github.com/seed-e8569b35/ordo/internal/hostlimit"
	"github.com/seed-e8569b35/ordo/layout"
)

// openHTTP serves package httpapi on Config.HTTPAddr, when set, with this
// node's metrics at /metrics and HTTP calls counted in them. IDs and
// status go through the gRPC service's own methods, so HTTP has the same
// path to IDs (sequencer, confirmation, one forward to the leader), the
// same error codes, and the same timeout (RPCTimeout).
func (n *Node) openHTTP() error {
	if n.cfg.HTTPAddr == "" {
		return nil
	}
	lis, err := net.Listen("tcp", n.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen for HTTP: %w", err)
	}
	n.httpAddr = lis.Addr().String()
	logger := n.logger.Named("http")
	cfg := httpapi.Config{
		Metrics: n.metrics.Handler(),
		Observe: func(route string, code int, d time.Duration) { n.metrics.Served(route, strconv.Itoa(code), d) },
		Timeout: n.cfg.RPCTimeout,
		Logger:  logger,
	}
	if n.cfg.TLS != nil {
		// The gRPC port's rules: a certificate signed by the cluster CA
		// for IDs and status. Probes may come without one (see
		// httpapi.Config.TLS).
		cfg.TLS = n.cfg.TLS.ServerConfig(logger, false)
	} else if !isLoopback(n.cfg.HTTPAddr) {
		logger.Warn("serving HTTP PLAINTEXT on a non-loopback address (--insecure)", "http", n.cfg.HTTPAddr)
	}
	n.httpServer = httpapi.NewServer(newHTTPNode(n), cfg)
	lis = hostlimit.Wrap(lis, n.cfg.MaxConnsPerHost, logger)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.httpServer.Serve(lis); err != nil {
			logger.Error("HTTP server stopped", "error", err)
		}
	}()
	return nil
}

// closeHTTP lets requests in flight finish for a moment, then drops them.
func (n *Node) closeHTTP() {
	if n.httpServer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := n.httpServer.Shutdown(ctx); err != nil {
		n.logger.Named("http").Warn("HTTP requests cut short on close", "error", err)
	}
}

// HTTPAddr returns the address the HTTP server listens on, or "" when
// Config.HTTPAddr is empty.
func (n *Node) HTTPAddr() string { return n.httpAddr }

// httpNode is the node as package httpapi needs it. Errors leave through
// toStatus, the one place this package maps its errors to codes, so HTTP
// and gRPC callers see the same code for the same trouble.
type httpNode struct {
	n     *Node
	admin *grpcapi.Admin // answers Status as gRPC Admin/Status does
}

func newHTTPNode(n *Node) httpNode { return httpNode{n: n, admin: grpcapi.NewAdmin(grpcNode{n})} }

func (h httpNode) Next(ctx context.Context, count uint32) (*api.NextResponse, error) {
	resp, err := h.n.next(ctx, &api.NextRequest{Count: count})
	return resp, h.status(ctx, err)
}

func (h httpNode) Status(ctx context.Context) (*api.StatusResponse, error) {
	return h.admin.Status(ctx, &api.StatusRequest{})
}

func (h httpNode) Ready() error { return h.status(context.Background(), h.n.ready()) }

func (h httpNode) Leader() (id, addr string) { return h.n.leader() }

// Layout is the replicated layout and group, as the Layout RPC answers:
// the cluster's durable word, not this node's flags.
func (h httpNode) Layout() (layout.Layout, uint64, error) {
	st := h.n.fsm.State()
	if st.Layout == nil {
		return layout.Layout{}, 0, h.status(context.Background(), fmt.Errorf("%w: the cluster's layout is not known here yet", grpcapi.ErrNotReady))
	}
	return *st.Layout, st.Group, nil
}

// status is toStatus for a caller outside gRPC: the leader hint goes in
// the message (httpapi adds its own header), as there is no trailer.
func (h httpNode) status(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	_, leaderAddr := h.n.leader()
	return toStatus(ctx, err, leaderAddr)
}
