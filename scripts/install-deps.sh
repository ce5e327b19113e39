#!/usr/bin/env bash
# Installs what CURE's build and QEMU tests need on a fresh Debian 12 machine:
# Debian packages (QEMU, iPXE ROMs, mstflint for the image, syslinux/mtools
# for the test host-OS disk, PostgreSQL for the store's tests, which start
# private clusters of their own; for UEFI network boot: OVMF, Debian's iPXE
# builds that provisioner-lite serves over TFTP, dnsmasq as the test's site
# DHCP server, systemd-boot's EFI stub and binutils' objcopy for the host
# disk's unified kernel image; sbsigntool and faketime to sign the CURE
# image reproducibly; swtpm and swtpm-tools for the QEMU nodes' TPMs and the
# attestation tests, tpm2-tools; systemd for systemd-analyze verify of deploy/systemd; python3-sushy for the virtual BMC's Ironic
# client probes; fio, stress-ng, iperf3, perftest and nvme-cli for the tool bundle, whose
# pinned versions initramfs/toolbundle.yaml names) and Debian's kernel,
# unpacked under .cache/kernel.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(qemu-system-x86 qemu-utils ipxe-qemu zstd lz4 cpio nvme-cli mstflint syslinux syslinux-common extlinux mtools dosfstools fdisk xz-utils postgresql pci.ids
  ovmf ipxe dnsmasq-base systemd-boot-efi binutils iproute2 python3-sushy chromium fio stress-ng iperf3 perftest
  sbsigntool faketime swtpm swtpm-tools tpm2-tools systemd)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The kernel: whatever linux-image-amd64 depends on today (e.g. linux-image-6.1.0-NN-amd64).
kdir=.cache/kernel
if [ ! -f "$kdir/root/.complete" ]; then
  [ -n "$(apt-cache policy linux-image-amd64 2>/dev/null | grep Candidate)" ] || $SUDO apt-get update -qq
  pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
  [ -n "$pkg" ] || { echo "install-deps: cannot resolve linux-image-amd64's kernel package" >&2; exit 1; }
  echo "install-deps: fetching $pkg"
  rm -rf "$kdir" && mkdir -p "$kdir"
  (cd "$kdir" && apt-get download "$pkg" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  deb=$(ls "$kdir"/*.deb)
  dpkg-deb -x "$deb" "$kdir/root"
  touch "$kdir/root/.complete"
fi
ls "$kdir"/root/boot/vmlinuz-* >/dev/null
