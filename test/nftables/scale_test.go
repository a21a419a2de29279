// SPDX-License-Identifier: Apache-2.0

//go:build nftables

package nftables

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
	"github.com/ipvs-guard/ipvs-guard/pkg/ipvsdrift"
	"github.com/ipvs-guard/ipvs-guard/pkg/nftdrift"
)

// scaleServices is how many Services the scale figure programs (×3
// endpoints each); NFT_SCALE_SERVICES overrides it.
func scaleServices() int {
	if n, err := strconv.Atoi(os.Getenv("NFT_SCALE_SERVICES")); err == nil && n > 0 {
		return n
	}
	return 10000
}

func cip(i int) string { return fmt.Sprintf("10.96.%d.%d", i/250, i%250+1) }
func ep(i, j int) string {
	k := i*3 + j
	return fmt.Sprintf("10.%d.%d.%d", 100+k/62500, k/250%250, k%250+1)
}

// scaleInput is the cluster the scale table is kube-proxy's table of.
func scaleInput(n int) ([]*corev1.Service, ipvsdrift.ServiceEndpoints) {
	var svcs []*corev1.Service
	var slices []*discoveryv1.EndpointSlice
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		svcs = append(svcs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: cip(i), ClusterIPs: []string{cip(i)},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}})
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name + "-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: name}}, AddressType: discoveryv1.AddressTypeIPv4,
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}}}
		for j := range 3 {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ep(i, j)}, NodeName: ptr.To("n2"),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true)}})
		}
		slices = append(slices, es)
	}
	return svcs, ipvsdrift.Summarize(slices)
}

// TestScaleChild is the measured process of TestScaleFigures: one read of
// kube-proxy's table and one comparison, nothing else.
func TestScaleChild(t *testing.T) {
	if os.Getenv("NFT_SCALE_CHILD") != "1" {
		t.Skip("run by TestScaleFigures")
	}
	n := scaleServices()
	svcs, eps := scaleInput(n)
	// measure runs f and returns its wall and CPU time.
	measure := func(f func()) (time.Duration, time.Duration) {
		var before, after syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
		start := time.Now()
		f()
		wall := time.Since(start)
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		return wall, time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	}
	// Peak RSS from here on: the input (10,000 Services and the
	// EndpointSlices' summary) stays resident, as in the agent; the garbage
	// of building it does not count.
	// The agent's GOGC (cmd/ipvs-guard: agentGCPercent).
	debug.SetGCPercent(25)
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("resetting the peak RSS: %v", err)
	}
	vm := func(key string) string {
		status, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, key+":") {
				return strings.Join(strings.Fields(line)[1:], "")
			}
		}
		return "?"
	}
	base := vm("VmRSS")
	r := &nftdrift.Reader{}
	var tables []nftdrift.Table
	var found []nftdrift.Finding
	readCompare := func() {
		var err error
		if tables, err = r.Read(); err != nil {
			t.Fatal(err)
		}
		found = nftdrift.Compare(nftdrift.Input{Tables: tables, Services: svcs, Endpoints: eps, Node: "n1"})
	}
	wall, cpu := measure(readCompare)
	fmt.Printf("RESULT wall=%s cpu=%s findings=%d elements=%d chains=%d\n", wall, cpu, len(found), len(tables[0].ServiceIPs), len(tables[0].DNAT))
	// A resync after kube-proxy's partial sync of one Service: its chain
	// flushed and its rule written again (a new anonymous map).
	const c7 = "service-00000007-default/s7/tcp/http"
	script := fmt.Sprintf("flush chain ip kube-proxy %s\nadd rule ip kube-proxy %s meta l4proto tcp dnat ip to numgen random mod 3 map { 0 : %s . 8080, 1 : %s . 8080, 2 : %s . 8080 }\n",
		c7, c7, ep(7, 0), ep(7, 1), ep(7, 2))
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = bytes.NewBufferString(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f: %v: %s", err, out)
	}
	wall, cpu = measure(readCompare)
	st := r.Stats()
	fmt.Printf("RESYNC wall=%s cpu=%s findings=%d dumps=%d chains=%d\n", wall, cpu, len(found), st.MapDumps, st.ChainDumps)
	// A resync after a commit that touched no object of kube-proxy's.
	if out, err := exec.Command("nft", "add", "table", "ip", "scale-unrelated").CombinedOutput(); err != nil {
		t.Fatalf("nft add table: %v: %s", err, out)
	}
	defer exec.Command("nft", "delete", "table", "ip", "scale-unrelated").Run()
	wall, cpu = measure(readCompare)
	fmt.Printf("UNCHANGED wall=%s cpu=%s findings=%d unchanged=%d\n", wall, cpu, len(found), r.Stats().Unchanged)
	fmt.Printf("HWM %s(input:%s)\n", vm("VmHWM"), base)
}

// TestScaleFigures builds kube-proxy's table for 10,000 Services × 3
// endpoints as kube-proxy 1.37.1 writes it and measures one read and
// comparison (a child process: wall, CPU, peak RSS) against
// `nft -j list table ip kube-proxy`.
func TestScaleFigures(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Require(t, os.Getenv("NFT_NETNS") != "", "run through hack/test-nftables.sh (a private network namespace)")
	nft := testenv.Tool(t, "NFT", "nft", "apt-get install nftables")
	n := scaleServices()
	var b bytes.Buffer
	b.WriteString("add table ip kube-proxy\n")
	for _, c := range append(append([]string{}, nftdrift.BaseChains...), nftdrift.ChainServices, "reject-chain") {
		fmt.Fprintf(&b, "add chain ip kube-proxy %s\n", c)
	}
	for i := range n {
		fmt.Fprintf(&b, "add chain ip kube-proxy service-%08d-default/s%d/tcp/http\n", i, i)
		fmt.Fprintf(&b, "add rule ip kube-proxy service-%08d-default/s%d/tcp/http meta l4proto tcp dnat ip to numgen random mod 3 map { 0 : %s . 8080, 1 : %s . 8080, 2 : %s . 8080 }\n",
			i, i, ep(i, 0), ep(i, 1), ep(i, 2))
	}
	b.WriteString("add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }\n")
	b.WriteString("add map ip kube-proxy service-nodeports { type inet_proto . inet_service : verdict ; }\n")
	b.WriteString("add map ip kube-proxy no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; }\n")
	for i := range n {
		fmt.Fprintf(&b, "add element ip kube-proxy service-ips { %s . tcp . 80 : goto service-%08d-default/s%d/tcp/http }\n", cip(i), i, i)
	}
	_ = exec.Command(nft, "delete", "table", "ip", "kube-proxy").Run()
	f, err := os.CreateTemp(t.TempDir(), "table-*.nft")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	f.Close()
	start := time.Now()
	if out, err := exec.Command(nft, "-f", f.Name()).CombinedOutput(); err != nil {
		t.Fatalf("nft -f: %v: %s", err, out)
	}
	t.Logf("built the table of %d Services × 3 endpoints with nft -f in %.1fs", n, time.Since(start).Seconds())
	defer exec.Command(nft, "delete", "table", "ip", "kube-proxy").Run()

	start = time.Now()
	cmd := exec.Command(nft, "-j", "list", "table", "ip", "kube-proxy")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nft -j list table: %v", err)
	}
	nftWall := time.Since(start)
	nftRSS := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss

	child := exec.Command(os.Args[0], "-test.run=^TestScaleChild$", "-test.count=1")
	child.Env = append(os.Environ(), "NFT_SCALE_CHILD=1")
	res, err := child.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v: %s", err, res)
	}
	rss := child.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
	var wall, cpu, rwall, rcpu, uwall, ucpu time.Duration
	var findings, elements, chains, rfindings, dumps, ufindings, unchanged int
	var hwm string
	var chainDumps int
	for _, line := range bytes.Split(res, []byte("\n")) {
		var w, c string
		switch {
		case bytes.HasPrefix(line, []byte("RESULT ")):
			fmt.Sscanf(string(line), "RESULT wall=%s cpu=%s findings=%d elements=%d chains=%d", &w, &c, &findings, &elements, &chains)
			wall, _ = time.ParseDuration(w)
			cpu, _ = time.ParseDuration(c)
		case bytes.HasPrefix(line, []byte("RESYNC ")):
			fmt.Sscanf(string(line), "RESYNC wall=%s cpu=%s findings=%d dumps=%d chains=%d", &w, &c, &rfindings, &dumps, &chainDumps)
			rwall, _ = time.ParseDuration(w)
			rcpu, _ = time.ParseDuration(c)
		case bytes.HasPrefix(line, []byte("HWM ")):
			hwm = strings.TrimPrefix(string(line), "HWM ")
		case bytes.HasPrefix(line, []byte("UNCHANGED ")):
			fmt.Sscanf(string(line), "UNCHANGED wall=%s cpu=%s findings=%d unchanged=%d", &w, &c, &ufindings, &unchanged)
			uwall, _ = time.ParseDuration(w)
			ucpu, _ = time.ParseDuration(c)
		}
	}
	if elements != n || chains != n || findings != 0 || rfindings != 0 || ufindings != 0 {
		t.Fatalf("read %d elements, %d chains, %d/%d/%d findings; want %d, %d, 0:\n%s", elements, chains, findings, rfindings, ufindings, n, n, res)
	}
	// The resync read one chain and its new map; the unchanged read nothing.
	if dumps != n+1 || chainDumps != 1 || unchanged != 1 {
		t.Fatalf("%d anonymous maps dumped over the first read and the resync (want %d: each once), %d chains (want 1), %d unchanged reads (want 1):\n%s", dumps, n+1, chainDumps, unchanged, res)
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) * 1000 }
	t.Logf("FIGURE %d Services × 3 endpoints: first read + compare %s wall, %s CPU (%.2f ms per 1,000 Services), peak RSS while reading and comparing %s (GOGC 25, as the agent; the whole test process: %.1f MiB); nft -j list table %s (%d bytes of JSON, peak RSS %.1f MiB); ratio %.2f×",
		n, wall.Round(time.Millisecond), cpu.Round(time.Millisecond), per(cpu), hwm, float64(rss)/1024,
		nftWall.Round(time.Millisecond), len(out), float64(nftRSS)/1024, wall.Seconds()/nftWall.Seconds())
	t.Logf("FIGURE resync after kube-proxy rewrote one Service's chain: read + compare %s wall (%.3f× nft -j), %s CPU (%.2f ms per 1,000 Services); after a commit of nothing of kube-proxy's: %s wall, %s CPU (%.3f ms per 1,000 Services)",
		rwall.Round(time.Millisecond), rwall.Seconds()/nftWall.Seconds(), rcpu.Round(time.Millisecond), per(rcpu), uwall.Round(time.Microsecond), ucpu.Round(time.Microsecond), per(ucpu))
}

// TestReaderKeepsWhatItRead proves the reader's memory on the real kernel,
// following nf_tables' change feed and without it: an unchanged ruleset is
// not read again, an anonymous DNAT map is dumped once, and every way
// kube-proxy (or anyone) changes a Service chain's endpoints is seen — a
// chain flushed and rewritten, a rule replaced, an element deleted, the
// table deleted and made again with the same names.
func TestReaderKeepsWhatItRead(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Require(t, os.Getenv("NFT_NETNS") != "", "run through hack/test-nftables.sh (a private network namespace)")
	nft := testenv.Tool(t, "NFT", "nft", "apt-get install nftables")
	for _, feed := range []bool{true, false} {
		t.Run(fmt.Sprintf("feed=%v", feed), func(t *testing.T) { readerScenario(t, nft, feed) })
	}
}

func readerScenario(t *testing.T, nft string, feed bool) {
	run := func(script string) {
		t.Helper()
		cmd := exec.Command(nft, "-f", "-")
		cmd.Stdin = bytes.NewBufferString(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft -f: %v: %s\n%s", err, out, script)
		}
	}
	table := func(eps ...string) string {
		var b bytes.Buffer
		b.WriteString("add table ip kube-proxy\nadd map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }\n")
		for i := range 3 {
			fmt.Fprintf(&b, "add chain ip kube-proxy service-%d-default/s%d/tcp/http\n", i, i)
			fmt.Fprintf(&b, "add rule ip kube-proxy service-%d-default/s%d/tcp/http meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : %s . 8080, 1 : %s . 8080 }\n", i, i, eps[0], eps[1])
			fmt.Fprintf(&b, "add element ip kube-proxy service-ips { 10.96.0.%d . tcp . 80 : goto service-%d-default/s%d/tcp/http }\n", i+1, i, i)
		}
		return b.String()
	}
	_ = exec.Command(nft, "delete", "table", "ip", "kube-proxy").Run()
	_ = exec.Command(nft, "delete", "table", "ip", "unrelated").Run()
	defer exec.Command(nft, "delete", "table", "ip", "kube-proxy").Run()
	defer exec.Command(nft, "delete", "table", "ip", "unrelated").Run()
	run(table("10.1.0.1", "10.1.0.2"))

	r := &nftdrift.Reader{NoFeed: !feed}
	var tbl nftdrift.Table
	read := func() map[string][]string {
		t.Helper()
		ts, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		tbl = ts[0]
		out := map[string][]string{}
		for c, eps := range ts[0].DNAT {
			for _, e := range eps {
				out[c] = append(out[c], e.String())
			}
			slices.Sort(out[c])
		}
		return out
	}
	want := func(got map[string][]string, chain string, eps ...string) {
		t.Helper()
		if !slices.Equal(got[chain], eps) {
			t.Errorf("%s DNATs to %v, want %v (the kernel: %s)", chain, got[chain], eps, nftOut(nft))
		}
	}
	// stats checks the reader's counters; a field of -1 is not checked.
	stats := func(w nftdrift.ReaderStats) {
		t.Helper()
		s := r.Stats()
		if s.Feed != feed || s.Full != w.Full || s.MapDumps != w.MapDumps || s.Unchanged != w.Unchanged || (w.Followed >= 0 && s.Followed != w.Followed) {
			t.Errorf("reader stats %+v, want feed %v, %d full reads, %d map dumps, %d unchanged, %d followed", s, feed, w.Full, w.MapDumps, w.Unchanged, w.Followed)
		}
	}
	followed := func(n int) int {
		if feed {
			return n
		}
		return 0
	}
	full := func(withFeed, without int) int {
		if feed {
			return withFeed
		}
		return without
	}
	const c0, c1, c2 = "service-0-default/s0/tcp/http", "service-1-default/s1/tcp/http", "service-2-default/s2/tcp/http"
	got := read()
	want(got, c0, "10.1.0.1:8080", "10.1.0.2:8080")
	stats(nftdrift.ReaderStats{Full: 1, MapDumps: 3})
	read()
	stats(nftdrift.ReaderStats{Full: 1, MapDumps: 3, Unchanged: 1}) // nothing changed: nothing read

	// Another table's commit: the feed says nothing of kube-proxy's table;
	// without it the generation moved and everything is read (the maps from
	// memory).
	run("add table ip unrelated\n")
	want(read(), c1, "10.1.0.1:8080", "10.1.0.2:8080")
	stats(nftdrift.ReaderStats{Full: full(1, 2), MapDumps: 3, Unchanged: full(2, 1)})

	// A chain flushed and rewritten (kube-proxy's partial sync): a new map.
	run("flush chain ip kube-proxy " + c1 + "\nadd rule ip kube-proxy " + c1 + " meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.1.0.7 . 8080, 1 : 10.1.0.8 . 8080 }\n")
	got = read()
	want(got, c1, "10.1.0.7:8080", "10.1.0.8:8080")
	want(got, c0, "10.1.0.1:8080", "10.1.0.2:8080")
	stats(nftdrift.ReaderStats{Full: full(1, 3), MapDumps: 4, Unchanged: full(2, 1), Followed: followed(1)})

	// A rule replaced in place.
	h := ruleHandle(t, nft, c2)
	run(fmt.Sprintf("replace rule ip kube-proxy %s handle %s meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.1.0.9 . 8080, 1 : 10.1.0.2 . 8080 }\n", c2, h))
	want(read(), c2, "10.1.0.2:8080", "10.1.0.9:8080")
	stats(nftdrift.ReaderStats{Full: full(1, 4), MapDumps: 5, Unchanged: full(2, 1), Followed: followed(2)})

	// An element deleted, another pointed elsewhere; a chain added, one deleted.
	run("delete element ip kube-proxy service-ips { 10.96.0.1 . tcp . 80 }\n" +
		"delete element ip kube-proxy service-ips { 10.96.0.2 . tcp . 80 }\nadd element ip kube-proxy service-ips { 10.96.0.2 . tcp . 80 : goto " + c2 + " }\n" +
		"add chain ip kube-proxy service-3-default/s3/tcp/http\nflush chain ip kube-proxy " + c0 + "\ndelete chain ip kube-proxy " + c0 + "\n")
	got = read()
	if _, ok := got[c0]; ok || tbl.Chains[c0] {
		t.Errorf("deleted chain %s still read: %v", c0, got[c0])
	}
	if n, ok := tbl.Rules["service-3-default/s3/tcp/http"]; !ok || n != 0 || !tbl.Chains["service-3-default/s3/tcp/http"] {
		t.Errorf("the new empty chain: rules %d (%v), want 0", n, ok)
	}
	ips := map[string]string{}
	for k, v := range tbl.ServiceIPs {
		ips[k.String()] = v
	}
	if len(ips) != 2 || ips["10.96.0.2 . tcp . 80"] != c2 || ips["10.96.0.3 . tcp . 80"] != c2 {
		t.Errorf("service-ips read as %v", ips)
	}

	// The table deleted and made again in the same order (a firewall
	// reload, then kube-proxy's restart): the same set names, new contents.
	run("delete table ip kube-proxy\n" + table("10.1.0.3", "10.1.0.4"))
	got = read()
	for _, c := range []string{c0, c1, c2} {
		want(got, c, "10.1.0.3:8080", "10.1.0.4:8080")
	}
	if s := r.Stats(); s.Full != full(2, 6) {
		t.Errorf("the table made again: %d full reads, want %d", s.Full, full(2, 6))
	}
	// And gone.
	run("delete table ip kube-proxy\n")
	if read(); tbl.Present {
		t.Errorf("the deleted table read as present")
	}
}

// ruleHandle returns the handle of chain's first rule, from nft -a.
func ruleHandle(t *testing.T, nft, chain string) string {
	t.Helper()
	out, err := exec.Command(nft, "-a", "list", "chain", "ip", "kube-proxy", chain).Output()
	if err != nil {
		t.Fatalf("nft -a list chain: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "# handle "); i >= 0 && strings.Contains(line, "dnat") {
			return strings.TrimSpace(line[i+len("# handle "):])
		}
	}
	t.Fatalf("no rule handle in %s", out)
	return ""
}

func nftOut(nft string) string {
	out, _ := exec.Command(nft, "list", "table", "ip", "kube-proxy").CombinedOutput()
	return string(out)
}
