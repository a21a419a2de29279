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
)

// procRealServers holds the real servers of every address-based virtual
// server listed in /proc/net/ip_vs, by key. A key present with an empty
// slice is a virtual server the kernel listed without real servers.
//
// The kernel's file is the whole table in one read: where the netlink
// interface needs one IPVS_CMD_GET_DEST dump per virtual server (10,000
// round trips for 10,000 Services), the file costs a few hundred reads of a
// page each. It is lossy for virtual servers (no persistence engine, no
// scheduler flags, no address family for a firewall mark), so virtual
// servers still come from the netlink dump and only real servers from here;
// firewall-mark services, whose key the file cannot tell apart by family,
// are left to netlink.
type procRealServers map[Key][]RealServer

// parseProcIPVS parses the text of /proc/net/ip_vs (net/netfilter/ipvs/
// ip_vs_ctl.c, ip_vs_info_seq_show; unchanged since Linux 2.6.28):
//
//	IP Virtual Server version 1.2.1 (size=4096)
//	Prot LocalAddress:Port Scheduler Flags
//	  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
//	TCP  0A600001:01BB rr
//	  -> 0AF40001:192B      Masq    1      0          0
//	UDP  [fd00:0096:0000:0000:0000:0000:0000:000a]:0035 sh
//	FWM  00000007 rr
//
// Lines it does not know (a protocol it has no name for, a firewall mark)
// make it skip that virtual server with its real servers, never guess. A
// line it cannot parse is an error: the caller then reads through netlink.
func parseProcIPVS(data []byte) (procRealServers, error) {
	return readProcIPVS(bytes.NewReader(data))
}

// maxProcIPVSLine bounds one line of /proc/net/ip_vs (the kernel's longest,
// an IPv6 virtual server with a persistence timeout, is under 100 bytes).
const maxProcIPVSLine = 4 << 10

// readProcIPVS parses /proc/net/ip_vs as it reads it (see parseProcIPVS):
// it holds the real servers, never the file.
func readProcIPVS(r io.Reader) (procRealServers, error) {
	out := make(procRealServers)
	var cur *Key // the virtual server whose real servers follow; nil: skip them
	lineNo := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4<<10), maxProcIPVSLine)
	for sc.Scan() {
		lineNo++
		line := sc.Bytes()
		if lineNo <= 3 || len(line) == 0 {
			// The three header lines; checked loosely so a wording change
			// in a future kernel does not blind the reader.
			if lineNo == 1 && !bytes.HasPrefix(line, []byte("IP Virtual Server")) {
				return nil, fmt.Errorf("line 1: not an IPVS table: %.40q", line)
			}
			continue
		}
		if rest, ok := bytes.CutPrefix(line, []byte("  -> ")); ok {
			if cur == nil {
				continue
			}
			r, err := parseProcRealServer(rest)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", lineNo, err)
			}
			out[*cur] = append(out[*cur], r)
			continue
		}
		k, known, err := parseProcVirtualServer(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		cur = nil
		if !known {
			continue
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("line %d: virtual server %s listed twice", lineNo, k)
		}
		out[k] = []RealServer{}
		cur = &k
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", lineNo+1, err)
	}
	return out, nil
}

// parseProcVirtualServer parses "TCP  0A600001:01BB rr …" or
// "TCP  [v6]:0050 rr …". known is false for a line the reader skips on
// purpose (a firewall mark, a protocol IPVS balances but this package does
// not name).
func parseProcVirtualServer(line []byte) (k Key, known bool, err error) {
	fields := bytes.Fields(line)
	if len(fields) < 3 {
		return Key{}, false, fmt.Errorf("virtual server line %.60q: want protocol, address and scheduler", line)
	}
	switch string(fields[0]) {
	case "TCP":
		k.Protocol = TCP
	case "UDP":
		k.Protocol = UDP
	case "SCTP":
		k.Protocol = SCTP
	default: // "FWM", "AH", "ESP", "IP_<n>"
		return Key{}, false, nil
	}
	k.Address, k.Port, err = parseProcAddrPort(fields[1])
	if err != nil {
		return Key{}, false, fmt.Errorf("virtual server %.60q: %w", line, err)
	}
	return k, true, nil
}

// parseProcRealServer parses "0AF40001:192B      Masq    1      0          0".
func parseProcRealServer(rest []byte) (RealServer, error) {
	fields := bytes.Fields(rest)
	if len(fields) != 5 {
		return RealServer{}, fmt.Errorf("real server line %.60q: want 5 fields, got %d", rest, len(fields))
	}
	var r RealServer
	var err error
	if r.Address, r.Port, err = parseProcAddrPort(fields[0]); err != nil {
		return RealServer{}, fmt.Errorf("real server %.60q: %w", rest, err)
	}
	switch string(fields[1]) {
	case "Masq":
		r.Forward = Masquerade
	case "Local":
		r.Forward = LocalNode
	case "Tunnel":
		r.Forward = Tunnel
	case "Route":
		r.Forward = DirectRoute
	default:
		return RealServer{}, fmt.Errorf("real server %.60q: unknown forwarding method %q", rest, fields[1])
	}
	nums := [3]int{}
	for i, f := range fields[2:] {
		n, err := strconv.ParseInt(string(f), 10, 32)
		if err != nil {
			return RealServer{}, fmt.Errorf("real server %.60q: %w", rest, err)
		}
		nums[i] = int(n)
	}
	r.Weight, r.ActiveConn, r.InactiveConn = nums[0], nums[1], nums[2]
	return r, nil
}

// parseProcAddrPort parses "0A600001:01BB" (IPv4 in host-order hex, as
// ntohl prints it) or "[fd00:0096:…:000a]:0050".
func parseProcAddrPort(b []byte) (netip.Addr, uint16, error) {
	i := bytes.LastIndexByte(b, ':')
	if i < 0 {
		return netip.Addr{}, 0, errors.New("no port")
	}
	port, err := strconv.ParseUint(string(b[i+1:]), 16, 16)
	if err != nil || i+1+4 != len(b) {
		return netip.Addr{}, 0, fmt.Errorf("port %q is not 4 hex digits", b[i+1:])
	}
	a := b[:i]
	if len(a) > 2 && a[0] == '[' && a[len(a)-1] == ']' {
		addr, err := netip.ParseAddr(string(a[1 : len(a)-1]))
		if err != nil || !addr.Is6() || addr.Zone() != "" {
			return netip.Addr{}, 0, fmt.Errorf("address %q is not an IPv6 address", a)
		}
		return addr, uint16(port), nil
	}
	if len(a) != 8 {
		return netip.Addr{}, 0, fmt.Errorf("address %q is not 8 hex digits", a)
	}
	v, err := strconv.ParseUint(string(a), 16, 32)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("address %q is not 8 hex digits", a)
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), uint16(port), nil
}
