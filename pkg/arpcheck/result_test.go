// SPDX-License-Identifier: Apache-2.0

package arpcheck

import (
	"encoding/json"
	"net"
	"testing"
)

func TestClassify(t *testing.T) {
	a := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0xa}
	b := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0xb}
	c := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0xc}
	tests := []struct {
		name     string
		macs     []net.HardwareAddr
		expected []net.HardwareAddr
		want     Result
	}{
		{name: "nothing answered", want: ResultNoReply},
		{name: "nothing answered, expected known", expected: []net.HardwareAddr{a}, want: ResultNoReply},
		{name: "one MAC, no expectation", macs: []net.HardwareAddr{a}, want: ResultAnswered},
		{name: "one MAC, the expected one", macs: []net.HardwareAddr{a}, expected: []net.HardwareAddr{a}, want: ResultAnswered},
		{name: "one MAC, one of several expected", macs: []net.HardwareAddr{b}, expected: []net.HardwareAddr{a, b}, want: ResultAnswered},
		{name: "one MAC, not expected", macs: []net.HardwareAddr{c}, expected: []net.HardwareAddr{a, b}, want: ResultWrongResponder},
		{name: "two MACs", macs: []net.HardwareAddr{a, b}, want: ResultConflict},
		{name: "two MACs, one expected", macs: []net.HardwareAddr{a, b}, expected: []net.HardwareAddr{a}, want: ResultConflict},
		{name: "two MACs, both expected (same node, two NICs)", macs: []net.HardwareAddr{a, b}, expected: []net.HardwareAddr{a, b}, want: ResultConflict},
		{name: "three MACs", macs: []net.HardwareAddr{a, b, c}, want: ResultConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(tt.macs, tt.expected); got != tt.want {
				t.Errorf("classify(%v, %v) = %s, want %s", tt.macs, tt.expected, got, tt.want)
			}
		})
	}
}

func TestResultText(t *testing.T) {
	for _, r := range []Result{ResultUnknown, ResultAnswered, ResultNoReply, ResultConflict, ResultWrongResponder} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("marshal %d: %v", int(r), err)
		}
		var back Result
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		if back != r {
			t.Errorf("round trip of %s gave %s", r, back)
		}
	}
	if _, err := json.Marshal(Result(42)); err == nil {
		t.Error("marshalling an invalid Result succeeded")
	}
	var r Result
	if err := json.Unmarshal([]byte(`"flapping"`), &r); err == nil {
		t.Error("unmarshalling an unknown result succeeded")
	}
	if got := Result(42).String(); got != "Result(42)" {
		t.Errorf("String of invalid = %q", got)
	}
	for r, want := range map[Result]bool{ResultAnswered: false, ResultNoReply: true, ResultConflict: true, ResultWrongResponder: true, ResultUnknown: true} {
		if r.Problem() != want {
			t.Errorf("%s.Problem() = %v, want %v", r, !want, want)
		}
	}
}

func TestClassifyByNode(t *testing.T) {
	tests := []struct {
		name     string
		in       Result
		nodes    []string
		expected string
		want     Result
	}{
		{name: "responder is the announcer", in: ResultAnswered, nodes: []string{"a"}, expected: "a", want: ResultAnswered},
		{name: "responder is another node", in: ResultAnswered, nodes: []string{"b"}, expected: "a", want: ResultWrongResponder},
		{name: "responder MAC unknown", in: ResultAnswered, nodes: []string{""}, expected: "a", want: ResultAnswered},
		{name: "no announcer known", in: ResultAnswered, nodes: []string{"b"}, want: ResultAnswered},
		{name: "no resolver", in: ResultAnswered, expected: "a", want: ResultAnswered},
		{name: "conflict stays conflict", in: ResultConflict, nodes: []string{"a", "b"}, expected: "a", want: ResultConflict},
		{name: "no reply stays no reply", in: ResultNoReply, expected: "a", want: ResultNoReply},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classifyByNode(tt.in, tt.nodes, tt.expected); got != tt.want {
				t.Errorf("classifyByNode(%s, %v, %q) = %s, want %s", tt.in, tt.nodes, tt.expected, got, tt.want)
			}
		})
	}
}
