// SPDX-License-Identifier: Apache-2.0

package ipvs

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// ipvsadmTitle is the column header `ipvsadm -Ln` prints after its version line.
const ipvsadmTitle = "Prot LocalAddress:Port Scheduler Flags\n" +
	"  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n"

// WriteIPVSAdm writes t exactly as `ipvsadm -Ln` (ipvsadm 1.31) prints it,
// in the table's order, without ipvsadm's first line ("IP Virtual Server
// version …", which describes the kernel, not the table).
func (t Table) WriteIPVSAdm(w io.Writer) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(ipvsadmTitle)
	for _, e := range t {
		bw.WriteString(ipvsadmService(e.Virtual))
		bw.WriteByte('\n')
		for _, r := range e.Real {
			fmt.Fprintf(bw, "  -> %-28s %-7s %-6d %-10d %-10d\n",
				ipvsadmAddrPort(r.Address, r.Port), r.Forward, r.Weight, r.ActiveConn, r.InactiveConn)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing the IPVS table: %w", err)
	}
	return nil
}

// ipvsadmAddrPort renders "10.0.0.1:80" or "[fd00::1]:80" as ipvsadm -n does.
func ipvsadmAddrPort(a netip.Addr, port uint16) string {
	if a.Is6() && !a.Is4In6() {
		return fmt.Sprintf("[%s]:%d", a, port)
	}
	return fmt.Sprintf("%s:%d", a.Unmap(), port)
}

func ipvsadmService(v VirtualServer) string {
	var b strings.Builder
	if v.FWMark != 0 {
		fmt.Fprintf(&b, "FWM  %d", v.FWMark)
		if v.Address.Is6() && !v.Address.Is4In6() {
			b.WriteString(" IPv6")
		}
	} else {
		fmt.Fprintf(&b, "%s  %s", v.Protocol, ipvsadmAddrPort(v.Address, v.Port))
	}
	fmt.Fprintf(&b, " %s", v.Scheduler)
	if v.Flags&(FlagSched1|FlagSched2|FlagSched3) != 0 {
		fmt.Fprintf(&b, " (%s)", ipvsadmSchedFlags(v))
	}
	if v.Flags&FlagPersistent != 0 {
		fmt.Fprintf(&b, " persistent %d", v.Timeout)
		if v.Address.Is6() && !v.Address.Is4In6() {
			if v.Netmask != 128 {
				fmt.Fprintf(&b, " mask %d", v.Netmask)
			}
		} else if v.Netmask != 0xffffffff {
			var m [4]byte
			binary.NativeEndian.PutUint32(m[:], v.Netmask)
			fmt.Fprintf(&b, " mask %s", netip.AddrFrom4(m))
		}
		if v.PEName != "" {
			fmt.Fprintf(&b, " pe %s", v.PEName)
		}
	}
	if v.Flags&FlagOnePacket != 0 {
		b.WriteString(" ops")
	}
	return b.String()
}

func ipvsadmSchedFlags(v VirtualServer) string {
	var names []string
	switch v.Scheduler {
	case "sh", "mh":
		if v.Flags&FlagSched1 != 0 {
			names = append(names, v.Scheduler+"-fallback")
		}
		if v.Flags&FlagSched2 != 0 {
			names = append(names, v.Scheduler+"-port")
		}
		if v.Flags&FlagSched3 != 0 {
			names = append(names, "flag-3")
		}
	default:
		for i, f := range []ServiceFlags{FlagSched1, FlagSched2, FlagSched3} {
			if v.Flags&f != 0 {
				names = append(names, fmt.Sprintf("flag-%d", i+1))
			}
		}
	}
	return strings.Join(names, ",")
}
