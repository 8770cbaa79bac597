// Package secure holds Ordo's mutual TLS: it loads a node's or a client's
// certificate and the cluster CA, builds the tls.Config of each side, and
// tells what a verified peer is.
//
// There are three kinds of certificate, all signed by the cluster CA:
//
//   - a node certificate carries the serverAuth extended key usage (nodes
//     serve gRPC and Raft) and is trusted as a member of the cluster: it may
//     replicate, vote, answer term rounds and forward admin calls;
//   - a client certificate (clientAuth only) may ask for IDs and read
//     status;
//   - an admin is a client whose subject the node's configuration names,
//     or any caller that presents the admin token.
//
// So the CA must give serverAuth only to nodes. A node verifies every
// certificate itself, in VerifyConnection, so that a refusal is logged with
// the subject the peer claimed, which the standard handshake error lacks.
package secure

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// Errors of this package.
var (
	// ErrBadFiles means the certificate files are incomplete or unreadable.
	ErrBadFiles = errors.New("bad TLS files")
	// ErrNotVerified means a peer's certificate does not chain to the
	// cluster CA, has expired, or is not allowed for the connection.
	ErrNotVerified = errors.New("certificate not verified")
)

// Files names the PEM files of one side of a connection.
type Files struct {
	// Cert and Key are this side's certificate and private key.
	Cert, Key string
	// CA is the cluster CA's certificate, which peers' certificates must
	// chain to.
	CA string
}

// Empty reports whether no file is named: TLS is off.
func (f Files) Empty() bool { return f == Files{} }

// TLS is loaded key material: this side's certificate (if any) and the
// cluster CA.
type TLS struct {
	cert *tls.Certificate
	pool *x509.CertPool
}

// Load reads f. The CA is required; Cert and Key come together or not at
// all (a client without a certificate is refused by every node, which is
// what the tests of that refusal need).
func Load(f Files) (*TLS, error) {
	if f.CA == "" {
		return nil, fmt.Errorf("%w: a CA file is required with a certificate or key", ErrBadFiles)
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, fmt.Errorf("%w: give both a certificate and its key, or neither", ErrBadFiles)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("%w: read CA: %w", ErrBadFiles, err)
	}
	t := &TLS{pool: x509.NewCertPool()}
	if !t.pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrBadFiles, f.CA)
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: load %s and %s: %w", ErrBadFiles, f.Cert, f.Key, err)
		}
		t.cert = &cert
	}
	return t, nil
}

// Leaf is this side's certificate, or nil.
func (t *TLS) Leaf() *x509.Certificate {
	if t.cert == nil {
		return nil
	}
	return t.cert.Leaf
}

// ServerConfig is the tls.Config of a node's listeners: a client
// certificate is required and must chain to the CA; with nodesOnly it must
// also be a node certificate (the Raft port). Refusals are logged with the
// subject the peer presented and its address.
func (t *TLS) ServerConfig(logger hclog.Logger, nodesOnly bool) *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verified below, by hand, so that a refusal can be logged
		// with who was refused.
		ClientAuth: tls.RequireAnyClientCert,
	}
	if t.cert != nil {
		cfg.Certificates = []tls.Certificate{*t.cert}
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		err := t.verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
		if err == nil && nodesOnly && !IsNode(cs.PeerCertificates[0]) {
			err = fmt.Errorf("%w: %s is not a node certificate (no serverAuth usage)", ErrNotVerified, subjectOf(cs.PeerCertificates))
		}
		if err != nil && logger != nil {
			logger.Warn("refused a TLS peer", "subject", subjectOf(cs.PeerCertificates), "error", err)
		}
		return err
	}
	return cfg
}

// ClientConfig is the tls.Config for dialing a node: the node must present
// a node certificate that chains to the CA and names the host dialed.
func (t *TLS) ClientConfig() *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: t.pool}
	if t.cert != nil {
		cfg.Certificates = []tls.Certificate{*t.cert}
	}
	return cfg
}

func (t *TLS) verify(chain []*x509.Certificate, usage x509.ExtKeyUsage) error {
	if len(chain) == 0 {
		return fmt.Errorf("%w: no certificate presented", ErrNotVerified)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: t.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotVerified, subjectOf(chain), err)
	}
	return nil
}

func subjectOf(chain []*x509.Certificate) string {
	if len(chain) == 0 {
		return "(none)"
	}
	return chain[0].Subject.String()
}

// IsNode reports whether cert is a node certificate: one that may serve,
// which the cluster CA grants to nodes only.
func IsNode(cert *x509.Certificate) bool {
	return slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) ||
		slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageAny)
}

// Covers reports whether cert names host (an IP or a DNS name) among its
// subject alternative names: a node may join the cluster only at
// addresses its own certificate names.
func Covers(cert *x509.Certificate, host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return slices.ContainsFunc(cert.IPAddresses, ip.Equal)
	}
	return slices.ContainsFunc(cert.DNSNames, func(n string) bool { return strings.EqualFold(n, host) })
}

// Token is a shared secret that grants admin rights.
type Token struct{ sum [sha256.Size]byte }

// ReadToken reads a token from file; surrounding whitespace is not part
// of it.
func ReadToken(file string) (*Token, string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, "", fmt.Errorf("%w: read admin token: %w", ErrBadFiles, err)
	}
	s := strings.TrimSpace(string(b))
	if len(s) < 16 {
		return nil, "", fmt.Errorf("%w: admin token in %s is shorter than 16 characters", ErrBadFiles, file)
	}
	return NewToken(s), s, nil
}

// NewToken returns the token s.
func NewToken(s string) *Token { return &Token{sum: sha256.Sum256([]byte(s))} }

// Matches compares s with the token in constant time (hashing first, so
// the time does not depend on the lengths either).
func (t *Token) Matches(s string) bool {
	got := sha256.Sum256([]byte(s))
	return subtle.ConstantTimeCompare(got[:], t.sum[:]) == 1
}
