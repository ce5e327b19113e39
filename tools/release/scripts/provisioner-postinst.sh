#!/bin/sh
# cure-provisioner postinst: the cure system user, then systemd told of the
# units. The service is not enabled or started: the state dir must be made
# first (sudo -u cure provisioner-lite init --state-dir /var/lib/cure).
set -e
if [ "$1" = "configure" ]; then
	if command -v systemd-sysusers >/dev/null 2>&1; then
		systemd-sysusers /usr/lib/sysusers.d/cure.conf
	elif ! getent passwd cure >/dev/null; then
		adduser --system --group --home /var/lib/cure --no-create-home --gecos "CURE coordinator" cure
	fi
	# The state dir, the cure user's alone, so that `provisioner-lite init`
	# can run as cure (systemd's StateDirectory= makes it too, at first start).
	if [ ! -d /var/lib/cure ]; then
		install -d -o cure -g cure -m 0700 /var/lib/cure
	fi
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
		# An upgrade restarts a running coordinator on the new binary.
		if systemctl is-active --quiet provisioner-lite.service; then
			systemctl try-restart provisioner-lite.service || true
		fi
	fi
fi
exit 0
