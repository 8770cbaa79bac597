package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
)

// unaryTarget makes every call one bare unary Next, as callers without the
// Go client make them: generated stubs, no retries, and of the client's
// checks only the one every caller needs to read an answer at all, the
// shape of its runs (api.ExpandRuns). Like
// such a caller it asks any node first and then calls the leader that
// node's answer names, so the run measures the leader, not forwarding.
type unaryTarget struct {
	addrs []string
	tls   *tls.Config
	count uint32

	conn *grpc.ClientConn // to the leader, once warm found it
	seq  api.SequencerClient
}

func newUnaryTarget(addrs []string, tlsConf *tls.Config, count int) *unaryTarget {
	return &unaryTarget{addrs: addrs, tls: tlsConf, count: uint32(count)}
}

// warm asks the addresses in turn until one answers, then connects to the
// leader its answer names. A cluster still electing fails every call, so
// it tries again, every 50 ms, until ctx ends.
func (t *unaryTarget) warm(ctx context.Context) error {
	for {
		err := t.find(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// find is one pass of warm.
func (t *unaryTarget) find(ctx context.Context) error {
	var errs []error
	for _, addr := range t.addrs {
		resp, err := t.connect(ctx, addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if leader := resp.GetLeaderAddr(); leader != "" && leader != addr {
			_, err = t.connect(ctx, leader)
		}
		return err
	}
	return errors.Join(errs...)
}

// connect makes addr the target and calls it once.
func (t *unaryTarget) connect(ctx context.Context, addr string) (*api.NextResponse, error) {
	cc, err := dial(addr, t.tls)
	if err != nil {
		return nil, fmt.Errorf("node %q: %w", addr, err)
	}
	seq := api.NewSequencerClient(cc)
	resp, err := seq.Next(ctx, &api.NextRequest{Count: t.count})
	if err != nil {
		cc.Close()
		return nil, fmt.Errorf("node %q: %w", addr, err)
	}
	t.close()
	t.conn, t.seq = cc, seq
	return resp, nil
}

func (t *unaryTarget) call(ctx context.Context, _ int) ([]uint64, error) {
	resp, err := t.seq.Next(ctx, &api.NextRequest{Count: t.count})
	if err != nil {
		return nil, err
	}
	return api.ExpandRuns(resp.Runs, uint64(t.count))
}

func (t *unaryTarget) close() {
	if t.conn != nil {
		t.conn.Close()
	}
}
