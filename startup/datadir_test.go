package startup

import (
	"slices"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestStoredConfiguration: the configuration a data dir holds is the one
// Raft would start with: the newest configuration entry after the latest
// snapshot, else the snapshot's; older entries, and the address map, do
// not count.
func TestStoredConfiguration(t *testing.T) {
	conf := func(ids ...string) raft.Configuration {
		var c raft.Configuration
		for _, id := range ids {
			c.Servers = append(c.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":1")})
		}
		return c
	}
	entry := func(index uint64, c *raft.Configuration) *raft.Log {
		if c == nil {
			return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: []byte(`{}`)}
		}
		return &raft.Log{Index: index, Term: 1, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(*c)}
	}
	c1, c12, c2, c123 := conf("n1"), conf("n1", "n2"), conf("n2"), conf("n1", "n2", "n3")
	type snap struct {
		index uint64
		conf  raft.Configuration
	}
	cases := []struct {
		name string
		snap *snap
		log  []*raft.Log
		want []string
	}{
		{"empty", nil, nil, nil},
		{"one entry", nil, []*raft.Log{entry(1, &c1), entry(2, nil)}, []string{"n1"}},
		{"the newest entry", nil, []*raft.Log{entry(1, &c1), entry(2, nil), entry(3, &c12), entry(4, nil), entry(5, &c2), entry(6, nil)}, []string{"n2"}},
		{"a snapshot alone", &snap{4, c123}, nil, []string{"n1", "n2", "n3"}},
		{"an entry after the snapshot", &snap{4, c1}, []*raft.Log{entry(5, nil), entry(6, &c12), entry(7, nil)}, []string{"n1", "n2"}},
		{"entries the snapshot covers", &snap{5, c123}, []*raft.Log{entry(3, &c1), entry(4, nil), entry(5, nil), entry(6, nil)}, []string{"n1", "n2", "n3"}},
	}
	for _, tc := range cases {
		dir := t.TempDir()
		store, snaps, err := OpenStores(dir, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		if err := store.SetUint64(KeyCurrentTerm, 1); err != nil {
			t.Fatal(err)
		}
		if tc.log != nil {
			if err := store.StoreLogs(tc.log); err != nil {
				t.Fatal(err)
			}
		}
		if tc.snap != nil {
			_, trans := raft.NewInmemTransport("")
			sink, err := snaps.Create(raft.SnapshotVersionMax, tc.snap.index, 1, tc.snap.conf, tc.snap.index, trans)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sink.Write([]byte(`{"nodes":{}}`)); err != nil {
				t.Fatal(err)
			}
			if err := sink.Close(); err != nil {
				t.Fatal(err)
			}
			trans.Close()
		}
		store.Close()
		got, err := StoredConfiguration(dir)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var ids []string
		for _, s := range got.Servers {
			ids = append(ids, string(s.ID))
		}
		if !slices.Equal(ids, tc.want) {
			t.Errorf("%s: configuration %v, want %v", tc.name, ids, tc.want)
		}
	}
}
