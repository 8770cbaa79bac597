package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/internal/grpcerr"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/secure"
)

// defaultAddrs are the three nodes that scripts/cluster.sh starts.
const defaultAddrs = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"

// clientFlags are shared by every command that talks to a cluster.
type clientFlags struct {
	addrs      *string
	json       *bool
	timeout    *time.Duration
	tls        tlsFlags
	adminToken *string
	caller     *string
}

func addClientFlags(fs *flag.FlagSet) clientFlags {
	return clientFlags{
		addrs:      fs.String("addrs", defaultAddrs, "comma-separated gRPC addresses of cluster nodes"),
		json:       fs.Bool("json", false, "print JSON"),
		timeout:    fs.Duration("timeout", 10*time.Second, "give up after this long"),
		tls:        addTLSFlags(fs, "client"),
		adminToken: fs.String("admin-token-file", "", "file holding the cluster's admin token, sent with every call (for join, remove, transfer-leader)"),
		caller:     fs.String("caller", "", "name this caller with every call (1 to 128 bytes of printable ASCII): a plaintext cluster scopes idempotency keys to it; a TLS cluster takes the certificate's subject instead"),
	}
}

// options are the client options the TLS and token flags ask for.
func (f clientFlags) options() ([]client.Option, error) {
	var opts []client.Option
	t, err := f.tls.load()
	if err != nil {
		return nil, err
	}
	if t != nil {
		opts = append(opts, client.WithTLS(t.ClientConfig()))
	}
	if *f.adminToken != "" {
		_, token, err := secure.ReadToken(*f.adminToken)
		if err != nil {
			return nil, fmt.Errorf("%w: --admin-token-file: %v", errUsage, err)
		}
		opts = append(opts, client.WithAdminToken(token))
	}
	if *f.caller != "" {
		if err := client.CheckCaller(*f.caller); err != nil {
			return nil, fmt.Errorf("%w: --caller: %v", errUsage, err)
		}
		opts = append(opts, client.WithCaller(*f.caller))
	}
	return opts, nil
}

// with dials a client with the flags, runs fn with it under the call's
// timeout, and closes it.
func (f clientFlags) with(fn func(ctx context.Context, c *client.Client) error) error {
	c, ctx, cancel, err := f.dial()
	if err != nil {
		return err
	}
	defer cancel()
	defer c.Close()
	return fn(ctx, c)
}

func (f clientFlags) dial() (*client.Client, context.Context, context.CancelFunc, error) {
	var addrs []string
	for _, a := range strings.Split(*f.addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	opts, err := f.options()
	if err != nil {
		return nil, nil, nil, err
	}
	progress := &retryProgress{out: os.Stderr, now: time.Now, start: time.Now()}
	opts = append(opts, client.WithRetryNotify(progress.failed))
	c, err := client.New(addrs, opts...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: --addrs: %v", errUsage, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *f.timeout)
	return c, ctx, cancel, nil
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runNext(args []string) error {
	fs := flag.NewFlagSet("next", flag.ContinueOnError)
	cf := addClientFlags(fs)
	count := fs.Int("count", 1, "how many IDs")
	sequence := fs.String("sequence", "", "the named sequence to take IDs from (ordo sequence create); the cluster's default sequence when left out")
	key := fs.String("idempotency-key", "", "key the call (1 to 128 bytes): run again with the same key, --count and --sequence (and the same --caller, or certificate), while the cluster keeps the key (its newest 100,000), it prints the same IDs; another --count or --sequence, or a key used for ordo reserve, is refused")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, "give the count with --count and the sequence with --sequence"); err != nil {
		return err
	}
	if err := checkCount(*count); err != nil {
		return err
	}
	if len(*key) > client.MaxKeyLen {
		return fmt.Errorf("%w: --idempotency-key of %d bytes: want at most %d", errUsage, len(*key), client.MaxKeyLen)
	}
	if err := checkSequenceFlag(*sequence); err != nil {
		return err
	}
	return cf.with(func(ctx context.Context, c *client.Client) error {
		if *key != "" {
			ctx = client.WithIdempotencyKey(ctx, *key)
		}
		var ids []string
		var err error
		if *sequence != "" {
			ids, err = sequenceText(ctx, c, *sequence, *count)
		} else {
			ids, err = nextText(ctx, c, *count)
		}
		if err != nil {
			return err
		}
		if *cf.json {
			// IDs as strings: a JSON number above 2^53 loses precision in
			// JavaScript and in many JSON tools.
			return printJSON(map[string]any{"ids": ids})
		}
		w := bufio.NewWriter(os.Stdout)
		for _, id := range ids {
			fmt.Fprintln(w, id)
		}
		return w.Flush()
	})
}

// nextText returns count IDs as text: decimal under a 64-bit layout, the
// canonical UUIDv7 or ULID text under a 128-bit one. The cluster's layout
// says which call to make.
func nextText(ctx context.Context, c *client.Client, count int) ([]string, error) {
	format, err := clusterFormat(ctx, c)
	if err != nil {
		return nil, err
	}
	switch format {
	case layout.FormatULID:
		return texts(c.NextULIDs(ctx, count))
	case layout.FormatUUIDv7:
		return texts(c.NextUUIDs(ctx, count))
	}
	ids, err := c.NextN(ctx, count)
	if err != nil {
		return nil, err
	}
	return decimals(ids), nil
}

// clusterFormat asks the cluster for its layout: its format says which
// calls serve it ("" for the 64-bit calls).
func clusterFormat(ctx context.Context, c *client.Client) (layout.Format, error) {
	l, _, err := c.Layout(ctx)
	if err != nil {
		return "", fmt.Errorf("ask the cluster for its layout: %w", err)
	}
	return l.Format, nil
}

// decimals returns 64-bit IDs as decimal text.
func decimals(ids []uint64) []string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return s
}

// texts returns the canonical text of 128-bit IDs.
func texts[T fmt.Stringer](ids []T, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return s, nil
}

func runStatus(args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	cf := addClientFlags(fs)
	sf := addStatusSequenceFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, "ordo status takes flags only (--sequences to list the named sequences)"); err != nil {
		return err
	}
	req, err := sf.request(fs)
	if err != nil {
		return err
	}
	resp, err := askAdmin(cf, func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) (*api.StatusResponse, error) {
		return a.Status(ctx, req, opts...)
	})
	if err != nil {
		return err
	}
	if *cf.json {
		// GET /v1/status's schema: one for both (api.MarshalJSON).
		return printProto(resp)
	}
	cluster := ""
	for _, n := range resp.Nodes {
		if n.Id == resp.LeaderId {
			cluster = n.ClusterId
		}
	}
	fmt.Printf("leader %s (%s)  layout %s  group %d  cluster %s\n", resp.LeaderId, resp.LeaderAddr, resp.Layout, resp.Group, cluster)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tROLE\tVOTER\tTERM\tLAST CONTACT\tAPPLIED\tCOMMIT\tHIGH-WATER\tRAFT\tGRPC\tERROR")
	for _, n := range resp.Nodes {
		contact := "-"
		if n.LastContactMs > 0 {
			contact = (time.Duration(n.LastContactMs) * time.Millisecond).String()
		}
		fmt.Fprintf(w, "%s\t%s\t%t\t%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", n.Id, n.Role, n.Voter, n.Term, contact,
			n.AppliedIndex, n.CommitIndex, n.HighWater, n.RaftAddr, n.GrpcAddr, n.Error)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if req.Sequences {
		return printStatusSequences(resp)
	}
	return nil
}

func runDecode(args []string) error {
	fs := flag.NewFlagSet("decode", flag.ContinueOnError)
	spec := fs.String("layout", "default", "the layout the IDs were made with")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: give one or more IDs", errUsage)
	}
	l, err := layout.Parse(*spec)
	if err != nil {
		return fmt.Errorf("%w: --layout: %v", errUsage, err)
	}
	type decoded struct {
		ID    string    `json:"id"`
		Time  time.Time `json:"time"`
		Group uint64    `json:"group"`
		Seq   uint64    `json:"seq"`
	}
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "layout" })
	var out []decoded
	wide := false // a 128-bit ID was decoded
	for _, a := range fs.Args() {
		p, err := decodeID(a, l, explicit)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		out = append(out, decoded{ID: a, Time: p.Time, Group: p.Group, Seq: p.Seq})
		_, narrow := strconv.ParseUint(a, 10, 64)
		wide = wide || l.Wide() || narrow != nil
	}
	if *asJSON {
		return printJSON(out)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tTIME\tGROUP\tSEQ")
	for _, d := range out {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", d.ID, d.Time.Format(time.RFC3339Nano), d.Group, d.Seq)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if wide {
		fmt.Fprintln(os.Stderr, wideDecodeNote)
	}
	return nil
}

// wideDecodeNote follows a table of UUIDv7s or ULIDs: nothing in such an
// ID says who made it, and other generators fill those bits at random.
const wideDecodeNote = "note: GROUP and SEQ are Ordo's only in UUIDv7s and ULIDs an Ordo cluster made; in others (PostgreSQL's uuidv7(), other libraries) they are random bits"

// decodeID takes one ID apart: a decimal 64-bit ID under l, or a UUIDv7
// or ULID, whether Ordo made it or not (PostgreSQL 18's uuidv7(), any
// library's). Without an explicit 128-bit --layout, the text's length
// tells which: 36 characters (or 32 hex digits) a UUID, 26 a ULID. Text of
// decimal digits only is a 64-bit ID whatever its length: one too large
// is a mistyped or foreign number far likelier than a ULID or UUID that
// happens to have no letters, and decoding it as one would print a
// plausible time for nonsense.
func decodeID(a string, l layout.Layout, explicit bool) (layout.Parts, error) {
	if !l.Wide() {
		id, err := strconv.ParseUint(a, 10, 64)
		if err == nil {
			if err := checkFits(id, l); err != nil {
				return layout.Parts{}, err
			}
			return l.Decode(id), nil
		}
		if a != "" && strings.Trim(a, "0123456789") == "" {
			return layout.Parts{}, fmt.Errorf("%q is not a 64-bit unsigned integer (layout %s): %w", a, l, err)
		}
		guess := map[int]string{26: "ulid", 32: "uuidv7", 36: "uuidv7"}[len(a)]
		if explicit || guess == "" {
			return layout.Parts{}, fmt.Errorf("%q is not a 64-bit unsigned integer (layout %s), a UUIDv7 or a ULID", a, l)
		}
		if l, err = layout.Preset(guess); err != nil {
			return layout.Parts{}, err
		}
	}
	id, err := l.ParseWide(a)
	if err != nil {
		return layout.Parts{}, err
	}
	return l.DecodeWide(id)
}

// checkFits refuses a 64-bit id with a bit set above l's fields: the
// sign bit under a layout whose fields fill 63 bits (every one but discord
// and instagram, whose time field owns it), which such a layout never
// sets, so that decoding it would print a time, group and sequence the
// layout never made.
func checkFits(id uint64, l layout.Layout) error {
	width := l.TimeBits + l.GroupBits + l.SeqBits
	if width >= 64 || id>>width == 0 {
		return nil
	}
	return fmt.Errorf("%d is not an ID of layout %s: bit 63 (the sign bit) is set, but this layout's fields fill only the low %d bits (its time field runs out at %s without reaching it); if another layout made the ID, give that one with --layout",
		id, l, width, l.TickTime(l.MaxTick()).Format(time.RFC3339))
}

func runJoin(args []string) error {
	fs := flag.NewFlagSet("join", flag.ContinueOnError)
	cf := addClientFlags(fs)
	id := fs.String("id", "", "id of the node to add (required)")
	raftAddr := fs.String("raft-addr", "", "raft address of the node to add (required)")
	grpcAddr := fs.String("grpc-addr", "", "gRPC address of the node to add (required)")
	spec := fs.String("layout", "default", "the layout the node to add is configured with; the cluster refuses another")
	group := fs.Uint64("group", 0, "the group the node to add is configured with")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *id == "" || *raftAddr == "" || *grpcAddr == "" {
		return fmt.Errorf("%w: --id, --raft-addr and --grpc-addr are required", errUsage)
	}
	return adminCall(cf, func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) (*api.JoinResponse, error) {
		return a.Join(ctx, &api.JoinRequest{Id: *id, RaftAddr: *raftAddr, GrpcAddr: *grpcAddr, Layout: *spec, Group: *group}, opts...)
	}, "joined "+*id)
}

func runRemove(args []string) error {
	fs := flag.NewFlagSet("remove", flag.ContinueOnError)
	cf := addClientFlags(fs)
	id := fs.String("id", "", "id of the node to remove (required, on the command line)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, "name the node with --id"); err != nil {
		return err
	}
	if *id == "" {
		msg := "--id is required: name the node to remove, as in ordo remove --id n3"
		if v, ok := os.LookupEnv(envName("id")); ok {
			msg += fmt.Sprintf(" ($%s=%q is a node's own setting, which ordo remove does not read)", envName("id"), v)
		}
		return fmt.Errorf("%w: %s", errUsage, msg)
	}
	return cf.with(func(ctx context.Context, c *client.Client) error {
		if err := c.Remove(ctx, *id); err != nil {
			return err
		}
		return report(cf, "removed "+*id)
	})
}

func runTransferLeader(args []string) error {
	fs := flag.NewFlagSet("transfer-leader", flag.ContinueOnError)
	cf := addClientFlags(fs)
	id := fs.String("id", "", "id of the node to hand leadership to (default: any up-to-date voter)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, "name the node with --id"); err != nil {
		return err
	}
	if *id != "" {
		// Naming the leader changes nothing: say so rather than report a
		// transfer.
		st, err := askAdmin(cf, func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) (*api.StatusResponse, error) {
			return a.Status(ctx, &api.StatusRequest{}, opts...)
		})
		if err != nil {
			return err
		}
		if st.LeaderId == *id {
			return report(cf, *id+" already leads")
		}
	}
	return adminCall(cf, func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) (*api.TransferLeaderResponse, error) {
		return a.TransferLeader(ctx, &api.TransferLeaderRequest{Id: *id}, opts...)
	}, "leadership transferred")
}

// askAdmin makes one admin call through a client dialed with cf, which
// follows the leader, and returns the answer.
func askAdmin[R any](cf clientFlags, call func(context.Context, api.AdminClient, ...grpc.CallOption) (R, error)) (R, error) {
	var resp R
	c, ctx, cancel, err := cf.dial()
	if err != nil {
		return resp, err
	}
	defer cancel()
	defer c.Close()
	err = c.Admin(ctx, func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) (err error) {
		resp, err = call(ctx, a, opts...)
		return err
	})
	return resp, err
}

// retryProgress says, while a command's call is retried for more than a
// second, why, at most every five seconds: the operator sees the cause
// (a node that does not answer, no leader) instead of a silent wait. The
// client calls it from its goroutines.
type retryProgress struct {
	mu          sync.Mutex
	out         io.Writer
	now         func() time.Time
	start, last time.Time
}

func (p *retryProgress) failed(addr string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if err == nil || now.Sub(p.start) < time.Second || now.Sub(p.last) < 5*time.Second {
		return
	}
	p.last = now
	why := grpcerr.Describe(err)
	if addr != "" {
		why = addr + ": " + why
	}
	fmt.Fprintf(p.out, "ordo: still trying after %s: %s\n", now.Sub(p.start).Round(time.Second), why)
}

// adminCall runs one admin call and reports the outcome.
func adminCall[R any](cf clientFlags, call func(context.Context, api.AdminClient, ...grpc.CallOption) (R, error), done string) error {
	if _, err := askAdmin(cf, call); err != nil {
		return err
	}
	return report(cf, done)
}

// report prints what an admin command did, as text or JSON.
func report(cf clientFlags, done string) error {
	if *cf.json {
		return printJSON(map[string]string{"result": done})
	}
	fmt.Println(done)
	return nil
}
