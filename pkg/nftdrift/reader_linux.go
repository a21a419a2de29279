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

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Reader reads kube-proxy's nftables tables over netlink.
type Reader struct {
	// NetNS is the network namespace to read (a path such as
	// /var/run/netns/x); empty is the process's own.
	NetNS string
}

// families are the nftables families read, in order: ip then ip6.
var families = []struct {
	f    nftables.TableFamily
	name string
}{{nftables.TableFamilyIPv4, "ip"}, {nftables.TableFamilyIPv6, "ip6"}}

// dial opens one lasting netlink socket in r's network namespace, for every
// request of a read (a socket per request is most of the CPU at 10,000
// chains); the caller closes it with CloseLasting.
func (r Reader) dial() (*nftables.Conn, error) {
	var opts []nftables.ConnOption
	if r.NetNS != "" {
		f, err := os.Open(r.NetNS)
		if err != nil {
			return nil, fmt.Errorf("opening network namespace %s: %w", r.NetNS, err)
		}
		// The socket is created in the namespace while f is open; it
		// stays there once f is closed.
		defer f.Close()
		opts = append(opts, nftables.WithNetNSFd(int(f.Fd())))
	}
	conn, err := nftables.New(append(opts, nftables.AsLasting())...)
	if err != nil {
		return nil, fmt.Errorf("opening nftables netlink: %w", err)
	}
	return conn, nil
}

// Read returns kube-proxy's table of each family, ip then ip6.
func (r Reader) Read() ([]Table, error) {
	conn, err := r.dial()
	if err != nil {
		return nil, err
	}
	defer conn.CloseLasting()
	var out []Table
	for _, fam := range families {
		t, err := readTable(conn, fam.f, fam.name)
		if err != nil {
			return nil, fmt.Errorf("reading table %s %s: %w", fam.name, TableName, err)
		}
		out = append(out, t)
	}
	return out, nil
}

func readTable(conn *nftables.Conn, fam nftables.TableFamily, name string) (Table, error) {
	t := Table{Family: name, Chains: map[string]bool{}, Maps: map[string]bool{}, ServiceIPs: map[ServiceKey]string{},
		NodePorts: map[PortKey]string{}, NoEndpoint: map[ServiceKey]string{}, DNAT: map[string][]netip.AddrPort{}, Rules: map[string]int{}}
	tbl, err := conn.ListTableOfFamily(TableName, fam)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return t, nil
		}
		return t, err
	}
	t.Present = true
	chains, err := conn.ListChainsOfTableFamily(fam)
	if err != nil {
		return t, fmt.Errorf("listing chains: %w", err)
	}
	byName := map[string]*nftables.Chain{}
	for _, c := range chains {
		if c.Table == nil || c.Table.Name != TableName {
			continue
		}
		t.Chains[c.Name] = true
		byName[c.Name] = c
	}
	sets, err := conn.GetSets(tbl)
	if err != nil {
		return t, fmt.Errorf("listing sets: %w", err)
	}
	anon := map[string]*nftables.Set{}
	v6 := fam == nftables.TableFamilyIPv6
	for _, s := range sets {
		if s.Anonymous || strings.HasPrefix(s.Name, anonymousMapName) {
			anon[s.Name] = s
			continue
		}
		t.Maps[s.Name] = true
		switch s.Name {
		case MapServiceIPs, MapNoEndpoint, MapNodePorts:
		default:
			continue
		}
		elems, err := conn.GetSetElements(s)
		if err != nil {
			return t, fmt.Errorf("reading %s: %w", s.Name, err)
		}
		for _, e := range elems {
			v := verdict(e.Val)
			switch s.Name {
			case MapServiceIPs:
				if k, ok := decodeServiceKey(e.Key, v6); ok {
					t.ServiceIPs[k] = chainOf(v)
				}
			case MapNoEndpoint:
				if k, ok := decodeServiceKey(e.Key, v6); ok {
					t.NoEndpoint[k] = v
				}
			case MapNodePorts:
				if k, ok := decodePortKey(e.Key); ok {
					t.NodePorts[k] = chainOf(v)
				}
			}
		}
	}
	// The endpoints each Service chain DNATs to.
	endpointOf := map[string]netip.AddrPort{} // endpoint- chain → its DNAT target (older releases)
	readRules := func(c *nftables.Chain) ([]*nftables.Rule, error) {
		rules, err := conn.GetRules(tbl, c)
		if err != nil {
			return nil, fmt.Errorf("reading the rules of %s: %w", c.Name, err)
		}
		return rules, nil
	}
	for n, c := range byName {
		if !strings.HasPrefix(n, prefixEndpoint) {
			continue
		}
		rules, err := readRules(c)
		if err != nil {
			return t, err
		}
		for _, r := range rules {
			if ap, ok := ruleDNAT(r.Exprs, v6); ok {
				endpointOf[n] = ap
			}
		}
	}
	for n, c := range byName {
		if !strings.HasPrefix(n, prefixService) && !strings.HasPrefix(n, prefixLocal) && !strings.HasPrefix(n, prefixExternal) {
			continue
		}
		rules, err := readRules(c)
		if err != nil {
			return t, err
		}
		t.Rules[n] = len(rules)
		eps := []netip.AddrPort{}
		for _, r := range rules {
			for _, e := range r.Exprs {
				l, ok := e.(*expr.Lookup)
				if !ok {
					continue
				}
				s := anon[l.SetName]
				if s == nil {
					continue
				}
				elems, err := conn.GetSetElements(s)
				if err != nil {
					return t, fmt.Errorf("reading %s's map: %w", n, err)
				}
				for _, el := range elems {
					if s.IsMap && s.DataType.Name == "verdict" || len(el.Val) > 0 && isVerdict(el.Val) {
						if ap, ok := endpointOf[chainOf(verdict(el.Val))]; ok {
							eps = append(eps, ap)
						}
						continue
					}
					if ap, ok := decodeAddrPort(el.Val, v6); ok {
						eps = append(eps, ap)
					}
				}
			}
			// One endpoint: nft folds the map into constants (a rule
			// without a lookup).
			if !hasLookup(r.Exprs) {
				if ap, ok := ruleDNAT(r.Exprs, v6); ok {
					eps = append(eps, ap)
				}
			}
			// A single endpoint in older releases: a plain jump or goto.
			for _, e := range r.Exprs {
				if v, ok := e.(*expr.Verdict); ok && (v.Kind == expr.VerdictGoto || v.Kind == expr.VerdictJump) {
					if ap, ok := endpointOf[v.Chain]; ok {
						eps = append(eps, ap)
					}
				}
			}
		}
		t.DNAT[n] = eps
	}
	return t, nil
}

// ruleDNAT returns the address and port a rule DNATs to from immediates:
// the endpoint- chains of kube-proxy before 1.37, and the single-endpoint
// map nft folds into constants. Registers are laid out as the kernel does:
// NFT_REG_1..4 are 16 bytes each, NFT_REG32_00..15 (8..23) 4 bytes each,
// over the same 64 bytes.
func ruleDNAT(exprs []expr.Any, v6 bool) (netip.AddrPort, bool) {
	var file [64]byte
	offset := func(r uint32) (int, bool) {
		switch {
		case r >= 1 && r <= 4:
			return int(r-1) * 16, true
		case r >= 8 && r <= 23:
			return int(r-8) * 4, true
		}
		return 0, false
	}
	n := 4
	if v6 {
		n = 16
	}
	for _, e := range exprs {
		switch x := e.(type) {
		case *expr.Immediate:
			if o, ok := offset(x.Register); ok && o+len(x.Data) <= len(file) {
				copy(file[o:], x.Data)
			}
		case *expr.NAT:
			if x.Type != expr.NATTypeDestNAT {
				continue
			}
			oa, ok1 := offset(x.RegAddrMin)
			op, ok2 := offset(x.RegProtoMin)
			if !ok1 || !ok2 || oa+n > len(file) || op+2 > len(file) {
				continue
			}
			a, _ := netip.AddrFromSlice(file[oa : oa+n])
			return netip.AddrPortFrom(a.Unmap(), binary.BigEndian.Uint16(file[op:op+2])), true
		}
	}
	return netip.AddrPort{}, false
}

func hasLookup(exprs []expr.Any) bool {
	for _, e := range exprs {
		if _, ok := e.(*expr.Lookup); ok {
			return true
		}
	}
	return false
}

// isVerdict reports whether an element's data is a nested verdict
// (NFTA_VERDICT_CODE), not a value.
func isVerdict(b []byte) bool {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return false
	}
	for ad.Next() {
		if ad.Type() == unix.NFTA_VERDICT_CODE {
			return len(ad.Bytes()) == 4
		}
	}
	return false
}

// verdict renders an element's nested verdict as nft does ("goto
// service-…", "drop"); "" when b is none.
func verdict(b []byte) string {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return ""
	}
	ad.ByteOrder = binary.BigEndian
	var code int32
	var chain string
	have := false
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_VERDICT_CODE:
			if d := ad.Bytes(); len(d) == 4 {
				code, have = int32(binary.BigEndian.Uint32(d)), true
			}
		case unix.NFTA_VERDICT_CHAIN:
			chain = strings.TrimRight(string(ad.Bytes()), "\x00")
		}
	}
	if !have {
		return ""
	}
	switch code {
	case unix.NFT_JUMP:
		return "jump " + chain
	case unix.NFT_GOTO:
		return "goto " + chain
	case unix.NFT_RETURN:
		return "return"
	case 0:
		return "drop"
	case 1:
		return "accept"
	}
	return fmt.Sprintf("verdict %d", code)
}

// chainOf returns the chain a "goto X" or "jump X" verdict names.
func chainOf(v string) string {
	if c, ok := strings.CutPrefix(v, "goto "); ok {
		return c
	}
	if c, ok := strings.CutPrefix(v, "jump "); ok {
		return c
	}
	return ""
}

// ReadIPTables returns the chains of iptables-nft's tables nat, mangle and
// filter, families ip then ip6.
func (r Reader) ReadIPTables() ([]IPTablesFamily, error) {
	conn, err := r.dial()
	if err != nil {
		return nil, err
	}
	defer conn.CloseLasting()
	var out []IPTablesFamily
	for _, fam := range families {
		chains, err := conn.ListChainsOfTableFamily(fam.f)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("listing the chains of family %s: %w", fam.name, err)
		}
		f := IPTablesFamily{Family: fam.name, Chains: map[string]map[string]bool{}}
		for _, c := range chains {
			if c.Table == nil {
				continue
			}
			switch c.Table.Name {
			case "nat", "mangle", "filter":
			default:
				continue
			}
			if f.Chains[c.Table.Name] == nil {
				f.Chains[c.Table.Name] = map[string]bool{}
			}
			f.Chains[c.Table.Name][c.Name] = true
		}
		out = append(out, f)
	}
	return out, nil
}
