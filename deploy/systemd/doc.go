// Package systemd holds CURE's systemd units, sysusers.d entry and example
// configuration (installed by the cure-provisioner package, see
// tools/release), embedded so the release builder packs exactly what
// TestSystemdUnitsVerify checked.
package systemd

import _ "embed"

// Service is provisioner-lite.service, installed in /lib/systemd/system.
//
//go:embed provisioner-lite.service
var Service []byte

// Socket is provisioner-lite.socket: HTTP, gRPC and HTTPS boot passed as
// fd:3, fd:4 and fd:5.
//
//go:embed provisioner-lite.socket
var Socket []byte

// Sysusers is /usr/lib/sysusers.d/cure.conf: the `cure` system user.
//
//go:embed cure.sysusers
var Sysusers []byte

// Config is the example /etc/cure/provisioner-lite.yaml (a conffile).
//
//go:embed provisioner-lite.yaml
var Config []byte

// ExecPath is the binary the service starts, as installed.
const ExecPath = "/usr/bin/provisioner-lite"
