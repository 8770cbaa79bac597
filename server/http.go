package server

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/seed-e8569b35/ordo/httpapi"
	"github.com/seed-e8569b35/ordo/internal/hostlimit"
)

// openHTTP serves package httpapi on Config.HTTPAddr, when set, with this
// node's metrics at /metrics and HTTP calls counted in them. IDs and
// status are grpcapi.Server's, so HTTP has the same path to IDs
// (sequencer, confirmation, one forward to the leader), the same error
// codes, and the same timeout (RPCTimeout).
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
	n.httpServer = httpapi.NewServer(n.api, cfg)
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
