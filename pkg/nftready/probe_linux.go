// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// probeTable is the throwaway table's name; it lives only in the probe's
// private network namespace.
const probeTable = "ipvs-guard-probe"

// NetNSProber is the real Prober: every run makes a new network namespace
// no process lives in, builds a table there over netlink with one rule per
// feature (each sent as its own batch, so a refusal names its feature),
// reads the rules back, and lets the namespace go, with the table in it.
// The host's rules are never read or written.
type NetNSProber struct{}

// Probe implements Prober.
func (NetNSProber) Probe(ctx context.Context) ([]ProbeResult, error) {
	fd, err := privateNetNS()
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	conn, err := nftables.New(nftables.WithNetNSFd(fd))
	if err != nil {
		return nil, fmt.Errorf("netlink to the probe's network namespace: %w", err)
	}
	defer conn.CloseLasting()
	return probeConn(ctx, conn), nil
}

// privateNetNS returns a file descriptor of a new network namespace; the
// calling goroutine's thread is back in its own namespace when it returns.
func privateNetNS() (int, error) {
	type out struct {
		fd  int
		err error
	}
	ch := make(chan out, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- out{-1, fmt.Errorf("opening this thread's network namespace: %w", err)}
			return
		}
		defer unix.Close(orig)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- out{-1, fmt.Errorf("creating a private network namespace: %w", err)}
			return
		}
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
			// This thread stays in the private namespace: it exits with
			// the goroutine (still locked) and no other goroutine runs on it.
			if err == nil {
				unix.Close(fd)
			}
			ch <- out{-1, fmt.Errorf("returning from the private network namespace: %w", serr)}
			return
		}
		runtime.UnlockOSThread()
		if err != nil {
			ch <- out{-1, fmt.Errorf("opening the private network namespace: %w", err)}
			return
		}
		ch <- out{fd, nil}
	}()
	o := <-ch
	return o.fd, o.err
}

// probeConn builds the features one by one on conn. A feature whose
// prerequisite failed (no table, no nat chain) fails with that error.
func probeConn(ctx context.Context, conn *nftables.Conn) []ProbeResult {
	p := &prober{conn: conn, done: map[string]error{}}
	for _, e := range Expressions {
		if err := ctx.Err(); err != nil {
			p.done[e] = fmt.Errorf("not tried: %w", err)
			continue
		}
		p.done[e] = p.try(e)
	}
	// Leave nothing behind even while the namespace lives.
	if p.table != nil {
		conn.DelTable(p.table)
		_ = conn.Flush()
	}
	out := make([]ProbeResult, 0, len(Expressions))
	for _, e := range Expressions {
		out = append(out, ProbeResult{Expression: e, Err: p.done[e]})
	}
	return out
}

type prober struct {
	conn                      *nftables.Conn
	table                     *nftables.Table
	input, natPre, natPost    *nftables.Chain
	done                      map[string]error
	svcA, svcB, endpointChain *nftables.Chain
}

func (p *prober) prereq(name string) error {
	if err := p.done[name]; err != nil {
		return fmt.Errorf("%w: %s failed", errPrereq, name)
	}
	return nil
}

func (p *prober) flush(what string) error {
	if err := p.conn.Flush(); err != nil {
		return fmt.Errorf("the kernel refused %s: %w", what, err)
	}
	return nil
}

// rule adds one rule to chain and reads the chain back to see it.
func (p *prober) rule(chain *nftables.Chain, what string, exprs ...expr.Any) error {
	p.conn.AddRule(&nftables.Rule{Table: p.table, Chain: chain, Exprs: exprs})
	if err := p.flush(what); err != nil {
		return err
	}
	rules, err := p.conn.GetRules(p.table, chain)
	if err != nil {
		return fmt.Errorf("reading back %s: %w", what, err)
	}
	if len(rules) == 0 {
		return fmt.Errorf("reading back %s: the chain holds no rule", what)
	}
	return nil
}

var (
	clusterIP  = netip.MustParseAddr("10.96.0.10").As4()
	endpointIP = netip.MustParseAddr("10.244.0.5").As4()
)

func (p *prober) try(e string) error {
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	switch e {
	case ExprTable:
		p.table = p.conn.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: probeTable})
		p.input = p.conn.AddChain(&nftables.Chain{Name: "filter-input", Table: p.table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter})
		p.svcA = p.conn.AddChain(&nftables.Chain{Name: "service-a", Table: p.table})
		p.svcB = p.conn.AddChain(&nftables.Chain{Name: "service-b", Table: p.table})
		p.endpointChain = p.conn.AddChain(&nftables.Chain{Name: "endpoint-a", Table: p.table})
		if err := p.flush("a table with a filter base chain"); err != nil {
			p.table = nil
			return err
		}
		return nil
	case ExprNATChain:
		if err := p.prereq(ExprTable); err != nil {
			return err
		}
		p.natPre = p.conn.AddChain(&nftables.Chain{Name: "nat-prerouting", Table: p.table, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
		p.natPost = p.conn.AddChain(&nftables.Chain{Name: "nat-postrouting", Table: p.table, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
		return p.flush("nat base chains (type nat hook prerouting, postrouting)")
	case ExprCt:
		if err := p.prereq(ExprTable); err != nil {
			return err
		}
		// ct state established,related accept
		return p.rule(p.input, "ct state established,related accept",
			&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
				Xor:  binaryutil.NativeEndian.PutUint32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
			accept)
	case ExprFib:
		if err := p.prereq(ExprTable); err != nil {
			return err
		}
		// fib daddr type local accept
		return p.rule(p.input, "fib daddr type local",
			&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
			accept)
	case ExprNumgen:
		if err := p.prereq(ExprTable); err != nil {
			return err
		}
		// numgen random mod 2 == 0 goto endpoint-a
		return p.rule(p.svcA, "numgen random mod 2",
			&expr.Numgen{Register: 1, Modulus: 2, Type: unix.NFT_NG_RANDOM},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
			&expr.Verdict{Kind: expr.VerdictGoto, Chain: p.endpointChain.Name})
	case ExprVerdictMap:
		if err := p.prereq(ExprTable); err != nil {
			return err
		}
		vmap := &nftables.Set{Table: p.table, Name: "service-ips", IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict}
		if err := p.conn.AddSet(vmap, []nftables.SetElement{{Key: clusterIP[:],
			VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: p.svcB.Name}}}); err != nil {
			return fmt.Errorf("building the verdict map: %w", err)
		}
		if err := p.flush("a verdict map (type ipv4_addr : verdict)"); err != nil {
			return err
		}
		// ip daddr vmap @service-ips
		return p.rule(p.input, "ip daddr vmap @service-ips",
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: vmap.Name})
	case ExprConcatSet:
		if err := p.prereq(ExprTable); err != nil {
			return err
		}
		set := &nftables.Set{Table: p.table, Name: "cluster-ips-ports", Concatenation: true,
			KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)}
		key := make([]byte, 0, 12)
		key = append(key, clusterIP[:]...)
		key = append(key, unix.IPPROTO_TCP, 0, 0, 0)
		key = binary.BigEndian.AppendUint16(key, 53)
		key = append(key, 0, 0)
		if err := p.conn.AddSet(set, []nftables.SetElement{{Key: key}}); err != nil {
			return fmt.Errorf("building the concatenated set: %w", err)
		}
		if err := p.flush("a concatenated set (type ipv4_addr . inet_proto . inet_service)"); err != nil {
			return err
		}
		// ip daddr . meta l4proto . th dport @cluster-ips-ports accept
		return p.rule(p.input, "ip daddr . meta l4proto . th dport @cluster-ips-ports",
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 9},
			&expr.Payload{DestRegister: 10, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Lookup{SourceRegister: 1, SetName: set.Name},
			accept)
	case ExprNAT:
		if err := p.prereq(ExprNATChain); err != nil {
			return err
		}
		// dnat to 10.244.0.5:8080
		port := binary.BigEndian.AppendUint16(nil, 8080)
		return p.rule(p.natPre, "dnat to 10.244.0.5:8080",
			&expr.Immediate{Register: 1, Data: endpointIP[:]},
			&expr.Immediate{Register: 2, Data: port},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true})
	case ExprMasquerade:
		if err := p.prereq(ExprNATChain); err != nil {
			return err
		}
		return p.rule(p.natPost, "masquerade fully-random", &expr.Masq{FullyRandom: true})
	case ExprReject:
		if err := p.prereq(ExprTable); err != nil {
			return err
		}
		// reject with icmp type port-unreachable
		return p.rule(p.input, "reject with icmp port-unreachable",
			&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: icmpPortUnreachable})
	}
	return fmt.Errorf("unknown feature %q", e)
}

// icmpPortUnreachable is ICMP code 3 of type destination-unreachable.
const icmpPortUnreachable = 3
