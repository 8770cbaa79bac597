package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/internal/proc"
)

// Cost is what one process spent on a run, per ID the run received: the
// benchmark itself (its callers and client), or a node as its status
// reports it. CPU per ID is the figure that holds across hosts; the rest
// says where it went.
type Cost struct {
	// Name is "bench", or the node's id; Role the node's role at the end.
	Name string `json:"name"`
	Role string `json:"role,omitempty"`
	// CPU is user and system time over the run.
	CPU time.Duration `json:"cpu"`
	// CPUPerID is CPU over the IDs received, in microseconds.
	CPUPerID float64 `json:"cpu_per_id_us"`
	// Read and write system calls and context switches per ID (0 where
	// the host does not count them).
	ReadsPerID    float64 `json:"reads_per_id"`
	WritesPerID   float64 `json:"writes_per_id"`
	SwitchesPerID float64 `json:"switches_per_id"`
	// A node's NextStream batching: calls per message it read, answers
	// per message it sent; and its confirmation rounds a second.
	CallsPerMessage   float64 `json:"calls_per_message,omitempty"`
	AnswersPerMessage float64 `json:"answers_per_message,omitempty"`
	RoundsPerSecond   float64 `json:"rounds_per_second,omitempty"`
}

// String is one line of the human summary.
func (c Cost) String() string {
	name := c.Name
	if c.Role != "" {
		name += " (" + c.Role + ")"
	}
	s := fmt.Sprintf("%-16s %6.2f µs CPU/ID; per ID %.2f reads, %.2f writes, %.2f switches", name, c.CPUPerID, c.ReadsPerID, c.WritesPerID, c.SwitchesPerID)
	if c.CallsPerMessage > 0 || c.AnswersPerMessage > 0 {
		s += fmt.Sprintf("; stream: %.1f calls per message read, %.1f answers per message sent", c.CallsPerMessage, c.AnswersPerMessage)
	}
	if c.RoundsPerSecond > 0 {
		s += fmt.Sprintf("; %.0f rounds/s", c.RoundsPerSecond)
	}
	return s
}

// costMeter reads what the benchmark and the nodes have spent at the
// start of a run, to tell at its end what the run cost.
type costMeter struct {
	self  proc.Usage
	nodes map[string]*api.NodeInfo
	ask   func(context.Context) map[string]*api.NodeInfo
}

// startCosts reads this process's usage now and, when nodes is set, the
// nodes' (by their status).
func startCosts(ctx context.Context, nodes func(context.Context) map[string]*api.NodeInfo) *costMeter {
	m := &costMeter{ask: nodes}
	if nodes != nil {
		m.nodes = nodes(ctx)
	}
	m.self = proc.Self()
	return m
}

// spent is what the benchmark and the nodes had spent at the end of a
// run, read as soon as its callers stop (the history check after it is
// not the run's cost).
type spent struct {
	m     *costMeter
	self  proc.Usage
	nodes map[string]*api.NodeInfo
}

// end reads what the benchmark and the nodes have spent by now.
func (m *costMeter) end(ctx context.Context) spent {
	s := spent{m: m, self: proc.Self()}
	if m.ask != nil {
		s.nodes = m.ask(ctx)
	}
	return s
}

// perID is what the run cost, per each of its ids IDs, the benchmark
// first and then the nodes whose status answered at both ends, the
// leader first.
func (s spent) perID(ids int64, elapsed time.Duration) []Cost {
	out := []Cost{costOf("bench", "", s.self.Sub(s.m.self), ids)}
	var nodes []Cost
	for id, after := range s.nodes {
		before := s.m.nodes[id]
		if before == nil || before.Usage == nil || after.Usage == nil || restarted(before.Usage, after.Usage) {
			continue
		}
		a, b := after.Usage, before.Usage
		c := costOf(id, after.Role, proc.Usage{
			CPU:        time.Duration(a.CpuMicros-b.CpuMicros) * time.Microsecond,
			ReadCalls:  a.ReadSyscalls - b.ReadSyscalls,
			WriteCalls: a.WriteSyscalls - b.WriteSyscalls,
			Switches:   a.ContextSwitches - b.ContextSwitches,
		}, ids)
		c.CallsPerMessage = ratio(a.StreamCallsReceived-b.StreamCallsReceived, a.StreamMessagesReceived-b.StreamMessagesReceived)
		c.AnswersPerMessage = ratio(a.StreamAnswersSent-b.StreamAnswersSent, a.StreamMessagesSent-b.StreamMessagesSent)
		c.RoundsPerSecond = float64(a.ConfirmRounds-b.ConfirmRounds) / elapsed.Seconds()
		nodes = append(nodes, c)
	}
	slices.SortFunc(nodes, func(x, y Cost) int {
		if (x.Role == "leader") != (y.Role == "leader") {
			if x.Role == "leader" {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Name, y.Name)
	})
	return append(out, nodes...)
}

// restarted reports whether a node's counts went back between two
// statuses: it restarted during the run, and what it spent is unknown.
func restarted(before, after *api.NodeUsage) bool {
	return after.CpuMicros < before.CpuMicros || after.ReadSyscalls < before.ReadSyscalls ||
		after.WriteSyscalls < before.WriteSyscalls || after.ContextSwitches < before.ContextSwitches ||
		after.StreamCallsReceived < before.StreamCallsReceived || after.StreamMessagesReceived < before.StreamMessagesReceived ||
		after.StreamAnswersSent < before.StreamAnswersSent || after.StreamMessagesSent < before.StreamMessagesSent ||
		after.ConfirmRounds < before.ConfirmRounds
}

// costOf is u spent over ids IDs.
func costOf(name, role string, u proc.Usage, ids int64) Cost {
	n := uint64(max(ids, 0))
	return Cost{
		Name: name, Role: role, CPU: u.CPU,
		CPUPerID:      ratio(uint64(u.CPU.Nanoseconds()), n) / 1e3,
		ReadsPerID:    ratio(u.ReadCalls, n),
		WritesPerID:   ratio(u.WriteCalls, n),
		SwitchesPerID: ratio(u.Switches, n),
	}
}

// ratio is a/b, 0 when b is.
func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// statuses reads the nodes' statuses for a run's costs, through a
// client of its own; ask is nil for etcd.
type statuses struct {
	c   *client.Client
	ask func(context.Context) map[string]*api.NodeInfo
}

// statusOf is cfg's reader of node statuses.
func statusOf(cfg Config) (statuses, error) {
	if cfg.Target == TargetEtcd {
		return statuses{}, nil
	}
	var opts []client.Option
	if cfg.TLS != nil {
		opts = append(opts, client.WithTLS(cfg.TLS))
	}
	c, err := client.New(cfg.Addrs, opts...)
	if err != nil {
		return statuses{}, err
	}
	return statuses{c: c, ask: func(ctx context.Context) map[string]*api.NodeInfo { return nodeStatuses(ctx, c) }}, nil
}

func (s statuses) close() {
	if s.c != nil {
		s.c.Close()
	}
}

// nodeStatuses is the cluster's nodes' statuses by id, through c; empty
// when the cluster cannot be asked, so a run's figures never depend on
// it.
func nodeStatuses(ctx context.Context, c *client.Client) map[string]*api.NodeInfo {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var resp *api.StatusResponse
	err := c.Admin(ctx, func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) (err error) {
		resp, err = a.Status(ctx, &api.StatusRequest{}, opts...)
		return err
	})
	out := map[string]*api.NodeInfo{}
	if err != nil {
		return out
	}
	for _, n := range resp.Nodes {
		if n.Error == "" {
			out[n.Id] = n
		}
	}
	return out
}
