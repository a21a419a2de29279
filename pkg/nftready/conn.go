// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
)

// Conn is one entry of the IPVS connection table (/proc/net/ip_vs_conn).
type Conn struct {
	// Protocol is the connection's protocol.
	Protocol ipvs.Protocol
	// Client is the client's address and port.
	Client netip.AddrPort
	// VAddr is the virtual server's address.
	VAddr netip.Addr
	// VPort is the virtual server's port.
	VPort uint16
	// Dest is the real server's address and port.
	Dest netip.AddrPort
	// State is the connection state (ESTABLISHED, TIME_WAIT, …).
	State string
}

// maxConnLine bounds one line of /proc/net/ip_vs_conn (an IPv6 entry with
// persistence engine data is under 200 bytes).
const maxConnLine = 4096

// ReadConnections streams the IPVS connection table from r, calling fn for
// every entry. The header and lines that are not an entry (an unknown
// protocol) are skipped; a line too long or with a malformed address is an
// error naming the line.
func ReadConnections(r io.Reader, fn func(Conn)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), maxConnLine)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if n == 1 && bytes.HasPrefix(line, []byte("Pro ")) {
			continue
		}
		c, ok, err := parseConnLine(line)
		if err != nil {
			return fmt.Errorf("ip_vs_conn line %d: %w", n, err)
		}
		if ok {
			fn(c)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading ip_vs_conn after line %d: %w", n, err)
	}
	return nil
}

var errConnFields = errors.New("want protocol, client, client port, virtual address, virtual port, destination, destination port, state")

// parseConnLine parses "TCP 0A000001 A2B3 0A00020F 7530 0AF40005 1F90
// ESTABLISHED 899" (IPv4, hex) or the same with IPv6 addresses written
// colon-separated. ok is false for an unknown protocol.
func parseConnLine(line []byte) (Conn, bool, error) {
	f := bytes.Fields(line)
	if len(f) == 0 {
		return Conn{}, false, nil
	}
	if len(f) < 8 {
		return Conn{}, false, errConnFields
	}
	proto, err := ipvs.ParseProtocol(string(f[0]))
	if err != nil {
		return Conn{}, false, nil
	}
	var addrs [3]netip.Addr
	var ports [3]uint16
	for i := range 3 {
		if addrs[i], err = parseConnAddr(f[1+2*i]); err != nil {
			return Conn{}, false, err
		}
		p, err := strconv.ParseUint(string(f[2+2*i]), 16, 16)
		if err != nil {
			return Conn{}, false, fmt.Errorf("port %q: %w", f[2+2*i], err)
		}
		ports[i] = uint16(p)
	}
	return Conn{Protocol: proto, Client: netip.AddrPortFrom(addrs[0], ports[0]), VAddr: addrs[1], VPort: ports[1],
		Dest: netip.AddrPortFrom(addrs[2], ports[2]), State: string(f[7])}, true, nil
}

// parseConnAddr reads an IPv4 address as 8 hex digits, or an IPv6 one.
func parseConnAddr(b []byte) (netip.Addr, error) {
	if len(b) == 8 {
		var a [4]byte
		if _, err := hex.Decode(a[:], b); err != nil {
			return netip.Addr{}, fmt.Errorf("address %q: %w", b, err)
		}
		return netip.AddrFrom4(a), nil
	}
	a, err := netip.ParseAddr(string(b))
	if err != nil || !a.Is6() || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("address %q: not 8 hex digits nor IPv6", b)
	}
	return a.Unmap(), nil
}
