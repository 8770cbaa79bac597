package grpcapi

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/recv"
)

// Floor implements api.FloorServer: the stream floor of `ordo bench
// --target stream-floor`, a NextStream with nothing behind it. It needs of
// the node only a channel closed when the node closes, so it takes that
// and no node.
type Floor struct {
	api.UnimplementedFloorServer
	stop <-chan struct{}
}

// NewFloor returns the Floor service; its streams end when stop is closed.
func NewFloor(stop <-chan struct{}) *Floor { return &Floor{stop: stop} }

// ErrClosing ends a Floor stream when the node closes. It is a status, not
// a sentinel for ToStatus: Echo returns it to gRPC as it is.
var ErrClosing = status.Error(codes.Unavailable, "the node is closing")

// Echo implements api.FloorServer: it answers every call of each message
// at once, by id, with no IDs. It holds one message at a time: the next is
// read once the answers to the last are sent, so a client that sends
// faster than it reads is held back by gRPC flow control. It returns when
// the node closes, so that a benchmark's stream never holds up a graceful
// stop.
func (f *Floor) Echo(stream grpc.BidiStreamingServer[api.NextStreamRequest, api.NextStreamResponse]) error {
	done := make(chan error, 1)
	go func() { done <- echo(stream) }()
	select {
	case err := <-done:
		return err
	case <-f.stop:
		// Returning ends the stream, and with it echo's Recv or Send.
		return ErrClosing
	}
}

// echo answers the calls of each message, at most maxAnswersPerMessage
// answers to a message, until the client is done sending (nil) or the
// stream fails.
func echo(stream grpc.BidiStreamingServer[api.NextStreamRequest, api.NextStreamResponse]) error {
	return recv.Each(stream.Recv, func(req *api.NextStreamRequest) error {
		if req.Joint && len(req.Calls) > 1 {
			// One joint answer, as the leader gives one to the calls it
			// assigns together.
			a := &api.StreamAnswer{Id: req.Calls[0].Id}
			a.Also, a.Counts = jointOf(req.Calls)
			return stream.Send(&api.NextStreamResponse{Answers: []*api.StreamAnswer{a}})
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
		return nil
	})
}

// jointOf is what a joint answer to calls names besides its id: the other
// calls, and every call's count, in order. Echo and the node's NextStream
// share it, so the floor answers joint calls exactly as the leader does.
func jointOf(calls []*api.StreamCall) (also []uint64, counts []uint32) {
	also, counts = make([]uint64, 0, len(calls)-1), make([]uint32, len(calls))
	for i, call := range calls {
		counts[i] = call.Count
		if i > 0 {
			also = append(also, call.Id)
		}
	}
	return also, counts
}
