// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// depmod's binary indexes (modules.alias.bin, modules.symbols.bin, …) are a
// radix trie in one file, every integer a big-endian u32:
//
//	magic 0xB007F457, version 0x0002xxxx (major 2), root node offset
//	node at (offset & binNodeMask), holding in turn, each only when its flag is set in the offset:
//	  binNodePrefix: NUL-terminated string, the arc label's remaining characters
//	  binNodeChilds: first byte, last byte, (last-first+1) child offsets (0: none)
//	  binNodeValues: value count, then per value a priority and a NUL-terminated string
//
// The key of a node is the concatenation, from the root, of every node's
// prefix and the character labelling each child slot taken. In
// modules.alias.bin the keys are alias patterns (normalised: '-' → '_'
// outside brackets) and the values module names, the priority being the
// module's position in depmod's module list.
const (
	binIndexMagic        = 0xB007F457
	binIndexVersionMajor = 0x0002
	binIndexHeaderSize   = 12
	binNodePrefix        = 0x80000000
	binNodeValues        = 0x40000000
	binNodeChilds        = 0x20000000
	binNodeMask          = 0x0FFFFFFF
	// binMaxKey bounds the length of a key while walking the trie: depmod
	// writes keys of at most 1023 bytes, so a longer path is a cycle or junk.
	binMaxKey = 4096
)

// errBinIndex marks a malformed binary index.
var errBinIndex = errors.New("malformed binary module index")

// binIndex is depmod's binary trie index read into memory. Every read is
// bounds-checked: a malformed file yields an error wrapping errBinIndex,
// never a panic, and a search visits at most a budget of nodes proportional
// to the file's size, so a cyclic or hostile file cannot make it loop.
type binIndex struct {
	data []byte
	root uint32
}

// binValue is one value of a key: a string and its priority (lower first).
type binValue struct {
	priority uint32
	value    string
}

// binNode is a decoded node; its slices alias the index's data.
type binNode struct {
	prefix   []byte
	first    int    // first child character; > last when the node has none
	last     int    // last child character
	children []byte // (last-first+1) big-endian u32 offsets
	nvalues  uint32
	values   []byte // from the first value's priority to the end of the file
}

// parseBinIndex checks the header of a binary index and returns it.
func parseBinIndex(data []byte) (*binIndex, error) {
	if len(data) < binIndexHeaderSize {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the header", errBinIndex, len(data))
	}
	if m := binary.BigEndian.Uint32(data); m != binIndexMagic {
		return nil, fmt.Errorf("%w: magic %#08x, want %#08x", errBinIndex, m, uint32(binIndexMagic))
	}
	if v := binary.BigEndian.Uint32(data[4:]); v>>16 != binIndexVersionMajor {
		return nil, fmt.Errorf("%w: version %#08x, want major %d", errBinIndex, v, binIndexVersionMajor)
	}
	x := &binIndex{data: data, root: binary.BigEndian.Uint32(data[8:])}
	if _, _, err := x.node(x.root); err != nil {
		return nil, fmt.Errorf("root node: %w", err)
	}
	return x, nil
}

// node decodes the node an offset (flags included) names. ok is false for a
// null offset (no node), as in kmod.
func (x *binIndex) node(off uint32) (n binNode, ok bool, err error) {
	p := int(off & binNodeMask)
	if p == 0 {
		return n, false, nil
	}
	d := x.data
	if p < binIndexHeaderSize || p > len(d) {
		return n, false, fmt.Errorf("%w: node offset %d outside the file (%d bytes)", errBinIndex, p, len(d))
	}
	n.first, n.last = 1, 0
	if off&binNodePrefix != 0 {
		end := bytes.IndexByte(d[p:], 0)
		if end < 0 {
			return n, false, fmt.Errorf("%w: unterminated prefix at %d", errBinIndex, p)
		}
		n.prefix = d[p : p+end]
		p += end + 1
	}
	if off&binNodeChilds != 0 {
		if len(d)-p < 2 {
			return n, false, fmt.Errorf("%w: truncated child range at %d", errBinIndex, p)
		}
		n.first, n.last = int(d[p]), int(d[p+1])
		if n.first > n.last {
			return n, false, fmt.Errorf("%w: child range %d > %d at %d", errBinIndex, n.first, n.last, p)
		}
		p += 2
		size := (n.last - n.first + 1) * 4
		if len(d)-p < size {
			return n, false, fmt.Errorf("%w: truncated child offsets at %d", errBinIndex, p)
		}
		n.children = d[p : p+size]
		p += size
	}
	if off&binNodeValues != 0 {
		if len(d)-p < 4 {
			return n, false, fmt.Errorf("%w: truncated value count at %d", errBinIndex, p)
		}
		n.nvalues = binary.BigEndian.Uint32(d[p:])
		n.values = d[p+4:]
	}
	return n, true, nil
}

// child returns the offset of n's child labelled c (0 when none).
func (n *binNode) child(c byte) uint32 {
	if int(c) < n.first || int(c) > n.last {
		return 0
	}
	i := (int(c) - n.first) * 4
	return binary.BigEndian.Uint32(n.children[i:])
}

// appendValues appends n's values to out in file order.
func (n *binNode) appendValues(out []binValue) ([]binValue, error) {
	v := n.values
	for i := uint32(0); i < n.nvalues; i++ {
		if len(v) < 4 {
			return out, fmt.Errorf("%w: truncated value priority", errBinIndex)
		}
		prio := binary.BigEndian.Uint32(v)
		end := bytes.IndexByte(v[4:], 0)
		if end < 0 {
			return out, fmt.Errorf("%w: unterminated value", errBinIndex)
		}
		out = append(out, binValue{priority: prio, value: string(v[4 : 4+end])})
		v = v[4+end+1:]
	}
	return out, nil
}

// binSearch is the state of one wildcard search.
type binSearch struct {
	x      *binIndex
	budget int // nodes left to visit
	out    []binValue
}

// visit charges one node to the search's budget.
func (s *binSearch) visit() error {
	s.budget--
	if s.budget < 0 {
		return fmt.Errorf("%w: search visits more nodes than the file can hold (cycle)", errBinIndex)
	}
	return nil
}

// searchWild returns the values of every key that, taken as an fnmatch
// pattern, matches key — kmod's index_searchwild: descend the trie along key
// literally; wherever a key of the trie continues with '*', '?' or '[' (in a
// child slot or a node's prefix), walk that whole subtree and fnmatch each
// key's remainder from the wildcard on against key's remainder. Values come
// sorted by priority, as kmod's list; among equal priorities the one found
// later comes first, as kmod's insertion does.
func (x *binIndex) searchWild(key string) ([]binValue, error) {
	s := &binSearch{x: x, budget: len(x.data)}
	off, i := x.root, 0
	for {
		if err := s.visit(); err != nil {
			return nil, err
		}
		n, ok, err := x.node(off)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		matched := true
		for j, c := range n.prefix {
			if c == '*' || c == '?' || c == '[' {
				if err := s.all(&n, j, nil, key[i+j:]); err != nil {
					return nil, err
				}
				return s.sorted(), nil
			}
			if i+j >= len(key) || c != key[i+j] {
				matched = false
				break
			}
		}
		if !matched {
			break
		}
		i += len(n.prefix)
		for _, w := range []byte("*?[") {
			if err := s.allChild(&n, w, nil, key[i:]); err != nil {
				return nil, err
			}
		}
		if i == len(key) {
			if s.out, err = n.appendValues(s.out); err != nil {
				return nil, err
			}
			break
		}
		off = n.child(key[i])
		i++
	}
	return s.sorted(), nil
}

// allChild walks the subtree under n's child labelled c, if any.
func (s *binSearch) allChild(n *binNode, c byte, pattern []byte, subkey string) error {
	off := n.child(c)
	if off&binNodeMask == 0 {
		return nil
	}
	if err := s.visit(); err != nil {
		return err
	}
	child, _, err := s.x.node(off)
	if err != nil {
		return err
	}
	return s.all(&child, 0, append(pattern, c), subkey)
}

// all is kmod's index_searchwild__all: pattern holds the key's characters
// from the first wildcard down to n; n's prefix from j on extends it, then
// every child is walked, then n's values are taken when the pattern matches
// subkey.
func (s *binSearch) all(n *binNode, j int, pattern []byte, subkey string) error {
	pattern = append(pattern, n.prefix[j:]...)
	if len(pattern) > binMaxKey {
		return fmt.Errorf("%w: key longer than %d bytes (cycle)", errBinIndex, binMaxKey)
	}
	for c := n.first; c <= n.last; c++ {
		if err := s.allChild(n, byte(c), pattern, subkey); err != nil {
			return err
		}
	}
	if n.nvalues > 0 && fnmatch(string(pattern), subkey) {
		var err error
		if s.out, err = n.appendValues(s.out); err != nil {
			return err
		}
	}
	return nil
}

// sorted orders the values found as kmod's add_value does: by priority,
// later finds first among equals.
func (s *binSearch) sorted() []binValue {
	out := s.out
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].priority < out[b].priority })
	return out
}

// resolveAliasBin resolves name through modules.alias.bin the way kmod's
// modprobe does: every module whose alias pattern matches the normalised
// name, ordered by priority (depmod's module order, which is also the order
// of modules.alias's lines), without duplicates or invalid module names —
// the same list scanAliases gives over the matching text file.
func resolveAliasBin(x *binIndex, name string) ([]string, error) {
	vals, err := x.searchWild(normalizeAlias(name))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range vals {
		m := Normalize(v.value)
		if validModuleName(m) && !contains(out, m) {
			out = append(out, m)
		}
	}
	return out, nil
}
