#!/usr/bin/env bash
# Try CURE on one box: runs every sh block of docs/SITE.md ("The walk"), in
# the order written, as TestSiteGuideCommands does. One Linux machine plays
# a site: a network namespace with a bridge is the provisioning network,
# dnsmasq in a second namespace is the site's DHCP server (addresses only),
# the project's virtual BMC drives a UEFI QEMU node (OVMF, no NIC option
# ROM) on a tap device, and the coordinator answers PXE with its proxy DHCP
# and TFTP. The node is provisioned end to end (PXE, iPXE, CURE, wipe,
# install, the installed OS's callback), then diagnosed, and its HTML
# report written.
#
# Needs root (namespaces, a bridge, a tap device) and what
# `scripts/install-deps.sh tests` installs. Settings, from the environment:
#   W=/tmp/cure-one-box  everything the walk writes (state, disks, logs, the report)
#   OUT=out              make's output: image/ and hostos/ (built if absent), pki/ (the CA the image trusts)
#   NS=cure-site         the provisioning network's namespace (the DHCP server's is $NS-dhcp)
#   KEEP=1               skip the guide's last block (Stop): leave everything running (Ctrl-C stops it)
set -euo pipefail
cd "$(dirname "$0")/.."

export W=${W:-/tmp/cure-one-box} OUT=${OUT:-out} NS=${NS:-cure-site}
KEEP=${KEEP:-}
[ "$(id -u)" = 0 ] || { echo "try-one-box: run as root (it creates network namespaces, a bridge and a tap device)" >&2; exit 1; }
ip netns delete "$NS-dhcp" 2>/dev/null || true
ip netns delete "$NS" 2>/dev/null || true
rm -rf "$W" && mkdir -p "$W"

# The sh blocks, each announced with its line; KEEP drops the last one.
awk -v keep="$KEEP" '
	/^```sh$/ { inb = 1; n++; start[n] = NR; next }
	/^```$/ && inb { inb = 0; next }
	inb { body[n] = body[n] $0 "\n" }
	END { last = keep != "" ? n - 1 : n; for (i = 1; i <= last; i++) printf ": docs/SITE.md:%d\n%s", start[i], body[i] }
' docs/SITE.md > "$W/site-guide.sh"

cleanup() {
	set +e
	kill $(jobs -p) 2>/dev/null
	wait
	ip netns delete "$NS-dhcp" 2>/dev/null
	ip netns delete "$NS" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
set -x
# shellcheck source=/dev/null
. "$W/site-guide.sh"
set +x
echo "try-one-box: done; logs, state and the report ($W/node1.html) in $W"
if [ -n "$KEEP" ]; then
	echo "try-one-box: still running (KEEP=1): e.g. ip netns exec $NS $W/bin/curectl nodes show node1; Ctrl-C stops everything"
	wait
fi
