package server

import (
	"context"

	"google.golang.org/grpc/credentials"

	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/startup"
)

// newAuth is the authorization of n's calls (package grpcapi's). The
// admin token is hashed once here, for comparing in constant time.
func newAuth(n *Node) *grpcapi.Auth {
	cfg := grpcapi.AuthConfig{
		TLS:           n.cfg.TLS != nil,
		AdminSubjects: n.cfg.AdminSubjects,
		Logger:        n.logger.Named("grpc"),
	}
	if n.cfg.AdminToken != "" {
		cfg.AdminToken = secure.NewToken(n.cfg.AdminToken)
	}
	return grpcapi.NewAuth(n, cfg)
}

// transportCredentials is how this node dials its peers: with its node
// certificate when TLS is on.
func transportCredentials(t *secure.TLS) credentials.TransportCredentials {
	return startup.DialCredentials(t)
}

// adminContext adds the admin token, if one is configured, to a call this
// node makes itself (joining): without TLS the token is its only proof.
func (n *Node) adminContext(ctx context.Context) context.Context {
	return grpcapi.WithAdminToken(ctx, n.cfg.AdminToken)
}
