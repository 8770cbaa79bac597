package verify

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/secure/securetest"
)

func TestTLSDirNamesGenCertsFiles(t *testing.T) {
	dir := t.TempDir()
	set := securetest.WriteSet(t, dir)
	got := TLSDir(dir)
	if got.Node != set.Node || got.Client != set.Client || got.Admin != set.Admin {
		t.Fatalf("TLSDir(%s) = %+v, want the files of WriteSet %+v", dir, got, set)
	}
	ct, err := loadClusterTLS(got, []string{nodeIP(0), nodeIP(1), nodeIP(4)})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--tls-cert", set.Node.Cert, "--tls-key", set.Node.Key, "--tls-ca", set.CAFile, "--admin-subject", "CN=ordo-admin"}
	if !slices.Equal(ct.serveArgs, want) || ct.admin == nil || len(ct.admin.Certificates) != 1 {
		t.Fatalf("serve args %q, admin config %v; want %q and the admin certificate", ct.serveArgs, ct.admin, want)
	}
}

func TestTLSRefusesWhatCannotWork(t *testing.T) {
	dir := t.TempDir()
	set := securetest.WriteSet(t, dir)
	pki := securetest.New(t, "other")
	narrow := pki.Node("narrow", "127.0.0.1") // names no verify node IP
	for name, tc := range map[string]struct {
		tls  TLS
		want string
	}{
		"client as node":   {TLS{Node: set.Client, Admin: set.Admin}, "not a node certificate"},
		"node misses IP":   {TLS{Node: narrow, Admin: set.Admin}, "does not name 127.0.0.11"},
		"sixth node":       {TLS{Node: set.Node, Admin: set.Admin}, "does not name 127.0.0.16"},
		"no admin":         {TLS{Node: set.Node}, "admin"},
		"admin without CA": {TLS{Node: set.Node, Admin: secure.Files{Cert: set.Admin.Cert, Key: set.Admin.Key}}, "admin"},
		"missing node":     {TLS{Node: secure.Files{Cert: filepath.Join(dir, "nope.pem"), Key: set.Node.Key, CA: set.CAFile}, Admin: set.Admin}, "node"},
	} {
		ips := []string{nodeIP(0), nodeIP(1), nodeIP(2)}
		if name == "sixth node" {
			ips = append(ips, nodeIP(3), nodeIP(4), nodeIP(5))
		}
		_, err := loadClusterTLS(&tc.tls, ips)
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrBadConfig naming %q", name, err, tc.want)
		}
	}
	// A run checks the client side before it starts anything.
	cfg := Config{Addrs: []string{"127.0.0.1:1"}, Duration: time.Second, Clients: 1, MaxCount: 1,
		TLS: &TLS{Client: secure.Files{CA: set.CAFile}}}
	if _, err := Run(t.Context(), cfg); !errors.Is(err, ErrBadConfig) {
		t.Errorf("Run with a client that has no certificate: %v, want ErrBadConfig", err)
	}
}
