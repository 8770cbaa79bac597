package secure_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/secure/securetest"
)

func TestLoadRefusesIncompleteFiles(t *testing.T) {
	pki := securetest.New(t, "ca")
	node := pki.Node("n")
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []secure.Files{
		{Cert: node.Cert, Key: node.Key},                    // no CA
		{Cert: node.Cert, CA: node.CA},                      // no key
		{Key: node.Key, CA: node.CA},                        // no certificate
		{Cert: node.Cert, Key: node.Key, CA: garbage},       // CA not PEM
		{Cert: garbage, Key: node.Key, CA: node.CA},         // certificate not PEM
		{Cert: node.Cert, Key: node.Key, CA: "/no/such/ca"}, // missing file
	} {
		if _, err := secure.Load(f); !errors.Is(err, secure.ErrBadFiles) {
			t.Errorf("Load(%+v) = %v, want ErrBadFiles", f, err)
		}
	}
	if _, err := secure.Load(node); err != nil {
		t.Fatalf("Load(good files): %v", err)
	}
	if _, err := secure.Load(secure.Files{CA: node.CA}); err != nil {
		t.Fatalf("Load(CA only): %v", err)
	}
}

func TestNodesAndNames(t *testing.T) {
	pki := securetest.New(t, "ca")
	node := securetest.MustLoad(t, pki.Node("n", "127.0.0.1", "node1.example"))
	client := securetest.MustLoad(t, pki.Client("c"))
	if !secure.IsNode(node.Leaf()) || secure.IsNode(client.Leaf()) {
		t.Fatalf("IsNode: node %v, client %v; want true, false", secure.IsNode(node.Leaf()), secure.IsNode(client.Leaf()))
	}
	for host, want := range map[string]bool{"127.0.0.1": true, "NODE1.example": true, "127.0.0.2": false, "node2.example": false, "": false} {
		if got := secure.Covers(node.Leaf(), host); got != want {
			t.Errorf("Covers(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestToken(t *testing.T) {
	tok := secure.NewToken("correct horse battery staple")
	for s, want := range map[string]bool{"correct horse battery staple": true, "correct horse battery stapl": false, "": false, "x": false} {
		if got := tok.Matches(s); got != want {
			t.Errorf("Matches(%q) = %v, want %v", s, got, want)
		}
	}
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	good := filepath.Join(dir, "good")
	os.WriteFile(short, []byte("tooshort\n"), 0o600)
	os.WriteFile(good, []byte("  0123456789abcdef0123\n"), 0o600)
	if _, _, err := secure.ReadToken(short); !errors.Is(err, secure.ErrBadFiles) {
		t.Errorf("ReadToken(short) = %v, want ErrBadFiles", err)
	}
	tk, s, err := secure.ReadToken(good)
	if err != nil || s != "0123456789abcdef0123" || !tk.Matches(s) {
		t.Errorf("ReadToken(good) = %q, %v", s, err)
	}
}
