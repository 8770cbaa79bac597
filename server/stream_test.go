package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/layout"
)

// mustSingleNode is a one-node cluster that serves, and a connection to it.
func mustSingleNode(t *testing.T, configure func(*Config)) (*Node, *grpc.ClientConn) {
	t.Helper()
	cfg := testConfig(t, "n1", t.TempDir())
	if configure != nil {
		configure(&cfg)
	}
	n := mustBootstrap(t, cfg)
	conn := grpctest.Dial(t, n.GRPCAddr())
	mustNextVia(t, conn, 1)
	return n, conn
}

// TestNextStreamServesWhatFitsNearTheLeadBound: calls a message carries
// together are refused together only as far as they do not fit: near the
// lead bound, a call that fits alone is served, and the stream ends at
// the first that does not.
func TestNextStreamServesWhatFitsNearTheLeadBound(t *testing.T) {
	n, conn := mustSingleNode(t, func(cfg *Config) { cfg.Layout = layout.MustPreset("sonyflake") })
	c := api.NewSequencerClient(conn)
	mustNextVia(t, conn, 100000)
	mustNextVia(t, conn, 100000)
	state := n.seq.State()
	room := state.ClockHigh + state.MaxLead - (state.Next - 1)
	first, second := uint32(room/2), uint32(room)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.NextStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&api.NextStreamRequest{Joint: true, Calls: []*api.StreamCall{{Id: 1, Count: first}, {Id: 2, Count: second}}}); err != nil {
		t.Fatal(err)
	}
	// Call 2 may fit too by the time it is assigned (the clock adds
	// room); call 1 must be served either way.
	for answered := false; !answered; {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("with room for %d IDs, call 1 (%d IDs) was not served beside call 2 (%d): %v", room, first, second, err)
		}
		for _, a := range resp.Answers {
			answered = answered || a.Id == 1
		}
	}
}

// TestNextStreamJointAnswersFitAMessage: however many calls a client
// sends, and however slowly it reads, every message the leader sends fits
// the message bound: a joint answer covers at most as many calls as a
// message may answer.
func TestNextStreamJointAnswersFitAMessage(t *testing.T) {
	_, conn := mustSingleNode(t, nil)
	c := api.NewSequencerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.NextStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const perMsg, msgs = 70000, 4
	id := uint64(1) << 60 // long ids make long answers
	for range msgs {
		req := &api.NextStreamRequest{Joint: true}
		for range perMsg {
			req.Calls = append(req.Calls, &api.StreamCall{Id: id, Count: 1})
			id++
		}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	// A client slow to read: the leader's sends wait on flow control
	// while more answers become ready.
	time.Sleep(time.Second)
	for answered := 0; answered < perMsg*msgs; {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d of %d calls answered: %v", answered, perMsg*msgs, err)
		}
		if size := proto.Size(resp); size > grpcapi.MaxMessageBytes {
			t.Fatalf("a message of %d bytes", size)
		}
		for _, a := range resp.Answers {
			answered += 1 + len(a.Also)
		}
	}
}
