#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A throwaway kube-apiserver + etcd for tests that only need the API (the chart
# tier's server-side dry-run apply). Uses the kube-apiserver binary built by
# hack/apiserver/install.sh into $CACHE_DIR/kube-apiserver/<version>/.
#
#   hack/apiserver-lite.sh start DIR   # writes DIR/kubeconfig (admin token), exits 1 if it cannot start
#   hack/apiserver-lite.sh stop DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

K8S_VERSION=${K8S_VERSION:-v1.37.1}
cmd=${1:?start|stop}
dir=${2:?work directory}

free_port() {
	local p
	for _ in $(seq 50); do
		p=$((20000 + RANDOM % 20000))
		ss -ltnH "sport = :$p" | grep -q . || { echo "$p"; return 0; }
	done
	die "no free port"
}

stop() {
	local f
	for f in "$dir"/kube-apiserver.pid "$dir"/etcd.pid; do
		[ -f "$f" ] || continue
		kill "$(cat "$f")" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$(cat "$f")" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$(cat "$f")" 2>/dev/null || true
		rm -f "$f"
	done
}

start() {
	local apiserver=$CACHE_DIR/kube-apiserver/$K8S_VERSION/kube-apiserver
	if [ ! -x "$apiserver" ] && [ -x "$REPO_ROOT/hack/apiserver/install.sh" ]; then
		"$REPO_ROOT/hack/apiserver/install.sh" kube-apiserver
	fi
	[ -x "$apiserver" ] || { log "no kube-apiserver at $apiserver"; return 1; }
	apt_ensure etcd-server openssl
	mkdir -p "$dir/etcd" "$dir/certs"
	local etcd_port peer_port api_port
	etcd_port=$(free_port)
	peer_port=$(free_port)
	api_port=$(free_port)
	etcd --data-dir "$dir/etcd" --listen-client-urls "http://127.0.0.1:$etcd_port" \
		--advertise-client-urls "http://127.0.0.1:$etcd_port" \
		--listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
		--initial-cluster "default=http://127.0.0.1:$peer_port" >"$dir/etcd.log" 2>&1 &
	echo $! >"$dir/etcd.pid"
	openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
	openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
	local token
	token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
	echo "$token,admin,admin,system:masters" >"$dir/tokens.csv"
	"$apiserver" --bind-address=127.0.0.1 --secure-port="$api_port" --cert-dir="$dir/certs" \
		--etcd-servers="http://127.0.0.1:$etcd_port" --service-cluster-ip-range=10.96.0.0/24 \
		--service-account-issuer=https://kubernetes.default.svc --service-account-signing-key-file="$dir/sa.key" \
		--service-account-key-file="$dir/sa.pub" --token-auth-file="$dir/tokens.csv" \
		--authorization-mode=RBAC --endpoint-reconciler-type=none >"$dir/kube-apiserver.log" 2>&1 &
	echo $! >"$dir/kube-apiserver.pid"
	cat >"$dir/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster:
      server: https://127.0.0.1:$api_port
      insecure-skip-tls-verify: true
users:
  - name: admin
    user:
      token: $token
contexts:
  - name: test
    context: {cluster: test, user: admin}
current-context: test
KC
	local start=$SECONDS
	for _ in $(seq 120); do
		if kubectl --kubeconfig "$dir/kubeconfig" get --raw /readyz >/dev/null 2>&1; then
			log "kube-apiserver $K8S_VERSION ready on 127.0.0.1:$api_port in $((SECONDS - start)) s"
			return 0
		fi
		kill -0 "$(cat "$dir/kube-apiserver.pid")" 2>/dev/null || break
		sleep 0.5
	done
	tail -20 "$dir/kube-apiserver.log" >&2
	stop
	return 1
}

case $cmd in
start) start ;;
stop) stop ;;
*) die "usage: $0 start|stop DIR" ;;
esac
