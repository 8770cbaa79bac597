package server

// The cluster handshake: the first bytes of every Raft connection.
//
// Raft has no notion of a cluster: a member is an id and an address, and
// whatever speaks its protocol at a member's address is that member. A
// node started on another cluster's data dir (a wrong volume, a disk of a
// cluster that used the same names and addresses) therefore takes part in
// this cluster's elections with that cluster's log; a log whose last term
// is higher wins them, and a leader overwrites its followers' logs, so it
// can rewrite this cluster's committed history, the high-water mark with
// it, and IDs are handed out twice. So before Raft reads a byte, each end
// of a connection says which cluster and which node it is, and either end
// refuses when they do not belong together.
//
// Wire format (integers big-endian; a string is a u16 length and bytes):
//
//	hello  (dialer → acceptor):  "ORDO" | version u8 | length u16 | body
//	       body, version 1:      cluster id | node id
//	answer (acceptor → dialer):  "ORDO" | version u8 | length u16 | body
//	       body, version 1:      verdict u8 | cluster id | node id | reason
//
// The verdict is 0 to accept, else a refusal: 1 another cluster, 2 not in
// the configuration, 3 an unreadable hello (a later version may add more;
// any but 0 refuses).
//
// The magic's first byte, 'O', is no hashicorp/raft rpc type (0 to 4):
// an acceptor tells a peer of an older Ordo, which sends none, by its
// first byte, and an older acceptor reads a hello as an unknown rpc type
// and closes the connection. A later version keeps version 1's fields
// first and appends its own: the length lets this one skip what it does
// not know, and the acceptor answers in the lower of both versions.
//
// The rules, checked by both ends:
//
//   - Cluster: refused when both cluster ids are set and differ. An empty
//     id is a node whose FSM has not applied its cluster's init: a new
//     cluster before its first leader commits it, a joiner with an empty
//     data dir, or a member of a cluster that never committed it. Letting
//     it through is safe because the init is the first entry a leader
//     commits, before any reservation (becomeReady), and a log holds an
//     entry only with every entry before it: a log without the init holds
//     no reservation, so its node has no high-water mark to impose, and a
//     node with state but no cluster id is one whose cluster never
//     committed its init. (Clusters created before cluster ids existed
//     have none: for them the handshake checks node ids only.) The id is
//     read per connection, as it goes from "" to the cluster's while the
//     node runs. A restore makes a new cluster id; the nodes that join
//     the restored node start with empty data dirs, so they match.
//   - Node: the acceptor refuses a dialer whose node id is not in its
//     Raft configuration, when that is not empty (a joiner's is: the
//     leader that adds it dials it first), unless the cluster's leader,
//     asked over gRPC by the members of that configuration and answering
//     for this cluster, lists it (Node.admitListed): a member that was
//     down while a node was added must take that node's entries when it
//     leads, or it could never catch up, while the lost members of a
//     --recover'ed cluster, which the survivor's configuration no longer
//     lists and whose leader it does not ask, stay out. The dialer refuses an acceptor
//     whose node id is not the one its configuration lists for the
//     address it dialed, when it lists the address.
//   - Version: a peer that sends no hello runs an older Ordo and is
//     refused, so nodes of two versions do not talk: every node must be
//     upgraded (see docs/operations.md).
//
// A node also counts what its voters answer (checkOtherCluster): when a
// majority of the others name another cluster than its own, its data dir
// is the odd one out, and it refuses to serve.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/startup"
)

const (
	handshakeMagic   = "ORDO"
	handshakeVersion = 1
	// maxHandshakeBody bounds what a peer can make this node read before
	// it knows who the peer is; three strings of maxHandshakeString fit.
	maxHandshakeBody   = 4096
	maxHandshakeString = 1024
	// maxRaftRPCType is the highest rpc type byte of hashicorp/raft
	// v1.7.3 (rpcRequestPreVote), what an older Ordo sends first.
	maxRaftRPCType = 4
	// refusalLogEvery spaces out the logs of refusals of one peer: a
	// refused peer redials at every heartbeat, vote and retry.
	refusalLogEvery = time.Minute
)

// verdict is the acceptor's answer.
type verdict byte

const (
	verdictAccept verdict = iota
	verdictOtherCluster
	verdictNotMember
	verdictUnreadable
)

// hello is what one end of a connection says it is.
type hello struct{ clusterID, nodeID string }

// answer is the acceptor's reply to a hello.
type answer struct {
	verdict
	hello
	reason string
}

// raftIdentity is who a stream layer says it is in the handshake, and what
// it checks peers against. The zero value (a layer without a node, in
// tests) is of no cluster, has no id and an empty configuration.
type raftIdentity struct {
	nodeID string
	// clusterID is read per connection, as it goes from "" to the
	// cluster's when the FSM applies the init (nil: none).
	clusterID func() string
	members   memberCache
	answers   peerAnswers
	logger    hclog.Logger
	logs      logLimiter
	// strangerTo is set when a peer of this node's cluster refused it as
	// not in its configuration: a removed node that missed the entry
	// removing it (watchMembership asks the leader then).
	strangerTo atomic.Bool
}

func newRaftIdentity(nodeID string, clusterID func() string, logger hclog.Logger) *raftIdentity {
	return &raftIdentity{nodeID: nodeID, clusterID: clusterID, logger: logger}
}

func (id *raftIdentity) self() hello {
	return hello{nodeID: id.nodeID, clusterID: id.ownCluster()}
}

// ownCluster is this node's cluster id now ("" for none yet).
func (id *raftIdentity) ownCluster() string {
	if id.clusterID == nil {
		return ""
	}
	return id.clusterID()
}

func (id *raftIdentity) log() hclog.Logger {
	if id.logger == nil {
		return hclog.NewNullLogger()
	}
	return id.logger
}

// otherClusterFix is what an operator does when two nodes that dial each
// other are of two clusters.
const otherClusterFix = "the data dir of one of these nodes belongs to another cluster: find the node whose data dir is not its cluster's " +
	"(it refuses to serve when a majority of its voters answer for another cluster), stop it, move its data dir aside, " +
	"remove it from its cluster (ordo remove --id ID) and start it empty with --join"

// dialHandshake is the dialer's side on c, dialed to addr, within c's
// deadline.
func (id *raftIdentity) dialHandshake(c net.Conn, addr string) (presented string, err error) {
	own := id.self()
	return own.clusterID, id.dial(c, addr, own)
}

func (id *raftIdentity) dial(c net.Conn, addr string, own hello) error {
	if err := writeFrame(c, handshakeVersion, encodeHello(own)); err != nil {
		return fmt.Errorf("send the cluster handshake to raft peer %s: %w", addr, err)
	}
	_, body, err := readFrame(c)
	var ne net.Error
	switch {
	case errors.Is(err, errNoHandshake) && errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%w: raft peer %s did not answer the cluster handshake in time: %w", ErrPeerRefused, addr, err)
	case errors.Is(err, errNoHandshake):
		if id.logs.allow("out/old/" + addr) {
			id.log().Warn("a raft peer closed the connection without answering the cluster handshake: it may run an Ordo older than this version, "+
				"which logs the handshake as an unknown rpc type; nodes of two versions do not talk to each other: upgrade every node",
				"peer", addr)
		}
		return fmt.Errorf("%w: raft peer %s closed the connection without answering the cluster handshake: "+
			"it may run an Ordo older than this version (which reads the handshake as an unknown rpc type), and every node must be upgraded: %w",
			ErrPeerRefused, addr, err)
	case err != nil:
		return fmt.Errorf("%w: cluster handshake with raft peer %s: %w", ErrPeerRefused, addr, err)
	}
	ans, err := decodeAnswer(body)
	if err != nil {
		return fmt.Errorf("%w: cluster handshake with raft peer %s: %w", ErrPeerRefused, addr, err)
	}
	listedID, listed := id.members.idAt(addr)
	if listed && ans.nodeID == listedID {
		// Only what a member says at the address this node dialed counts
		// toward checkOtherCluster: a dialer can claim any id.
		id.answers.record(listedID, ans.clusterID)
	}
	switch {
	case ans.verdict == verdictOtherCluster || otherClusters(own.clusterID, ans.clusterID):
		id.logOtherCluster("out/"+addr, own.clusterID, ans.clusterID, addr, ans.nodeID)
		return fmt.Errorf("%w: %w: raft peer %s (node %q) is of cluster %s, this node of cluster %s",
			ErrPeerRefused, startup.ErrOtherCluster, addr, ans.nodeID, ans.clusterID, own.clusterID)
	case ans.verdict != verdictAccept:
		if ans.verdict == verdictNotMember {
			id.strangerTo.Store(true)
		}
		return fmt.Errorf("%w: raft peer %s (node %q) refused this node: %s", ErrPeerRefused, addr, ans.nodeID, ans.reason)
	case listed && ans.nodeID != listedID:
		if id.logs.allow("out/id/" + addr) {
			id.log().Error("refused a raft peer: it answers as another node than the one the raft configuration lists at its address",
				"peer", addr, "peer_node_id", ans.nodeID, "listed_node_id", listedID)
		}
		return fmt.Errorf("%w: raft peer %s answers as node %q, but the raft configuration lists %q there", ErrPeerRefused, addr, ans.nodeID, listedID)
	}
	return nil
}

// acceptHandshake is the acceptor's side on c, within c's deadline. Its
// errors are ErrPeerRefused, or io.EOF for a connection closed before its
// first byte (a port probe, a dialer that gave up).
func (id *raftIdentity) acceptHandshake(c net.Conn) (presented string, err error) {
	own := id.self()
	return own.clusterID, id.accept(c, own)
}

func (id *raftIdentity) accept(c net.Conn, own hello) error {
	remote := c.RemoteAddr().String()
	host, _, _ := net.SplitHostPort(remote)
	version, body, err := readFrame(c)
	var ne net.Error
	switch {
	case errors.Is(err, errNoHandshake) && errors.As(err, &ne) && ne.Timeout():
		if id.logs.allow("in/slow/" + host) {
			id.log().Warn("closed a raft connection that sent no cluster handshake in time", "peer", remote)
		}
		return fmt.Errorf("%w: %s sent no cluster handshake in time", ErrPeerRefused, remote)
	case errors.Is(err, errNoHandshake):
		return io.EOF
	case errors.Is(err, errRaftRPC):
		if id.logs.allow("in/old/" + host) {
			id.log().Error("refused a raft peer that sends no cluster handshake: it runs an Ordo older than this version; "+
				"nodes of two versions do not talk to each other: upgrade every node", "peer", remote)
		}
		return fmt.Errorf("%w: %s runs an Ordo older than this version: %w", ErrPeerRefused, remote, err)
	case err != nil:
		if id.logs.allow("in/bad/" + host) {
			id.log().Warn("refused a raft connection that is no Ordo peer", "peer", remote, "error", err)
		}
		return fmt.Errorf("%w: %s: %w", ErrPeerRefused, remote, err)
	}
	ans := answer{hello: own}
	peer, err := decodeHello(body)
	if err != nil {
		ans.verdict, ans.reason = verdictUnreadable, err.Error()
	} else {
		ans.verdict, ans.reason = id.judgeDialer(own, peer)
	}
	werr := writeFrame(c, min(version, handshakeVersion), encodeAnswer(ans))
	switch ans.verdict {
	case verdictAccept:
		if werr != nil {
			return fmt.Errorf("%w: answer the cluster handshake of %s: %w", ErrPeerRefused, remote, werr)
		}
		return nil
	case verdictOtherCluster:
		id.logOtherCluster("in/"+host+"/"+peer.nodeID, own.clusterID, peer.clusterID, remote, peer.nodeID)
	default:
		if id.logs.allow("in/" + host + "/" + peer.nodeID) {
			id.log().Warn("refused a raft peer", "peer", remote, "peer_node_id", peer.nodeID, "reason", ans.reason)
		}
	}
	return fmt.Errorf("%w: %s (node %q): %s", ErrPeerRefused, remote, peer.nodeID, ans.reason)
}

// judgeDialer applies the rules to a dialer's hello.
func (id *raftIdentity) judgeDialer(own, peer hello) (verdict, string) {
	if otherClusters(own.clusterID, peer.clusterID) {
		return verdictOtherCluster, fmt.Sprintf("node %q is of cluster %s, the dialer of cluster %s", own.nodeID, own.clusterID, peer.clusterID)
	}
	if member, known := id.members.has(peer.nodeID); known && !member {
		if own.clusterID != "" && peer.clusterID == own.clusterID {
			id.members.noteUnknown(peer.nodeID)
		}
		return verdictNotMember, fmt.Sprintf("node %q is not in the raft configuration of node %q", peer.nodeID, own.nodeID)
	}
	return verdictAccept, ""
}

func (id *raftIdentity) logOtherCluster(key, own, peer, addr, peerID string) {
	if id.logs.allow(key) {
		id.log().Error("refused a raft peer of another cluster: "+otherClusterFix,
			"cluster_id", own, "peer_cluster_id", peer, "peer", addr, "peer_node_id", peerID)
	}
}

// otherClusters reports whether two nodes are of two clusters: only ids
// both set can tell.
func otherClusters(a, b string) bool { return a != "" && b != "" && a != b }

// memberCache is the handshake's copy of this node's latest Raft
// configuration, which the node refreshes (Node.refreshMembers: after
// NewRaft, then at each watchMembership tick). The handshake runs in
// Raft's connection goroutines, so it must not wait on Raft's main loop,
// which served GetConfiguration in versions before v1.7.3's atomic copy:
// a copy of its own keeps a connection from depending on that.
//
// A stale copy is safe. It only narrows who may connect; membership
// stays Raft's to decide. A member added since the copy was taken is
// refused until the next refresh, which to Raft is a peer unreachable for
// a moment, retried; and the node that adds it is the leader, which
// dials the new member (with an empty configuration, it accepts anyone),
// not the other way round. A member removed since is let in until the
// next refresh, as every member was before this check, and Raft's own
// handling of removed nodes applies as before. The cluster check, the one
// that keeps another cluster's log out, does not read the copy.
type memberCache struct {
	servers atomic.Pointer[[]raft.Server]

	mu sync.Mutex
	// admitted are dialers of this cluster that the configuration does
	// not list yet but the cluster's leader does (Node.admitListed).
	admitted map[string]bool
	// unknown are dialers of this cluster refused as not members since
	// the last takeUnknown, at most maxUnknown of them.
	unknown map[string]bool
}

// maxUnknown bounds the refused ids a node asks its leader about at once.
const maxUnknown = 16

func (m *memberCache) set(servers []raft.Server) {
	s := slices.Clone(servers)
	m.servers.Store(&s)
}

func (m *memberCache) get() []raft.Server {
	if s := m.servers.Load(); s != nil {
		return *s
	}
	return nil
}

// noteUnknown remembers a dialer of this cluster refused as not a member.
func (m *memberCache) noteUnknown(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unknown == nil {
		m.unknown = map[string]bool{}
	}
	if len(m.unknown) < maxUnknown {
		m.unknown[id] = true
	}
}

// takeUnknown returns and forgets the dialers noted since the last call.
func (m *memberCache) takeUnknown() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := slices.Sorted(maps.Keys(m.unknown))
	m.unknown = nil
	return ids
}

// admit lets dialer id in although the configuration does not list it.
func (m *memberCache) admit(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.admitted == nil {
		m.admitted = map[string]bool{}
	}
	m.admitted[id] = true
}

func (m *memberCache) isAdmitted(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.admitted[id]
}

// has reports whether id is in the configuration, and whether that has
// any server at all.
func (m *memberCache) has(id string) (member, known bool) {
	servers := m.get()
	listed := slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == id })
	return listed || m.isAdmitted(id), len(servers) > 0
}

// idAt returns the id the configuration lists at addr, if any.
func (m *memberCache) idAt(addr string) (string, bool) {
	for _, s := range m.get() {
		if string(s.Address) == addr {
			return string(s.ID), true
		}
	}
	return "", false
}

// otherVoters returns the voters other than self.
func (m *memberCache) otherVoters(self string) []string {
	var ids []string
	for _, s := range m.get() {
		if s.Suffrage == raft.Voter && string(s.ID) != self {
			ids = append(ids, string(s.ID))
		}
	}
	return ids
}

// peerAnswers holds the cluster id each member last named in a handshake,
// either end. Only members are recorded, so a peer cannot grow it.
type peerAnswers struct {
	mu sync.Mutex
	m  map[string]string
}

func (a *peerAnswers) record(nodeID, clusterID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]string{}
	}
	a.m[nodeID] = clusterID
}

func (a *peerAnswers) snapshot() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.m)
}

// logLimiter lets one log through per key and refusalLogEvery.
type logLimiter struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (l *logLimiter) allow(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if t, ok := l.last[key]; ok && now.Sub(t) < refusalLogEvery {
		return false
	}
	if l.last == nil {
		l.last = map[string]time.Time{}
	}
	// Keys name peers' addresses, which anyone can vary: forget the
	// expired ones before the map grows.
	if len(l.last) >= 1024 {
		maps.DeleteFunc(l.last, func(_ string, t time.Time) bool { return now.Sub(t) >= refusalLogEvery })
	}
	l.last[key] = now
	return true
}

// otherClusterVerdict is decideOtherCluster's answer: others maps each
// other voter whose last answer named another cluster to that cluster.
type otherClusterVerdict struct {
	refuse bool
	others map[string]string
}

// decideOtherCluster decides whether a node whose data dir holds cluster
// own is the odd one out: it is when a majority of its other voters
// (voters, without itself) last answered the handshake (answers, by node
// id) with another cluster id. A minority proves nothing about which side
// is wrong (a member with a wrong data dir makes its peers see it as
// other), and is only logged, by the handshake. Empty ids tell nothing:
// neither this node's nor an answer's.
func decideOtherCluster(own string, voters []string, answers map[string]string) otherClusterVerdict {
	v := otherClusterVerdict{others: map[string]string{}}
	if own == "" {
		return v
	}
	for _, id := range voters {
		if c := answers[id]; otherClusters(own, c) {
			v.others[id] = c
		}
	}
	v.refuse = len(voters) > 0 && len(v.others) > len(voters)/2
	return v
}

// describeOthers names the voters of otherClusterVerdict.others by
// cluster: "n1, n2 are of cluster Y".
func describeOthers(others map[string]string) string {
	byCluster := map[string][]string{}
	for id, c := range others {
		byCluster[c] = append(byCluster[c], id)
	}
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(byCluster)) {
		ids := byCluster[c]
		slices.Sort(ids)
		verb := "is"
		if len(ids) > 1 {
			verb = "are"
		}
		parts = append(parts, fmt.Sprintf("%s %s of cluster %s", strings.Join(ids, ", "), verb, c))
	}
	return strings.Join(parts, "; ")
}

// writeFrame writes one hello or answer.
func writeFrame(w io.Writer, version byte, body []byte) error {
	b := make([]byte, 0, len(handshakeMagic)+3+len(body))
	b = append(b, handshakeMagic...)
	b = append(b, version)
	b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
	_, err := w.Write(append(b, body...))
	return err
}

// readFrame reads one hello or answer. Its errors tell a peer that sent
// nothing (errNoHandshake), a Raft RPC (errRaftRPC: an older Ordo) and
// anything else apart.
func readFrame(r io.Reader) (version byte, body []byte, err error) {
	var head [len(handshakeMagic) + 3]byte
	if _, err := io.ReadFull(r, head[:1]); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", errNoHandshake, err)
	}
	if head[0] <= maxRaftRPCType {
		return 0, nil, fmt.Errorf("%w: first byte %d", errRaftRPC, head[0])
	}
	if _, err := io.ReadFull(r, head[1:]); err != nil {
		return 0, nil, fmt.Errorf("read the cluster handshake: %w", err)
	}
	if string(head[:len(handshakeMagic)]) != handshakeMagic {
		return 0, nil, fmt.Errorf("%w: starts with %q", errNotOrdo, head[:len(handshakeMagic)])
	}
	version = head[len(handshakeMagic)]
	n := binary.BigEndian.Uint16(head[len(handshakeMagic)+1:])
	if version == 0 || n > maxHandshakeBody {
		return 0, nil, fmt.Errorf("%w: version %d, body of %d bytes", errNotOrdo, version, n)
	}
	body = make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, fmt.Errorf("read the cluster handshake: %w", err)
	}
	return version, body, nil
}

func appendString(b []byte, s string) []byte {
	s = s[:min(len(s), maxHandshakeString)]
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func encodeHello(h hello) []byte {
	return appendString(appendString(nil, h.clusterID), h.nodeID)
}

func encodeAnswer(a answer) []byte {
	b := appendString(appendString([]byte{byte(a.verdict)}, a.clusterID), a.nodeID)
	return appendString(b, a.reason)
}

// bodyReader reads a body's fields; past its end, every read fails and
// err says so. Bytes after the fields it reads are a later version's.
type bodyReader struct {
	b   []byte
	err error
}

func (r *bodyReader) byte() byte {
	if r.err != nil || len(r.b) < 1 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *bodyReader) string() string {
	if r.err != nil || len(r.b) < 2 {
		r.fail()
		return ""
	}
	n := int(binary.BigEndian.Uint16(r.b))
	if len(r.b) < 2+n {
		r.fail()
		return ""
	}
	s := string(r.b[2 : 2+n])
	r.b = r.b[2+n:]
	return s
}

func (r *bodyReader) fail() {
	if r.err == nil {
		r.err = fmt.Errorf("%w: the cluster handshake ends early", errNotOrdo)
	}
}

func decodeHello(body []byte) (hello, error) {
	r := bodyReader{b: body}
	h := hello{clusterID: r.string(), nodeID: r.string()}
	return h, r.err
}

func decodeAnswer(body []byte) (answer, error) {
	r := bodyReader{b: body}
	a := answer{verdict: verdict(r.byte())}
	a.clusterID, a.nodeID, a.reason = r.string(), r.string(), r.string()
	return a, r.err
}
