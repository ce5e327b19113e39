#!/usr/bin/env bash
# Try CURE on one box: README "Try it on one box", the same commands in the
# same order (TestSiteWalkOneBox runs this script and checks that every
# command of that README section is here). One Linux machine plays a site:
# a network namespace with a bridge is the provisioning network, dnsmasq in
# a second namespace is the site's DHCP server (addresses only), the
# project's virtual BMC drives a UEFI QEMU node (OVMF, no NIC option ROM) on
# a tap device, and the coordinator answers PXE with its proxy DHCP and
# TFTP. The node is provisioned end to end: PXE, iPXE, CURE, wipe, install,
# the installed OS's callback.
#
# Needs root (namespaces, a bridge, a tap device) and what
# scripts/install-deps.sh installs. Settings, from the environment:
#   W=/tmp/cure-one-box  everything this trial writes (state, disks, logs)
#   OUT=out              make's output: image/ and hostos/ (built if absent), pki/ (the CA the image trusts)
#   NS=cure-site         the provisioning network's namespace (the DHCP server's is $NS-dhcp)
#   KEEP=1               leave everything running after the provision (stop it with Ctrl-C)
set -euo pipefail
cd "$(dirname "$0")/.."

W=${W:-/tmp/cure-one-box} OUT=${OUT:-out} NS=${NS:-cure-site}
KEEP=${KEEP:-}
[ "$(id -u)" = 0 ] || { echo "try-one-box: run as root (it creates network namespaces, a bridge and a tap device)" >&2; exit 1; }

pids=()
cleanup() {
	set +e
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	ip netns delete "$NS-dhcp" 2>/dev/null
	ip netns delete "$NS" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '\n== %s\n' "$*"; }
# waitfor SECONDS WHAT COMMAND...: until COMMAND succeeds, at most SECONDS.
waitfor() {
	local limit=$1 what=$2
	shift 2
	for ((i = 0; i < limit * 5; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	echo "try-one-box: $what did not happen within ${limit}s" >&2
	return 1
}
ip netns delete "$NS-dhcp" 2>/dev/null || true
ip netns delete "$NS" 2>/dev/null || true
rm -rf "$W" && mkdir -p "$W"

step "0. build: the CURE image and the test host-OS disk (skipped when $OUT has them), the binaries"
[ -f "$OUT/image/report.json" ] && [ -f "$OUT/hostos/disk.raw.zst" ] || make image hostos OUT="$OUT"
go build -o "$W/bin/" ./provisioner-lite/cmd/provisioner-lite ./provisioner-lite/cmd/curectl ./qemu-test/cmd/vbmc

step "1. the provisioning network: bridge br0 (the coordinator at 10.88.0.1), tap0 for the node, a veth to the DHCP server's namespace"
ip netns add $NS
ip netns add $NS-dhcp
ip -n $NS link set lo up
ip -n $NS link add br0 type bridge
ip -n $NS addr add 10.88.0.1/24 dev br0
ip -n $NS link set br0 up
ip -n $NS tuntap add dev tap0 mode tap
ip -n $NS link set tap0 master br0
ip -n $NS link set tap0 up
ip -n $NS link add veth0 type veth peer name veth1 netns $NS-dhcp
ip -n $NS link set veth0 master br0
ip -n $NS link set veth0 up
ip -n $NS-dhcp link set lo up
ip -n $NS-dhcp addr add 10.88.0.2/24 dev veth1
ip -n $NS-dhcp addr add fd88::2/64 dev veth1 nodad
ip -n $NS-dhcp link set veth1 up

step "2. the site's DHCP server: dnsmasq, addresses only (no PXE options), a fixed address for the node, IPv6 router advertisements"
ip netns exec $NS-dhcp dnsmasq --conf-file=/dev/null --keep-in-foreground --port=0 --interface=veth1 --bind-interfaces --user=root --group=root \
    --dhcp-range=10.88.0.100,10.88.0.200,1h --dhcp-host=52:54:00:c0:de:01,10.88.0.10 --enable-ra --dhcp-range=fd88::,ra-only \
    --dhcp-leasefile=$W/dnsmasq.leases --log-dhcp --log-facility=$W/dnsmasq.log &
pids+=($!)

step "3. the coordinator's state dir, trusting the CA the image was built with (make's $OUT/pki)"
install -d -m 700 $W/state $W/state/pki
cp $OUT/pki/ca.pem $OUT/pki/ca-key.pem $W/state/pki/
ip netns exec $NS $W/bin/provisioner-lite init --state-dir $W/state --pxe-interface br0

step "4. a virtual BMC and its UEFI QEMU node on tap0; it writes the nodes file"
cat > $W/fleet.yaml <<EOF
tls: true                 # HTTPS with a self-signed certificate, pinned in the nodes file
sku: qemu-nvme
passwordEnv: BMC_PW       # the nodes file names the coordinator's environment variable, not the password
workDir: $W/vbmc
nodes:
  - name: node1
    mac: 52:54:00:c0:de:01
    tap: tap0
    uefi: true
    diskSizeMiB: 2048
EOF
ip netns exec $NS $W/bin/vbmc -config $W/fleet.yaml -nodes-yaml $W/nodes.yaml > $W/vbmc.log 2>&1 &
pids+=($!)
waitfor 60 "the virtual BMC" test -s "$W/nodes.yaml"
cat "$W/nodes.yaml"

step "5. the SKU, with the OS image to install: imported, its digest put in the SKU"
mkdir -p $W/manifests
cp manifests/examples/qemu-nvme.yaml $W/manifests/
$W/bin/provisioner-lite artifacts add --state-dir $W/state --sku $W/manifests/qemu-nvme.yaml $OUT/hostos/disk.raw.zst

step "6. check the site, then start the coordinator with its proxy DHCP and TFTP on br0"
export BMC_PW=password
ip netns exec $NS $W/bin/provisioner-lite check --manifests $W/manifests --nodes $W/nodes.yaml --state-dir $W/state --image-dir $OUT/image
ip netns exec $NS $W/bin/provisioner-lite --state-dir $W/state --manifests $W/manifests --nodes $W/nodes.yaml --image-dir $OUT/image \
    --pxe-interface br0 --proxy-dhcp > $W/coordinator.log 2>&1 &
pids+=($!)
export CURE_CA=$W/state/pki/ca.pem CURE_CERT=$W/state/pki/operators/admin.pem CURE_KEY=$W/state/pki/operators/admin-key.pem
waitfor 60 "the coordinator's start" ip netns exec $NS $W/bin/curectl nodes

step "7. provision node1, watching it"
start=$(date +%s)
ip netns exec $NS $W/bin/curectl provision --watch node1
echo "try-one-box: node1 provisioned in $(($(date +%s) - start)) s; logs and state in $W"

if [ -n "$KEEP" ]; then
	echo "try-one-box: still running (KEEP=1): e.g. ip netns exec $NS $W/bin/curectl nodes show node1; Ctrl-C stops everything"
	wait
fi
