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
	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
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

// fakePeer is a member of a serving cluster, as firstStart asks it: its
// NodeStatus shows a high-water mark, its Status lists members.
type fakePeer struct {
	api.UnimplementedAdminServer
	members []string
	leader  string
}

func (p *fakePeer) NodeStatus(context.Context, *api.NodeStatusRequest) (*api.NodeInfo, error) {
	return &api.NodeInfo{Id: "b", HighWater: 12345}, nil
}

func (p *fakePeer) Status(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
	r := &api.StatusResponse{LeaderId: p.leader}
	for _, m := range p.members {
		r.Nodes = append(r.Nodes, &api.NodeInfo{Id: m})
	}
	return r, nil
}

// mustServePeer serves p on a free port and returns its address.
func mustServePeer(t *testing.T, p *fakePeer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterAdminServer(s, p)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestFirstStart: a node with an empty data dir bootstraps only when no
// listed peer serves yet, and joins only when the cluster says it is not
// a member; when no one can tell, it refuses (a member that lost its data
// must never start Raft). Real processes: TestLostDataDir.
func TestFirstStart(t *testing.T) {
	dead := []server.Peer{
		{ID: "a", RaftAddr: deadAddr(t), GRPCAddr: deadAddr(t)},
		{ID: "b", RaftAddr: deadAddr(t), GRPCAddr: deadAddr(t)},
	}
	withPeer := func(p *fakePeer) []server.Peer {
		return []server.Peer{dead[0], {ID: "b", RaftAddr: deadAddr(t), GRPCAddr: mustServePeer(t, p)}}
	}
	noJoin := []string(nil)
	deadJoin := []string{deadAddr(t)}
	stranger := &fakePeer{members: []string{"b", "x"}, leader: "b"}
	cases := []struct {
		name          string
		id            string
		peers         []server.Peer
		join          []string
		wantBootstrap bool
		wantErr       error // nil for none
		wantText      string
	}{
		{"named, nobody serves yet", "a", dead, noJoin, true, nil, ""},
		{"named, nobody serves yet, with --join", "a", dead, deadJoin, true, nil, ""},
		{"named, the cluster serves, no --join", "a", withPeer(stranger), noJoin, false, server.ErrClusterExists, "already serves"},
		{"named, the cluster serves and says it is not a member", "a", withPeer(stranger), deadJoin, false, nil, ""},
		{"named, the cluster serves and says it is a member", "a", withPeer(&fakePeer{members: []string{"a", "b"}, leader: "b"}), deadJoin, false, server.ErrNodeExists, "remove it first"},
		{"named, the cluster serves but knows no leader", "a", withPeer(&fakePeer{members: []string{"b"}}), deadJoin, false, server.ErrClusterUnknown, "cannot ask"},
		{"not named, no --join", "c", dead, noJoin, false, errUsage, "--bootstrap does not name"},
		{"not named, --join nobody answers", "c", dead, deadJoin, false, server.ErrClusterUnknown, "cannot ask"},
		{"only --join, the cluster answers", "c", nil, []string{mustServePeer(t, stranger)}, false, nil, ""},
		{"only --join, nobody answers", "c", nil, deadJoin, false, server.ErrClusterUnknown, "cannot ask"},
		{"neither", "c", nil, noJoin, false, errUsage, "give --bootstrap to create a cluster or --join"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Short: a check that cannot ask anyone gives up when it ends.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			boot, err := firstStart(ctx, tc.id, tc.peers, tc.join, nil, hclog.NewNullLogger())
			if boot != tc.wantBootstrap {
				t.Errorf("bootstrap = %v, want %v", boot, tc.wantBootstrap)
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != nil && (!errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantText)):
				t.Errorf("error %v, want %v containing %q", err, tc.wantErr, tc.wantText)
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
