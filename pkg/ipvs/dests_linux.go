// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ipvs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	mobyipvs "github.com/moby/ipvs"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// IPVS generic-netlink command, attribute and message numbers
// (include/uapi/linux/ip_vs.h).
const (
	ipvsCmdGetDest       = 8
	ipvsCmdAttrService   = 1
	ipvsCmdAttrDest      = 2
	ipvsSvcAttrAF        = 1
	ipvsSvcAttrProtocol  = 2
	ipvsSvcAttrAddr      = 3
	ipvsSvcAttrPort      = 4
	ipvsSvcAttrFWMark    = 5
	ipvsDestAttrAddr     = 1
	ipvsDestAttrPort     = 2
	ipvsDestAttrFwd      = 3
	ipvsDestAttrWeight   = 4
	ipvsDestAttrUThresh  = 5
	ipvsDestAttrLThresh  = 6
	ipvsDestAttrActive   = 7
	ipvsDestAttrInactive = 8
	ipvsDestAttrAF       = 11
	genlHdrLen           = 4
	destRecvTimeout      = 3 * time.Second
	destRecvBuffer       = 64 << 10
)

// destReader dumps the real servers of one virtual server at a time over
// its own blocking generic-netlink socket with one reused receive buffer.
//
// moby/ipvs's GetDestinations costs, per virtual server, a getsockname, a
// 64 KiB buffer and a trip through Go's netpoller with a read deadline; with
// one dump per virtual server that is most of the time of reading a large
// table. This reader does one sendto and one or two recvfrom per virtual
// server (what ipvsadm does) and converts through the same moby/ipvs
// Destination type as the rest of the package. It is not safe for
// concurrent use; Handle serialises it.
type destReader struct {
	fd  int
	pid uint32
	seq uint32
	buf []byte
}

// newDestReader opens the socket in the caller's network namespace.
func newDestReader() (*destReader, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("opening generic netlink socket: %w", err)
	}
	tv := unix.NsecToTimeval(destRecvTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("setting the netlink receive timeout: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding generic netlink socket: %w", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("reading the netlink port id: %w", err)
	}
	nsa, ok := sa.(*unix.SockaddrNetlink)
	if !ok {
		unix.Close(fd)
		return nil, errors.New("reading the netlink port id: not a netlink socket")
	}
	return &destReader{fd: fd, pid: nsa.Pid, buf: make([]byte, destRecvBuffer)}, nil
}

func (r *destReader) close() {
	if r != nil && r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// destinations dumps the real servers of s using generic-netlink family id.
func (r *destReader) destinations(family int, s *mobyipvs.Service) ([]*mobyipvs.Destination, error) {
	r.seq++
	req := nl.NewNetlinkRequest(family, unix.NLM_F_ACK|unix.NLM_F_DUMP)
	req.Seq = r.seq
	req.AddData(&nl.Genlmsg{Command: ipvsCmdGetDest, Version: 1})
	req.AddData(serviceSelector(s))
	if err := unix.Sendto(r.fd, req.Serialize(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sending IPVS_CMD_GET_DEST: %w", err)
	}
	var out []*mobyipvs.Destination
	for {
		n, _, err := unix.Recvfrom(r.fd, r.buf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return nil, fmt.Errorf("receiving IPVS real servers: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(r.buf[:n])
		if err != nil {
			return nil, fmt.Errorf("parsing IPVS real servers: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != r.seq || m.Header.Pid != r.pid {
				continue // a late answer to an earlier, abandoned request
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, errors.New("short netlink error message")
				}
				if errno := int32(binary.NativeEndian.Uint32(m.Data[:4])); errno != 0 {
					return nil, syscall.Errno(-errno)
				}
				return out, nil
			}
			d, err := parseDestMessage(m.Data, s.AddressFamily)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
	}
}

// serviceSelector is the IPVS_CMD_ATTR_SERVICE attribute that names s for a
// GET: its family and either its firewall mark or protocol, address and port.
func serviceSelector(s *mobyipvs.Service) *nl.RtAttr {
	a := nl.NewRtAttr(ipvsCmdAttrService, nil)
	a.AddRtAttr(ipvsSvcAttrAF, nl.Uint16Attr(s.AddressFamily))
	if s.FWMark != 0 {
		a.AddRtAttr(ipvsSvcAttrFWMark, nl.Uint32Attr(s.FWMark))
		return a
	}
	a.AddRtAttr(ipvsSvcAttrProtocol, nl.Uint16Attr(s.Protocol))
	addr := s.Address.To16()
	if s.AddressFamily == syscall.AF_INET {
		addr = s.Address.To4()
	}
	a.AddRtAttr(ipvsSvcAttrAddr, addr)
	port := make([]byte, 2)
	binary.BigEndian.PutUint16(port, s.Port)
	a.AddRtAttr(ipvsSvcAttrPort, port)
	return a
}

// parseDestMessage decodes one IPVS_CMD_NEW_DEST message (after the netlink
// header) into a moby/ipvs Destination; svcFamily is assumed when the kernel
// (older than 3.18) sends no address family.
func parseDestMessage(data []byte, svcFamily uint16) (*mobyipvs.Destination, error) {
	if len(data) < genlHdrLen {
		return nil, errors.New("parsing IPVS real server: short message")
	}
	top, err := parseAttrs(data[genlHdrLen:])
	if err != nil {
		return nil, fmt.Errorf("parsing IPVS real server: %w", err)
	}
	for _, t := range top {
		if t.typ != ipvsCmdAttrDest {
			continue
		}
		attrs, err := parseAttrs(t.value)
		if err != nil {
			return nil, fmt.Errorf("parsing IPVS real server: %w", err)
		}
		var d mobyipvs.Destination
		var addr []byte
		u32 := func(b []byte) (uint32, error) {
			if len(b) < 4 {
				return 0, fmt.Errorf("parsing IPVS real server: attribute of %d bytes, want 4", len(b))
			}
			return binary.NativeEndian.Uint32(b), nil
		}
		for _, a := range attrs {
			var v uint32
			switch a.typ {
			case ipvsDestAttrAddr:
				addr = a.value
				continue
			case ipvsDestAttrPort:
				if len(a.value) < 2 {
					return nil, errors.New("parsing IPVS real server: short port")
				}
				d.Port = binary.BigEndian.Uint16(a.value)
				continue
			case ipvsDestAttrAF:
				if len(a.value) < 2 {
					return nil, errors.New("parsing IPVS real server: short address family")
				}
				d.AddressFamily = binary.NativeEndian.Uint16(a.value)
				continue
			case ipvsDestAttrFwd, ipvsDestAttrWeight, ipvsDestAttrUThresh, ipvsDestAttrLThresh, ipvsDestAttrActive, ipvsDestAttrInactive:
				if v, err = u32(a.value); err != nil {
					return nil, err
				}
			default:
				continue
			}
			switch a.typ {
			case ipvsDestAttrFwd:
				d.ConnectionFlags = v
			case ipvsDestAttrWeight:
				d.Weight = int(int32(v))
			case ipvsDestAttrUThresh:
				d.UpperThreshold = v
			case ipvsDestAttrLThresh:
				d.LowerThreshold = v
			case ipvsDestAttrActive:
				d.ActiveConnections = int(v)
			case ipvsDestAttrInactive:
				d.InactiveConnections = int(v)
			}
		}
		if d.AddressFamily == 0 {
			d.AddressFamily = svcFamily
		}
		switch {
		case d.AddressFamily == syscall.AF_INET && len(addr) >= 4:
			d.Address = net.IP(append([]byte(nil), addr[:4]...))
		case d.AddressFamily == syscall.AF_INET6 && len(addr) >= 16:
			d.Address = net.IP(append([]byte(nil), addr[:16]...))
		default:
			return nil, fmt.Errorf("parsing IPVS real server: address of %d bytes for family %d", len(addr), d.AddressFamily)
		}
		return &d, nil
	}
	return nil, errors.New("parsing IPVS real server: no destination attribute")
}

// attr is one netlink attribute.
type attr struct {
	typ   uint16
	value []byte
}

// parseAttrs splits netlink attributes, bounds-checked (a malformed buffer
// is an error, never a panic); the nested and byte-order flags are dropped
// from the type.
func parseAttrs(b []byte) ([]attr, error) {
	var out []attr
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		typ := binary.NativeEndian.Uint16(b[2:4]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < 4 || l > len(b) {
			return nil, fmt.Errorf("netlink attribute of length %d in %d bytes", l, len(b))
		}
		out = append(out, attr{typ: typ, value: b[4:l]})
		next := (l + 3) &^ 3
		if next > len(b) {
			next = len(b)
		}
		b = b[next:]
	}
	return out, nil
}
