package bench

// The floor targets: what one gRPC round trip costs on this machine, with
// nothing behind it, as a unary call (the floor) and as a call on a shared
// stream (the stream floor). Run beside the other targets they turn their
// figures into ratios that mean something on any machine: an Ordo call is
// one client-to-leader round trip plus a leader-to-followers round, so it
// cannot beat its floor, and its distance from the floor is Ordo's own
// cost.

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/sendq"
)

// floorTarget calls the standard gRPC health check of one server. Every
// Ordo node serves it, and it does no work, so a run measures gRPC and the
// machine alone. Calls yield no IDs: there is no order to check.
type floorTarget struct {
	conn   *grpc.ClientConn
	health healthpb.HealthClient
}

func newFloorTarget(addr string, tlsConf *tls.Config) (*floorTarget, error) {
	cc, err := dial(addr, tlsConf)
	if err != nil {
		return nil, fmt.Errorf("floor endpoint %q: %w", addr, err)
	}
	return &floorTarget{conn: cc, health: healthpb.NewHealthClient(cc)}, nil
}

// dial connects as the bench's bare targets do: one connection, with TLS
// when it is set.
func dial(addr string, tlsConf *tls.Config) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if tlsConf != nil {
		creds = credentials.NewTLS(tlsConf)
	}
	return grpc.NewClient(addr, append(api.DialWindows(), grpc.WithTransportCredentials(creds))...)
}

func (t *floorTarget) call(ctx context.Context, _ int) ([]uint64, error) {
	if _, err := t.health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		return nil, err
	}
	return nil, nil
}

func (t *floorTarget) warm(ctx context.Context) error {
	_, err := t.call(ctx, 0)
	return err
}

func (t *floorTarget) close() { t.conn.Close() }

// streamFloorTarget is the stream floor: the callers share one stream to
// the Floor service of the first address, which answers every call at
// once with no IDs. The calls are sent as the default Go client sends
// them (package sendq: those made while a message is being sent go
// together in the next), so the default client's figures read against
// this floor show what Ordo itself costs: its confirmation round, its
// leader and its client. A broken stream fails every call after it: a
// floor is measured, not recovered.
type streamFloorTarget struct {
	conn   *grpc.ClientConn
	cancel context.CancelFunc // ends the stream
	queue  *sendq.Queue

	mu      sync.Mutex
	pending map[uint64]chan struct{} // closed when answered
	nextID  uint64

	dead chan struct{} // closed when the stream broke
	err  error         // why, set before dead closes
}

func newStreamFloorTarget(addr string, tlsConf *tls.Config) (*streamFloorTarget, error) {
	cc, err := dial(addr, tlsConf)
	if err != nil {
		return nil, fmt.Errorf("stream floor endpoint %q: %w", addr, err)
	}
	return &streamFloorTarget{conn: cc, cancel: func() {}, queue: sendq.New(),
		pending: map[uint64]chan struct{}{}, dead: make(chan struct{})}, nil
}

// warm opens the stream, within ctx, and makes the first call.
func (t *streamFloorTarget) warm(ctx context.Context) error {
	// The stream outlives ctx.
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	st, err := api.NewFloorClient(t.conn).Echo(sctx)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return err
	}
	t.cancel = cancel
	go t.receive(st)
	go func() {
		if err := t.queue.Run(t.dead, st.Send); err != nil {
			cancel() // receive records why
		}
	}()
	_, err = t.call(ctx, 0)
	return err
}

func (t *streamFloorTarget) call(ctx context.Context, _ int) ([]uint64, error) {
	done := make(chan struct{})
	t.mu.Lock()
	id := t.nextID
	t.nextID++
	t.pending[id] = done
	t.mu.Unlock()
	t.queue.Add(&api.StreamCall{Id: id, Count: 1})
	select {
	case <-done:
		return nil, nil
	case <-t.dead:
		select {
		case <-done: // answered just before the stream broke
			return nil, nil
		default:
		}
		return nil, t.err
	case <-ctx.Done():
		t.mu.Lock()
		delete(t.pending, id)
		t.mu.Unlock()
		return nil, ctx.Err()
	}
}

// receive wakes the calls answered, until the stream breaks.
func (t *streamFloorTarget) receive(st grpc.BidiStreamingClient[api.NextStreamRequest, api.NextStreamResponse]) {
	var answered []chan struct{}
	for {
		resp, err := st.Recv()
		if err != nil {
			t.err = fmt.Errorf("stream floor: %w", err)
			close(t.dead)
			t.cancel()
			return
		}
		t.queue.AnsweredBy(resp)
		answered = answered[:0]
		t.mu.Lock()
		for _, a := range resp.Answers {
			for _, id := range append([]uint64{a.Id}, a.Also...) {
				if done := t.pending[id]; done != nil {
					delete(t.pending, id)
					answered = append(answered, done)
				}
			}
		}
		t.mu.Unlock()
		for _, done := range answered {
			close(done)
		}
	}
}

func (t *streamFloorTarget) close() {
	t.cancel()
	t.conn.Close()
}
