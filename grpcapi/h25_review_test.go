package grpcapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

func tlsCtx(subject pkix.Name) context.Context {
	cert := &x509.Certificate{Subject: subject}
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}}})
}

// Keys are scoped to the caller's certificate subject, cut to 128 bytes:
// two clients whose subjects share their first 128 bytes share one key
// namespace, so the second one's "order-7" replays the first one's IDs
// (two callers answered the same IDs) or is refused as a reused key.
func TestH25ReviewDistinctSubjectsAreDistinctCallers(t *testing.T) {
	base := pkix.Name{Organization: []string{"Example Corp"}, OrganizationalUnit: []string{"payments-" + strings.Repeat("x", 100)}}
	a, b := base, base
	a.CommonName, b.CommonName = "writer-1", "writer-2"
	// Subject.String() lists CN first; make the distinguishing part late.
	a.CommonName = strings.Repeat("svc.", 40) + "writer-1"
	b.CommonName = strings.Repeat("svc.", 40) + "writer-2"
	ca, cb := idempotencyCaller(tlsCtx(a)), idempotencyCaller(tlsCtx(b))
	if ca == cb {
		t.Errorf("subjects %q and %q are one caller %q: their keys collide", a.String(), b.String(), ca)
	}
}

// SPIFFE/Istio-style workload certificates carry the identity in a URI
// SAN and an empty subject: every such client is caller "", the same
// namespace as every plaintext client that names none.
func TestH25ReviewEmptySubjectsAreOneCaller(t *testing.T) {
	c1 := &x509.Certificate{}
	c2 := &x509.Certificate{}
	c1.URIs = mustURIs(t, "spiffe://example.org/ns/pay/sa/writer-1")
	c2.URIs = mustURIs(t, "spiffe://example.org/ns/ledger/sa/writer-2")
	ctx := func(c *x509.Certificate) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}}})
	}
	if a, b := idempotencyCaller(ctx(c1)), idempotencyCaller(ctx(c2)); a == b {
		t.Fatalf("two workloads with different SPIFFE IDs are one caller %q: their keys collide", a)
	}
}

func mustURIs(t *testing.T, s string) []*url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return []*url.URL{u}
}
