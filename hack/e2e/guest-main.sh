#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# /guest/main of the end-to-end tier: the guest is one Kubernetes node,
# "guest", driven by the host's test (test/e2e) over a small control endpoint.
#
# It loads the netfilter modules kube-proxy's iptables/ipset rules need (a
# real node's kernel loads them on demand; here the kernel's modprobe helper
# is off, so that only ipvs-guard loads IPVS modules), serves
# POST /cgi-bin/exec on port 8000 (the body is a shell script run with
# /guest/e2e-lib.sh sourced; the answer is its output, a newline and a last
# line "exit=<code>"), and waits until the host writes the run's verdict to
# /run/e2e/done. Everything it starts is stopped before it exits.
set -u
mkdir -p /run/e2e /tmp/www/cgi-bin

# nf_tables for iptables-nft (matches and targets through nft_compat), ipset
# types the IPVS proxier creates, conntrack over netlink for UDP cleanup.
# Not IPVS: that is the scenario's business.
nf_modules="nf_tables nft_compat nft_chain_nat nf_nat nft_ct nft_reject_inet nf_conntrack_netlink
	x_tables xt_comment xt_mark xt_conntrack xt_addrtype xt_MASQUERADE xt_set xt_nat xt_multiport
	xt_statistic xt_physdev ipt_REJECT ip6t_REJECT nf_reject_ipv4 nf_reject_ipv6
	ip_set ip_set_hash_ip ip_set_hash_ipport ip_set_hash_ipportip ip_set_hash_ipportnet
	ip_set_hash_net ip_set_hash_netport ip_set_bitmap_port dummy"
for m in $nf_modules; do
	/usr/libexec/kmod/modprobe "$m" 2>>/run/e2e/modprobe-errors.log ||
		echo "e2e guest: could not load $m (see /run/e2e/modprobe-errors.log)"
done
# What is loaded now is the node's baseline; IPVS is not part of it.
cut -d' ' -f1 /proc/modules | sort >/run/e2e/modules.boot

cat >/tmp/www/cgi-bin/exec <<'EOF'
#!/bin/sh
printf 'Content-Type: text/plain\r\n\r\n'
script=$(mktemp /tmp/ctl.XXXXXX)
head -c "${CONTENT_LENGTH:-0}" >"$script"
( . /guest/e2e-lib.sh && . "$script" ) </dev/null 2>&1
printf '\nexit=%d\n' $?
rm -f "$script"
EOF
chmod 0755 /tmp/www/cgi-bin/exec
httpd -f -p 8000 -h /tmp/www &
echo $! >/run/e2e/httpd.pid
echo "e2e guest: control endpoint on :8000, node guest up $(cut -d' ' -f1 /proc/uptime)s after boot"

while [ ! -s /run/e2e/done ]; do
	sleep 1
done
. /guest/e2e-lib.sh
stop_all
rc=$(cat /run/e2e/done)
echo "e2e guest: host verdict $rc"
exit "$rc"
