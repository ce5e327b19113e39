#!/bin/sh
# cure-provisioner postrm: systemd forgets the removed units. The state dir
# /var/lib/cure and the cure user stay (a purge keeps the store too: it
# holds the site's runs and PKI).
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
exit 0
