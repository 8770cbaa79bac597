package securetest

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/seed-e8569b35/ordo/secure"
)

// Set is a directory of certificates laid out as scripts/gen-certs.sh
// writes it, so tests can use what an operator would:
//
//	ca.pem      ca-key.pem      the CA
//	node.pem    node-key.pem    CN=ordo-node, serverAuth+clientAuth, the SANs of NodeHosts
//	client.pem  client-key.pem  CN=ordo-client, clientAuth
//	admin.pem   admin-key.pem   CN=ordo-admin, clientAuth
//	admin.token                 64 hex digits
type Set struct {
	Dir string
	// Node, Client and Admin name each certificate, its key and ca.pem.
	Node, Client, Admin secure.Files
	// CAFile is ca.pem; TokenFile is admin.token, which holds Token.
	CAFile, TokenFile, Token string
}

// Subjects of the certificates in a Set, as the node's --admin-subject
// takes them.
const (
	NodeCN       = "ordo-node"
	ClientCN     = "ordo-client"
	AdminCN      = "ordo-admin"
	AdminSubject = "CN=" + AdminCN
)

// dnsName is what gen-certs.sh accepts as this host's name.
var dnsName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)

// NodeHosts are the subject alternative names gen-certs.sh gives the node
// certificate: 127.0.0.1, ::1, 127.0.0.11 to 127.0.0.15 (the loopback IPs
// of the nodes `ordo verify` starts), localhost, and this host's name when
// it is a DNS name.
func NodeHosts() []string {
	hosts := []string{"127.0.0.1", "::1", "127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14", "127.0.0.15", "localhost"}
	if h, err := os.Hostname(); err == nil && dnsName.MatchString(h) && h != "localhost" {
		hosts = append(hosts, h)
	}
	return hosts
}

// WriteSet makes a new CA (CN=ordo-ca) and writes a Set signed by it into
// dir, which is created if missing.
func WriteSet(t testing.TB, dir string) Set {
	t.Helper()
	return New(t, "ordo-ca").WriteSet(dir)
}

// WriteSet writes a Set signed by p into dir: new node, client and admin
// certificates and a new admin token, with p's CA as ca.pem. Files
// already there are replaced (each by a rename, so a reader sees the old
// file or the new one, never half of one).
func (p *PKI) WriteSet(dir string) Set {
	p.t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		p.t.Fatal(err)
	}
	s := Set{Dir: dir, CAFile: filepath.Join(dir, "ca.pem"), TokenFile: filepath.Join(dir, "admin.token")}
	p.place(p.caFile, s.CAFile, 0o644)
	p.placeKey(filepath.Join(dir, "ca-key.pem"))
	install := func(name string, f secure.Files) secure.Files {
		out := secure.Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: s.CAFile}
		p.place(f.Cert, out.Cert, 0o644)
		p.place(f.Key, out.Key, 0o600)
		return out
	}
	s.Node = install("node", p.Node(NodeCN, NodeHosts()...))
	s.Client = install("client", p.Client(ClientCN))
	s.Admin = install("admin", p.Client(AdminCN))
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		p.t.Fatal(err)
	}
	s.Token = hex.EncodeToString(b)
	writeAtomic(p.t, s.TokenFile, []byte(s.Token), 0o600)
	return s
}

// Install copies files' certificate and key to cert and key (replacing
// them on disk, each by a rename) and returns files naming the new paths
// (the CA stays files.CA).
func Install(t testing.TB, files secure.Files, cert, key string) secure.Files {
	t.Helper()
	copyFile(t, files.Cert, cert, 0o644)
	copyFile(t, files.Key, key, 0o600)
	return secure.Files{Cert: cert, Key: key, CA: files.CA}
}

// Bundle writes the CA certificates of cas, concatenated, to path: a
// trust bundle for the time a cluster moves from one CA to another.
func Bundle(t testing.TB, path string, cas ...string) string {
	t.Helper()
	var b []byte
	for _, ca := range cas {
		pem, err := os.ReadFile(ca)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, pem...)
	}
	writeAtomic(t, path, b, 0o644)
	return path
}

func (p *PKI) place(from, to string, mode os.FileMode) { p.t.Helper(); copyFile(p.t, from, to, mode) }

func (p *PKI) placeKey(to string) {
	p.t.Helper()
	der, err := x509.MarshalECPrivateKey(p.key)
	if err != nil {
		p.t.Fatal(err)
	}
	writeAtomic(p.t, to, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

func copyFile(t testing.TB, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, to, b, mode)
}

// writeAtomic writes b to a temporary file next to path and renames it
// over path.
func writeAtomic(t testing.TB, path string, b []byte, mode os.FileMode) {
	t.Helper()
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		t.Fatal(err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, mode)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		t.Fatal(err)
	}
}
