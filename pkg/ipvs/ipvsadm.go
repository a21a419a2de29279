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
// sorted as ipvsadm sorts by default, without ipvsadm's first line ("IP
// Virtual Server version …", which describes the kernel, not the table).
func (t Table) WriteIPVSAdm(w io.Writer) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(ipvsadmTitle)
	for _, e := range t.ipvsadmSorted() {
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
		fmt.Fprintf(&b, "%-4s %s", v.Protocol, ipvsadmAddrPort(v.Address, v.Port))
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

// ipvsadmSorted returns a copy of t ordered as `ipvsadm -L` orders it
// (libipvs ipvs_cmp_services and ipvs_cmp_dests through glibc's qsort).
// The comparators subtract unsigned values into an int, so they overflow
// (192.0.2.10 sorts before 10.96.0.1) and are not transitive; mimicking them
// and glibc's merge sort exactly is what reproduces ipvsadm's order.
func (t Table) ipvsadmSorted() Table {
	out := make(Table, len(t))
	for i, e := range t {
		out[i] = Entry{Virtual: e.Virtual, Real: glibcMergeSort(e.Real, ipvsadmCmpDests)}
	}
	return glibcMergeSort(out, func(a, b Entry) int { return ipvsadmCmpServices(a.Virtual, b.Virtual) })
}

// glibcMergeSort sorts like glibc 2.36's qsort (msort_with_tmp): top-down,
// left half n/2, ties taken from the left.
func glibcMergeSort[T any](in []T, cmp func(a, b T) int) []T {
	s := append([]T(nil), in...)
	tmp := make([]T, len(s))
	var sortRange func(b []T)
	sortRange = func(b []T) {
		n := len(b)
		if n <= 1 {
			return
		}
		n1 := n / 2
		b1, b2 := b[:n1], b[n1:]
		sortRange(b1)
		sortRange(b2)
		t := tmp[:0]
		i, j := 0, 0
		for i < len(b1) && j < len(b2) {
			if cmp(b1[i], b2[j]) <= 0 {
				t = append(t, b1[i])
				i++
			} else {
				t = append(t, b2[j])
				j++
			}
		}
		t = append(t, b1[i:]...)
		copy(b, t) // what is left of b2 is already in place
	}
	sortRange(s)
	return s
}

// u32diff is C's `int r = (u_int32_t)a - (u_int32_t)b`.
func u32diff(a, b uint32) int { return int(int32(a - b)) }

func addrWords(a netip.Addr) []uint32 {
	if a.Is4() || a.Is4In6() {
		b := a.Unmap().As4()
		return []uint32{binary.BigEndian.Uint32(b[:])}
	}
	b := a.As16()
	return []uint32{binary.BigEndian.Uint32(b[0:]), binary.BigEndian.Uint32(b[4:]), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])}
}

func cmpAddrs(a, b netip.Addr) int {
	aw, bw := addrWords(a), addrWords(b)
	r := 0
	for i := 0; r == 0 && i < len(aw) && i < len(bw); i++ {
		r = u32diff(aw[i], bw[i])
	}
	return r
}

func family(v VirtualServer) int {
	if v.Address.Is6() && !v.Address.Is4In6() {
		return 10 // AF_INET6
	}
	return 2 // AF_INET
}

func ipvsadmCmpServices(a, b VirtualServer) int {
	if r := u32diff(a.FWMark, b.FWMark); r != 0 {
		return r
	}
	if r := family(a) - family(b); r != 0 {
		return r
	}
	if r := int(a.Protocol) - int(b.Protocol); r != 0 {
		return r
	}
	if r := cmpAddrs(a.Address, b.Address); r != 0 {
		return r
	}
	return int(a.Port) - int(b.Port)
}

func ipvsadmCmpDests(a, b RealServer) int {
	if r := cmpAddrs(a.Address, b.Address); r != 0 {
		return r
	}
	return int(a.Port) - int(b.Port)
}
