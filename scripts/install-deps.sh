#!/usr/bin/env bash
# Installs, on Debian 12, what one role of a CURE machine needs, and only that:
#
#   install-deps.sh coordinator [--with-postgres-server]
#       a host that runs provisioner-lite: Debian's iPXE builds, which its
#       proxy DHCP and TFTP serve (/usr/lib/ipxe); with the flag, a local
#       PostgreSQL server for --db (SQLite in the state dir needs nothing).
#       No QEMU, no browser, no build tools.
#   install-deps.sh image
#       make image, make hostos, make toolbundle: gcc (cure-nvml uses cgo),
#       zstd/lz4/cpio/xz for the initramfs, mstflint, nvme-cli and pci.ids
#       for the image, syslinux/mtools/dosfstools/fdisk for the test OS disk,
#       systemd-boot's EFI stub and binutils' objcopy for its unified kernel
#       image, sbsigntool and faketime to sign the CURE image reproducibly,
#       fio, stress-ng, iperf3, perftest, mdadm, xfsprogs and e2fsprogs for
#       the tool bundle (whose pinned
#       versions initramfs/toolbundle.yaml names), and Debian's kernel,
#       unpacked under .cache/kernel.
#   install-deps.sh tests   (the default; what `make deps` passes)
#       make test and make demo: the image role, plus QEMU with its iPXE ROMs
#       and OVMF (qemu-system-aarch64 and AAVMF too, for make e2e-arm64),
#       Debian's iPXE builds, dnsmasq as the tests' site DHCP
#       server, iproute2, swtpm/swtpm-tools/tpm2-tools for the QEMU nodes'
#       TPMs, python3-sushy for the virtual BMC's Ironic client probes,
#       PostgreSQL (the store's tests start private clusters), Chromium (the
#       dashboard's browser tests) and systemd (systemd-analyze verifies the
#       units).
#   install-deps.sh image-arm64
#       make image-arm64: the image role, plus Debian's arm64 kernel (dpkg's
#       arm64 architecture is added so apt-get download finds it),
#       unpacked under .cache/kernel-arm64.
#   install-deps.sh all     every role.
set -euo pipefail
cd "$(dirname "$0")/.."

role=${1:-tests}
pgserver=
[ "${2:-}" = --with-postgres-server ] && pgserver=1

coordinator=(ipxe ca-certificates)
image=(gcc libc6-dev zstd lz4 cpio xz-utils nvme-cli mstflint pci.ids syslinux syslinux-common extlinux mtools dosfstools fdisk
  systemd-boot-efi binutils sbsigntool faketime fio stress-ng iperf3 perftest mdadm xfsprogs e2fsprogs)
tests=("${image[@]}" qemu-system-x86 qemu-utils ipxe-qemu ovmf ipxe dnsmasq-base iproute2 swtpm swtpm-tools tpm2-tools
  python3-sushy postgresql chromium systemd qemu-system-arm qemu-efi-aarch64 curl)

kernel=
karch=amd64
case "$role" in
coordinator) pkgs=("${coordinator[@]}"); [ -n "$pgserver" ] && pkgs+=(postgresql) ;;
image) pkgs=("${image[@]}"); kernel=1 ;;
image-arm64) pkgs=("${image[@]}"); kernel=1; karch=arm64 ;;
tests) pkgs=("${tests[@]}"); kernel=1 ;;
all) pkgs=("${coordinator[@]}" "${tests[@]}"); kernel=1 ;;
*)
  echo "install-deps: unknown role \"$role\" (want coordinator, image, image-arm64, tests or all)" >&2
  exit 2
  ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps ($role): apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ -n "$kernel" ] || exit 0

# The kernel: whatever linux-image-$karch depends on today (e.g.
# linux-image-6.1.0-NN-amd64), amd64's in .cache/kernel, another
# architecture's in .cache/kernel-$karch.
kdir=.cache/kernel
kpkg=linux-image-$karch
if [ "$karch" != amd64 ]; then
  kdir=.cache/kernel-$karch
  kpkg=linux-image-$karch:$karch
  if ! dpkg --print-foreign-architectures | grep -qx "$karch"; then
    $SUDO dpkg --add-architecture "$karch"
    $SUDO apt-get update -qq
  fi
fi
if [ ! -f "$kdir/root/.complete" ]; then
  [ -n "$(apt-cache policy "$kpkg" 2>/dev/null | grep Candidate)" ] || $SUDO apt-get update -qq
  pkg=$(apt-cache depends "$kpkg" | awk '/Depends: linux-image-/{print $2; exit}')
  [ -n "$pkg" ] || { echo "install-deps: cannot resolve $kpkg's kernel package" >&2; exit 1; }
  echo "install-deps: fetching $pkg"
  rm -rf "$kdir" && mkdir -p "$kdir"
  (cd "$kdir" && apt-get download "$pkg" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  deb=$(ls "$kdir"/*.deb)
  dpkg-deb -x "$deb" "$kdir/root"
  touch "$kdir/root/.complete"
fi
ls "$kdir"/root/boot/vmlinuz-* >/dev/null
