// Package hostos is the tiny installed "host OS" of the QEMU tests: an
// initramfs spec (hostos.yaml) whose uinit is cmd/hostready, the disk image
// assembler (hostdisk, cmd/mkhostdisk), and a test that boots the disk in
// QEMU and waits for its phone-home callback.
package hostos
