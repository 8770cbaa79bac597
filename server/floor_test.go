package server

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
)

// TestFloorEchoAnswersEveryCall: Echo answers every call of a message by
// id, with no IDs, in messages of at most maxAnswersPerMessage answers;
// it ends cleanly when the client is done sending, and with errClosing
// when the node closes, instead of holding up the graceful stop until it
// is cut off.
func TestFloorEchoAnswersEveryCall(t *testing.T) {
	n := mustOpen(t, testConfig(t, "n1", t.TempDir()))
	if err := n.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	floor := api.NewFloorClient(mustConn(t, n.GRPCAddr()))

	st, err := floor.Echo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// echoes sends one message of calls with ids from first, and fails
	// unless each is answered once, with nothing else.
	echoes := func(first uint64, calls int) {
		t.Helper()
		req := &api.NextStreamRequest{}
		for i := range calls {
			// Counts do not matter: out of range, they are echoed too.
			req.Calls = append(req.Calls, &api.StreamCall{Id: first + uint64(i), Count: uint32(i % 3)})
		}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		got := map[uint64]bool{}
		for len(got) < calls {
			resp, err := st.Recv()
			if err != nil {
				t.Fatalf("after %d of %d answers: %v", len(got), calls, err)
			}
			if len(resp.Answers) > maxAnswersPerMessage {
				t.Fatalf("%d answers in one message, want at most %d", len(resp.Answers), maxAnswersPerMessage)
			}
			for _, a := range resp.Answers {
				if a.Id < first || a.Id >= first+uint64(calls) || got[a.Id] {
					t.Fatalf("answer for call %d: not asked, or answered twice", a.Id)
				}
				if len(a.Runs) != 0 || a.Invalid != "" {
					t.Fatalf("answer for call %d: %v, want the id alone", a.Id, a)
				}
				got[a.Id] = true
			}
		}
	}
	echoes(0, 1)
	echoes(1, 3)
	echoes(100, 3*maxAnswersPerMessage+5)
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the client closed its side: %v, want a clean end", err)
	}

	// A stream left open ends when the node closes, with the node's own
	// word: a graceful stop cut short would end it otherwise.
	st, err = floor.Echo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	echoes(0, 1)
	ended := make(chan error, 1)
	go func() {
		_, err := st.Recv()
		ended <- err
	}()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != status.Convert(errClosing).Message() {
			t.Fatalf("an open echo stream when the node closed: %v, want %v", err, errClosing)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an open echo stream still runs after the node closed")
	}
}
