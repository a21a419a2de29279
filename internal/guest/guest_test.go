// SPDX-License-Identifier: Apache-2.0

package guest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseProcModules(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Module
		wantErr bool
	}{
		{
			name: "guest kernel after loading ip_vs",
			in: "ip_vs_rr 16384 0 - Live 0x0000000000000000\n" +
				"ip_vs 188416 2 ip_vs_rr,ip_vs_sh, Live 0x0000000000000000\n" +
				"nf_conntrack 176128 1 ip_vs, Live 0x0000000000000000\n" +
				"libcrc32c 16384 2 nf_conntrack,ip_vs, Live 0x0000000000000000\n",
			want: []Module{
				{Name: "ip_vs_rr", RefCount: 0, State: "Live"},
				{Name: "ip_vs", RefCount: 2, UsedBy: []string{"ip_vs_rr", "ip_vs_sh"}, State: "Live"},
				{Name: "nf_conntrack", RefCount: 1, UsedBy: []string{"ip_vs"}, State: "Live"},
				{Name: "libcrc32c", RefCount: 2, UsedBy: []string{"nf_conntrack", "ip_vs"}, State: "Live"},
			},
		},
		{name: "empty", in: ""},
		{name: "unloading with permanent marker", in: "x 1 0 [permanent] Unloading 0x0\n",
			want: []Module{{Name: "x", UsedBy: []string{"[permanent]"}, State: "Unloading"}}},
		{name: "short line", in: "ip_vs 1 0\n", wantErr: true},
		{name: "bad refcount", in: "ip_vs 1 x - Live 0x0\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProcModules([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}
