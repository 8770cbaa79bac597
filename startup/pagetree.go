package startup

import (
	"encoding/binary"
	"fmt"
)

// checkPageTree walks the page tree of the BoltDB file data (the bytes of
// raft.db) from its newest valid meta page, without BoltDB, and reports
// the first page that is out of bounds, of the wrong kind, or reached
// twice. BoltDB itself trusts those links: a damaged file whose pages
// point back at each other sends its cursors round for ever, growing
// their stacks until memory runs out. Only once this walk passes does
// checkLogStore let BoltDB read every key.
//
// The layout read here is BoltDB 1.3's, in the machine's byte order
// (little-endian on every platform Ordo is built for).
func checkPageTree(data []byte) error {
	const pageHeader, element = 16, 16
	le := binary.LittleEndian
	var best struct{ root, high, txid uint64 }
	var pageSize uint64
	found := false
	for m := 0; m < 2; m++ {
		// Each meta page sits at m * its page size; the first holds
		// the page size for both.
		ps := uint64(4096)
		if len(data) >= pageHeader+12 {
			ps = uint64(le.Uint32(data[pageHeader+8:]))
		}
		off := uint64(m) * ps
		if ps < 512 || off+pageHeader+64 > uint64(len(data)) {
			continue
		}
		meta := data[off+pageHeader:]
		if le.Uint32(meta[0:]) != 0xED0CDAED || le.Uint32(meta[4:]) != 2 {
			continue
		}
		if txid := le.Uint64(meta[48:]); !found || txid > best.txid {
			best.root, best.high, best.txid = le.Uint64(meta[16:]), le.Uint64(meta[40:]), txid
			pageSize, found = uint64(le.Uint32(meta[8:])), true
		}
	}
	if !found {
		return fmt.Errorf("no valid meta page")
	}
	seen := map[uint64]bool{}
	var walk func(id uint64) error
	var leaf func(p []byte) error
	page := func(id uint64) ([]byte, error) {
		if id < 2 || id >= best.high {
			return nil, fmt.Errorf("page %d is outside pages 2 to %d", id, best.high-1)
		}
		off := id * pageSize
		if off+pageHeader > uint64(len(data)) {
			return nil, fmt.Errorf("page %d lies past the end of the file", id)
		}
		span := (1 + uint64(le.Uint32(data[off+12:]))) * pageSize
		if off+span > uint64(len(data)) || id+span/pageSize > best.high {
			return nil, fmt.Errorf("page %d overflows past the end", id)
		}
		for i := id; i < id+span/pageSize; i++ {
			if seen[i] {
				return nil, fmt.Errorf("page %d is reached twice", i)
			}
			seen[i] = true
		}
		return data[off : off+span], nil
	}
	walk = func(id uint64) error {
		p, err := page(id)
		if err != nil {
			return err
		}
		flags, count := le.Uint16(p[8:]), int(le.Uint16(p[10:]))
		switch {
		case flags&0x01 != 0: // branch
			if count == 0 {
				return fmt.Errorf("branch page %d is empty", id)
			}
			for i := range count {
				e := pageHeader + i*element
				if e+element > len(p) {
					return fmt.Errorf("branch page %d: element %d past the page", id, i)
				}
				if err := walk(le.Uint64(p[e+8:])); err != nil {
					return err
				}
			}
			return nil
		case flags&0x02 != 0:
			return leaf(p)
		default:
			return fmt.Errorf("page %d is neither a branch nor a leaf (flags %#x)", id, flags)
		}
	}
	leaf = func(p []byte) error {
		count := int(le.Uint16(p[10:]))
		for i := range count {
			e := pageHeader + i*element
			if e+element > len(p) {
				return fmt.Errorf("leaf element %d past its page", i)
			}
			pos, ksize, vsize := uint64(le.Uint32(p[e+4:])), uint64(le.Uint32(p[e+8:])), uint64(le.Uint32(p[e+12:]))
			start := uint64(e) + pos
			if start+ksize+vsize > uint64(len(p)) {
				return fmt.Errorf("leaf element %d: key and value past its page", i)
			}
			if le.Uint32(p[e:])&0x01 == 0 { // not a bucket
				continue
			}
			value := p[start+ksize : start+ksize+vsize]
			if len(value) < 16 {
				return fmt.Errorf("leaf element %d: bucket header too short", i)
			}
			if root := le.Uint64(value); root != 0 {
				if err := walk(root); err != nil {
					return err
				}
				continue
			}
			inline := value[16:] // an inline bucket: a leaf page in the value
			if len(inline) < pageHeader || le.Uint16(inline[8:])&0x02 == 0 {
				return fmt.Errorf("leaf element %d: inline bucket is not a leaf page", i)
			}
			if err := leaf(inline); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(best.root)
}
