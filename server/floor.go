package server

import (
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
)

// floorService implements api.FloorServer: the stream floor of `ordo
// bench --target stream-floor`, a NextStream with nothing behind it.
type floorService struct {
	api.UnimplementedFloorServer
	n *Node
}

// errClosing ends a floor stream when the node closes.
var errClosing = status.Error(codes.Unavailable, "the node is closing")

// Echo implements api.FloorServer: it answers every call of each message
// at once, by id, with no IDs. It holds one message at a time: the next is
// read once the answers to the last are sent, so a client that sends
// faster than it reads is held back by gRPC flow control. It returns when
// the node closes, so that a benchmark's stream never holds up a graceful
// stop.
func (f *floorService) Echo(stream grpc.BidiStreamingServer[api.NextStreamRequest, api.NextStreamResponse]) error {
	done := make(chan error, 1)
	go func() { done <- echo(stream) }()
	select {
	case err := <-done:
		return err
	case <-f.n.stop:
		// Returning ends the stream, and with it echo's Recv or Send.
		return errClosing
	}
}

// echo answers the calls of each message, at most maxAnswersPerMessage
// answers to a message, until the client is done sending (nil) or the
// stream fails.
func echo(stream grpc.BidiStreamingServer[api.NextStreamRequest, api.NextStreamResponse]) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if req.Joint && len(req.Calls) > 1 {
			// One joint answer, as the leader gives one to the calls it
			// assigns together.
			a := &api.StreamAnswer{Id: req.Calls[0].Id}
			a.Also, a.Counts = jointOf(req.Calls)
			if err := stream.Send(&api.NextStreamResponse{Answers: []*api.StreamAnswer{a}}); err != nil {
				return err
			}
			continue
		}
		for calls := req.Calls; len(calls) > 0; {
			part := calls[:min(len(calls), maxAnswersPerMessage)]
			calls = calls[len(part):]
			resp := &api.NextStreamResponse{Answers: make([]*api.StreamAnswer, len(part))}
			for i, c := range part {
				resp.Answers[i] = &api.StreamAnswer{Id: c.Id}
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}
