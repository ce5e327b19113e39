#!/bin/sh
# cure-provisioner prerm: a removed package stops its service and sockets.
set -e
if [ "$1" = "remove" ] && [ -d /run/systemd/system ]; then
	systemctl stop provisioner-lite.service provisioner-lite.socket || true
fi
exit 0
