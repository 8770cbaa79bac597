package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/seed-e8569b35/ordo/api"
)

// adminNode is a leader n1 of n1..n3 that records each TransferLeader and
// Remove it is asked for, by the id asked.
type adminNode struct {
	api.UnimplementedAdminServer

	mu          sync.Mutex
	transferred []string
	removed     []string
}

func (f *adminNode) Status(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
	resp := &api.StatusResponse{LeaderId: "n1", LeaderAddr: "127.0.0.1:7001", Layout: "default"}
	for _, id := range []string{"n1", "n2", "n3"} {
		role := "follower"
		if id == "n1" {
			role = "leader"
		}
		resp.Nodes = append(resp.Nodes, &api.NodeInfo{Id: id, Role: role, Voter: true})
	}
	return resp, nil
}

func (f *adminNode) TransferLeader(_ context.Context, req *api.TransferLeaderRequest) (*api.TransferLeaderResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.transferred = append(f.transferred, req.Id)
	return &api.TransferLeaderResponse{LeaderId: req.Id}, nil
}

func (f *adminNode) Remove(_ context.Context, req *api.RemoveRequest) (*api.RemoveResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, req.Id)
	return &api.RemoveResponse{}, nil
}

// asked returns the ids of every transfer and removal so far.
func (f *adminNode) asked() (transferred, removed []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.transferred...), append([]string(nil), f.removed...)
}

func (f *adminNode) serve(t *testing.T) string { return serveAdmin(t, f) }

// TestAdminCommandsIgnoreNodeID: on a host whose environment holds a
// node's settings (ordo.env sets ORDO_ID to the node's own id), ordo
// transfer-leader without --id hands leadership to any voter, not to
// $ORDO_ID, and ordo remove without --id removes nothing and names the
// fix; the client variables (ORDO_ADDRS) still count.
func TestAdminCommandsIgnoreNodeID(t *testing.T) {
	f := &adminNode{}
	t.Setenv("ORDO_ADDRS", f.serve(t))
	t.Setenv("ORDO_TIMEOUT", "5s")
	t.Setenv("ORDO_ID", "n3")

	out, err := output(t, runTransferLeader)
	if err != nil || out != "leadership transferred\n" {
		t.Fatalf("ordo transfer-leader: %v, printed %q", err, out)
	}
	if transferred, _ := f.asked(); len(transferred) != 1 || transferred[0] != "" {
		t.Fatalf("ordo transfer-leader with ORDO_ID=n3 asked to transfer to %q, want one transfer to any voter (\"\")", transferred)
	}

	_, err = output(t, runRemove)
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--id is required") || !strings.Contains(err.Error(), "$ORDO_ID=\"n3\"") {
		t.Errorf("ordo remove with ORDO_ID=n3: %v, want a usage error asking for --id and naming $ORDO_ID", err)
	}
	if _, removed := f.asked(); len(removed) != 0 {
		t.Fatalf("ordo remove without --id removed %q", removed)
	}
	out, err = output(t, runRemove, "--id", "n2")
	if _, removed := f.asked(); err != nil || out != "removed n2\n" || len(removed) != 1 || removed[0] != "n2" {
		t.Fatalf("ordo remove --id n2: %v, printed %q, removed %q", err, out, removed)
	}
}

// TestTransferLeaderToTheLeader: naming the node that leads transfers
// nothing and says it already leads (exit 0); naming another transfers.
func TestTransferLeaderToTheLeader(t *testing.T) {
	f := &adminNode{}
	addr := f.serve(t)
	out, err := output(t, runTransferLeader, "--addrs", addr, "--id", "n1")
	if err != nil || out != "n1 already leads\n" {
		t.Errorf("ordo transfer-leader --id n1 (the leader): %v, printed %q; want \"n1 already leads\"", err, out)
	}
	if transferred, _ := f.asked(); len(transferred) != 0 {
		t.Errorf("a transfer to the leader was asked for: %q", transferred)
	}
	out, err = output(t, runTransferLeader, "--addrs", addr, "--id", "n1", "--json")
	if err != nil || compactJSON(out) != `{"result":"n1 already leads"}` {
		t.Errorf("--json: %v, printed %q", err, out)
	}
	out, err = output(t, runTransferLeader, "--addrs", addr, "--id", "n2")
	if transferred, _ := f.asked(); err != nil || out != "leadership transferred\n" || len(transferred) != 1 || transferred[0] != "n2" {
		t.Errorf("ordo transfer-leader --id n2: %v, printed %q, transfers asked %q", err, out, transferred)
	}
}

// TestStatusIgnoresOtherCommandsVariables: ORDO_SEQUENCES, set for ordo
// bench --sequences (a number), and a node's settings leave ordo status
// as it is.
func TestStatusIgnoresOtherCommandsVariables(t *testing.T) {
	f := &statusNode{}
	addr := f.serve(t)
	for k, v := range map[string]string{"ORDO_SEQUENCES": "5", "ORDO_LIMIT": "many", "ORDO_JSON": "yes", "ORDO_ID": "n3", "ORDO_LAYOUT": "ulid"} {
		t.Setenv(k, v)
	}
	out, err := output(t, runStatus, "--addrs", addr)
	if err != nil || !strings.HasPrefix(out, "leader n1 (127.0.0.1:7001)") || strings.Contains(out, "SEQUENCE") {
		t.Fatalf("ordo status with ORDO_SEQUENCES=5: %v, printed\n%s", err, out)
	}
	out, err = output(t, runDecode, "5")
	if err != nil || !strings.Contains(out, "2024-01-01T00:00:00Z") {
		t.Fatalf("ordo decode 5 with ORDO_LAYOUT=ulid: %v, printed\n%s", err, out)
	}
}
