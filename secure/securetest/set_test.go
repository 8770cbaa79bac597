package securetest_test

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/secure/securetest"
)

// setFiles are the files scripts/gen-certs.sh makes, and their modes.
var setFiles = map[string]os.FileMode{
	"ca.pem": 0o644, "ca-key.pem": 0o600,
	"node.pem": 0o644, "node-key.pem": 0o600,
	"client.pem": 0o644, "client-key.pem": 0o600,
	"admin.pem": 0o644, "admin-key.pem": 0o600,
	"admin.token": 0o600,
}

func TestWriteSet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	s := securetest.WriteSet(t, dir)
	checkSet(t, dir)
	if s.Node.Cert != filepath.Join(dir, "node.pem") || s.Admin.Key != filepath.Join(dir, "admin-key.pem") || s.Client.CA != filepath.Join(dir, "ca.pem") {
		t.Errorf("Set names %+v", s)
	}
	tok, text, err := secure.ReadToken(s.TokenFile)
	if err != nil || text != s.Token || len(text) != 64 || !tok.Matches(s.Token) {
		t.Errorf("admin token %q (%v), want the 64 hex digits of Set.Token %q", text, err, s.Token)
	}

	// A second set from a new CA is not trusted by the first, and a
	// bundle of both CAs trusts both.
	other := securetest.WriteSet(t, filepath.Join(t.TempDir(), "other"))
	if s.Token == other.Token {
		t.Error("two sets share an admin token")
	}
	first := securetest.MustLoad(t, s.Node)
	second := securetest.MustLoad(t, other.Node)
	if chains(first.Leaf(), other.CAFile) || !chains(first.Leaf(), s.CAFile) {
		t.Error("a set's node certificate chains to the wrong CA")
	}
	bundle := securetest.Bundle(t, filepath.Join(t.TempDir(), "bundle.pem"), s.CAFile, other.CAFile)
	if !chains(first.Leaf(), bundle) || !chains(second.Leaf(), bundle) {
		t.Error("a bundle of both CAs does not trust both sets")
	}

	// Install replaces files on disk.
	n := securetest.Install(t, other.Node, s.Node.Cert, s.Node.Key)
	if got := securetest.MustLoad(t, secure.Files{Cert: n.Cert, Key: n.Key, CA: other.CAFile}).Leaf(); !got.Equal(second.Leaf()) {
		t.Error("Install did not replace the certificate")
	}
}

// TestWriteSetMatchesGenCerts compares WriteSet with what
// scripts/gen-certs.sh makes: the same files, subjects, usages and
// node SANs.
func TestWriteSetMatchesGenCerts(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl to run scripts/gen-certs.sh")
	}
	script, err := filepath.Abs("../../scripts/gen-certs.sh")
	if err != nil {
		t.Fatal(err)
	}
	genDir := filepath.Join(t.TempDir(), "gen")
	cmd := exec.Command("bash", script, genDir)
	cmd.Env = append(os.Environ(), "ORDO_CERT_SANS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen-certs.sh: %v\n%s", err, out)
	}
	goDir := filepath.Join(t.TempDir(), "go")
	securetest.WriteSet(t, goDir)
	checkSet(t, genDir)
	checkSet(t, goDir)
	for _, name := range []string{"node.pem", "client.pem", "admin.pem"} {
		g, w := readCert(t, filepath.Join(genDir, name)), readCert(t, filepath.Join(goDir, name))
		if g.Subject.String() != w.Subject.String() || !slices.Equal(g.ExtKeyUsage, w.ExtKeyUsage) {
			t.Errorf("%s: gen-certs.sh makes %s %v, WriteSet %s %v", name, g.Subject, g.ExtKeyUsage, w.Subject, w.ExtKeyUsage)
		}
		if !slices.Equal(sans(g), sans(w)) {
			t.Errorf("%s: gen-certs.sh SANs %v, WriteSet %v", name, sans(g), sans(w))
		}
	}
}

// checkSet checks dir holds a complete set with gen-certs.sh's modes,
// subjects and usages.
func checkSet(t *testing.T, dir string) {
	t.Helper()
	for name, mode := range setFiles {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, st.Mode().Perm(), mode)
		}
	}
	ca := filepath.Join(dir, "ca.pem")
	for name, want := range map[string]struct {
		subject string
		node    bool
	}{"node": {"CN=ordo-node", true}, "client": {"CN=ordo-client", false}, "admin": {securetest.AdminSubject, false}} {
		tl, err := secure.Load(secure.Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: ca})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		leaf := tl.Leaf()
		if leaf.Subject.String() != want.subject || secure.IsNode(leaf) != want.node || !chains(leaf, ca) {
			t.Errorf("%s: subject %s, node %v, chains %v; want %s, %v, true", name, leaf.Subject, secure.IsNode(leaf), chains(leaf, ca), want.subject, want.node)
		}
		if want.node {
			for _, h := range securetest.NodeHosts() {
				if !secure.Covers(leaf, h) {
					t.Errorf("%s does not name %s", name, h)
				}
			}
		}
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sans(c *x509.Certificate) []string {
	var s []string
	for _, ip := range c.IPAddresses {
		s = append(s, ip.String())
	}
	for _, d := range c.DNSNames {
		s = append(s, strings.ToLower(d))
	}
	slices.Sort(s)
	return s
}

// chains reports whether cert verifies against the CA bundle in caFile
// for a client.
func chains(cert *x509.Certificate, caFile string) bool {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return false
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return false
	}
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}
