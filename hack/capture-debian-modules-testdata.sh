#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates the kernel index files of pkg/modules/testdata/debian12 from the
# real Debian 12 kernel package: real lines only (the IPVS / conntrack /
# crc32c closure plus a sample of others), trimmed for size.
# Usage: hack/capture-debian-modules-testdata.sh [kernel-package-version]
source "$(dirname "$0")/lib.sh"
apt_ensure kmod
pkg=${1:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')}
[ -n "$pkg" ] || die "cannot find the current Debian kernel package"
rel=${pkg#linux-image-}
work=$CACHE_DIR/kernel/$rel
mkdir -p "$work"
(
	flock 9
	cd "$work"
	ls ./*.deb >/dev/null 2>&1 || apt-get download "$pkg"
	if [ ! -f rootfs/.done ]; then
		rm -rf rootfs
		dpkg -x ./*.deb rootfs
		depmod -b rootfs "$rel"
		touch rootfs/.done
	fi
) 9>"$CACHE_DIR/kernel/.lock-$rel"
src=$work/rootfs/lib/modules/$rel
dst=$REPO_ROOT/pkg/modules/testdata/debian12/lib/modules/$rel
rm -rf "$REPO_ROOT/pkg/modules/testdata/debian12/lib/modules"
mkdir -p "$dst"
closure='/(ip_vs[a-z_]*|nf_conntrack|nf_conntrack_(ftp|sip|netlink)|nf_defrag_ipv[46]|libcrc32c|crc32c_generic|crc32c-intel|crc32_generic|crc32-pclmul|dummy|veth|x_tables|ip_tables|xt_ipvs|xt_conntrack|nf_nat|nf_tables|nfnetlink|overlay|bridge|br_netfilter|stp|llc|xfs|btrfs|raid6_pq|xor|zstd_compress|ext4|jbd2|mbcache|crc16|virtio_net|net_failover|failover)\.ko:'
grep -E "$closure" "$src/modules.dep" >"$dst/modules.dep"
grep -E '/(ipv6|crc32|tcp_cubic|zswap|zpool|crc-ccitt|unix|af_packet)\.ko$' "$src/modules.builtin" >"$dst/modules.builtin"
cp "$src/modules.softdep" "$dst/modules.softdep"
{
	head -1 "$src/modules.alias"
	grep -E ' (crc32c_intel|crc32c_generic|crc32_generic|crc32_pclmul|libcrc32c|nf_conntrack|nf_conntrack_ftp|nf_conntrack_sip|ip_vs|dummy|veth|nf_nat|nf_tables|nfnetlink|xt_conntrack|xt_ipvs|overlay|bridge|br_netfilter|xfs|btrfs|virtio_net)$' "$src/modules.alias"
	grep -E ' (intel_uncore|e1000e)$' "$src/modules.alias" | head -6
} >"$dst/modules.alias"
wc -l "$dst"/modules.*
log "wrote $dst"
