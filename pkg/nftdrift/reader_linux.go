// SPDX-License-Identifier: Apache-2.0

//go:build linux

package nftdrift

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Reader reads kube-proxy's nftables tables over netlink. A Reader
// remembers what it read: a read when the ruleset's generation has not
// moved since returns the same tables (one request), and the elements of an
// anonymous DNAT map are dumped once per map (the kernel refuses changes to
// an anonymous map bound to its rule, and a new map gets a new handle), so a
// re-read dumps only the maps kube-proxy wrote since. The kernel finds a set
// by a linear search of its table's sets, twice per element dump: the first
// read of 10,000 maps costs it O(maps²), as `nft list` pays too; a re-read
// pays it only for the new maps. The zero value is ready; safe for
// concurrent use; the tables it returns are shared and read-only.
type Reader struct {
	// NetNS is the network namespace to read (a path such as
	// /var/run/netns/x); empty is the process's own.
	NetNS string

	mu sync.Mutex
	// gen and last are the generation and tables of the last read whose
	// generation did not move while it ran.
	gen  uint32
	last []Table
	// maps are the entries of the anonymous maps the last read saw.
	maps  map[mapKey][]mapEntry
	stats ReaderStats
}

// ReaderStats counts a Reader's work, for tests and benchmarks.
type ReaderStats struct {
	// Reads are the calls of Read; Unchanged those answered from the last
	// read (the generation had not moved).
	Reads, Unchanged int
	// MapDumps are the element dumps of anonymous maps; MapsCached the
	// anonymous maps whose elements came from an earlier read.
	MapDumps, MapsCached int
	// Retries are the reads begun again because the ruleset changed while
	// they ran.
	Retries int
}

// mapKey names an anonymous map for as long as it exists: the kernel numbers
// tables per network namespace and sets per table, never reusing a handle.
type mapKey struct {
	family byte
	table  uint64
	set    uint64
}

// families are the nftables families read, in order: ip then ip6.
var families = []struct {
	f    byte
	name string
}{{unix.NFPROTO_IPV4, "ip"}, {unix.NFPROTO_IPV6, "ip6"}}

// Stats returns what the reader did so far.
func (r *Reader) Stats() ReaderStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// maxAttempts bounds the reads begun again because kube-proxy committed a
// change while one ran.
const maxAttempts = 3

// Read returns kube-proxy's table of each family, ip then ip6, as one
// generation of the ruleset: a read during which the generation moved is
// begun again (at most maxAttempts reads; the last stands).
func (r *Reader) Read() ([]Table, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Reads++
	c, err := r.dialRaw()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	gen, err := c.gen()
	if err != nil {
		return nil, err
	}
	if r.last != nil && gen == r.gen {
		r.stats.Unchanged++
		return r.last, nil
	}
	r.last = nil
	for attempt := 1; ; attempt++ {
		maps := map[mapKey][]mapEntry{}
		var out []Table
		for _, fam := range families {
			t, err := r.readTable(c, fam.f, fam.name, maps)
			if err != nil {
				return nil, fmt.Errorf("reading table %s %s: %w", fam.name, TableName, err)
			}
			out = append(out, t)
		}
		r.maps = maps
		after, err := c.gen()
		if err != nil {
			return nil, err
		}
		if after == gen {
			r.gen, r.last = gen, out
			return out, nil
		}
		if attempt == maxAttempts {
			return out, nil
		}
		r.stats.Retries++
		gen = after
	}
}

// mapEntry is one element of a DNAT map, decoded: the endpoint it DNATs to,
// or the endpoint- chain it jumps to (older releases).
type mapEntry struct {
	value netip.AddrPort
	chain string
}

// mapEntryOf decodes one DNAT map element, copying nothing of the netlink
// answer (a cached entry would keep it alive).
func mapEntryOf(e element, v6 bool) (mapEntry, bool) {
	if e.verdict != "" {
		if c := chainOf(e.verdict); c != "" {
			return mapEntry{chain: c}, true
		}
		return mapEntry{}, false
	}
	if ap, ok := decodeAddrPort(e.value, v6); ok {
		return mapEntry{value: ap}, true
	}
	return mapEntry{}, false
}

// conn is one netlink socket for every request of a read (a socket per
// request was most of the CPU at 10,000 chains). Answers are read into one
// buffer of recvBuffer bytes: the kernel sizes each skb of a dump by the
// largest read the socket has seen, and re-walks the table from its start
// for each, so a page-sized read (netlink.Conn's) made the dump of 10,000
// rules or sets quadratic in the kernel.
type conn struct {
	nl  *netlink.Conn
	raw syscall.RawConn
	buf []byte
}

// recvBuffer is the answer buffer: the kernel fills a dump's skb up to
// 32 KiB.
const recvBuffer = 64 << 10

// errDumpInterrupted is a dump the kernel marked inconsistent (the table
// changed while it ran).
var errDumpInterrupted = errors.New("the kernel interrupted a dump: the ruleset changed while it was read")

// dialRaw opens the socket in r's network namespace.
func (r *Reader) dialRaw() (*conn, error) {
	cfg := &netlink.Config{}
	if r.NetNS != "" {
		f, err := os.Open(r.NetNS)
		if err != nil {
			return nil, fmt.Errorf("opening network namespace %s: %w", r.NetNS, err)
		}
		// The socket is created in the namespace while f is open; it
		// stays there once f is closed.
		defer f.Close()
		cfg.NetNS = int(f.Fd())
	}
	nl, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening nftables netlink: %w", err)
	}
	raw, err := nl.SyscallConn()
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("opening nftables netlink: %w", err)
	}
	return &conn{nl: nl, raw: raw, buf: make([]byte, recvBuffer)}, nil
}

// Close closes the socket.
func (c *conn) Close() error { return c.nl.Close() }

// recv reads one datagram of answers into c.buf.
func (c *conn) recv() ([]byte, error) {
	var n, flags int
	var rerr error
	if err := c.raw.Read(func(fd uintptr) bool {
		n, _, flags, _, rerr = unix.Recvmsg(int(fd), c.buf, nil, 0)
		return rerr != unix.EAGAIN
	}); err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, rerr
	}
	if flags&unix.MSG_TRUNC != 0 {
		return nil, fmt.Errorf("a netlink answer larger than %d bytes", len(c.buf))
	}
	return c.buf[:n], nil
}

// request sends one nf_tables request (a dump when dump is set) and calls
// fn with each answer past its nfgenmsg header. The bytes fn gets are
// overwritten by the next read: fn decodes, it keeps nothing.
func (c *conn) request(msg uint16, family byte, dump bool, fn func([]byte) error, a ...netlink.Attribute) error {
	data, err := netlink.MarshalAttributes(a)
	if err != nil {
		return err
	}
	flags := netlink.Request
	if dump {
		flags |= netlink.Dump
	}
	sent, err := c.nl.Send(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | msg), Flags: flags},
		// nfgenmsg: family, version NFNETLINK_V0, resource id 0.
		Data: append([]byte{family, unix.NFNETLINK_V0, 0, 0}, data...),
	})
	if err != nil {
		return err
	}
	interrupted := false
	for {
		b, err := c.recv()
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(b)
		if err != nil {
			return fmt.Errorf("parsing a netlink answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != sent.Header.Sequence {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR, unix.NLMSG_DONE:
				if len(m.Data) >= 4 {
					if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code < 0 {
						return syscall.Errno(-code)
					}
				}
				if interrupted {
					return errDumpInterrupted
				}
				return nil
			}
			if m.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
				interrupted = true
			}
			if len(m.Data) >= 4 {
				if err := fn(m.Data[4:]); err != nil {
					return err
				}
			}
			if !dump {
				return nil
			}
		}
	}
}

// gen returns the ruleset's generation: it moves with every committed
// change in the network namespace.
func (c *conn) gen() (uint32, error) {
	var g uint32
	got := false
	err := c.request(unix.NFT_MSG_GETGEN, unix.AF_UNSPEC, false, func(b []byte) (err error) {
		g, err = decodeGen(b)
		got = err == nil
		return err
	})
	if err == nil && !got {
		err = errors.New("no answer")
	}
	if err != nil {
		return 0, fmt.Errorf("reading the nftables generation: %w", err)
	}
	return g, nil
}

func str(typ uint16, s string) netlink.Attribute {
	return netlink.Attribute{Type: typ, Data: append([]byte(s), 0)}
}

// readTable reads one family's kube-proxy table: chains, sets, every rule
// (one dump), the three verdict maps and the anonymous DNAT maps not read
// before (maps collects the anonymous maps seen).
func (r *Reader) readTable(c *conn, fam byte, name string, maps map[mapKey][]mapEntry) (Table, error) {
	t := Table{Family: name, Chains: map[string]bool{}, Maps: map[string]bool{}, ServiceIPs: map[ServiceKey]string{},
		NodePorts: map[PortKey]string{}, NoEndpoint: map[ServiceKey]string{}, DNAT: map[string][]netip.AddrPort{}, Rules: map[string]int{}}
	var handle uint64
	err := c.request(unix.NFT_MSG_GETTABLE, fam, false, func(b []byte) (err error) {
		handle, err = decodeTableHandle(b)
		return err
	}, str(unix.NFTA_TABLE_NAME, TableName))
	if errors.Is(err, unix.ENOENT) {
		return t, nil
	}
	if err != nil {
		return t, fmt.Errorf("reading the table: %w", err)
	}
	t.Present = true
	v6 := fam == unix.NFPROTO_IPV6

	if err := c.request(unix.NFT_MSG_GETCHAIN, fam, true, func(b []byte) error {
		tbl, ch, err := decodeChain(b)
		if err != nil {
			return fmt.Errorf("decoding a chain: %w", err)
		}
		if tbl == TableName {
			t.Chains[ch] = true
		}
		return nil
	}, str(unix.NFTA_CHAIN_TABLE, TableName)); err != nil {
		return t, fmt.Errorf("listing chains: %w", err)
	}

	anon := map[string]setInfo{}
	if err := c.request(unix.NFT_MSG_GETSET, fam, true, func(b []byte) error {
		s, tbl, err := decodeSet(b)
		if err != nil {
			return fmt.Errorf("decoding a set: %w", err)
		}
		switch {
		case tbl != TableName:
		case s.flags&unix.NFT_SET_ANONYMOUS != 0 || strings.HasPrefix(s.name, anonymousMapName):
			anon[s.name] = s
		default:
			t.Maps[s.name] = true
		}
		return nil
	}, str(unix.NFTA_SET_TABLE, TableName)); err != nil {
		return t, fmt.Errorf("listing sets: %w", err)
	}
	// elements calls fn with each element of set (its bytes are overwritten
	// after fn returns).
	elements := func(set string, fn func(element)) error {
		err := c.request(unix.NFT_MSG_GETSETELEM, fam, true, func(b []byte) error {
			return decodeElements(b, fn)
		}, str(unix.NFTA_SET_ELEM_LIST_TABLE, TableName), str(unix.NFTA_SET_ELEM_LIST_SET, set))
		if err != nil {
			return fmt.Errorf("reading %s: %w", set, err)
		}
		return nil
	}
	for _, m := range VerdictMaps {
		if !t.Maps[m] {
			continue
		}
		if err := elements(m, func(e element) {
			switch m {
			case MapServiceIPs:
				if k, ok := decodeServiceKey(e.key, v6); ok {
					t.ServiceIPs[k] = chainOf(e.verdict)
				}
			case MapNoEndpoint:
				if k, ok := decodeServiceKey(e.key, v6); ok {
					t.NoEndpoint[k] = e.verdict
				}
			case MapNodePorts:
				if k, ok := decodePortKey(e.key); ok {
					t.NodePorts[k] = chainOf(e.verdict)
				}
			}
		}); err != nil {
			return t, err
		}
	}

	// Every rule of the table in one dump.
	var rules []rule
	endpointOf := map[string]netip.AddrPort{} // endpoint- chain → its DNAT target (older releases)
	if err := c.request(unix.NFT_MSG_GETRULE, fam, true, func(b []byte) error {
		ru, err := decodeRule(b, v6)
		if err != nil {
			return fmt.Errorf("decoding a rule: %w", err)
		}
		if strings.HasPrefix(ru.chain, prefixEndpoint) && ru.hasDNAT {
			endpointOf[ru.chain] = ru.dnat
		}
		rules = append(rules, ru)
		return nil
	}, str(unix.NFTA_RULE_TABLE, TableName)); err != nil {
		return t, fmt.Errorf("listing rules: %w", err)
	}
	// The endpoints each Service chain DNATs to.
	for n := range t.Chains {
		if strings.HasPrefix(n, prefixService) || strings.HasPrefix(n, prefixLocal) || strings.HasPrefix(n, prefixExternal) {
			t.Rules[n] = 0
			t.DNAT[n] = []netip.AddrPort{}
		}
	}
	for _, ru := range rules {
		eps, ok := t.DNAT[ru.chain]
		if !ok {
			continue
		}
		t.Rules[ru.chain]++
		for _, set := range ru.lookups {
			s, ok := anon[set]
			if !ok {
				continue
			}
			k := mapKey{fam, handle, s.handle}
			entries, cached := r.maps[k]
			if cached && s.constant() {
				r.stats.MapsCached++
			} else {
				entries = nil
				if err := elements(set, func(e element) {
					if me, ok := mapEntryOf(e, v6); ok {
						entries = append(entries, me)
					}
				}); err != nil {
					return t, fmt.Errorf("reading %s's map: %w", ru.chain, err)
				}
				r.stats.MapDumps++
			}
			if s.constant() {
				maps[k] = entries
			}
			for _, e := range entries {
				if e.chain != "" {
					if ap, ok := endpointOf[e.chain]; ok {
						eps = append(eps, ap)
					}
					continue
				}
				eps = append(eps, e.value)
			}
		}
		// One endpoint: nft folds the map into constants (a rule without
		// a lookup).
		if len(ru.lookups) == 0 && ru.hasDNAT {
			eps = append(eps, ru.dnat)
		}
		// A single endpoint in older releases: a plain jump or goto.
		for _, j := range ru.jumps {
			if ap, ok := endpointOf[j]; ok {
				eps = append(eps, ap)
			}
		}
		t.DNAT[ru.chain] = eps
	}
	return t, nil
}

// ReadIPTables returns the chains of iptables-nft's tables nat, mangle and
// filter, families ip then ip6.
func (r *Reader) ReadIPTables() ([]IPTablesFamily, error) {
	c, err := r.dialRaw()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var out []IPTablesFamily
	for _, fam := range families {
		f := IPTablesFamily{Family: fam.name, Chains: map[string]map[string]bool{}}
		err := c.request(unix.NFT_MSG_GETCHAIN, fam.f, true, func(b []byte) error {
			tbl, ch, err := decodeChain(b)
			if err != nil {
				return fmt.Errorf("decoding a chain: %w", err)
			}
			switch tbl {
			case "nat", "mangle", "filter":
			default:
				return nil
			}
			if f.Chains[tbl] == nil {
				f.Chains[tbl] = map[string]bool{}
			}
			f.Chains[tbl][ch] = true
			return nil
		})
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("listing the chains of family %s: %w", fam.name, err)
		}
		out = append(out, f)
	}
	return out, nil
}
