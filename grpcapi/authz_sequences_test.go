package grpcapi

import (
	"testing"

	"github.com/seed-e8569b35/ordo/api"
)

// Defining sequences is for operators; using and reading them for clients.
func TestSequenceMethodsAccess(t *testing.T) {
	for method, want := range map[string]access{
		api.Admin_CreateSequence_FullMethodName:   accessAdmin,
		api.Admin_DropSequence_FullMethodName:     accessAdmin,
		api.Admin_ListSequences_FullMethodName:    accessClient,
		api.Admin_DescribeSequence_FullMethodName: accessClient,
		api.Sequencer_Next_FullMethodName:         accessClient,
	} {
		if got := methodAccess(method); got != want {
			t.Errorf("%s needs access %d, want %d", method, got, want)
		}
	}
}
