#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# /guest/main for `make demo`: the story of ipvs-guard's main job, told in the
# guest kernel. Exits 0 only if every step behaved as it should.
set -u
say() { printf '\n## %s\n' "$*"; }
show() {
	printf '\n$ %s\n' "$*"
	"$@"
	code=$?
	printf '(exit code %d)\n' "$code"
	return "$code"
}
ipvs_modules() {
	printf '\n$ grep -E "^(ip_vs|nf_conntrack|nf_defrag|libcrc32c)" /proc/modules | cut -d" " -f1\n'
	grep -E '^(ip_vs|nf_conntrack|nf_defrag|libcrc32c)' /proc/modules | cut -d' ' -f1 | sort | tr '\n' ' '
	grep -qE '^ip_vs ' /proc/modules || printf '(no IPVS module loaded)'
	echo
}
ok=0
expect() { # expect WANT GOT WHAT
	if [ "$1" != "$2" ]; then
		printf '!! %s: exit code %s, expected %s\n' "$3" "$2" "$1"
		ok=1
	fi
}

say "A fresh node: Debian's kernel $(uname -r), kube-proxy meant to run in IPVS mode, but nobody loaded the IPVS modules or declared them for boot. (In this VM the kernel's own module auto-loading is switched off, so only ipvs-guard can load anything.)"
ipvs_modules
show ls -A /etc/modules-load.d/

say "ipvs-guard diagnose looks at the node and changes nothing. Exit code 1 means: problems found."
show ipvs-guard diagnose
expect 1 $? "diagnose on the broken node"

say "No kube-proxy runs here yet and nothing on the node says its mode, so --assume-proxy-mode ipvs states it. ipvs-guard diagnose --fix loads the missing modules itself (finit_module, resolving modules.dep and softdeps; no modprobe) and declares them in /etc/modules-load.d/ipvs.conf so a reboot keeps them."
show ipvs-guard diagnose --fix --assume-proxy-mode ipvs
expect 0 $? "diagnose --fix"
ipvs_modules
show cat /etc/modules-load.d/ipvs.conf

say "Run it again: healthy, exit code 0."
show ipvs-guard diagnose
expect 0 $? "diagnose after the fix"

say "Does the declaration survive a reboot? Drop the modules and let systemd-modules-load, which runs at boot, read the file."
/usr/libexec/kmod/modprobe -r -a ip_vs_rr ip_vs_wrr ip_vs_sh ip_vs nf_conntrack 2>/dev/null
ipvs_modules
show /lib/systemd/systemd-modules-load
ipvs_modules
show ipvs-guard diagnose
expect 0 $? "diagnose after systemd-modules-load"

if [ "$ok" = 0 ]; then
	say "Done: found (exit 1), fixed, healthy (exit 0), and persistent across a reboot. Scripts use -o json; an agent does the same continuously: ipvs-guard run."
else
	say "The demo did not go as expected (see the !! lines above)."
fi
exit $ok
