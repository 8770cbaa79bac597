// Package grpcerr words grpc-go's transport failures as an operator reads
// them: "connection refused", not `rpc error: code = Unavailable desc =
// connection error: desc = "transport: Error while dialing: ..."`. The
// node's answers, its logs and the command line say it alike.
package grpcerr

import (
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// transportPrefixes begin the messages of the Unavailable statuses grpc-go
// makes on the client side when a connection cannot be made or breaks;
// a server's own Unavailable statuses (Ordo's) begin otherwise.
var transportPrefixes = []string{
	"connection error: desc = ",
	"transport: ",
	"transport is closing",
	"error reading from server",
	"closing transport due to",
	"the connection is draining",
	"the stream is rejected because server is draining the connection",
}

// TransportReason reports whether msg, an Unavailable status's, is a
// transport failure's, and why it failed in a few words: the innermost
// cause, "connection refused" of `connection error: desc = "transport:
// Error while dialing: dial tcp 127.0.0.1:7001: connect: connection
// refused"`.
func TransportReason(msg string) (string, bool) {
	if !slices.ContainsFunc(transportPrefixes, func(p string) bool { return strings.HasPrefix(msg, p) }) {
		return "", false
	}
	if desc, ok := strings.CutPrefix(msg, "connection error: desc = "); ok {
		if d, err := strconv.Unquote(desc); err == nil {
			desc = d
		}
		msg = desc
	}
	reason := strings.TrimSpace(msg[strings.LastIndex(msg, ": ")+1:])
	switch {
	case strings.Contains(msg, "draining"), strings.HasPrefix(msg, "closing transport"), msg == "transport is closing",
		reason == "EOF", strings.HasSuffix(reason, "connection reset by peer"), strings.HasSuffix(reason, "broken pipe"):
		return "the connection closed", true
	case strings.HasSuffix(reason, "i/o timeout"), strings.HasSuffix(reason, "deadline exceeded"):
		return "timed out", true
	case reason == "":
		return "no connection", true
	}
	return reason, true
}

// Describe is err in a few words: a transport failure's reason ("cannot
// connect (connection refused)"), a gRPC status as its code and message
// ("AlreadyExists: node already exists: ...", without grpc-go's "rpc
// error: code = ... desc ="), else err's text.
func Describe(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	if reason, ok := TransportReason(st.Message()); ok && st.Code() == codes.Unavailable {
		return "cannot connect (" + reason + ")"
	}
	return st.Code().String() + ": " + st.Message()
}
