// SPDX-License-Identifier: Apache-2.0

//go:build netns && linux

package arpcheck

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ipvs-guard/ipvs-guard/pkg/nodestatus"
)

// inNetNS runs fn on a thread moved into namespace ns; the thread is never
// unlocked, so the runtime retires it afterwards.
func inNetNS(t testing.TB, ns string, fn func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromPath(netnsPath(ns))
		if err != nil {
			done <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			done <- err
			return
		}
		fn()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatalf("entering %s: %v", ns, err)
	}
}

// publishedDirectory is the MAC directory as the agents' Node annotations
// make it: each node's MACs read by nodestatus.HostMACs and
// nodestatus.HostDownMACs inside that node's namespace.
type publishedDirectory map[string]struct{ up, down map[string]string }

func publish(t testing.TB, nodes map[string]string) publishedDirectory {
	t.Helper()
	d := publishedDirectory{}
	for node, ns := range nodes {
		var up, down map[string]string
		var errUp, errDown error
		inNetNS(t, ns, func() {
			up, errUp = nodestatus.HostMACs()
			down, errDown = nodestatus.HostDownMACs()
		})
		if err := errors.Join(errUp, errDown); err != nil {
			t.Fatalf("reading %s's MACs: %v", node, err)
		}
		// Through the annotations' encoding, as another agent reads them.
		up, errUp = nodestatus.DecodeMACs(nodestatus.EncodeMACs(up))
		down, errDown = nodestatus.DecodeMACs(nodestatus.EncodeMACs(down))
		if err := errors.Join(errUp, errDown); err != nil {
			t.Fatal(err)
		}
		d[node] = struct{ up, down map[string]string }{up, down}
	}
	return d
}

func (d publishedDirectory) NodeMACs(_ context.Context, node string, _ bool) []net.HardwareAddr {
	var out []net.HardwareAddr
	for _, m := range d[node].up {
		if hw, err := net.ParseMAC(m); err == nil {
			out = append(out, hw)
		}
	}
	return out
}

func (d publishedDirectory) NodeForMAC(ctx context.Context, mac net.HardwareAddr, lookup bool) (string, bool) {
	n, _, _, ok := d.InterfaceForMAC(ctx, mac, lookup)
	return n, ok
}

func (d publishedDirectory) InterfaceForMAC(_ context.Context, mac net.HardwareAddr, _ bool) (string, string, bool, bool) {
	for node, p := range d {
		for ifc, m := range p.up {
			if m == mac.String() {
				return node, ifc, false, true
			}
		}
	}
	for node, p := range d {
		for ifc, m := range p.down {
			if m == mac.String() {
				return node, ifc, true, true
			}
		}
	}
	return "", "", false, false
}

// forgedResponder answers ARP requests for vip arriving on iface in ns
// with replies whose source MAC is mac, out of iface: what a speaker that
// took another interface's MAC sends (metallb#2026). It stops with the test.
func forgedResponder(t *testing.T, tp *topo, ns, iface string, vip netip.Addr, mac net.HardwareAddr) {
	t.Helper()
	ifi := &net.Interface{Index: tp.ifindex(ns, iface), Name: iface}
	conn, err := listenInNetNS(netnsPath(ns), ifi, unix.ETH_P_ARP, nil)
	if err != nil {
		t.Fatalf("responder socket in %s: %v", ns, err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); _ = conn.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			n, _, err := conn.ReadFrom(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if err != nil {
				return
			}
			reqMAC, src, target, err := parseRequest(buf[:n])
			if err != nil || target != vip {
				continue
			}
			_, _ = conn.WriteTo(buildReply(t, mac, vip, reqMAC, src), &packet.Addr{HardwareAddr: reqMAC})
		}
	}()
}

// TestNetNSReplyWay builds an announcing node with three interfaces on the
// prober's segment and checks that a reply with the MAC of another of its
// interfaces than the announced one, or of one that is down, is named as
// such, with the directory its agent would publish, and that iputils
// arping sees the same MAC.
func TestNetNSReplyWay(t *testing.T) {
	requireNetNS(t)
	tp := newTopo(t)
	br := tp.ns("br")
	tp.bridge(br, "br0")
	prober := tp.ns("prober")
	node := tp.ns("node1")
	other := tp.ns("node2")
	tp.plug(br, "br0", "p0", prober, "eth0", "10.77.3.1/24")
	mac0 := tp.plug(br, "br0", "n0", node, "eth0", "10.77.3.11/24")
	mac1 := tp.plug(br, "br0", "n1", node, "eth1", "10.77.3.12/24")
	mac2 := tp.plug(br, "br0", "n2", node, "eth2", "10.77.3.13/24")
	tp.run("ip", "-n", node, "link", "set", "eth2", "down")
	macOther := tp.plug(br, "br0", "o0", other, "eth0", "10.77.3.21/24")
	// Only the interface holding an address answers for it (strictARP's
	// arp_ignore=1): the VIP on eth1 is answered with eth1's MAC alone.
	tp.sysctl(node, "net.ipv4.conf.all.arp_ignore", "1")
	tp.sysctl(node, "net.ipv4.conf.all.arp_announce", "2")
	tp.run("ip", "-n", node, "addr", "add", "10.77.3.70/32", "dev", "eth1")
	tp.run("ip", "-n", node, "addr", "add", "10.77.3.72/32", "dev", "eth0")
	tp.run("ip", "-n", other, "addr", "add", "10.77.3.73/32", "dev", "eth0")
	forged := netip.MustParseAddr("10.77.3.71")
	forgedResponder(t, tp, node, "eth0", forged, mustMAC(t, mac2))

	dir := publish(t, map[string]string{"node1": node, "node2": other})
	if d := dir["node1"].down; d["eth2"] != mac2 {
		t.Fatalf("node1 publishes down interfaces %v, want eth2 %s among them", d, mac2)
	}
	if u := dir["node1"].up; u["eth0"] != mac0 || u["eth1"] != mac1 {
		t.Fatalf("node1 publishes %v, want eth0 %s and eth1 %s", u, mac0, mac1)
	}

	tests := []struct {
		name      string
		ip        string
		ifaces    []string
		announcer string
		want      Result
		mac       string
		wantIface string
	}{
		{name: "announced interface", ip: "10.77.3.72", ifaces: []string{"eth0"}, announcer: "node1", want: ResultAnswered, mac: mac0},
		{name: "another interface of the announcer", ip: "10.77.3.70", ifaces: []string{"eth0"}, announcer: "node1", want: ResultOtherInterface, mac: mac1, wantIface: "eth1"},
		{name: "the same reply, eth1 announced", ip: "10.77.3.70", ifaces: []string{"eth0", "eth1"}, announcer: "node1", want: ResultAnswered, mac: mac1},
		{name: "a down interface's MAC", ip: "10.77.3.71", ifaces: []string{"eth0"}, announcer: "node1", want: ResultDownInterface, mac: mac2, wantIface: "eth2"},
		{name: "another node stays a wrong responder", ip: "10.77.3.73", ifaces: []string{"eth0"}, announcer: "node1", want: ResultWrongResponder, mac: macOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewChecker(CheckerOptions{
				Targets:   StaticTargets(Target{IP: netip.MustParseAddr(tt.ip), ExpectedNode: tt.announcer, ExpectedInterfaces: tt.ifaces}),
				Network:   HostNetwork{NetNSPath: netnsPath(prober)},
				Probe:     ProbeOptions{Window: 500 * time.Millisecond, Attempts: 3},
				Directory: dir,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := c.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Findings) != 1 {
				t.Fatalf("findings: %+v", res)
			}
			f := res.Findings[0].(Finding)
			if f.Result != tt.want || !slices.Equal(f.MACs, []string{tt.mac}) || f.ResponderInterface != tt.wantIface {
				t.Errorf("ipvs-guard: %s by %v (%q), want %s by %s (%q): %s", f.Result, f.MACs, f.ResponderInterface, tt.want, tt.mac, tt.wantIface, res.Message)
			}
			if want := reasonFor(tt.want); res.Reason != want {
				t.Errorf("reason %s, want %s", res.Reason, want)
			}
			ar := arping(t, prober, "eth0", tt.ip, "-c", "2", "-w", "2")
			if !slices.Equal(ar.macs, f.MACs) {
				t.Errorf("arping saw MACs %v, ipvs-guard %v\n%s", ar.macs, f.MACs, ar.out)
			}
			t.Logf("%s: %s", tt.ip, f)
		})
	}
}
