#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# /init of the ipvs-guard guest: prepare a minimal system, run /guest/main,
# report its exit code on the console with the run's nonce, power off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin
export HOME=/root TMPDIR=/tmp TERM=dumb

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
[ -d /sys/kernel/debug ] && mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null

nonce=
net=0
shell=0
for arg in $(cat /proc/cmdline); do
	case "$arg" in
	ipvsguard.nonce=*) nonce=${arg#*=} ;;
	ipvsguard.net=1) net=1 ;;
	ipvsguard.shell=1) shell=1 ;;
	esac
done

finish() {
	echo "ipvs-guard-guest-exit $nonce $1"
	sync
	poweroff -f
	sleep 5
}

fail() {
	echo "guest init: $*" >&2
	finish 125
}

# The kernel's modprobe helper off: request_module() then fails with ENOENT at
# once, so nothing but the code under test (finit_module/init_module) loads a
# module.
echo >/proc/sys/kernel/modprobe || fail "cannot switch off the kernel's modprobe helper"
[ -z "$(cat /proc/sys/kernel/modprobe)" ] || fail "kernel modprobe helper still set: $(cat /proc/sys/kernel/modprobe)"

hostname guest
ip link set lo up

if [ "$net" = 1 ]; then
	# No udev here: the harness loads the NIC driver itself, before any test.
	/usr/libexec/kmod/modprobe -a virtio_pci virtio_net || fail "cannot load virtio_pci and virtio_net"
	i=0
	while [ ! -e /sys/class/net/eth0 ] && [ "$i" -lt 50 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	ip link set eth0 up || fail "no eth0 (virtio-net-pci device missing?)"
	ip addr add 10.0.2.15/24 dev eth0
	ip route add default via 10.0.2.2
	printf 'nameserver 10.0.2.3\n' >/etc/resolv.conf
fi

# The marker guest tests look for (internal/testenv.RequireGuest), and the
# modules loaded before any test ran (internal/guest.ResetModules restores it).
mkdir -p /run/ipvs-guard-guest
uname -r >/run/ipvs-guard-guest/kernel
cp /usr/lib/ipvs-guard-guest/release /run/ipvs-guard-guest/release
echo "guest: Debian $(cat /run/ipvs-guard-guest/release), kernel $(uname -r); systemd-modules-load and kmod: $(cat /usr/lib/ipvs-guard-guest/judges)"
cut -d' ' -f1 /proc/modules >/run/ipvs-guard-guest/modules.baseline
: >/run/ipvs-guard-guest/modprobe.log

. /guest/env

if [ "$shell" = 1 ]; then
	echo "ipvs-guard guest shell; 'exit' powers off"
	setsid cttyhack sh -l
	finish 0
fi

cd /
sh /guest/main
finish $?
