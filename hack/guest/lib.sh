# SPDX-License-Identifier: Apache-2.0
# Guest-kernel harness: a stock Debian kernel booted under QEMU with a
# generated initramfs. Source it (after nothing: it sources ../lib.sh).
#
# Layout of the cache (all keyed by the kernel version):
#   $CACHE_DIR/guest/<kver>/root/            dpkg -x of linux-image-<kver> plus depmod's indexes
#   $CACHE_DIR/guest/<kver>/vmlinuz          the kernel image (bzImage)
#   $CACHE_DIR/guest/<kver>/vmlinux          the same kernel as an ELF, booted via PVH
#   $CACHE_DIR/guest/<kver>/base-<key>.cpio  busybox, tools, libraries, module closure
#   $CACHE_DIR/guest/runs/<name>-<pid>/      one run's payload, initrd, console (removed after)
#   $CACHE_DIR/guest/runs/test-guest.console.log  the console of the last `make test-guest`
# See hack/guest/README.md for the conventions other tiers rely on.

# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

GUEST_DIR=$REPO_ROOT/hack/guest
# Debian packages the harness needs on the host. systemd provides
# /lib/systemd/systemd-modules-load, which the guest runs as the reference.
GUEST_HOST_PACKAGES=(qemu-system-x86 busybox-static kmod ipvsadm iproute2 iputils-arping cpio gzip
	xz-utils systemd libc-bin coreutils util-linux)

# guest_ensure_host_packages installs what building and booting a guest needs,
# plus the apt packages named by `pkg` lines of the given manifests.
guest_ensure_host_packages() {
	local extra=()
	local m kind arg
	for m in "$@"; do
		while read -r kind arg _; do
			[ "$kind" = pkg ] && extra+=("$arg")
		done < <(guest_manifest_lines "$m")
	done
	apt_ensure "${GUEST_HOST_PACKAGES[@]}" "${extra[@]}"
}

# guest_manifest_lines prints a manifest without comments and blank lines.
guest_manifest_lines() {
	sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$1"
}

# guest_apt_update refreshes apt's package lists, serialised with apt_ensure.
guest_apt_update() {
	(
		flock 9
		as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
		as_root mkdir -p /var/lib/apt/periodic && as_root touch /var/lib/apt/periodic/ipvs-guard-updated
	) 9>/var/lock/ipvs-guard-apt.lock
}

# guest_kernel_version prints the kernel to use: $GUEST_KERNEL_VERSION, else
# the version pinned in hack/guest/KERNEL_VERSION. If the pinned package is
# neither cached nor downloadable any more (Debian rotates kernel ABIs), it
# falls back to what linux-image-amd64 depends on today, loudly.
guest_kernel_version() {
	local v=${GUEST_KERNEL_VERSION:-}
	if [ -z "$v" ]; then
		v=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$GUEST_DIR/KERNEL_VERSION" | head -n1 | tr -d '[:space:]')
	fi
	[ -n "$v" ] || die "no kernel version pinned in $GUEST_DIR/KERNEL_VERSION"
	if [ -f "$CACHE_DIR/guest/$v/.ready" ]; then
		echo "$v"
		return
	fi
	# A fresh machine may have no package lists yet.
	apt-cache show "linux-image-$v" >/dev/null 2>&1 || guest_apt_update
	if apt-cache show "linux-image-$v" >/dev/null 2>&1; then
		echo "$v"
		return
	fi
	local cur
	cur=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: linux-image-\(.*\)$/\1/p' | head -n1)
	[ -n "$cur" ] || die "kernel linux-image-$v is not in apt's index and linux-image-amd64 names no kernel (apt-get update?)"
	log "WARNING: pinned kernel $v is no longer in Debian's archive; using $cur (update hack/guest/KERNEL_VERSION)"
	echo "$cur"
}

# guest_ensure_kernel downloads, unpacks and depmods linux-image-<kver> once.
# It prints the directory holding vmlinuz and root/.
guest_ensure_kernel() {
	local kver=$1
	local dir=$CACHE_DIR/guest/$kver
	if [ -f "$dir/.ready" ]; then
		[ -f "$dir/vmlinux" ] || [ -f "$dir/.no-vmlinux" ] ||
			guest_extract_vmlinux "$dir/vmlinuz" "$dir/vmlinux" || touch "$dir/.no-vmlinux"
		echo "$dir"
		return
	fi
	mkdir -p "$CACHE_DIR/guest"
	(
		flock 8
		[ -f "$dir/.ready" ] && exit 0
		local tmp
		tmp=$(mktemp -d "$CACHE_DIR/guest/.kernel-$kver.XXXXXX")
		log "downloading linux-image-$kver"
		# apt-get drops to the _apt user for downloads; give it a directory it may write.
		chmod 0777 "$tmp"
		(cd "$tmp" && apt-get download -q "linux-image-$kver" >&2) || die "apt-get download linux-image-$kver failed"
		log "unpacking linux-image-$kver"
		dpkg -x "$tmp"/linux-image-"$kver"_*.deb "$tmp/root"
		[ -d "$tmp/root/lib/modules/$kver" ] || die "linux-image-$kver has no lib/modules/$kver"
		# The .deb ships no modules.dep and no binary indexes; make them as the
		# postinst would.
		depmod -b "$tmp/root" "$kver"
		[ -s "$tmp/root/lib/modules/$kver/modules.dep.bin" ] || die "depmod made no modules.dep.bin"
		cp "$tmp/root/boot/vmlinuz-$kver" "$tmp/vmlinuz"
		guest_extract_vmlinux "$tmp/vmlinuz" "$tmp/vmlinux" || touch "$tmp/.no-vmlinux"
		rm -f "$tmp"/*.deb
		rm -rf "$dir"
		mv "$tmp" "$dir"
		touch "$dir/.ready"
	) 8>"$CACHE_DIR/guest/.kernel.lock"
	[ -f "$dir/.ready" ] || die "kernel $kver not ready"
	echo "$dir"
}

# guest_extract_vmlinux unpacks the ELF kernel from an xz-compressed bzImage.
# QEMU boots an ELF kernel with a PVH note directly (Debian sets CONFIG_PVH),
# which skips the firmware and the in-guest decompression: several seconds
# under TCG.
guest_extract_vmlinux() {
	local bz=$1 out=$2 off
	off=$(LC_ALL=C grep -abo $'\xfd7zXZ\x00' "$bz" | head -n1 | cut -d: -f1)
	[ -n "$off" ] || return 1
	# xz complains about the trailing data after the stream; the ELF is whole.
	tail -c +$((off + 1)) "$bz" | xz -dc >"$out.tmp" 2>/dev/null || true
	if [ "$(head -c4 "$out.tmp" | od -An -c | tr -d ' ')" = '177ELF' ] && grep -q '^CONFIG_PVH=y' "$(dirname "$bz")"/root/boot/config-*; then
		mv "$out.tmp" "$out"
		return 0
	fi
	rm -f "$out.tmp"
	return 1
}

# guest_kernel_image prints the image to boot: the PVH vmlinux when there is
# one (GUEST_BZIMAGE=1 forces the bzImage), else the bzImage.
guest_kernel_image() {
	local kdir=$1
	if [ "${GUEST_BZIMAGE:-0}" != 1 ] && [ -f "$kdir/vmlinux" ]; then
		echo "$kdir/vmlinux"
	else
		echo "$kdir/vmlinuz"
	fi
}

# guest_copy_file copies a host file (following symlinks) into the staging
# root at the same path, mapped onto the merged-/usr layout the guest uses.
guest_copy_file() {
	local src=$1 stage=$2 dst=${3:-}
	[ -n "$dst" ] || dst=$src
	case "$dst" in
	/bin/* | /sbin/* | /lib/* | /lib64/*) dst=/usr$dst ;;
	esac
	mkdir -p "$stage$(dirname "$dst")"
	cp -L --preserve=mode "$src" "$stage$dst"
}

# guest_copy_binary copies a dynamic (or static) executable with every shared
# library ldd names and the dynamic loader.
guest_copy_binary() {
	local src=$1 stage=$2 dst=${3:-}
	if [ ! -e "$src" ]; then
		# Not where the manifest says (a host without merged /usr?): use PATH.
		local found
		found=$(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin command -v "${src##*/}") || die "binary $src not found on the host"
		[ -n "$dst" ] || dst=$src
		src=$found
	fi
	guest_copy_file "$src" "$stage" "$dst"
	local lib
	while read -r lib; do
		[ -n "$lib" ] && guest_copy_file "$lib" "$stage"
	done < <(ldd "$src" 2>/dev/null | sed -n -e 's/.*=> \(\/[^ ]*\) .*/\1/p' -e 's/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p' | sort -u)
}

# guest_module_closure prints the .ko paths (relative to the modules dir) of
# the given modules and everything modprobe would load with them: modules.dep
# dependencies and softdep pre/post modules, resolved through aliases.
guest_module_closure() {
	local root=$1 kver=$2
	shift 2
	local m
	for m in "$@"; do
		modprobe -d "$root" -S "$kver" --show-depends --ignore-install "$m" 2>/dev/null ||
			modprobe -d "$root" -S "$kver" --show-depends "$m" ||
			die "module $m: not in kernel $kver"
	done | sed -n "s|^insmod $root/lib/modules/$kver/\([^ ]*\).*|\1|p" | sort -u
}

# guest_manifest_key hashes everything that goes into the base image.
guest_manifest_key() {
	local kver=$1
	shift
	{
		echo "$kver"
		cat "$GUEST_DIR/lib.sh"
		local m
		for m in "$@"; do cat "$m"; done
		dpkg-query -W -f='${Package} ${Version}\n' busybox-static kmod ipvsadm iproute2 systemd 2>/dev/null
	} | sha256sum | cut -c1-16
}

# guest_build_base builds (once per key) the cached base initramfs: busybox,
# the tools and libraries, the kernel's module closure and all of depmod's
# index files. Manifests are read in order; see hack/guest/README.md.
# It prints the path of the .cpio.
guest_build_base() {
	local kver=$1 kdir=$2
	shift 2
	local key out
	key=$(guest_manifest_key "$kver" "$@")
	out=$kdir/base-$key.cpio
	if [ -f "$out" ]; then
		touch "$out"
		echo "$out"
		return
	fi
	# Keep the few base images used last (one per manifest set in use).
	# shellcheck disable=SC2012
	ls -t "$kdir"/base-*.cpio 2>/dev/null | tail -n +6 | xargs -r rm -f
	log "building guest base image $key for $kver"
	local stage
	stage=$(mktemp -d "$kdir/.stage.XXXXXX")
	local kroot=$kdir/root
	local moddir=/usr/lib/modules/$kver

	# Merged /usr, like Debian 12.
	mkdir -p "$stage"/{usr/bin,usr/sbin,usr/lib,usr/lib64,proc,sys,dev,run,tmp,etc,root,mnt,var}
	ln -s usr/bin "$stage/bin"
	ln -s usr/sbin "$stage/sbin"
	ln -s usr/lib "$stage/lib"
	ln -s usr/lib64 "$stage/lib64"
	ln -s ../run "$stage/var/run"
	chmod 1777 "$stage/tmp"
	mkdir -p "$stage$moddir" "$stage/etc/modprobe.d" "$stage/etc/modules-load.d"
	printf 'root:x:0:0:root:/root:/bin/sh\n' >"$stage/etc/passwd"
	printf 'root:x:0:\n' >"$stage/etc/group"
	printf '127.0.0.1 localhost guest\n::1 localhost\n' >"$stage/etc/hosts"
	: >"$stage/etc/fstab"

	# depmod's index files, text and binary, exactly as depmod made them.
	cp "$kroot/lib/modules/$kver"/modules.* "$stage$moddir/"

	local modules=() kind arg arg2 m
	for m in "$@"; do
		while read -r kind arg arg2; do
			case "$kind" in
			module) modules+=("$arg") ;;
			module-dir)
				local f
				while read -r f; do
					f=${f##*/}
					f=${f%%.ko*}
					modules+=("$f")
				done < <(find "$kroot/lib/modules/$kver/$arg" -name '*.ko*')
				;;
			bin) guest_copy_binary "$arg" "$stage" "$arg2" ;;
			file)
				if [ -d "$arg" ]; then
					mkdir -p "$stage${arg2:-$arg}"
					cp -a "$arg/." "$stage${arg2:-$arg}/"
				else
					guest_copy_file "$arg" "$stage" "$arg2"
				fi
				;;
			link) mkdir -p "$stage$(dirname "$arg2")" && ln -sfn "$arg" "$stage$arg2" ;;
			pkg) ;;
			*) die "manifest $m: unknown line kind '$kind'" ;;
			esac
		done < <(guest_manifest_lines "$m")
	done

	local rel n=0
	while read -r rel; do
		mkdir -p "$stage$moddir/$(dirname "$rel")"
		cp "$kroot/lib/modules/$kver/$rel" "$stage$moddir/$rel"
		n=$((n + 1))
	done < <(guest_module_closure "$kroot" "$kver" "${modules[@]}")
	log "guest base: $n kernel modules"

	# busybox applets wherever no real tool sits; never the module tools: in the
	# guest only the code under test loads modules (kmod lives off PATH).
	guest_copy_file /bin/busybox "$stage" /usr/bin/busybox
	local applet
	while read -r applet; do
		case "${applet##*/}" in
		modprobe | insmod | rmmod | lsmod | depmod | modinfo | init | linuxrc) continue ;;
		esac
		applet=/usr/${applet#usr/}
		[ -e "$stage$applet" ] || [ -L "$stage$applet" ] || ln -s /usr/bin/busybox "$stage$applet"
	done < <("$stage/usr/bin/busybox" --list-full)
	# A tripwire: anything that runs `modprobe` in the guest is logged and fails.
	cat >"$stage/usr/sbin/modprobe" <<'EOF'
#!/bin/sh
echo "modprobe $*" >>/run/ipvs-guard-guest/modprobe.log
echo "modprobe is disabled in the ipvs-guard guest (called with: $*)" >&2
exit 1
EOF
	chmod 0755 "$stage/usr/sbin/modprobe"

	# Uncompressed: under TCG the guest inflates gzip far slower than the host
	# copies a few more megabytes.
	local tmpout
	tmpout=$(mktemp "$out.XXXXXX")
	(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0) >"$tmpout"
	rm -rf "$stage"
	chmod 0644 "$tmpout"
	mv "$tmpout" "$out"
	echo "$out"
}

# guest_stage_payload creates the per-run payload tree (init, ipvs-guard, the
# caller's main script). Prints the staging directory; the caller adds files
# under it (guest_stage_test_binary) and then calls guest_pack.
guest_stage_payload() {
	local run=$1 main=$2
	local stage=$run/payload
	rm -rf "$stage"
	mkdir -p "$stage/usr/local/bin" "$stage/guest"
	install -m 0755 "$GUEST_DIR/init.sh" "$stage/init"
	install -m 0755 "$main" "$stage/guest/main"
	if [ -n "${GUEST_IPVS_GUARD_BIN:-}" ]; then
		install -m 0755 "$GUEST_IPVS_GUARD_BIN" "$stage/usr/local/bin/ipvs-guard"
	fi
	# Environment for the guest's main script and tests.
	{
		echo "export CI='${CI:-}'"
		echo "export IPVS_GUARD_BIN=/usr/local/bin/ipvs-guard"
		local v
		for v in ${GUEST_ENV_PASS:-}; do
			printf "export %s='%s'\n" "$v" "${!v:-}"
		done
	} >"$stage/guest/env"
	echo "$stage"
}

# guest_pack concatenates the cached base and the run's payload into one
# initrd (the kernel unpacks concatenated cpio archives in order, later files
# over earlier ones). GUEST_INITRD_GZIP=1 compresses it (smaller, slower boot).
guest_pack() {
	local base=$1 run=$2
	(cd "$run/payload" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0) >"$run/payload.cpio"
	if [ "${GUEST_INITRD_GZIP:-0}" = 1 ]; then
		cat "$base" "$run/payload.cpio" | gzip -1 >"$run/initrd"
	else
		cat "$base" "$run/payload.cpio" >"$run/initrd"
	fi
	rm -f "$run/payload.cpio"
	echo "$run/initrd"
}

# guest_accel prints the QEMU accelerator flags: KVM only where it really
# works (not the PVM backend, which cannot run a stock kernel), else TCG.
guest_accel() {
	if [ "${GUEST_ACCEL:-}" = tcg ]; then
		echo "-accel tcg -cpu max"
	elif [ ! -d /sys/module/kvm_pvm ] && [ -r /dev/kvm ] && [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then
		echo "-accel kvm -cpu host"
	else
		echo "-accel tcg -cpu max"
	fi
}

# guest_boot boots kernel+initrd, streams the console to stdout (and
# $run/console.log) and exits with the exit code of the guest's main script.
# Environment: GUEST_TIMEOUT (seconds, default 600), GUEST_MEMORY (default
# 1G), GUEST_NET=1 (QEMU user networking; the guest gets 10.0.2.15/24, the
# host is 10.0.2.2), GUEST_INTERACTIVE=1 (a shell instead of main),
# GUEST_QUIET=1 (console only to the log).
guest_boot() {
	local kernel=$1 initrd=$2 run=$3
	local nonce
	nonce=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
	local append="console=ttyS0 quiet loglevel=3 panic=-1 oops=panic ipvsguard.nonce=$nonce"
	local net=()
	if [ "${GUEST_NET:-0}" = 1 ]; then
		append+=" ipvsguard.net=1"
		net=(-netdev "user,id=n0${GUEST_NET_HOSTFWD:+,$GUEST_NET_HOSTFWD}" -device "virtio-net-pci,netdev=n0,romfile=")
	fi
	[ "${GUEST_INTERACTIVE:-0}" = 1 ] && append+=" ipvsguard.shell=1"
	local accel
	read -ra accel <<<"$(guest_accel)"
	local cmd=(qemu-system-x86_64 "${accel[@]}" -m "${GUEST_MEMORY:-1G}" -smp 1 -nodefaults -no-user-config
		-display none -serial stdio -no-reboot "${net[@]}" -kernel "$kernel" -initrd "$initrd" -append "$append")
	log "booting guest (${accel[*]}), console log: $run/console.log"
	if [ "${GUEST_INTERACTIVE:-0}" = 1 ]; then
		"${cmd[@]}"
		return
	fi
	local start=$SECONDS rc=0
	if [ "${GUEST_QUIET:-0}" = 1 ]; then
		timeout -k 10 "${GUEST_TIMEOUT:-600}" "${cmd[@]}" </dev/null >"$run/console.log" 2>&1 || rc=$?
	else
		# GUEST_CONSOLE_FILTER=1 hides kernel messages and the exit marker.
		local filter='^ipvs-guard-guest-exit |^\[ *[0-9]+\.[0-9]+\] '
		[ "${GUEST_CONSOLE_FILTER:-0}" = 1 ] || filter='^$^'
		timeout -k 10 "${GUEST_TIMEOUT:-600}" "${cmd[@]}" </dev/null 2>&1 | tr -d '\r' | tee "$run/console.log" |
			{ grep --line-buffered -vE "$filter" || true; }
		rc=${PIPESTATUS[0]}
	fi
	local marker
	marker=$(tr -d '\r' <"$run/console.log" | sed -n "s/^ipvs-guard-guest-exit $nonce \([0-9][0-9]*\)\$/\1/p" | tail -n1)
	if [ -z "$marker" ]; then
		if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
			log "guest timed out after $((SECONDS - start))s (GUEST_TIMEOUT=${GUEST_TIMEOUT:-600}); last console lines:"
		else
			log "guest ended without reporting an exit code (kernel panic, oops or /init crash; qemu exit $rc); last console lines:"
		fi
		tail -n 40 "$run/console.log" >&2
		return 3
	fi
	log "guest finished in $((SECONDS - start))s with exit code $marker"
	return "$marker"
}

# guest_prepare does everything up to a bootable base: host packages, kernel,
# base image. Sets GUEST_KVER, GUEST_KDIR, GUEST_KERNEL, GUEST_BASE. Manifests default to
# hack/guest/base.manifest plus $GUEST_MANIFESTS.
guest_prepare() {
	local manifests=("$GUEST_DIR/base.manifest")
	local m
	for m in ${GUEST_MANIFESTS:-}; do
		[ -f "$m" ] || m=$REPO_ROOT/$m
		[ -f "$m" ] || die "manifest $m not found"
		manifests+=("$m")
	done
	if [ -n "${GUEST_EXTRA_MODULES:-}${GUEST_EXTRA_BINS:-}" ]; then
		local extra=$CACHE_DIR/guest/extra-$$.manifest
		mkdir -p "$CACHE_DIR/guest"
		{
			for m in ${GUEST_EXTRA_MODULES:-}; do echo "module $m"; done
			for m in ${GUEST_EXTRA_BINS:-}; do echo "bin $m"; done
		} >"$extra"
		manifests+=("$extra")
	fi
	guest_ensure_host_packages "${manifests[@]}"
	GUEST_KVER=$(guest_kernel_version)
	GUEST_KDIR=$(guest_ensure_kernel "$GUEST_KVER")
	GUEST_KERNEL=$(guest_kernel_image "$GUEST_KDIR")
	GUEST_BASE=$(guest_build_base "$GUEST_KVER" "$GUEST_KDIR" "${manifests[@]}")
	[ -n "${extra:-}" ] && rm -f "$extra"
	return 0
}

# guest_build_ipvs_guard builds the static binary the guest runs.
guest_build_ipvs_guard() {
	(cd "$REPO_ROOT" && make -s build >&2)
	GUEST_IPVS_GUARD_BIN=$REPO_ROOT/bin/ipvs-guard
}
