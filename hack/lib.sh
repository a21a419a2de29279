# SPDX-License-Identifier: Apache-2.0
# Shared shell helpers for the project's scripts. Source it; do not run it.

set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Everything slow to build or download lives here, keyed by version, git-ignored.
CACHE_DIR=${IPVS_GUARD_CACHE:-$REPO_ROOT/.cache}
mkdir -p "$CACHE_DIR"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# as_root runs a command as root (directly when already root).
as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

# apt_ensure installs the given Debian packages unless they are all installed already.
apt_ensure() {
	local missing=()
	local p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "installing Debian packages: ${missing[*]}"
	# Serialise apt across concurrent scripts.
	(
		flock 9
		if [ ! -f /var/lib/apt/periodic/ipvs-guard-updated ] || [ -n "$(find /var/lib/apt/periodic/ipvs-guard-updated -mmin +360 2>/dev/null)" ]; then
			as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
			as_root mkdir -p /var/lib/apt/periodic && as_root touch /var/lib/apt/periodic/ipvs-guard-updated
		fi
		as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	) 9>/var/lock/ipvs-guard-apt.lock
}

# debian_mirror prints the host's Debian mirror (deb822 sources first, then sources.list).
debian_mirror() {
	local m
	m=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\/\?\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
	[ -n "$m" ] || m=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
	echo "${m:-http://deb.debian.org/debian}"
}
