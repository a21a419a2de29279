// SPDX-License-Identifier: Apache-2.0

//go:build linux

package nftdrift

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

func mustAttrs(t testing.TB, a ...netlink.Attribute) []byte {
	t.Helper()
	b, err := netlink.MarshalAttributes(a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func nested(t testing.TB, typ uint16, a ...netlink.Attribute) netlink.Attribute {
	return netlink.Attribute{Type: typ | unix.NLA_F_NESTED, Data: mustAttrs(t, a...)}
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func expr(t testing.TB, name string, data ...netlink.Attribute) netlink.Attribute {
	return nested(t, unix.NFTA_LIST_ELEM, netlink.Attribute{Type: unix.NFTA_EXPR_NAME, Data: []byte(name + "\x00")},
		nested(t, unix.NFTA_EXPR_DATA, data...))
}

func verdictAttr(t testing.TB, code int32, chain string) netlink.Attribute {
	a := []netlink.Attribute{{Type: unix.NFTA_VERDICT_CODE, Data: be32(uint32(code))}}
	if chain != "" {
		a = append(a, netlink.Attribute{Type: unix.NFTA_VERDICT_CHAIN, Data: []byte(chain + "\x00")})
	}
	return nested(t, unix.NFTA_DATA_VERDICT, a...)
}

// ruleMsg is a NEWRULE message's attributes as the kernel writes them.
func ruleMsg(t testing.TB, chain string, exprs ...netlink.Attribute) []byte {
	return mustAttrs(t,
		netlink.Attribute{Type: unix.NFTA_RULE_TABLE, Data: []byte("kube-proxy\x00")},
		netlink.Attribute{Type: unix.NFTA_RULE_CHAIN, Data: []byte(chain + "\x00")},
		netlink.Attribute{Type: unix.NFTA_RULE_HANDLE, Data: binary.BigEndian.AppendUint64(nil, 42)},
		nested(t, unix.NFTA_RULE_EXPRESSIONS, exprs...))
}

func ruleSeeds(t testing.TB) map[string][]byte {
	// The single-endpoint rule of kube-proxy 1.37.1 as nft folds it:
	// immediates into NFT_REG32_00 (address) and NFT_REG32_01 (port), nat
	// from them.
	single := ruleMsg(t, "service-X-default/web/tcp/http",
		expr(t, "immediate", netlink.Attribute{Type: unix.NFTA_IMMEDIATE_DREG, Data: be32(8)},
			nested(t, unix.NFTA_IMMEDIATE_DATA, netlink.Attribute{Type: unix.NFTA_DATA_VALUE, Data: []byte{10, 244, 1, 5}})),
		expr(t, "immediate", netlink.Attribute{Type: unix.NFTA_IMMEDIATE_DREG, Data: be32(9)},
			nested(t, unix.NFTA_IMMEDIATE_DATA, netlink.Attribute{Type: unix.NFTA_DATA_VALUE, Data: []byte{0x1f, 0x90}})),
		expr(t, "nat", netlink.Attribute{Type: unix.NFTA_NAT_TYPE, Data: be32(unix.NFT_NAT_DNAT)},
			netlink.Attribute{Type: unix.NFTA_NAT_FAMILY, Data: be32(unix.NFPROTO_IPV4)},
			netlink.Attribute{Type: unix.NFTA_NAT_REG_ADDR_MIN, Data: be32(8)},
			netlink.Attribute{Type: unix.NFTA_NAT_REG_PROTO_MIN, Data: be32(9)}))
	mapped := ruleMsg(t, "service-Y-default/api/tcp/http",
		expr(t, "numgen", netlink.Attribute{Type: 1, Data: be32(1)}),
		expr(t, "lookup", netlink.Attribute{Type: unix.NFTA_LOOKUP_SET, Data: []byte("__map7\x00")},
			netlink.Attribute{Type: unix.NFTA_LOOKUP_SREG, Data: be32(1)}),
		expr(t, "immediate", netlink.Attribute{Type: unix.NFTA_IMMEDIATE_DREG, Data: be32(0)},
			nested(t, unix.NFTA_IMMEDIATE_DATA, verdictAttr(t, unix.NFT_GOTO, "endpoint-ABC"))))
	return map[string][]byte{"single": single, "mapped": mapped}
}

func TestDecodeRule(t *testing.T) {
	seeds := ruleSeeds(t)
	tests := []struct {
		name    string
		b       []byte
		want    rule
		wantErr bool
	}{
		{name: "single", b: seeds["single"], want: rule{chain: "service-X-default/web/tcp/http", handle: 42,
			dnat: netip.MustParseAddrPort("10.244.1.5:8080"), hasDNAT: true}},
		{name: "mapped", b: seeds["mapped"], want: rule{chain: "service-Y-default/api/tcp/http", handle: 42,
			lookups: []string{"__map7"}, jumps: []string{"endpoint-ABC"}}},
		{name: "truncated", b: seeds["single"][:len(seeds["single"])-3], wantErr: true},
		{name: "no chain", b: mustAttrs(t, netlink.Attribute{Type: unix.NFTA_RULE_TABLE, Data: []byte("kube-proxy\x00")}), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeRule(tt.b, false)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if got.chain != tt.want.chain || got.handle != tt.want.handle || got.dnat != tt.want.dnat || got.hasDNAT != tt.want.hasDNAT ||
				!slices.Equal(got.lookups, tt.want.lookups) || !slices.Equal(got.jumps, tt.want.jumps) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func elementsMsg(t testing.TB) []byte {
	key := []byte{10, 96, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0}
	return mustAttrs(t,
		netlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: []byte("kube-proxy\x00")},
		netlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: []byte("service-ips\x00")},
		nested(t, unix.NFTA_SET_ELEM_LIST_ELEMENTS,
			nested(t, unix.NFTA_LIST_ELEM,
				nested(t, unix.NFTA_SET_ELEM_KEY, netlink.Attribute{Type: unix.NFTA_DATA_VALUE, Data: key}),
				nested(t, unix.NFTA_SET_ELEM_DATA, verdictAttr(t, unix.NFT_GOTO, "service-X-default/web/tcp/http"))),
			nested(t, unix.NFTA_LIST_ELEM,
				nested(t, unix.NFTA_SET_ELEM_KEY, netlink.Attribute{Type: unix.NFTA_DATA_VALUE, Data: []byte{0, 0, 0, 1}}),
				nested(t, unix.NFTA_SET_ELEM_DATA, netlink.Attribute{Type: unix.NFTA_DATA_VALUE, Data: []byte{10, 244, 1, 6, 0x1f, 0x90}}))))
}

func TestDecodeElements(t *testing.T) {
	var got []element
	if err := decodeElements(elementsMsg(t), func(e element) { got = append(got, e) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d elements, want 2", len(got))
	}
	if k, ok := decodeServiceKey(got[0].key, false); !ok || k.String() != "10.96.0.1 . tcp . 80" || got[0].verdict != "goto service-X-default/web/tcp/http" {
		t.Errorf("element 0: %v %q", k, got[0].verdict)
	}
	if e, ok := mapEntryOf(got[1], false); !ok || e.value != netip.MustParseAddrPort("10.244.1.6:8080") {
		t.Errorf("element 1: %+v", e)
	}
}

// FuzzDecodeRule: the kernel's rules are outside input; no answer panics.
func FuzzDecodeRule(f *testing.F) {
	for _, b := range ruleSeeds(f) {
		f.Add(b, false)
	}
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) {
		_, _ = decodeRule(b, v6)
	})
}

// FuzzDecodeElements: set elements, chains, sets, the table and the
// generation are outside input too.
func FuzzDecodeElements(f *testing.F) {
	f.Add(elementsMsg(f))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = decodeElements(b, func(e element) { _, _ = mapEntryOf(e, false); _, _ = decodeServiceKey(e.key, true) })
		_, _, _ = decodeSet(b)
		_, _, _ = decodeChain(b)
		_, _ = decodeTableHandle(b)
		_, _ = decodeGen(b)
	})
}
