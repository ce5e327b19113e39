package main

import (
	"flag"
	"strings"

	"github.com/cure-oss/cure/provisioner-lite/coordinator"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// registerFlags registers the coordinator's flags on fs, each defaulting
// to c's value (coordinator.DefaultConfig; $CURE_DB and the other CURE_*
// variables are read after parsing, see coordOpts.resolve). The
// repeatable flags fill lists; the caller copies them into c after Parse.
func registerFlags(fs *flag.FlagSet, c *coordinator.Config, imports, tlsNames, webhooks *multiFlag) {
	registerSiteFlags(fs, c)
	registerConnFlags(fs, &c.Conns)
	registerNetbootFlags(fs, &c.Netboot)
	registerFleetFlags(fs, c)
	registerInstanceFlags(fs, c)
	registerArchFlags(fs, c)
	registerEnlistFlags(fs, &c.Enlist)
	registerMemoryFlags(fs, c)
	fs.Var(imports, "import-artifact", "file to add to the content-addressed artifact store (repeatable)")
	fs.Var(tlsNames, "tls-name", "another DNS name or IP the gRPC server certificate carries, besides --advertise, 127.0.0.1 and localhost: "+
		"a name operators give curectl --server (a DNS name, a VIP), which curectl verifies as given (repeatable)")
	fs.Var(webhooks, "webhook", "POST a signed JSON notification to this URL when a run ends or needs attention (repeatable; docs/OBSERVABILITY.md)")
}

// registerSiteFlags: the site, the listeners, the runs' timeouts and budgets.
func registerSiteFlags(fs *flag.FlagSet, c *coordinator.Config) {
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "store, PKI and artifact directory (0700; one coordinator at a time; made by provisioner-lite init)")
	fs.StringVar(&c.ManifestDir, "manifests", c.ManifestDir, "directory of SKU manifests (<sku>.yaml) and validation suites (suites/<name>.yaml)")
	fs.StringVar(&c.NodesFile, "nodes", c.NodesFile, "node inventory (YAML or CSV) imported at start (later: curectl nodes import)")
	fs.StringVar(&c.ImageDir, "image-dir", c.ImageDir, "cure-build output: vmlinuz, initramfs, report.json (its CA must be this state dir's)")
	fs.StringVar(&c.HTTPListen, "http-listen", c.HTTPListen, "boot/artifact HTTP listen address (fd:N: a listening socket inherited as file descriptor N)")
	fs.StringVar(&c.HTTPSListen, "https-listen", c.HTTPSListen, "HTTPS boot listener (fd:N as for --http-listen; empty: none): the signed image cure.efi for UEFI HTTP boot "+
		"(--netboot uefi-http sets the BMC's HttpBootUri to it; firmware verifies it with pki/boot-ca.pem) and the image's boot parameters")
	fs.StringVar(&c.GRPCListen, "grpc-listen", c.GRPCListen, "gRPC (runners and curectl) listen address (fd:N: a listening socket inherited as file descriptor N)")
	fs.StringVar(&c.Advertise, "advertise", c.Advertise, "host or IP nodes use to reach this coordinator (default: the address of --pxe-interface, else of the default route's interface)")
	fs.StringVar(&c.PXEInterface, "pxe-interface", c.PXEInterface, "the interface facing the nodes' provisioning network (default: the default route's): --advertise defaults to its address, and proxy DHCP answers there (SO_BINDTODEVICE)")
	fs.StringVar(&c.BMCBaseURL, "bmc-base-url", c.BMCBaseURL, "artifact server base URL as BMCs reach it (default: the nodes' URL)")
	fs.StringVar(&c.AdvertiseGRPC, "advertise-grpc", c.AdvertiseGRPC, "host:port nodes dial for gRPC (default: advertise host + the gRPC port)")
	fs.DurationVar(&c.Timeouts.Reconnect, "reconnect", c.Timeouts.Reconnect, "a runner gone this long (or, in a validate phase, silent: no heartbeat) counts as a disconnect")
	fs.DurationVar(&c.Timeouts.RunnerPhase, "runner-phase-timeout", c.Timeouts.RunnerPhase, "an in-band phase other than validate fails without its end within this (validate: its suite's planned duration plus grace)")
	fs.DurationVar(&c.Timeouts.BMCCall, "bmc-timeout", c.Timeouts.BMCCall, "timeout of one Redfish call")
	fs.DurationVar(&c.Timeouts.BMCTask, "bmc-task-timeout", c.Timeouts.BMCTask, "a BMC firmware update task, from submission to its end")
	fs.DurationVar(&c.Timeouts.BMCReset, "bmc-reset-timeout", c.Timeouts.BMCReset, "a BMC reset until the BMC answers again")
	fs.DurationVar(&c.Timeouts.BMCPoll, "bmc-poll", c.Timeouts.BMCPoll, "BMC sensor polling period during a validate phase whose suite sets no stage bmcInterval")
	fs.DurationVar(&c.Timeouts.RetryBase, "retry-base", c.Timeouts.RetryBase, "first delay before a failed phase is tried again (doubles per attempt, full jitter)")
	fs.DurationVar(&c.Timeouts.RetryMax, "retry-max", c.Timeouts.RetryMax, "cap of the delay before a failed phase is tried again")
	fs.DurationVar(&c.Timeouts.WaitForCURE, "wait-cure", c.Timeouts.WaitForCURE, "PXE boot to runner registered budget (also a boot token's life)")
	fs.DurationVar(&c.Timeouts.HostOS, "wait-host", c.Timeouts.HostOS, "reboot to installed OS callback budget (the callback is refused after it)")
	fs.IntVar(&c.Budgets.PhaseAttempts, "phase-attempts", c.Budgets.PhaseAttempts, "attempts per phase before the run fails")
	fs.BoolVar(&c.BindBootIP, "bind-boot-ip", c.BindBootIP, "refuse a runner's first Hello from another IP than the one that fetched its iPXE script "+
		"(turn off only if the site's DHCP gives iPXE and CURE different addresses); a request for a node's boot identity from a second address "+
		"stops its run for an operator (off: addresses are not identities and a peer that asks first is not caught)")
	fs.DurationVar(&c.ClaimSettle, "claim-settle", c.ClaimSettle, "a boot that has not passed attestation gets no assignment (PSIDs, host token) "+
		"until this long after the coordinator armed PXE or powered the node, with one claimant for its boot identity: set it above your slowest server's power-on-to-iPXE time")
	fs.IntVar(&c.TokensPerWindow, "boot-tokens-per-window", c.TokensPerWindow, "boot tokens one PXE boot of a node may mint (iPXE retries the script)")
	fs.Int64Var(&c.EventLimits.MaxEvents, "max-run-events", c.EventLimits.MaxEvents, "runner events stored per run; past it metrics and logs are dropped")
	fs.Int64Var(&c.EventLimits.MaxBytes, "max-run-event-bytes", c.EventLimits.MaxBytes, "bytes of runner events stored per run; past it metrics and logs are dropped")
	fs.Int64Var(&c.EventLimits.MaxVerdicts, "max-run-verdicts", c.EventLimits.MaxVerdicts, "distinct verdicts a run's runner may report")
	fs.DurationVar(&c.Retention.RunEvents, "retention", c.Retention.RunEvents, "keep the runner's metrics and logs and the coordinator's notes of finished runs this long (phases, verdicts and the essential timeline stay)")
	fs.DurationVar(&c.Retention.Audit, "audit-retention", c.Retention.Audit, "keep audit log entries this long")
	fs.DurationVar(&c.Retention.Fleet, "fleet-retention", c.Retention.Fleet, "keep verdicts' measurements (the fleet history fleet bands judge against) this long; raised to the longest fleet window of the suites")
}

// registerFleetFlags: BMCs, power, the store and several instances,
// observability.
func registerFleetFlags(fs *flag.FlagSet, c *coordinator.Config) {
	fs.StringVar(&c.BMCCA, "bmc-ca", c.BMCCA, "PEM CA bundle that verifies BMC certificates of nodes without caFile or fingerprint (empty: the system roots)")
	fs.StringVar(&c.EKRoots, "ek-roots", c.EKRoots, "directory of TPM manufacturers' root certificates (PEM): a node's EK certificate must chain to one unless the nodes file pins its ek_sha256 "+
		"(empty: EKs are trusted on first use; docs/SECURITY.md)")
	fs.IntVar(&c.MaxRuns, "max-runs", c.MaxRuns, "runs this instance drives at once; Provision beyond it is refused (ResourceExhausted) so curectl can try another instance")
	fs.StringVar(&c.PeerGRPC, "peer-grpc", c.PeerGRPC, "other instances of this fleet (shared database) as nodes dial them, host:port comma-separated: "+
		"a runner whose coordinator dies reconnects to the next")
	fs.StringVar(&c.DB, "db", c.DB, "database: empty for SQLite in the state dir (one instance), or a PostgreSQL DSN "+
		"(postgres://… or host=… dbname=…) shared by several instances; default $CURE_DB (keeps a password off the command line)")
	fs.Float64Var(&c.PowerOnRate, "power-on-rate", c.PowerOnRate, "power-ons per second per PDU or rack (see --power-group-label); 0: not paced")
	fs.IntVar(&c.PowerOnBurst, "power-on-burst", c.PowerOnBurst, "power-ons a PDU or rack may do back to back before --power-on-rate applies")
	fs.StringVar(&c.PowerGroupLabels, "power-group-label", c.PowerGroupLabels, "node labels that name a node's power group, first present wins (none: one group)")
	fs.IntVar(&c.BMCMaxInflight, "bmc-max-inflight", c.BMCMaxInflight, "Redfish calls in flight per BMC")
	fs.IntVar(&c.BMCMaxLogins, "bmc-max-logins", c.BMCMaxLogins, "Redfish logins in flight over all BMCs")
	fs.DurationVar(&c.BMCIdle, "bmc-idle", c.BMCIdle, "a BMC session unused this long is logged out")
	fs.StringVar(&c.PprofListen, "pprof-listen", c.PprofListen, "serve Go's /debug/pprof on this address (loopback only, e.g. 127.0.0.1:6060; empty: off)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "how long a run stays with an instance that stopped renewing its lease before another instance takes it over")
	fs.DurationVar(&c.StatsEvery, "stats-every", c.StatsEvery, "log the store's write statistics and the active runs this often")
	fs.StringVar(&c.Instance, "instance-id", c.Instance, "this coordinator instance's name (leases, answers, logs); unique among instances sharing a database")
	fs.StringVar(&c.MetricsListen, "metrics-listen", c.MetricsListen, "serve /metrics, /healthz and /readyz on this address (empty: off; keep it off the provisioning network)")
	fs.StringVar(&c.WebListen, "web-listen", c.WebListen, "serve the web dashboard (TLS, operator client certificate required) on this address (empty: off)")
	fs.StringVar(&c.WebhookSecretFile, "webhook-secret-file", c.WebhookSecretFile, "HMAC key of the webhook signature (default: webhook.secret in the state dir, created on first use)")
	fs.StringVar(&c.ToolBundle, "tool-bundle", c.ToolBundle, "the tool bundle (make toolbundle: out/toolbundle/toolbundle.tar.zst) to serve to suites that run fio, stress-ng or iperf3, and to cure-tools in a node's debug shell (nvme-cli); the image pins the one it was built with")
}

// registerConnFlags registers the listeners' connection caps, each
// defaulting to f's value.
func registerConnFlags(fs *flag.FlagSet, f *coordinator.ConnLimits) {
	derived := " (0: derived from the file descriptor limit, docs/SECURITY.md)"
	fs.IntVar(&f.HTTPConns, "http-max-conns", f.HTTPConns, "open connections of the boot/artifact server"+derived)
	fs.IntVar(&f.HTTPPerSource, "http-max-conns-per-source", f.HTTPPerSource, "open connections of the boot/artifact server from one address (IPv6: one /64)"+derived)
	fs.IntVar(&f.HTTPSConns, "https-max-conns", f.HTTPSConns, "open connections of the HTTPS boot listener (--https-listen)"+derived)
	fs.IntVar(&f.HTTPSPerSource, "https-max-conns-per-source", f.HTTPSPerSource, "open connections of the HTTPS boot listener from one address (IPv6: one /64)"+derived)
	fs.IntVar(&f.GRPCConns, "grpc-max-conns", f.GRPCConns, "open connections of the gRPC server"+derived)
	fs.IntVar(&f.GRPCPerSource, "grpc-max-conns-per-source", f.GRPCPerSource, "open connections of the gRPC server from one address"+derived)
	fs.IntVar(&f.WebConns, "web-max-conns", f.WebConns, "open connections of the dashboard"+derived)
	fs.IntVar(&f.WebPerSource, "web-max-conns-per-source", f.WebPerSource, "open connections of the dashboard from one address"+derived)
	fs.IntVar(&f.MetricsConns, "metrics-max-conns", f.MetricsConns, "open connections of the metrics listener"+derived)
	fs.IntVar(&f.MetricsPerSource, "metrics-max-conns-per-source", f.MetricsPerSource, "open connections of the metrics listener from one address"+derived)
	fs.IntVar(&f.WebStreams, "web-max-streams", f.WebStreams, "live dashboard streams (one per open dashboard tab) in all; more are refused with 429")
	fs.IntVar(&f.WebStreamsPerOperator, "web-max-streams-per-operator", f.WebStreamsPerOperator, "live dashboard streams of one operator certificate; more are refused with 429")
}

// registerNetbootFlags registers the network boot front door's flags,
// each defaulting to n's value.
func registerNetbootFlags(fs *flag.FlagSet, n *coordinator.NetbootConfig) {
	fs.BoolVar(&n.ProxyDHCP, "proxy-dhcp", n.ProxyDHCP, "answer PXE clients on UDP 67 and 4011 of --pxe-interface beside the site's DHCP server "+
		"(never hands out addresses): firmware gets an iPXE build over TFTP, iPXE gets the boot script URL")
	fs.BoolVar(&n.AllMACs, "proxy-dhcp-all-macs", n.AllMACs, "answer PXE clients whose MAC is not in the node inventory too (default: only inventory MACs, "+
		"so other machines on the network are left to whatever else answers them)")
	fs.StringVar(&n.TFTPListen, "tftp-listen", n.TFTPListen, "serve the iPXE builds over TFTP (read-only) on this address; "+
		"default with --proxy-dhcp: port 69 on the proxy's server IP; \"off\" disables")
	fs.StringVar(&n.ServerIP, "pxe-server-ip", n.ServerIP, "next-server and DHCP server identifier the proxy announces (default: the first IPv4 address of --pxe-interface)")
	fs.StringVar(&n.IPXEDir, "ipxe-dir", n.IPXEDir, "directory of the iPXE builds (Debian's ipxe package): undionly.kpxe for BIOS, the --ipxe-efi build for x86-64 UEFI")
	fs.StringVar(&n.IPXEEFI, "ipxe-efi", n.IPXEEFI, "iPXE build for x86-64 UEFI clients: snponly.efi (the firmware's own NIC driver, only the booting NIC) "+
		"or ipxe.efi (iPXE's native drivers)")
	fs.StringVar(&n.Mode, "netboot", n.Mode, "boot override that brings a node into CURE: pxe, or uefi-http (UEFI HTTP boot where the BMC offers UefiHttp; PXE elsewhere)")
	fs.StringVar(&n.BootMode, "boot-mode", n.BootMode, "BootSourceOverrideMode of that override: auto (UEFI where the BMC offers it), uefi, or legacy")
}
