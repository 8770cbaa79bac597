package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed-e8569b35/ordo/server"
)

// deadAddr returns an address nothing listens on: a port that was free a
// moment ago. A peer there counts as one that is starting too.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestFirstStart covers the choices that need no serving cluster; the
// cluster_test package covers a node that finds its cluster serving
// (TestLostDataDir).
func TestFirstStart(t *testing.T) {
	peers := []server.Peer{
		{ID: "a", RaftAddr: deadAddr(t), GRPCAddr: deadAddr(t)},
		{ID: "b", RaftAddr: deadAddr(t), GRPCAddr: deadAddr(t)},
	}
	join := []string{deadAddr(t)}
	cases := []struct {
		name          string
		id            string
		peers         []server.Peer
		join          []string
		wantBootstrap bool
		wantErr       string // "" for none
	}{
		{"named, nobody serves yet", "a", peers, nil, true, ""},
		{"named, with --join too", "a", peers, join, true, ""},
		{"not named, no --join", "c", peers, nil, false, "--bootstrap does not name"},
		{"not named, --join", "c", peers, join, false, ""},
		{"only --join", "c", nil, join, false, ""},
		{"neither", "c", nil, nil, false, "give --bootstrap to create a cluster or --join"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			boot, err := firstStart(ctx, tc.id, tc.peers, tc.join, nil, hclog.NewNullLogger())
			if boot != tc.wantBootstrap {
				t.Errorf("bootstrap = %v, want %v", boot, tc.wantBootstrap)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, errUsage)):
				t.Errorf("error %v, want a usage error containing %q", err, tc.wantErr)
			}
		})
	}
}

// serveEnvNames returns the ORDO_ variables ordo serve reads, from its
// usage text.
func serveEnvNames(t *testing.T) map[string]bool {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	err = runServe([]string{"-h"})
	os.Stderr = stderr
	w.Close()
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("serve -h: %v, want flag.ErrHelp", err)
	}
	usage, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range envVar.FindAllString(string(usage), -1) {
		names[m] = true
	}
	if !names["ORDO_ID"] || !names["ORDO_JOIN"] {
		t.Fatalf("serve -h names no ORDO_ID or ORDO_JOIN:\n%s", usage)
	}
	return names
}

var (
	envVar  = regexp.MustCompile(`ORDO_[A-Z_]+[A-Z]`)
	fileVar = regexp.MustCompile(`\$\{ORDO_[A-Z_]+`)
)

// The deployment examples set ordo serve's settings through ORDO_
// variables; a misspelt one would be ignored in silence.
func TestDeployFilesNameRealSettings(t *testing.T) {
	known := serveEnvNames(t)
	for _, file := range []string{
		"../../deploy/kubernetes/ordo.yaml",
		"../../deploy/docker-compose.yml",
		"../../deploy/systemd/ordo.env.example",
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// ${ORDO_IMAGE} and the like are the file's own variables.
		text := fileVar.ReplaceAllString(string(b), "")
		seen := 0
		for _, name := range envVar.FindAllString(text, -1) {
			seen++
			if !known[name] {
				t.Errorf("%s sets %s, which ordo serve does not read", file, name)
			}
		}
		if seen == 0 {
			t.Errorf("%s names no ORDO_ variable", file)
		}
	}
}
