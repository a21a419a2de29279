// SPDX-License-Identifier: Apache-2.0

package modules

import (
	"strings"
	"testing"
)

func TestWrittenByIPVSGuard(t *testing.T) {
	h := newFileHeader
	fresh := func(sched string, k Shipper) string {
		return string(MergeDeclarations(nil, Desired(sched, k), nil).Content)
	}
	stale := string(MergeDeclarations([]byte(fresh("rr", nil)), Desired("rr", nil), map[string]string{"ip_vs_sh": "not in kernel 6.1.0-56-amd64"}).Content)
	tests := []struct {
		name    string
		content string
		own     bool
	}{
		{"as written, default scheduler", fresh("rr", nil), true},
		{"as written, scheduler mh", fresh("mh", nil), true},
		{"as written, nf_conntrack_ipv4 kernel", fresh("lc", shipFunc(func(n string) bool { return n == ConntrackIPv4Module })), true},
		{"a module commented out as not in the kernel", stale, true},
		{"a module the kernel lacked was never written", h + "ip_vs\nip_vs_rr\nip_vs_wrr\nnf_conntrack\n", true},
		{"an admin's comment", fresh("rr", nil) + "# DO NOT REMOVE\n", false},
		{"an admin's comment inside", h + "ip_vs\n# DO NOT REMOVE\nip_vs_rr\nip_vs_wrr\nip_vs_sh\nnf_conntrack\n", false},
		{"an admin's ip_vs_mh appended", fresh("rr", nil) + "ip_vs_mh\n", false},
		{"an admin's other module", fresh("rr", nil) + "br_netfilter\n", false},
		{"a blank line added", fresh("rr", nil) + "\n", false},
		{"trailing spaces", strings.Replace(fresh("rr", nil), "ip_vs_rr\n", "ip_vs_rr \n", 1), false},
		{"dashes for underscores", strings.Replace(fresh("rr", nil), "ip_vs_wrr\n", "ip-vs-wrr\n", 1), false},
		{"a module twice", fresh("rr", nil) + "ip_vs\n", false},
		{"reordered", h + "ip_vs_rr\nip_vs\nip_vs_wrr\nip_vs_sh\nnf_conntrack\n", false},
		{"two schedulers", h + "ip_vs\nip_vs_rr\nip_vs_wrr\nip_vs_sh\nip_vs_lc\nip_vs_mh\nnf_conntrack\n", false},
		{"two conntrack modules", fresh("rr", nil) + "nf_conntrack_ipv4\n", false},
		{"a helper module", h + "ip_vs\nip_vs_ftp\n", false},
		{"a comment that looks like ipvs-guard's with another reason", h + "# ip_vs  # ipvs-guard: keep\nip_vs_rr\n", false},
		{"a stale line of another module", h + "ip_vs\n# br_netfilter  # ipvs-guard: not in kernel 6.1.0\n", false},
		{"CR LF line ends", strings.ReplaceAll(fresh("rr", nil), "\n", "\r\n"), false},
		{"no final line end", strings.TrimSuffix(fresh("rr", nil), "\n"), false},
		{"the header only", h, false},
		{"no header", "ip_vs\nip_vs_rr\n", false},
		{"the header edited", strings.Replace(fresh("rr", nil), "Maintained by", "Owned by", 1), false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := WrittenByIPVSGuard([]byte(tt.content)); got != tt.own {
				t.Errorf("WrittenByIPVSGuard = %v, want %v for\n%s", got, tt.own, tt.content)
			}
		})
	}
}
