# SPDX-License-Identifier: Apache-2.0
# Guest-side helpers of the migration tier (busybox sh), sourced by the
# scripts test/migrate sends to the control endpoint, after
# hack/e2e/e2e-lib.sh (bg_start, kp_start, uptime_s...).

# nft_modules_load loads what kube-proxy's nftables ruleset asks of the
# kernel: nf_tables and the expressions it uses (ct, numgen, fib, nat,
# masquerade, reject, limit, objref; counter is part of nf_tables since
# Linux 5.x). All are modules in Debian's kernel. A real node's kernel
# loads them on demand; this guest's modprobe helper is off.
nft_modules_load() {
	for m in nf_tables nft_ct nft_numgen nft_hash nft_fib nft_fib_inet nft_fib_ipv4 nft_fib_ipv6 \
		nft_nat nft_masq nft_chain_nat nft_reject nft_reject_inet nft_reject_ipv4 nft_reject_ipv6 \
		nft_limit nft_objref nft_compat; do
		grep -q "^$m " /proc/modules && continue
		/usr/libexec/kmod/modprobe "$m" 2>>"$E2E_RUN/modprobe-errors.log" ||
			echo "migrate guest: could not load $m (built in, or see $E2E_RUN/modprobe-errors.log)"
	done
	return 0
}

# mg_kp_start MODE [ARGS...] restarts kube-proxy in MODE (ipvs or
# nftables). kube-proxy gets kmod's modprobe on its PATH, as in the upstream
# image kubeadm runs: its IPVS cleanup (run when it starts in nftables mode)
# asks `modprobe -va ip_vs` first and does nothing when that fails, and the
# guest's PATH only has a tripwire modprobe, which fails. MG_KP_PATH
# replaces kube-proxy's PATH: MG_KP_PATH="$PATH" leaves it the tripwire only,
# as RKE2's image, which has no modprobe. Prints the guest time of the start.
mg_kp_start() {
	mode=$1
	shift
	kp_stop >/dev/null
	PATH=${MG_KP_PATH:-/usr/libexec/kmod:$PATH} kp_start --kubeconfig="$E2E_RUN/node.kubeconfig" --proxy-mode="$mode" \
		--hostname-override=guest --metrics-bind-address=127.0.0.1:10249 "$@" >/dev/null || return 1
	i=0
	while [ ! -s "$E2E_RUN/kube-proxy.starts" ] && [ $i -lt 100 ]; do
		usleep 20000
		i=$((i + 1))
	done
	echo "kube-proxy-start $(tail -n1 "$E2E_RUN/kube-proxy.starts")"
}

# backend_start serves "backend guest" on :8080 (busybox httpd), the
# Service's only endpoint.
backend_start() {
	mkdir -p /tmp/backend
	echo "backend guest" >/tmp/backend/index.html
	bg_start backend httpd -f -p 8080 -h /tmp/backend
}

# proxy_state VIP prints which data plane holds VIP:80 now: ipvs (a
# virtual server), nft (kube-proxy's nftables table, no virtual server),
# both, or none.
proxy_state() {
	ipvs=0
	nft=0
	ipvsadm -Ln -t "$1:80" >/dev/null 2>&1 && ipvs=1
	nft list tables 2>/dev/null | grep -qx 'table ip kube-proxy' && nft=1
	case $ipvs$nft in
	10) echo ipvs ;;
	01) echo nft ;;
	11) echo both ;;
	*) echo none ;;
	esac
}

# vip_poll VIP: every 500 ms (more would take the guest's only vCPU from
# kube-proxy), one line "<guest time> <proxy_state> ok|fail
# <mode>" for a GET of http://VIP/ answered by the backend and kube-proxy's
# /proxyMode (none when it does not answer), until $E2E_RUN/vip-poll.stop
# exists.
vip_poll() {
	while [ ! -e "$E2E_RUN/vip-poll.stop" ]; do
		t=$(uptime_s)
		st=$(proxy_state "$1")
		r=fail
		timeout 2 wget -qO- "http://$1/" 2>/dev/null | grep -q '^backend guest' && r=ok
		m=$(timeout 2 wget -qO- http://127.0.0.1:10249/proxyMode 2>/dev/null)
		echo "$t $st $r ${m:-none}"
		usleep 500000
	done
}

# vip_poll_start VIP starts vip_poll in the background (log vip-poll.log).
vip_poll_start() {
	rm -f "$E2E_RUN/vip-poll.stop" "$E2E_RUN/vip-poll.log"
	bg_start vip-poll sh -c '. /guest/e2e-lib.sh; . /guest/migrate-lib.sh; vip_poll "$1"' vp "$1"
}

# vip_poll_stop stops it and prints its log.
vip_poll_stop() {
	touch "$E2E_RUN/vip-poll.stop"
	i=0
	while bg_running vip-poll && [ $i -lt 200 ]; do
		usleep 50000
		i=$((i + 1))
	done
	cat "$E2E_RUN/vip-poll.log"
}
