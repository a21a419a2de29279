#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Reproduces the hostile-host-files table: each case builds a throwaway
# --root tree from pkg/modules/testdata/debian12, runs ipvs-guard diagnose
# (with --fix where the case is about writing) under /usr/bin/time -v and a
# 60 s timeout, and prints: exit code, wall time, peak RSS, and what was
# written (files changed inside the tree, anything created outside it).
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
apt_ensure time
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=$work/ipvs-guard
go build -o "$bin" ./cmd/ipvs-guard
rel=6.1.0-56-amd64

fresh() { # fresh NAME: a new tree at $work/NAME/root with an empty $work/NAME/outside
	rm -rf "${work:?}/$1"
	mkdir -p "$work/$1/outside"
	cp -a pkg/modules/testdata/debian12 "$work/$1/root"
	echo "$work/$1/root"
}

printf '| case | exit | time | peak RSS | written |\n|---|---|---|---|---|\n'
run() { # run NAME ARGS...: diagnose the tree of NAME
	local name=$1 root=$work/$1/root outside=$work/$1/outside
	shift
	touch "$work/$name/.stamp"
	sleep 0.01
	local code=0
	timeout -s KILL 60 /usr/bin/time -v -o "$work/$name/time" "$bin" diagnose --root "$root" --kube-proxy-metrics-address 127.0.0.1:1 --assume-proxy-mode ipvs "$@" >"$work/$name/out" 2>&1 || code=$?
	local wall rss
	wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/$name/time")
	rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/$name/time")
	local written
	written=$(cd "$root" && find . -newer "$work/$name/.stamp" -type f ! -path './proc/*' 2>/dev/null | sed 's|^\.||' | tr '\n' ' ')
	local out
	out=$(find "$outside" -mindepth 1 | sed "s|$outside|outside|" | tr '\n' ' ')
	[[ $code == 137 ]] && code="killed at 60 s"
	printf '| %s | %s | %s | %s MiB | %s%s |\n' "$name" "$code" "${wall:-?}" "$(( ${rss:-0} / 1024 ))" "${written:-nothing}" "${out:+; OUTSIDE: $out}"
	grep -m1 -iE '^error:|larger|too large|redirect|not a regular|named pipe|device|limit for|module index|could not|symbolic link|no such|kernel release' "$work/$name/out" | sed 's/^ *//' | cut -c1-200 | sed "s/^/  > $name: /" >&2 || true
}

# FIFOs and devices where host files belong.
for f in etc/modules-load.d/fifo.conf proc/modules proc/sys/kernel/osrelease lib/modules/$rel/modules.dep lib/modules/$rel/modules.alias.bin; do
	name="fifo-$(basename "$f")"
	r=$(fresh "$name")
	rm -f "$r/$f"
	mkdir -p "$(dirname "$r/$f")"
	mkfifo "$r/$f.fifo" && ln -s "/$f.fifo" "$r/$f"
	run "$name" --fix
done
r=$(fresh devzero-conf); ln -s /dev/zero "$r/etc/modules-load.d/zero.conf"; mkdir -p "$r/dev"; mknod "$r/dev/zero" c 1 5
run devzero-conf --fix
r=$(fresh arp-ignore-fifo); mkdir -p "$r/proc/sys/net/ipv4/conf/all"; mkfifo "$r/proc/sys/net/ipv4/conf/all/arp_ignore"
run arp-ignore-fifo

# Links out of the root.
r=$(fresh etc-link); mv "$r/etc" "$r/etc.real"; ln -s "$work/etc-link/outside" "$r/etc"
run etc-link --fix
r=$(fresh mld-link); rm -rf "$r/etc/modules-load.d"; ln -s "$work/mld-link/outside" "$r/etc/modules-load.d"
run mld-link --fix
r=$(fresh abs-conf-link); printf 'root:$6$secret:1::::::\n' >"$work/abs-conf-link/shadow"; ln -s "$work/abs-conf-link/shadow" "$r/etc/modules-load.d/ipvs.conf"
run abs-conf-link --fix
if grep -q secret "$work/abs-conf-link/out"; then echo "  > the link target's content was printed" >&2; else echo "  > the link target's content was not printed" >&2; fi
r=$(fresh dep-dotdot); sed -i '1s|^|../../../../../../../../tmp/x.ko: |' "$r/lib/modules/$rel/modules.dep"
run dep-dotdot

# systemd's precedence.
r=$(fresh usrlib-ipvs); mkdir -p "$r/usr/lib/modules-load.d"; printf 'iscsi_tcp\nnbd\nip_vs\n' >"$r/usr/lib/modules-load.d/ipvs.conf"
run usrlib-ipvs --fix
if grep -q iscsi_tcp "$r/etc/modules-load.d/ipvs.conf" && grep -q nbd "$r/etc/modules-load.d/ipvs.conf"; then echo "  > /etc/modules-load.d/ipvs.conf keeps iscsi_tcp and nbd" >&2; fi

# A broken module index.
r=$(fresh dep-empty); : >"$r/lib/modules/$rel/modules.dep"; printf 'ip_vs\nip_vs_rr\n' >"$r/etc/modules-load.d/ipvs.conf"
run dep-empty --fix
r=$(fresh dep-cut); head -n 3 "$r/lib/modules/$rel/modules.dep" | head -c -1 >"$r/dep" && mv "$r/dep" "$r/lib/modules/$rel/modules.dep"
run dep-cut --fix

# Dangling links and directories named *.conf.
r=$(fresh dangling-conf); ln -s /nonexistent "$r/etc/modules-load.d/dangling.conf"; ln -s /etc "$r/etc/modules-load.d/dirlink.conf"; mkdir "$r/etc/modules-load.d/dir.conf"
run dangling-conf

# Big files.
r=$(fresh conf-9MB); (set +o pipefail; yes foo_module_name_x | head -c $((9 << 20))) >"$r/etc/modules-load.d/big.conf"
run conf-9MB
r=$(fresh conf-200MB); (set +o pipefail; yes foo_module_name_x | head -c $((200 << 20))) >"$r/etc/modules-load.d/huge.conf"
run conf-200MB

# Many modprobe.d files, each under its 1 MiB limit (their budget together is 256 KiB).
for n in 35 100; do
	r=$(fresh "modprobe-${n}x1MiB"); mkdir -p "$r/etc/modprobe.d"
	for i in $(seq -w 1 "$n"); do (set +o pipefail; yes "install i${i}_module_x /bin/true" | head -c $((1 << 20))) >"$r/etc/modprobe.d/f$i.conf"; done
	run "modprobe-${n}x1MiB"
done

# Bad flags.
r=$(fresh sched-inject); run sched-inject --scheduler 'rr;rm -rf /' --fix
r=$(fresh sched-dotdot); run sched-dotdot --scheduler ../x --fix
r=$(fresh sched-long); run sched-long --scheduler "$(printf 'a%.0s' $(seq 100000))" --fix
r=$(fresh sched-ftp); run sched-ftp --scheduler ftp --fix
r=$(fresh sched-nosuch); run sched-nosuch --scheduler nosuch
for v in . .. $'6.1.0\n6.2.0'; do
	name="osrelease-$(printf %q "$v" | tr -dc 'a-z0-9.')"
	r=$(fresh "$name"); printf '%s\n' "$v" >"$r/proc/sys/kernel/osrelease"
	run "$name" --fix
done

# Control characters.
r=$(fresh esc-name); printf 'ip_vs_nosuch\n' >"$r/etc/modules-load.d/"$'\e[2J\e[H[OK] x.conf'; printf 'ip_vs\0\n' >"$r/etc/modules-load.d/nul.conf"
run esc-name
if grep -q $'\e' "$work/esc-name/out"; then echo "  > RAW ESC in the report" >&2; else echo "  > no raw control character in the report" >&2; fi

# Probe targets and interfaces.
own=$(ip -4 -o addr show scope global | awk '{print $4; exit}')
r=$(fresh probe-own); run probe-own --probe-ip "${own%/*}"
r=$(fresh probe-bcast); run probe-bcast --probe-ip "$(python3 -c "import ipaddress,sys; print(ipaddress.ip_interface(sys.argv[1]).network.broadcast_address)" "$own")"
r=$(fresh probe-net); run probe-net --probe-ip "$(python3 -c "import ipaddress,sys; print(ipaddress.ip_interface(sys.argv[1]).network.network_address)" "$own")"
r=$(fresh iface-missing); run iface-missing --interface nonexistent0
r=$(fresh metrics-noport); run metrics-noport --kube-proxy-metrics-address 127.0.0.1

# kube-proxy answering 8 MiB, or redirecting to another host:port.
kp_server() { # kp_server PORT MODE: a fake kube-proxy metrics port (MODE big or redirect)
	python3 - "$1" "$2" >/dev/null 2>&1 <<'PY' &
import http.server, sys
port, mode = int(sys.argv[1]), sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        if mode == "redirect":
            self.send_response(302); self.send_header("Location", "http://127.0.0.2:%d%s" % (port, self.path)); self.end_headers(); return
        body = (b"ipvs" if self.path == "/proxyMode" else b"{}") + b" " * (8 << 20)
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
PY
	echo $!
}
pid=$(kp_server 18249 big); sleep 1
r=$(fresh kube-proxy-8MiB); run kube-proxy-8MiB --kube-proxy-metrics-address 127.0.0.1:18249
kill "$pid"
pid=$(kp_server 18250 redirect); sleep 1
r=$(fresh kube-proxy-redirect); run kube-proxy-redirect --kube-proxy-metrics-address 127.0.0.1:18250
kill "$pid"
