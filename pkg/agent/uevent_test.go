// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseModuleUevent(t *testing.T) {
	tests := []struct {
		name   string
		msg    string
		want   ModuleEvent
		wantOK bool
	}{
		{name: "add", msg: "add@/module/ip_vs\x00ACTION=add\x00DEVPATH=/module/ip_vs\x00SUBSYSTEM=module\x00SEQNUM=1234\x00",
			want: ModuleEvent{Action: "add", Module: "ip_vs"}, wantOK: true},
		{name: "remove", msg: "remove@/module/ip_vs_lc\x00ACTION=remove\x00DEVPATH=/module/ip_vs_lc\x00SUBSYSTEM=module\x00SEQNUM=9\x00",
			want: ModuleEvent{Action: "remove", Module: "ip_vs_lc"}, wantOK: true},
		{name: "other subsystem", msg: "add@/devices/virtual/net/veth0\x00ACTION=add\x00DEVPATH=/devices/virtual/net/veth0\x00SUBSYSTEM=net\x00"},
		{name: "module bind is not a load", msg: "bind@/module/ip_vs\x00ACTION=bind\x00DEVPATH=/module/ip_vs\x00SUBSYSTEM=module\x00"},
		{name: "header disagrees", msg: "add@/module/a\x00ACTION=add\x00DEVPATH=/module/b\x00SUBSYSTEM=module\x00"},
		{name: "udev rebroadcast", msg: "libudev\x00\xfe\xed\xca\xfe"},
		{name: "empty", msg: ""},
		{name: "no name", msg: "add@/module/\x00ACTION=add\x00DEVPATH=/module/\x00SUBSYSTEM=module\x00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseModuleUevent([]byte(tt.msg))
			if ok != tt.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tt.wantOK)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseModuleUevent(f *testing.F) {
	f.Add([]byte("add@/module/ip_vs\x00ACTION=add\x00DEVPATH=/module/ip_vs\x00SUBSYSTEM=module\x00SEQNUM=1234\x00"))
	f.Add([]byte("remove@/module/nf_conntrack\x00ACTION=remove\x00DEVPATH=/module/nf_conntrack\x00SUBSYSTEM=module\x00SEQNUM=1\x00"))
	f.Add([]byte("change@/devices/system/cpu/cpu0\x00ACTION=change\x00SUBSYSTEM=cpu\x00"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		ev, ok := ParseModuleUevent(msg)
		if !ok {
			return
		}
		again, ok2 := ParseModuleUevent(FormatModuleUevent(ev, 1))
		if !ok2 || again != ev {
			t.Fatalf("round trip of %+v gave %+v, %v", ev, again, ok2)
		}
	})
}
