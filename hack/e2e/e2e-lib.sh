# SPDX-License-Identifier: Apache-2.0
# Guest-side helpers of the end-to-end tier, sourced before every script the
# host sends to /cgi-bin/exec (and by /guest/main). busybox sh.
#
# Background processes live under /run/e2e/<name>.{pid,pgid,rc,log}: pid is the
# process itself, pgid its session (setsid), rc its exit code once it ended.

E2E_RUN=/run/e2e

# uptime_s prints seconds since boot (the guest's monotonic clock, 10 ms).
uptime_s() { cut -d' ' -f1 /proc/uptime; }

# bg_start NAME CMD [ARG...] starts CMD in its own session, output appended to
# /run/e2e/NAME.log, and returns once its pid is known.
bg_start() {
	name=$1
	shift
	rm -f "$E2E_RUN/$name.rc" "$E2E_RUN/$name.pid" "$E2E_RUN/$name.pgid"
	setsid sh -c 'n=$1; shift; echo $$ >"/run/e2e/$n.pgid"; "$@" & p=$!; echo $p >"/run/e2e/$n.pid"; wait $p; echo $? >"/run/e2e/$n.rc"' \
		bg "$name" "$@" >>"$E2E_RUN/$name.log" 2>&1 </dev/null &
	i=0
	while [ ! -s "$E2E_RUN/$name.pid" ] && [ $i -lt 100 ]; do
		usleep 50000
		i=$((i + 1))
	done
	[ -s "$E2E_RUN/$name.pid" ] || { echo "$name did not start"; return 1; }
	echo "started $name (pid $(cat "$E2E_RUN/$name.pid")) at $(uptime_s)"
}

# bg_running NAME succeeds while NAME's process is alive.
bg_running() {
	[ -s "$E2E_RUN/$1.pid" ] && [ ! -e "$E2E_RUN/$1.rc" ] && kill -0 "$(cat "$E2E_RUN/$1.pid")" 2>/dev/null
}

# bg_stop NAME [SECONDS] sends SIGTERM to NAME and waits for it to exit
# (default 10 s, then SIGKILL to its whole session). Prints
# "stopped NAME rc=<code> after <seconds>s"; fails when it had to be killed.
bg_stop() {
	name=$1
	limit=${2:-10}
	[ -s "$E2E_RUN/$name.pid" ] || { echo "$name was not started"; return 1; }
	t0=$(uptime_s)
	kill -TERM "$(cat "$E2E_RUN/$name.pid")" 2>/dev/null
	i=0
	while [ ! -e "$E2E_RUN/$name.rc" ] && [ $i -lt $((limit * 20)) ]; do
		usleep 50000
		i=$((i + 1))
	done
	if [ ! -e "$E2E_RUN/$name.rc" ]; then
		kill -KILL -"$(cat "$E2E_RUN/$name.pgid")" 2>/dev/null
		echo "stopped $name rc=killed after ${limit}s"
		return 1
	fi
	echo "stopped $name rc=$(cat "$E2E_RUN/$name.rc") after $(awk -v a="$t0" -v b="$(uptime_s)" 'BEGIN{printf "%.2f", b-a}')s"
}

# vmhwm NAME prints NAME's peak resident set size in KiB (VmHWM).
vmhwm() {
	awk '/^VmHWM:/ {print $2}' "/proc/$(cat "$E2E_RUN/$1.pid")/status"
}

# kp_loop ARGS... runs kube-proxy like kubelet runs a crashing container:
# restart after 3 s whenever it exits. Each start is logged with its time.
kp_loop() {
	while :; do
		echo "$(uptime_s)" >>"$E2E_RUN/kube-proxy.starts"
		echo "=== kube-proxy $* (start at $(uptime_s))"
		/usr/local/bin/kube-proxy "$@"
		echo "=== kube-proxy exited with $? at $(uptime_s); restarting in 3s"
		sleep 3
	done
}

# kp_start ARGS... starts kube-proxy under kp_loop.
kp_start() {
	rm -f "$E2E_RUN/kube-proxy.starts"
	bg_start kube-proxy sh -c '. /guest/e2e-lib.sh; kp_loop "$@"' kp "$@"
}

# kp_stop stops kube-proxy and its restart loop.
kp_stop() {
	[ -s "$E2E_RUN/kube-proxy.pgid" ] || return 0
	kill -TERM -"$(cat "$E2E_RUN/kube-proxy.pgid")" 2>/dev/null
	i=0
	while bg_running kube-proxy && [ $i -lt 200 ]; do
		usleep 50000
		i=$((i + 1))
	done
	kill -KILL -"$(cat "$E2E_RUN/kube-proxy.pgid")" 2>/dev/null
	echo "stopped kube-proxy"
}

# kp_pid prints the pid of the running kube-proxy binary (not its loop).
# (if, not &&: a last /proc entry that is not kube-proxy must not make the
# function fail.)
kp_pid() {
	for d in /proc/[0-9]*; do
		if [ "$(readlink "$d/exe" 2>/dev/null)" = /usr/local/bin/kube-proxy ]; then echo "${d#/proc/}"; fi
	done
}

# kp_starts prints how many times kube-proxy was started by the loop.
kp_starts() { wc -l <"$E2E_RUN/kube-proxy.starts" 2>/dev/null || echo 0; }

# kp_table_has VIP... succeeds when every VIP (IPv4 or IPv6) has an IPVS
# virtual server and sits on kube-ipvs0.
kp_table_has() {
	table=$(ipvsadm -Ln 2>/dev/null)
	addrs=$(/usr/sbin/ip -o addr show dev kube-ipvs0 2>/dev/null) # iproute2: busybox ip lacks IPv6 details
	for vip in "$@"; do
		case $vip in
		*:*)
			echo "$table" | grep -qF " [$vip]:" || return 1
			echo "$addrs" | grep -qF "inet6 $vip/" || return 1
			;;
		*)
			echo "$table" | grep -qF " $vip:" || return 1
			echo "$addrs" | grep -qF "inet $vip/" || return 1
			;;
		esac
	done
}

# kp_wait_table SECONDS VIP... waits until kube-proxy programmed every VIP and
# prints "programmed <seconds>" measured from kube-proxy's last start.
kp_wait_table() {
	limit=$1
	shift
	i=0
	while ! kp_table_has "$@"; do
		[ $i -ge $((limit * 10)) ] && { echo "not programmed after ${limit}s"; ipvsadm -Ln; return 1; }
		usleep 100000
		i=$((i + 1))
	done
	now=$(uptime_s)
	start=$(tail -n1 "$E2E_RUN/kube-proxy.starts")
	echo "programmed $(awk -v a="$start" -v b="$now" 'BEGIN{printf "%.2f", b-a}')"
}

# stop_all stops what the run started (the agent first, so that its exit is clean).
stop_all() {
	bg_running agent && bg_stop agent 10
	kp_stop >/dev/null
	[ -s "$E2E_RUN/httpd.pid" ] && kill "$(cat "$E2E_RUN/httpd.pid")" 2>/dev/null
	return 0
}
