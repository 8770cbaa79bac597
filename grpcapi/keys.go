package grpcapi

// Idempotency keys: a keyed call for IDs is decided in the log with its
// key (package fsm, keys.go), scoped to its caller: the certificate's
// subject with TLS, else the api.CallerKey metadata (one namespace when
// absent). A follower that forwards a keyed call names the caller it
// saw; the leader takes that name only from a forwarded call, and with
// TLS only from a node's certificate.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"google.golang.org/grpc/metadata"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/settle"
)

// checkKey refuses a key no caller may send.
func checkKey(key string) error {
	if len(key) > fsm.MaxKeyLen {
		return fmt.Errorf("%w: idempotency key of %d bytes, the most is %d", ErrBadRequest, len(key), fsm.MaxKeyLen)
	}
	return nil
}

// keyOf is the call's key with its caller; empty when unkeyed.
func keyOf(ctx context.Context, req *api.NextRequest) fsm.Keyed {
	return keyed(ctx, req.IdempotencyKey)
}

// keyed is key with the caller of the call ctx carries; empty when key
// is.
func keyed(ctx context.Context, key string) fsm.Keyed {
	if key == "" {
		return fsm.Keyed{}
	}
	return fsm.Keyed{Caller: idempotencyCaller(ctx), Key: key}
}

// idempotencyCaller is whom a keyed call's key belongs to: the
// certificate's subject (or, when it has none, its first URI name, as
// SPIFFE identities are), else the name the call or its forwarder gave.
func idempotencyCaller(ctx context.Context) string {
	named := ""
	if v := metadata.ValueFromIncomingContext(ctx, api.CallerKey); len(v) > 0 {
		named = v[0]
	}
	c := callerOf(ctx)
	if c.cert == nil || Forwarded(ctx) && secure.IsNode(c.cert) {
		return bounded(named)
	}
	name := c.cert.Subject.String()
	if name == "" && len(c.cert.URIs) > 0 {
		name = c.cert.URIs[0].String()
	}
	return bounded(name)
}

// bounded is name, or a digest of it when it is longer than a caller may
// be: two long names never share a namespace, as a cut would make them.
func bounded(name string) string {
	if len(name) <= fsm.MaxKeyLen {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// keysRead refuses to forward a keyed call before the cluster version
// that reads keys: until then the leader may run an Ordo that ignores the
// key (a field it does not know) and answers the call as unkeyed, so its
// retry would take new IDs. From that version on every voter reads them;
// a follower whose state lags refuses, and the caller retries.
func (s *Server) keysRead() error {
	if v := s.State.ClusterVersion(); v < fsm.SequencesVersion {
		return fmt.Errorf("%w: this node's state says %d, named sequences and idempotency keys need %d (a leader of an older Ordo would ignore them): upgrade every node",
			settle.ErrClusterVersion, v, fsm.SequencesVersion)
	}
	return nil
}

// keyedForwardContext is forwardContext, naming the caller of a keyed
// call (key set), which the leader cannot see.
func (s *Server) keyedForwardContext(ctx context.Context, key string) context.Context {
	fctx := s.forwardContext(ctx)
	if key == "" {
		return fctx
	}
	return metadata.AppendToOutgoingContext(fctx, api.CallerKey, idempotencyCaller(ctx))
}

// keyedNext is the path of a keyed call of the default sequence: its
// ticks are recorded under its key in the log before it is answered.
func (s *Server) keyedNext(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
	if err := checkKey(req.IdempotencyKey); err != nil {
		return nil, err
	}
	conn, fwd, err := s.forward(ctx)
	if err != nil {
		return nil, err
	}
	if fwd {
		if err := s.keysRead(); err != nil {
			return nil, err
		}
		return api.NewSequencerClient(conn).Next(s.keyedForwardContext(ctx, req.IdempotencyKey), req)
	}
	first, err := s.Settle.Claim(ctx, keyOf(ctx, req), uint64(req.Count))
	if err != nil {
		return nil, err
	}
	s.Meter.Issued(uint64(req.Count))
	return &api.NextResponse{Runs: api.Runs(s.cfg.Layout, s.cfg.Group, first, uint64(req.Count)), LeaderId: s.cfg.ID, LeaderAddr: s.cfg.GRPCAddr, Keyed: true}, nil
}
