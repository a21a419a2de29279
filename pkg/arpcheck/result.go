// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"bytes"
	"fmt"
	"net"
	"slices"
)

// Result is the verdict for one probed IP.
type Result int

const (
	// ResultUnknown is the zero value; no verdict was reached.
	ResultUnknown Result = iota
	// ResultAnswered means exactly one MAC answered (and it is the expected one, if any was given).
	ResultAnswered
	// ResultNoReply means no MAC answered within the reply window, after every retry.
	ResultNoReply
	// ResultConflict means two or more MACs answered: clients flap between them.
	ResultConflict
	// ResultWrongResponder means exactly one MAC answered, but not one of the expected MACs.
	ResultWrongResponder
	// ResultOtherInterface means exactly one MAC answered, the announcing
	// node's, but of an interface other than the ones MetalLB's
	// ServiceL2Status names (the reply leaves by another way: a router
	// filtering by source may drop it).
	ResultOtherInterface
	// ResultDownInterface means exactly one MAC answered, the MAC of an
	// interface of the announcing node that is down (administratively or
	// without carrier).
	ResultDownInterface
)

var resultNames = [...]string{
	ResultUnknown:        "unknown",
	ResultAnswered:       "answered",
	ResultNoReply:        "no-reply",
	ResultConflict:       "conflict",
	ResultWrongResponder: "wrong-responder",
	ResultOtherInterface: "reply-from-other-interface",
	ResultDownInterface:  "reply-from-down-interface",
}

// String returns the result as it appears in reports and JSON.
func (r Result) String() string {
	if r < 0 || int(r) >= len(resultNames) {
		return fmt.Sprintf("Result(%d)", int(r))
	}
	return resultNames[r]
}

// MarshalText implements encoding.TextMarshaler.
func (r Result) MarshalText() ([]byte, error) {
	if r < 0 || int(r) >= len(resultNames) {
		return nil, fmt.Errorf("marshalling ARP result: invalid value %d", int(r))
	}
	return []byte(resultNames[r]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *Result) UnmarshalText(b []byte) error {
	for i, n := range resultNames {
		if string(b) == n {
			*r = Result(i)
			return nil
		}
	}
	return fmt.Errorf("unknown ARP result %q", b)
}

// Problem reports whether the result makes the arp check unhealthy.
func (r Result) Problem() bool { return r != ResultAnswered }

// classify turns the distinct MACs that answered for an IP (in order of first
// reply) into a verdict. expected, when not empty, lists the MACs allowed to
// answer (the announcing node's interfaces). Several responders are a conflict
// even when one of them is expected: clients still flap between them.
func classify(macs, expected []net.HardwareAddr) Result {
	switch {
	case len(macs) == 0:
		return ResultNoReply
	case len(macs) > 1:
		return ResultConflict
	case len(expected) > 0 && !containsMAC(expected, macs[0]):
		return ResultWrongResponder
	default:
		return ResultAnswered
	}
}

func containsMAC(list []net.HardwareAddr, mac net.HardwareAddr) bool {
	return slices.ContainsFunc(list, func(m net.HardwareAddr) bool { return bytes.Equal(m, mac) })
}

// classifyByNode refines an answered verdict when only the announcing node's
// name is known (no expected MACs): a single responder whose MAC a node
// resolver attributes to another node is a wrong responder. An unknown MAC
// proves nothing and leaves the verdict alone.
func classifyByNode(r Result, responderNodes []string, expectedNode string) Result {
	if r != ResultAnswered || expectedNode == "" || len(responderNodes) != 1 {
		return r
	}
	if n := responderNodes[0]; n != "" && n != expectedNode {
		return ResultWrongResponder
	}
	return r
}
