package bench

// The etcd target: the same callers, latency and order check as Ordo's,
// but every call is one etcd Put and the store revision it was applied at
// is the sequence number. etcd's client module is deliberately not a
// dependency (it pulls in a large tree and pins grpc); the two messages
// needed are encoded by hand with protowire and sent through grpc-go with
// a codec that passes raw bytes.

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
)

// etcdPutMethod is KV.Put in etcd's api/etcdserverpb/rpc.proto.
const etcdPutMethod = "/etcdserverpb.KV/Put"

// Field numbers from etcd's api/etcdserverpb/rpc.proto.
const (
	putRequestKey       protowire.Number = 1 // PutRequest.key (bytes)
	putRequestValue     protowire.Number = 2 // PutRequest.value (bytes)
	putResponseHeader   protowire.Number = 1 // PutResponse.header (ResponseHeader)
	headerRevisionField protowire.Number = 3 // ResponseHeader.revision (int64)
)

// encodePutRequest returns the wire form of PutRequest{key, value}.
func encodePutRequest(key, value []byte) []byte {
	var b []byte
	b = protowire.AppendTag(b, putRequestKey, protowire.BytesType)
	b = protowire.AppendBytes(b, key)
	b = protowire.AppendTag(b, putRequestValue, protowire.BytesType)
	b = protowire.AppendBytes(b, value)
	return b
}

// decodePutRevision returns header.revision from the wire form of a
// PutResponse. Unknown fields (prev_kv, fields of later etcd versions) are
// skipped, as protobuf requires; a repeated header field is merged, so the
// last revision seen wins. A response without a positive revision is an
// error: etcd's first revision after a Put is 2, so 0 means the field was
// missing, and the history check would otherwise see a bogus ID.
func decodePutRevision(b []byte) (int64, error) {
	var rev int64
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != putResponseHeader {
			return nil
		}
		if typ != protowire.BytesType {
			return fmt.Errorf("%w: PutResponse.header has wire type %d", ErrBadResponse, typ)
		}
		return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
			if num != headerRevisionField {
				return nil
			}
			if typ != protowire.VarintType {
				return fmt.Errorf("%w: ResponseHeader.revision has wire type %d", ErrBadResponse, typ)
			}
			x, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return fmt.Errorf("%w: ResponseHeader.revision: %v", ErrBadResponse, protowire.ParseError(n))
			}
			rev = int64(x)
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	if rev <= 0 {
		return 0, fmt.Errorf("%w: no positive header.revision (got %d)", ErrBadResponse, rev)
	}
	return rev, nil
}

// eachField calls f with every field of the message b: its number, wire
// type, and raw value (for a bytes field, the contents without the length
// prefix). It stops at the first error, and reports truncated or invalid
// input as ErrBadResponse instead of reading past the end.
func eachField(b []byte, f func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: tag: %v", ErrBadResponse, protowire.ParseError(n))
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return fmt.Errorf("%w: field %d: %v", ErrBadResponse, num, protowire.ParseError(m))
		}
		v := b[:m]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v) // cannot fail: ConsumeFieldValue accepted it
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
		b = b[m:]
	}
	return nil
}

// rawFrame is a message already in (or still in) wire form; rawCodec moves
// it through grpc untouched.
type rawFrame struct{ b []byte }

// rawCodec is a grpc codec for *rawFrame. It is named "proto" so that the
// request's content-type is application/grpc+proto, which etcd's server
// decodes with its protobuf codec; any other name would make the server
// fall back with a warning today and fail in later grpc releases.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(*rawFrame)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return m.b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*rawFrame)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	// grpc may reuse data's buffer after Unmarshal returns.
	m.b = append(m.b[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// etcdTarget issues Puts to an etcd cluster.
type etcdTarget struct {
	conns []*grpc.ClientConn
	// reqs[i] is caller i's encoded PutRequest: the same key and value
	// every call, so it is built once.
	reqs [][]byte
	opts []grpc.CallOption
}

// newEtcdTarget connects to every endpoint (one ClientConn each, like
// etcd's own benchmark tool, so the load is spread over the members rather
// than funnelled through one) and prepares each caller's request.
func newEtcdTarget(addrs []string, callers int) (*etcdTarget, error) {
	t := &etcdTarget{opts: []grpc.CallOption{grpc.ForceCodec(rawCodec{})}}
	for _, a := range addrs {
		cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.close()
			return nil, fmt.Errorf("etcd endpoint %q: %w", a, err)
		}
		t.conns = append(t.conns, cc)
	}
	// A small value, as a sequencer's record would be: the benchmark is
	// about ordering, not bandwidth.
	value := []byte("x")
	for i := range callers {
		t.reqs = append(t.reqs, encodePutRequest(fmt.Appendf(nil, "ordo-bench/%d", i), value))
	}
	return t, nil
}

// call makes caller's Put and returns the revision as a one-ID response.
// Callers are spread over the endpoints round-robin.
func (t *etcdTarget) call(ctx context.Context, caller int) ([]uint64, error) {
	var resp rawFrame
	cc := t.conns[caller%len(t.conns)]
	if err := cc.Invoke(ctx, etcdPutMethod, &rawFrame{b: t.reqs[caller]}, &resp, t.opts...); err != nil {
		return nil, err
	}
	rev, err := decodePutRevision(resp.b)
	if err != nil {
		return nil, err
	}
	return []uint64{uint64(rev)}, nil
}

// warm makes one Put through every connection, so connecting is not
// counted as latency and an endpoint that is down fails the run up front.
func (t *etcdTarget) warm(ctx context.Context) error {
	for i := range min(len(t.conns), len(t.reqs)) {
		if _, err := t.call(ctx, i); err != nil {
			return fmt.Errorf("etcd endpoint %s: %w", t.conns[i].Target(), err)
		}
	}
	return nil
}

func (t *etcdTarget) close() {
	for _, cc := range t.conns {
		cc.Close()
	}
}
