package startup

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/bbolt"
)

// mustBoltFile writes a small BoltDB file with a bucket of keys and
// returns its bytes.
func mustBoltFile(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("logs"))
		if err != nil {
			return err
		}
		for i := range 200 {
			if err := b.Put([]byte{byte(i >> 8), byte(i)}, make([]byte, 100)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestCheckPageTree: a sound file passes; a page that points back at
// itself, or past the end, is caught without following it for ever.
func TestCheckPageTree(t *testing.T) {
	good := mustBoltFile(t)
	if err := checkPageTree(good); err != nil {
		t.Fatalf("a sound file: %v", err)
	}
	le := binary.LittleEndian
	meta := func(data []byte) (root, pageSize uint64) {
		// The newer of the two meta pages names the root.
		ps := uint64(le.Uint32(data[16+8:]))
		m0, m1 := data[16:], data[ps+16:]
		m := m0
		if le.Uint64(m1[48:]) > le.Uint64(m0[48:]) {
			m = m1
		}
		return le.Uint64(m[16:]), ps
	}
	for _, tt := range []struct {
		name   string
		damage func(data []byte)
		want   string
	}{
		{"root points at itself", func(d []byte) {
			root, ps := meta(d)
			p := d[root*ps:]
			le.PutUint16(p[8:], 0x01) // a branch
			le.PutUint16(p[10:], 1)
			le.PutUint64(p[16+8:], root)
		}, "reached twice"},
		{"root points past the end", func(d []byte) {
			root, ps := meta(d)
			p := d[root*ps:]
			le.PutUint16(p[8:], 0x01)
			le.PutUint16(p[10:], 1)
			le.PutUint64(p[16+8:], 1<<40)
		}, "outside pages"},
		{"root zeroed", func(d []byte) {
			root, ps := meta(d)
			clear(d[root*ps : (root+1)*ps])
		}, "neither a branch nor a leaf"},
		{"metas zeroed", func(d []byte) {
			_, ps := meta(d)
			clear(d[:2*ps])
		}, "no valid meta"},
	} {
		data := append([]byte(nil), good...)
		tt.damage(data)
		if err := checkPageTree(data); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}
