// SPDX-License-Identifier: Apache-2.0

package l2segment

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ArpingResult is what one run of iputils arping saw.
type ArpingResult struct {
	// Exit is arping's exit code: 0 only when every request got exactly one reply.
	Exit int
	// MACs are the distinct responders, lower case, sorted.
	MACs []string
	// RTTs are the printed round-trip times, corrected for iputils'
	// 0.5 ms print offset, in reply order.
	RTTs []time.Duration
	// Output is arping's output.
	Output string
}

// ArpingPrintOffset is what iputils arping (20221126) adds to every RTT it
// prints (`usecs -= msecs*1000 - 500`).
const ArpingPrintOffset = 500 * time.Microsecond

var unicastReply = regexp.MustCompile(`(?m)^Unicast reply from (\S+) \[([0-9A-Fa-f:]{17})\]\s+([0-9.]+)ms`)

// Arping runs iputils arping on the node's eth0 for ip: one request a
// second until count replies arrived or deadline passed (arping's -c with
// -w counts replies); -b keeps broadcasting, so every holder of the
// address answers every request. To hear every responder, pass a count
// above the number of replies expected.
func (n *Node) Arping(ctx context.Context, ip netip.Addr, count int, deadline time.Duration) (ArpingResult, error) {
	args := ArpingArgs("eth0", ip, count, deadline)
	out, err := n.Command(ctx, args[0], args[1:]...).CombinedOutput()
	exit := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return ArpingResult{Output: string(out)}, fmt.Errorf("running arping in %s: %w", n.NetNS, err)
		}
		exit = ee.ExitCode()
	}
	return ParseArping(string(out), exit, ip)
}

// ArpingArgs is the iputils arping command line Arping runs, on iface:
// for a host that runs it by other means (a guest on the segment).
func ArpingArgs(iface string, ip netip.Addr, count int, deadline time.Duration) []string {
	return []string{"arping", "-b", "-I", iface, "-c", strconv.Itoa(count), "-w", strconv.Itoa(int(deadline.Seconds() + 0.5)), ip.String()}
}

// ParseArping reads the output and exit code of an ArpingArgs run for ip.
func ParseArping(out string, exit int, ip netip.Addr) (ArpingResult, error) {
	res := ArpingResult{Exit: exit, Output: out}
	for _, m := range unicastReply.FindAllStringSubmatch(res.Output, -1) {
		if m[1] != ip.String() {
			return res, fmt.Errorf("arping printed a reply for %s while probing %s:\n%s", m[1], ip, res.Output)
		}
		mac := strings.ToLower(m[2])
		if !slices.Contains(res.MACs, mac) {
			res.MACs = append(res.MACs, mac)
		}
		ms, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return res, fmt.Errorf("parsing arping RTT %q: %w", m[3], err)
		}
		res.RTTs = append(res.RTTs, time.Duration(ms*float64(time.Millisecond))-ArpingPrintOffset)
	}
	slices.Sort(res.MACs)
	return res, nil
}
