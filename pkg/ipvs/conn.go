// SPDX-License-Identifier: Apache-2.0

package ipvs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
)

// ProcConnPath is the IPVS connection table of the reading task's network
// namespace (the agent runs in the host's).
const ProcConnPath = "/proc/self/net/ip_vs_conn"

// ConnKey is where a group of IPVS connection entries go: the virtual
// server they came in on and the real server they were scheduled to.
type ConnKey struct {
	// Virtual is the virtual server's address, protocol and port.
	Virtual Key
	// Real is the real server's address and port.
	Real netip.AddrPort
}

// ConnCounts counts connection entries per virtual and real server.
type ConnCounts map[ConnKey]int

// maxConnLine bounds one line of /proc/net/ip_vs_conn (the longest, an
// IPv6 entry with a persistence engine's data, is under 200 bytes).
const maxConnLine = 4 << 10

// ConnTableLimit bounds the connection table read: some 4 million entries
// of the kernel's IPv4 lines, far past a busy node's million. It is read as
// a stream, so the limit bounds reading time, not memory.
var ConnTableLimit = hostfs.Limit{Kind: "the IPVS connection table", Max: 512 << 20}

// MaxConnKeys bounds the distinct virtual and real server pairs counted:
// memory grows with them, not with the entries (a million entries of a
// real node go to at most as many pairs as the IPVS table has real servers,
// plus the ones being drained). More is an error wrapping
// ErrTooManyConnKeys.
const MaxConnKeys = 1 << 16

// ErrTooManyConnKeys: the connection entries counted go to more distinct
// virtual and real server pairs than MaxConnKeys.
var ErrTooManyConnKeys = errors.New("too many distinct connection destinations")

// ReadConnCounts reads the IPVS connection table at host path p under root
// (ProcConnPath on the host, "/proc/net/ip_vs_conn" under another root) and
// counts its entries per virtual and real server, only those keep returns
// true for (nil keeps all). It holds the counts, never the file: the file
// is opened inside the root like every host file (a link out of it
// resolves inside it, a named pipe or device is refused without blocking),
// read as a stream up to ConnTableLimit. A missing file (ip_vs not loaded)
// is an error wrapping os.ErrNotExist.
func ReadConnCounts(root hostfs.Root, p string, keep func(ConnKey) bool) (ConnCounts, error) {
	f, err := root.OpenLimited(p, ConnTableLimit)
	if err != nil {
		return nil, fmt.Errorf("reading the IPVS connection table: %w", err)
	}
	defer f.Close()
	c, err := ParseConnCounts(f, keep)
	if err != nil {
		return nil, fmt.Errorf("reading the IPVS connection table %s: %w", root.Path(p), err)
	}
	return c, nil
}

// ParseConnCounts parses the text of /proc/net/ip_vs_conn
// (net/netfilter/ipvs/ip_vs_conn.c, ip_vs_conn_seq_show):
//
//	Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData
//	UDP 0A000001 C350 0A600001 0035 0AF40001 0035 UDP         00:58
//	TCP [fd00:0000:…:0001] C350 [fd00:…:000a] 0050 [fd00:…:0002] 1F90 ESTABLISHED 897
//
// and counts the entries keep returns true for (nil keeps all) per virtual
// and real server, as it reads: memory grows with the distinct pairs
// counted (at most MaxConnKeys, else an error wrapping ErrTooManyConnKeys),
// never with the entries. IPv4 addresses are host-order hex as ntohl prints
// them; the Expires field is not read. Entries of a protocol this package
// does not name (the persistence templates IPVS lists as "IP") are skipped;
// a line it cannot parse is an error naming the line.
func ParseConnCounts(r io.Reader, keep func(ConnKey) bool) (ConnCounts, error) {
	out := ConnCounts{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4<<10), maxConnLine)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Bytes()
		if lineNo == 1 {
			if !bytes.HasPrefix(line, []byte("Pro ")) {
				return nil, fmt.Errorf("line 1: not an IPVS connection table: %.40q", line)
			}
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		k, ok, err := parseConnLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		if !ok {
			continue
		}
		if n, seen := out[k]; seen {
			out[k] = n + 1
			continue
		}
		if keep != nil && !keep(k) {
			continue
		}
		if len(out) >= MaxConnKeys {
			return nil, fmt.Errorf("line %d: the entries counted go to more than %d distinct virtual and real server pairs: %w", lineNo, MaxConnKeys, ErrTooManyConnKeys)
		}
		out[k] = 1
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", lineNo+1, err)
	}
	if lineNo == 0 {
		return nil, errors.New("empty IPVS connection table file: no header")
	}
	return out, nil
}

// connFields splits line at runs of spaces into at most len(f) fields
// without allocating; it returns how many it found.
func connFields(line []byte, f *[11][]byte) int {
	n := 0
	for i := 0; i < len(line) && n < len(f); {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		if i == len(line) {
			break
		}
		j := i
		for j < len(line) && line[j] != ' ' && line[j] != '\t' {
			j++
		}
		f[n] = line[i:j]
		n++
		i = j
	}
	return n
}

func parseConnLine(line []byte) (ConnKey, bool, error) {
	var fa [11][]byte
	n := connFields(line, &fa)
	f := fa[:n]
	if len(f) < 8 {
		return ConnKey{}, false, fmt.Errorf("connection %.80q: want at least 8 fields, got %d", line, len(f))
	}
	var proto Protocol
	switch string(f[0]) {
	case "TCP":
		proto = TCP
	case "UDP":
		proto = UDP
	case "SCTP":
		proto = SCTP
	default: // "IP" (a persistence template), "AH", "ESP", …
		return ConnKey{}, false, nil
	}
	vaddr, err := parseConnAddr(f[3])
	if err != nil {
		return ConnKey{}, false, fmt.Errorf("connection %.80q: virtual address: %w", line, err)
	}
	vport, err := parseConnPort(f[4])
	if err != nil {
		return ConnKey{}, false, fmt.Errorf("connection %.80q: virtual port: %w", line, err)
	}
	daddr, err := parseConnAddr(f[5])
	if err != nil {
		return ConnKey{}, false, fmt.Errorf("connection %.80q: destination address: %w", line, err)
	}
	dport, err := parseConnPort(f[6])
	if err != nil {
		return ConnKey{}, false, fmt.Errorf("connection %.80q: destination port: %w", line, err)
	}
	return ConnKey{
		Virtual: Key{Address: vaddr, Protocol: proto, Port: vport},
		Real:    netip.AddrPortFrom(daddr, dport),
	}, true, nil
}

func parseConnAddr(b []byte) (netip.Addr, error) {
	if len(b) > 2 && b[0] == '[' && b[len(b)-1] == ']' {
		b = b[1 : len(b)-1]
	}
	if bytes.IndexByte(b, ':') >= 0 {
		a, err := netip.ParseAddr(string(b))
		if err != nil || !a.Is6() || a.Zone() != "" {
			return netip.Addr{}, fmt.Errorf("%q is not an IPv6 address", b)
		}
		return a, nil
	}
	if len(b) != 8 {
		return netip.Addr{}, fmt.Errorf("%q is not 8 hex digits", b)
	}
	v, err := strconv.ParseUint(string(b), 16, 32)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not 8 hex digits", b)
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), nil
}

func parseConnPort(b []byte) (uint16, error) {
	if len(b) != 4 {
		return 0, fmt.Errorf("%q is not 4 hex digits", b)
	}
	v, err := strconv.ParseUint(string(b), 16, 16)
	if err != nil {
		return 0, fmt.Errorf("%q is not 4 hex digits", b)
	}
	return uint16(v), nil
}
