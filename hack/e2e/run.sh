#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The end-to-end tier (`make test-e2e`) and the agent half of `make demo`.
#
# The host runs a real kube-apiserver + etcd (internal/apiservertest, started
# by the test); the QEMU guest kernel is one node, "guest", running the real
# kube-proxy v1.37.1 in IPVS mode and `ipvs-guard run` as its agent, both
# reaching the API server at https://10.0.2.2:<port> over QEMU user
# networking. The test (test/e2e, build tag e2e) drives the scenarios through
# the API server and the guest's control endpoint, and asserts on the Node's
# conditions, the Events and the agent's /metrics (forwarded to the host).
#
#   hack/e2e/run.sh             # the tier: go test -v output, exit code = verdict
#   hack/e2e/run.sh --demo      # make demo's short story, as a timeline: the modules found
#                               # missing by a report-only agent, then fixed by remediation
#   hack/e2e/run.sh --demo-full # the whole tier's run told as a timeline (make demo-full)
#
# Installs and caches what it needs on a fresh Debian 12 machine: etcd,
# kube-apiserver and kube-proxy built from the module proxy (first time: about
# 10 minutes on 2 cores; cached in $IPVS_GUARD_CACHE/<name>/<version>/), the
# guest kernel, QEMU, iptables and ipset.
source "$(dirname "${BASH_SOURCE[0]}")/../guest/lib.sh"
cd "$REPO_ROOT"
export IPVS_GUARD_CACHE=$CACHE_DIR

demo=0
story=full
case "${1:-}" in
--demo) demo=1 story=short ;;
--demo-full) demo=1 ;;
esac
start=$SECONDS

# say prints progress: to stderr normally, in plain words in the demo.
say() { if [ "$demo" = 1 ]; then printf '%s\n' "$*"; else log "$*"; fi; }

free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 20000))
		ss -ltnH "sport = :$p" | grep -q . || { echo "$p"; return 0; }
	done
	die "no free port"
}

if [ "$demo" = 1 ]; then
	cat <<'EOF'

======================================================================================
 Part 2: ipvs-guard as the node agent of a cluster
======================================================================================
 A real kube-apiserver + etcd run on this machine. The guest kernel is one node,
 "guest", with the real kube-proxy v1.37.1 in IPVS mode and `ipvs-guard run` as its
 agent (started with the args of the shipped DaemonSet). Below: what happens, in
 seconds since the API server started, as seen on the API server.
 The first run builds kube-apiserver and kube-proxy from source (about 10 minutes on
 2 cores) and is cached afterwards.
EOF
	if [ "$story" = short ]; then
		echo " The short story: a report-only agent finds the missing module, the remediating one fixes it."
		echo " The whole timeline (LoadBalancer IPs, strict ARP, IPv6, a stall, the data plane): make demo-full."
	fi
fi

K8S_VERSION=v1.37.1
cold=0
for c in kube-apiserver kube-proxy; do
	[ -x "$CACHE_DIR/$c/$K8S_VERSION/$c" ] || cold=1
done
if [ "$cold" = 1 ]; then
	say "first run: building kube-apiserver and kube-proxy $K8S_VERSION from the Go module proxy (about 10 minutes on 2 cores; cached afterwards)"
fi
apt_ensure iproute2
hack/apiserver/install.sh etcd kube-apiserver kube-proxy
log "e2e: components ready after $((SECONDS - start))s"
KUBE_PROXY=$CACHE_DIR/kube-proxy/$K8S_VERSION/kube-proxy

guest_prepare -manifest hack/e2e/guest.manifest
guest_build_ipvs_guard
GUEST_KVER=$(guest_kernel_version)
guestctl base -manifest hack/e2e/guest.manifest >/dev/null
log "e2e: guest image and ipvs-guard ready after $((SECONDS - start))s"

run=$CACHE_DIR/guest/runs/e2e-$$
mkdir -p "$run"
guest_pid=
cleanup() {
	if [ -n "$guest_pid" ] && kill -0 "$guest_pid" 2>/dev/null; then
		kill -TERM -- "-$guest_pid" 2>/dev/null || true
	fi
	# Keep the last run's logs (console, agent, kube-proxy), drop the initrd.
	rm -f "$run/initrd" "$run/e2e.test"
	rm -rf "$run/payload" "$CACHE_DIR/guest/runs/e2e-last"
	mv "$run" "$CACHE_DIR/guest/runs/e2e-last" 2>/dev/null || true
}
trap cleanup EXIT

ctl_port=$(free_port)
metrics_port=$(free_port)
# The agent serves /metrics on the DaemonSet's port, 9473.
fwd="hostfwd=tcp:127.0.0.1:$ctl_port-:8000,hostfwd=tcp:127.0.0.1:$metrics_port-:9473"
say "booting the guest node (Debian kernel $GUEST_KVER under QEMU; console log $CACHE_DIR/guest/runs/e2e-last/console.log)"
# Its own session, so that it can be stopped as a whole if the test dies.
setsid bin/guestctl run -name e2e -dir "$run" -manifest hack/e2e/guest.manifest -main hack/e2e/guest-main.sh \
	-file "$KUBE_PROXY:/usr/local/bin/kube-proxy" -file hack/e2e/e2e-lib.sh:/guest/e2e-lib.sh:0644 \
	-net -hostfwd "$fwd" -quiet -memory "${GUEST_MEMORY:-1536M}" -timeout "${GUEST_TIMEOUT:-1800}s" 2>"$run/boot.log" &
guest_pid=$!

# Compiled while the guest boots.
go test -c -tags e2e -o "$run/e2e.test" ./test/e2e
log "e2e: test compiled after $((SECONDS - start))s"

test_args=(-test.run '^TestE2E$' -test.timeout 30m -test.count=1)
[ "$demo" = 1 ] || test_args+=(-test.v)
rc=0
(cd test/e2e && E2E_GUEST_URL="http://127.0.0.1:$ctl_port" E2E_METRICS_URL="http://127.0.0.1:$metrics_port/metrics" \
	E2E_ARTIFACTS="$run" E2E_STORY="$story" "$run/e2e.test" "${test_args[@]}") || rc=$?

# The test told the guest its verdict; the guest stops everything and powers off.
guest_rc=0
for _ in $(seq 60); do
	kill -0 "$guest_pid" 2>/dev/null || break
	sleep 1
done
if kill -0 "$guest_pid" 2>/dev/null; then
	log "guest still running 60 s after the test ended; stopping it"
	kill -TERM -- "-$guest_pid" 2>/dev/null || true
	guest_rc=3
else
	wait "$guest_pid" || guest_rc=$?
fi
[ "$guest_rc" = 0 ] || { log "guest exit code $guest_rc:"; tail -n 20 "$run/boot.log" >&2; }
[ "$rc" = 0 ] && rc=$guest_rc

wall=$((SECONDS - start))
if [ "$rc" = 0 ]; then
	say "e2e passed in ${wall}s wall time (logs: $CACHE_DIR/guest/runs/e2e-last/)"
else
	log "e2e FAILED (exit $rc) after ${wall}s; logs: $CACHE_DIR/guest/runs/e2e-last/ (console.log, agent.log, kube-proxy.log)"
fi
exit "$rc"
