// SPDX-License-Identifier: Apache-2.0

package nftready

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
)

const prereqRel = "6.1.0-test-amd64"

// prereqTree is a node whose kernel has nf_tables as modules, every module
// kube-proxy's nftables rules need in its index, and those of loaded in
// /proc/modules; extra adds or replaces files ("" removes one).
func prereqTree(t *testing.T, loaded []string, extra map[string]string) map[string]string {
	t.Helper()
	var dep, proc strings.Builder
	for _, m := range NeededModules() {
		fmt.Fprintf(&dep, "kernel/net/netfilter/%s.ko:\n", m)
	}
	for _, m := range loaded {
		fmt.Fprintf(&proc, "%s 16384 0 - Live 0x0000000000000000\n", m)
	}
	files := map[string]string{
		"proc/sys/kernel/osrelease":                            prereqRel + "\n",
		"proc/sys/kernel/modules_disabled":                     "0\n",
		"proc/modules":                                         proc.String(),
		"proc/cmdline":                                         "BOOT_IMAGE=/vmlinuz root=/dev/vda1 ro\n",
		path.Join("lib/modules", prereqRel, "modules.dep"):     dep.String(),
		path.Join("lib/modules", prereqRel, "modules.builtin"): "kernel/lib/crc32.ko\n",
	}
	for p, c := range extra {
		if c == "" {
			delete(files, p)
			continue
		}
		files[p] = c
	}
	return files
}

func without(all []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(all), func(m string) bool { return slices.Contains(drop, m) })
}

func staticMode(m string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return m, nil }
}

func TestPrerequisitesChecker(t *testing.T) {
	all := NeededModules()
	depDir := path.Join("lib/modules", prereqRel)
	tests := []struct {
		name    string
		mode    func(context.Context) (string, error)
		loaded  []string
		files   map[string]string
		status  check.Status
		reason  string
		msg     []string // substrings of the message
		notMsg  []string
		fix     []string // substrings of the remediation
		kinds   []string // finding kinds, in order
		noFixes bool
	}{
		{name: "every module loaded, nothing blocked", loaded: all, status: check.StatusOK, reason: ReasonPrerequisitesMet, noFixes: true},
		{name: "modules not loaded yet but shipped and loadable: the kernel loads them on kube-proxy's next sync", loaded: []string{"nf_tables"},
			status: check.StatusOK, reason: ReasonPrerequisitesMet, noFixes: true},
		{name: "ipvs mode: skipped", mode: staticMode(kubeproxy.ModeIPVS), loaded: nil, files: map[string]string{"etc/modprobe.d/x.conf": "blacklist nft_numgen\n"},
			status: check.StatusSkipped, reason: ReasonPrerequisitesNotNFTables, msg: []string{"runs in ipvs mode", "do not apply"}},
		{name: "iptables mode: skipped", mode: staticMode(kubeproxy.ModeIPTables), status: check.StatusSkipped, reason: ReasonPrerequisitesNotNFTables},
		{name: "kube-proxy's metrics port refuses connections: skipped",
			mode: func(context.Context) (string, error) {
				return "", fmt.Errorf("GET /proxyMode: %w", kubeproxy.ErrUnreachable)
			},
			status: check.StatusSkipped, reason: kubeproxy.ReasonUnreachable},
		{name: "a loaded module newly blacklisted: a problem for the next boot", loaded: all,
			files:  map[string]string{"etc/modprobe.d/x.conf": "# local hardening\nblacklist nft_numgen\n"},
			status: check.StatusProblem, reason: ReasonModuleBlocked,
			msg: []string{`nft_numgen, which kube-proxy's nftables rules need, is blocked by "blacklist nft_numgen" in /etc/modprobe.d/x.conf: it is loaded now, but the kernel will not load it after the next boot.`},
			fix: []string{`Remove the line "blacklist nft_numgen" from /etc/modprobe.d/x.conf.`}, kinds: []string{PrereqBlocked}},
		{name: "a blacklisted module not loaded: the kernel does not load it", loaded: without(all, "nft_numgen"),
			files:  map[string]string{"etc/modprobe.d/x.conf": "blacklist nft_numgen\n"},
			status: check.StatusProblem, reason: ReasonModuleBlocked, msg: []string{"in /etc/modprobe.d/x.conf: the kernel does not load it."}, kinds: []string{PrereqBlocked}},
		{name: "install command", loaded: all,
			files:  map[string]string{"etc/modprobe.d/deny.conf": "install nft_ct /bin/false\n"},
			status: check.StatusProblem, reason: ReasonModuleBlocked, msg: []string{`nft_ct, which kube-proxy's nftables rules need, is blocked by "install nft_ct /bin/false" in /etc/modprobe.d/deny.conf`},
			fix: []string{`Remove the line "install nft_ct /bin/false" from /etc/modprobe.d/deny.conf.`}, kinds: []string{PrereqBlocked}},
		{name: "conntrack replaced by an install command: blocked even as a dependency", loaded: all,
			files:  map[string]string{"etc/modprobe.d/deny.conf": "install nf_conntrack /bin/true\n"},
			status: check.StatusProblem, reason: ReasonModuleBlocked, msg: []string{`nf_conntrack, which kube-proxy's nftables rules need, is blocked by "install nf_conntrack /bin/true"`}, kinds: []string{PrereqBlocked}},
		{name: "a blacklisted dependency (nf_conntrack, nf_nat) still loads: no problem", loaded: without(all, "nf_conntrack", "nf_nat"),
			files:  map[string]string{"etc/modprobe.d/x.conf": "blacklist nf_conntrack\nblacklist nf_nat\n"},
			status: check.StatusOK, reason: ReasonPrerequisitesMet},
		{name: "the modprobe --ignore-install wrapper loads the module", loaded: all,
			files:  map[string]string{"etc/modprobe.d/log.conf": "install nft_numgen logger loading; /sbin/modprobe --ignore-install nft_numgen\n"},
			status: check.StatusOK, reason: ReasonPrerequisitesMet},
		{name: "a blacklisted built-in module is not touched", loaded: without(all, "nft_numgen"),
			files: map[string]string{"etc/modprobe.d/x.conf": "blacklist nft_numgen\n",
				path.Join(depDir, "modules.builtin"): "kernel/net/netfilter/nft_numgen.ko\n"},
			status: check.StatusOK, reason: ReasonPrerequisitesMet},
		{name: "blacklisted on the kernel command line", loaded: all,
			files:  map[string]string{"proc/cmdline": "root=/dev/vda1 modprobe.blacklist=nft_numgen,usb_storage\n"},
			status: check.StatusProblem, reason: ReasonModuleBlocked, msg: []string{`"modprobe.blacklist=nft_numgen" in /proc/cmdline`},
			fix: []string{"Remove nft_numgen from modprobe.blacklist= on the kernel command line"}},
		{name: "kernel.modules_disabled with a needed module not loaded", loaded: without(all, "nft_numgen"),
			files: map[string]string{"proc/sys/kernel/modules_disabled": "1\n",
				"etc/sysctl.d/99-lockdown.conf":    "# lock the kernel\nkernel.modules_disabled = 1\n",
				"usr/lib/sysctl.d/50-default.conf": "kernel.sysrq = 16\n"},
			status: check.StatusProblem, reason: ReasonModulesDisabled,
			msg: []string{"kernel.modules_disabled is 1 and nft_numgen is not loaded: the kernel cannot load it until reboot, and kube-proxy's nftables rules need it."},
			fix: []string{"nft_numgen)", "remove the line kernel.modules_disabled = 1 from /etc/sysctl.d/99-lockdown.conf and reboot."}, kinds: []string{PrereqModulesDisabled}},
		{name: "kernel.modules_disabled with conntrack not loaded, set in sysctl.conf", loaded: without(all, "nf_conntrack", "nft_ct"),
			files:  map[string]string{"proc/sys/kernel/modules_disabled": "1\n", "etc/sysctl.conf": "kernel/modules_disabled=1\n"},
			status: check.StatusProblem, reason: ReasonModulesDisabled, msg: []string{"nft_ct, nf_conntrack are not loaded: the kernel cannot load them until reboot"},
			fix: []string{"from /etc/sysctl.conf and reboot"}, kinds: []string{PrereqModulesDisabled, PrereqModulesDisabled}},
		{name: "kernel.modules_disabled with every module loaded", loaded: all,
			files:  map[string]string{"proc/sys/kernel/modules_disabled": "1\n"},
			status: check.StatusOK, reason: ReasonPrerequisitesMet},
		{name: "a needed module not loaded and not in the kernel's index", loaded: without(all, "nft_numgen"),
			files:  map[string]string{path.Join(depDir, "modules.dep"): strings.ReplaceAll(prereqDep(), "kernel/net/netfilter/nft_numgen.ko:\n", "")},
			status: check.StatusProblem, reason: ReasonModuleNotInKernel, msg: []string{"The running kernel does not ship nft_numgen (neither in modules.dep nor built in)"},
			fix: []string{"Install the running kernel's full modules package (it ships nft_numgen)"}, kinds: []string{PrereqNotInKernel}},
		{name: "no modules.dep: the index tells nothing", loaded: without(all, "nft_numgen"),
			files:  map[string]string{path.Join(depDir, "modules.dep"): ""},
			status: check.StatusOK, reason: ReasonPrerequisitesMet},
		{name: "modules disabled, not shipped and blacklisted: every finding, modules_disabled's reason first", loaded: without(all, "nft_numgen"),
			files: map[string]string{"proc/sys/kernel/modules_disabled": "1\n", "etc/modprobe.d/x.conf": "blacklist nft_numgen\n",
				path.Join(depDir, "modules.dep"): strings.ReplaceAll(prereqDep(), "kernel/net/netfilter/nft_numgen.ko:\n", "")},
			status: check.StatusProblem, reason: ReasonModulesDisabled, msg: []string{"kernel.modules_disabled is 1", "does not ship nft_numgen", `"blacklist nft_numgen"`},
			kinds: []string{PrereqModulesDisabled, PrereqNotInKernel, PrereqBlocked}},
		{name: "no module support (no /proc/modules): everything is built in", files: map[string]string{"proc/modules": "", "etc/modprobe.d/x.conf": "blacklist nft_numgen\n"},
			status: check.StatusOK, reason: ReasonPrerequisitesMet},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeTree(t, prereqTree(t, tt.loaded, tt.files))
			m := tt.mode
			if m == nil {
				m = staticMode(kubeproxy.ModeNFTables)
			}
			c, err := NewPrerequisitesChecker(PrerequisitesConfig{Host: HostSources(root), Mode: m})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Name != check.NameNFTablesPrerequisites || res.Status != tt.status || res.Reason != tt.reason {
				t.Fatalf("got %s %s %s: %s\nfindings %v", res.Name, res.Status, res.Reason, res.Message, res.Findings)
			}
			for _, s := range tt.msg {
				if !strings.Contains(res.Message, s) {
					t.Errorf("message %q lacks %q", res.Message, s)
				}
			}
			fix := fmt.Sprint(res.Remediation)
			for _, s := range tt.fix {
				if !strings.Contains(fix, s) {
					t.Errorf("remediation %q lacks %q", fix, s)
				}
			}
			if tt.noFixes && len(res.Remediation) > 0 {
				t.Errorf("remediation %q for a healthy node", fix)
			}
			if tt.kinds != nil {
				var kinds []string
				for _, f := range res.Findings {
					kinds = append(kinds, f.(Prerequisite).Kind)
				}
				if !slices.Equal(kinds, tt.kinds) {
					t.Errorf("finding kinds %q, want %q", kinds, tt.kinds)
				}
			}
			// The message does not change while the fault lasts.
			again, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if again.Message != res.Message || again.Reason != res.Reason {
				t.Errorf("second run: %s %q, first %s %q", again.Reason, again.Message, res.Reason, res.Message)
			}
		})
	}
}

func prereqDep() string {
	var dep strings.Builder
	for _, m := range NeededModules() {
		fmt.Fprintf(&dep, "kernel/net/netfilter/%s.ko:\n", m)
	}
	return dep.String()
}

// TestPrerequisitesLastMode: a kube-proxy that stops answering keeps the
// mode it last reported; one never heard from is an error, not a guess.
func TestPrerequisitesLastMode(t *testing.T) {
	root := writeTree(t, prereqTree(t, NeededModules(), map[string]string{"etc/modprobe.d/x.conf": "blacklist nft_numgen\n"}))
	var answer string
	var fail error
	c, err := NewPrerequisitesChecker(PrerequisitesConfig{Host: HostSources(root), Mode: func(context.Context) (string, error) { return answer, fail }})
	if err != nil {
		t.Fatal(err)
	}
	hung := errors.New("context deadline exceeded (Client.Timeout exceeded while awaiting headers)")
	fail = hung
	if _, err := c.Run(context.Background()); err == nil || !errors.Is(err, hung) {
		t.Fatalf("never answered: %v", err)
	}
	answer, fail = kubeproxy.ModeNFTables, nil
	if res, err := c.Run(context.Background()); err != nil || res.Reason != ReasonModuleBlocked {
		t.Fatalf("nftables: %v %s", err, res.Reason)
	}
	answer, fail = "", hung
	if res, err := c.Run(context.Background()); err != nil || res.Reason != ReasonModuleBlocked {
		t.Fatalf("hung after nftables: %v %s %s", err, res.Reason, res.Message)
	}
	fail = fmt.Errorf("dial: %w", kubeproxy.ErrUnreachable)
	if res, err := c.Run(context.Background()); err != nil || res.Status != check.StatusSkipped {
		t.Fatalf("refused: %v %s", err, res.Status)
	}
	fail = hung
	if _, err := c.Run(context.Background()); err == nil {
		t.Fatal("hung after refused: the mode is unknown again, yet judged")
	}
}

func TestSetsModulesDisabled(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bool
	}{
		{"kernel.modules_disabled = 1\n", true},
		{"kernel.modules_disabled=1", true},
		{"-kernel.modules_disabled = 1\n", true},
		{"kernel/modules_disabled = 1\n", true},
		{"  kernel.modules_disabled\t=\t1  \n", true},
		{"# kernel.modules_disabled = 1\n", false},
		{"; kernel.modules_disabled = 1\n", false},
		{"kernel.modules_disabled = 0\n", false},
		{"kernel.modules_disabled_x = 1\n", false},
		{"", false},
	} {
		if got := setsModulesDisabled(tt.in); got != tt.want {
			t.Errorf("%q: %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestModulesDisabledFiles: systemd-sysctl's order and masking by name.
func TestModulesDisabledFiles(t *testing.T) {
	root := writeTree(t, map[string]string{
		"etc/sysctl.d/10-a.conf":     "kernel.modules_disabled = 1\n",
		"usr/lib/sysctl.d/10-a.conf": "kernel.modules_disabled = 1\n", // masked by /etc's
		"usr/lib/sysctl.d/90-b.conf": "kernel.modules_disabled=1\n",
		"run/sysctl.d/50-c.conf":     "kernel.sysrq = 1\n",
		"etc/sysctl.d/README":        "kernel.modules_disabled = 1\n",
		"etc/sysctl.conf":            "kernel.modules_disabled = 1\n",
	})
	got := modulesDisabledFiles(root)
	want := []string{"/etc/sysctl.d/10-a.conf", "/usr/lib/sysctl.d/90-b.conf", "/etc/sysctl.conf"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// FuzzSetsModulesDisabled: any sysctl.d content is read without panic, and
// only a line naming the sysctl with the value 1 counts.
func FuzzSetsModulesDisabled(f *testing.F) {
	for _, s := range []string{"kernel.modules_disabled = 1\n", "-kernel/modules_disabled=1", "# kernel.modules_disabled = 1", "kernel.modules_disabled=0\nkernel.sysrq=1", "=\n=1\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if setsModulesDisabled(s) && !strings.Contains(strings.ReplaceAll(s, "/", "."), "kernel.modules_disabled") {
			t.Errorf("%q counted as setting kernel.modules_disabled", s)
		}
	})
}
