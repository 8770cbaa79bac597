// Package securetest makes throwaway certificate authorities and
// certificates for tests of mutual TLS, in Go, so tests need no openssl.
package securetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/secure"
)

// PKI is a cluster CA whose files live in a test's temp dir.
type PKI struct {
	t      testing.TB
	dir    string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	caFile string
	serial int64
}

// New makes a CA named name.
func New(t testing.TB, name string) *PKI {
	t.Helper()
	p := &PKI{t: t, dir: t.TempDir(), key: mustKey(t)}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	if p.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.caFile = p.write(name+"-ca.pem", "CERTIFICATE", der)
	p.serial = 1
	return p
}

// CAFile is the CA certificate's PEM file.
func (p *PKI) CAFile() string { return p.caFile }

// Node is a node certificate (serverAuth and clientAuth) for the hosts
// given (IPs or DNS names; 127.0.0.1 and localhost when none).
func (p *PKI) Node(cn string, hosts ...string) secure.Files {
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	return p.issue(cn, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, hosts, time.Now().Add(24*time.Hour))
}

// Client is a client certificate (clientAuth only).
func (p *PKI) Client(cn string) secure.Files {
	return p.issue(cn, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, time.Now().Add(24*time.Hour))
}

// Expired is a client certificate that expired an hour ago.
func (p *PKI) Expired(cn string) secure.Files {
	return p.issue(cn, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, time.Now().Add(-time.Hour))
}

// MustLoad loads files.
func MustLoad(t testing.TB, files secure.Files) *secure.TLS {
	t.Helper()
	tl, err := secure.Load(files)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func (p *PKI) issue(cn string, usage []x509.ExtKeyUsage, hosts []string, notAfter time.Time) secure.Files {
	p.t.Helper()
	p.serial++
	key := mustKey(p.t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		p.t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		p.t.Fatal(err)
	}
	name := cn + "-" + big.NewInt(p.serial).String()
	return secure.Files{
		Cert: p.write(name+".pem", "CERTIFICATE", der),
		Key:  p.write(name+"-key.pem", "EC PRIVATE KEY", keyDER),
		CA:   p.caFile,
	}
}

func (p *PKI) write(name, kind string, der []byte) string {
	p.t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

func mustKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
