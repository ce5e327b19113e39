// Command provisioner-lite is the thin coordinator: it drives BMCs over
// Redfish, serves the boot chain and artifacts over HTTP, and talks gRPC with
// the runners in CURE. Every run lives in its SQLite store, so a restart
// resumes where the runs were.
//
//	provisioner-lite init --state-dir DIR     one state dir: CA, server certificate, state key, admin operator certificate
//	provisioner-lite check [--manifests DIR] [--nodes FILE] [--state-dir DIR [--image-dir DIR]]
//	provisioner-lite pki --state-dir DIR [--operator NAME --role ROLE]
//	provisioner-lite pki offline --keys DIR --out DIR [--host H,...] [--days N]   on the key host (docs/KEYS.md)
//	provisioner-lite artifacts add --state-dir DIR [--sku SKU.yaml] FILE...
//	provisioner-lite [flags]                  the coordinator (lints the same as check first, and refuses on problems)
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/attestation"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/bootserver"
	"github.com/cure-oss/cure/provisioner-lite/hostaddr"
	"github.com/cure-oss/cure/provisioner-lite/pacing"
	"github.com/cure-oss/cure/provisioner-lite/peerlimit"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/pool"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/sitecheck"
	"github.com/cure-oss/cure/provisioner-lite/statedir"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// config is everything run needs, from the flags.
type config struct {
	stateDir, manifestDir, nodesFile, imageDir string
	httpListen, grpcListen, advertise, grpcAdv string
	httpsListen                                string
	pxeInterface                               string
	procRoot                                   string // /proc: the default route (hostaddr)
	bmcBaseURL                                 string
	imports                                    []string
	toolBundle                                 string
	timeouts                                   pipeline.Timeouts
	budgets                                    pipeline.Budgets
	bindBootIP                                 bool
	claimSettle                                time.Duration
	tokensPerWindow                            int
	eventLimits                                store.EventLimits
	retention                                  store.Retention
	conns                                      connFlags
	bmcCA                                      string
	ekRoots                                    string
	maxRuns                                    int
	instance                                   string
	peerGRPC                                   string
	statsEvery                                 time.Duration
	db                                         string
	leaseTTL                                   time.Duration
	powerRate                                  float64
	powerBurst, bmcInflight, bmcLogins         int
	powerGroups                                string
	bmcIdle                                    time.Duration
	pprofListen                                string
	tlsNames                                   []string // extra names of the gRPC server certificate
	netboot                                    netbootFlags
	metricsListen, webListen                   string
	webhooks                                   []string
	webhookSecret                              string
}

func main() {
	// Everything this process creates (state, keys, logs it writes) is
	// private to the coordinator's user, whatever the caller's umask.
	syscall.Umask(0o077)
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") {
		switch os.Args[1] {
		case "init":
			os.Exit(initCmd(os.Args[2:], os.Stdout))
		case "check":
			os.Exit(checkCmd(os.Args[2:], os.Stdout))
		case "pki":
			os.Exit(pkiCmd(os.Args[2:]))
		case "artifacts":
			os.Exit(artifactsCmd(os.Args[2:], os.Stdout))
		default:
			// Never a coordinator start: a typo must not create a state dir and a CA.
			fmt.Fprintf(os.Stderr, "provisioner-lite: unknown command %q\n", os.Args[1])
			usage(os.Stderr)
			os.Exit(2)
		}
	}
	var c config
	var imports, tlsNames, webhooks multiFlag
	flag.Usage = func() {
		usage(flag.CommandLine.Output())
		fmt.Fprintln(flag.CommandLine.Output(), "\ncoordinator flags, by topic:")
		printGroupedFlags(flag.CommandLine.Output(), flag.CommandLine)
	}
	flag.StringVar(&c.stateDir, "state-dir", "state", "store, PKI and artifact directory (0700; one coordinator at a time; made by provisioner-lite init)")
	flag.StringVar(&c.manifestDir, "manifests", "manifests/examples", "directory of SKU manifests (<sku>.yaml) and validation suites (suites/<name>.yaml)")
	flag.StringVar(&c.nodesFile, "nodes", "", "node inventory (YAML or CSV) imported at start (later: curectl nodes import)")
	flag.StringVar(&c.imageDir, "image-dir", "out/image", "cure-build output: vmlinuz, initramfs, report.json (its CA must be this state dir's)")
	flag.StringVar(&c.httpListen, "http-listen", ":8080", "boot/artifact HTTP listen address (fd:N: a listening socket inherited as file descriptor N)")
	flag.StringVar(&c.httpsListen, "https-listen", "", "HTTPS boot listener (fd:N as for --http-listen; empty: none): the signed image cure.efi for UEFI HTTP boot "+
		"(--netboot uefi-http sets the BMC's HttpBootUri to it; firmware verifies it with pki/boot-ca.pem) and the image's boot parameters")
	flag.StringVar(&c.grpcListen, "grpc-listen", ":8443", "gRPC (runners and curectl) listen address (fd:N: a listening socket inherited as file descriptor N)")
	flag.StringVar(&c.advertise, "advertise", "", "host or IP nodes use to reach this coordinator (default: the address of --pxe-interface, else of the default route's interface)")
	flag.StringVar(&c.pxeInterface, "pxe-interface", "", "the interface facing the nodes' provisioning network (default: the default route's): --advertise defaults to its address, and proxy DHCP answers there (SO_BINDTODEVICE)")
	flag.StringVar(&c.bmcBaseURL, "bmc-base-url", "", "artifact server base URL as BMCs reach it (default: the nodes' URL)")
	flag.StringVar(&c.grpcAdv, "advertise-grpc", "", "host:port nodes dial for gRPC (default: advertise host + the gRPC port)")
	flag.DurationVar(&c.timeouts.Reconnect, "reconnect", 3*time.Minute, "a runner gone this long (or, in a validate phase, silent: no heartbeat) counts as a disconnect")
	flag.DurationVar(&c.timeouts.RunnerPhase, "runner-phase-timeout", 30*time.Minute, "an in-band phase other than validate fails without its end within this (validate: its suite's planned duration plus grace)")
	flag.DurationVar(&c.timeouts.BMCCall, "bmc-timeout", 30*time.Second, "timeout of one Redfish call")
	flag.DurationVar(&c.timeouts.BMCTask, "bmc-task-timeout", time.Hour, "a BMC firmware update task, from submission to its end")
	flag.DurationVar(&c.timeouts.BMCReset, "bmc-reset-timeout", 10*time.Minute, "a BMC reset until the BMC answers again")
	flag.DurationVar(&c.timeouts.BMCPoll, "bmc-poll", time.Duration(manifests.DefaultBMCInterval), "BMC sensor polling period during a validate phase whose suite sets no stage bmcInterval")
	flag.DurationVar(&c.timeouts.RetryBase, "retry-base", 2*time.Second, "first delay before a failed phase is tried again (doubles per attempt, full jitter)")
	flag.DurationVar(&c.timeouts.RetryMax, "retry-max", time.Minute, "cap of the delay before a failed phase is tried again")
	flag.DurationVar(&c.timeouts.WaitForCURE, "wait-cure", 10*time.Minute, "PXE boot to runner registered budget (also a boot token's life)")
	flag.DurationVar(&c.timeouts.HostOS, "wait-host", 15*time.Minute, "reboot to installed OS callback budget (the callback is refused after it)")
	flag.IntVar(&c.budgets.PhaseAttempts, "phase-attempts", 3, "attempts per phase before the run fails")
	flag.BoolVar(&c.bindBootIP, "bind-boot-ip", true, "refuse a runner's first Hello from another IP than the one that fetched its iPXE script "+
		"(turn off only if the site's DHCP gives iPXE and CURE different addresses); a request for a node's boot identity from a second address "+
		"stops its run for an operator (off: addresses are not identities and a peer that asks first is not caught)")
	flag.DurationVar(&c.claimSettle, "claim-settle", pipeline.DefaultClaimSettle, "a boot that has not passed attestation gets no assignment (PSIDs, host token) "+
		"until this long after the coordinator armed PXE or powered the node, with one claimant for its boot identity: set it above your slowest server's power-on-to-iPXE time")
	flag.IntVar(&c.tokensPerWindow, "boot-tokens-per-window", 6, "boot tokens one PXE boot of a node may mint (iPXE retries the script)")
	flag.Int64Var(&c.eventLimits.MaxEvents, "max-run-events", store.DefaultEventLimits.MaxEvents, "runner events stored per run; past it metrics and logs are dropped")
	flag.Int64Var(&c.eventLimits.MaxBytes, "max-run-event-bytes", store.DefaultEventLimits.MaxBytes, "bytes of runner events stored per run; past it metrics and logs are dropped")
	flag.Int64Var(&c.eventLimits.MaxVerdicts, "max-run-verdicts", store.DefaultEventLimits.MaxVerdicts, "distinct verdicts a run's runner may report")
	flag.DurationVar(&c.retention.RunEvents, "retention", store.DefaultRetention.RunEvents, "keep the runner's metrics and logs and the coordinator's notes of finished runs this long (phases, verdicts and the essential timeline stay)")
	flag.DurationVar(&c.retention.Audit, "audit-retention", store.DefaultRetention.Audit, "keep audit log entries this long")
	flag.DurationVar(&c.retention.Fleet, "fleet-retention", store.DefaultRetention.Fleet, "keep verdicts' measurements (the fleet history fleet bands judge against) this long; raised to the longest fleet window of the suites")
	c.conns.register(flag.CommandLine)
	flag.StringVar(&c.bmcCA, "bmc-ca", "", "PEM CA bundle that verifies BMC certificates of nodes without caFile or fingerprint (empty: the system roots)")
	flag.StringVar(&c.ekRoots, "ek-roots", "", "directory of TPM manufacturers' root certificates (PEM): a node's EK certificate must chain to one unless the nodes file pins its ek_sha256 "+
		"(empty: EKs are trusted on first use; docs/SECURITY.md)")
	flag.IntVar(&c.maxRuns, "max-runs", pipeline.DefaultMaxRuns, "runs this instance drives at once; Provision beyond it is refused (ResourceExhausted) so curectl can try another instance")
	flag.StringVar(&c.peerGRPC, "peer-grpc", "", "other instances of this fleet (shared database) as nodes dial them, host:port comma-separated: "+
		"a runner whose coordinator dies reconnects to the next")
	flag.StringVar(&c.db, "db", os.Getenv("CURE_DB"), "database: empty for SQLite in the state dir (one instance), or a PostgreSQL DSN "+
		"(postgres://… or host=… dbname=…) shared by several instances; default $CURE_DB (keeps a password off the command line)")
	flag.Float64Var(&c.powerRate, "power-on-rate", 2, "power-ons per second per PDU or rack (see --power-group-label); 0: not paced")
	flag.IntVar(&c.powerBurst, "power-on-burst", 8, "power-ons a PDU or rack may do back to back before --power-on-rate applies")
	flag.StringVar(&c.powerGroups, "power-group-label", "pdu,rack", "node labels that name a node's power group, first present wins (none: one group)")
	flag.IntVar(&c.bmcInflight, "bmc-max-inflight", 2, "Redfish calls in flight per BMC")
	flag.IntVar(&c.bmcLogins, "bmc-max-logins", 64, "Redfish logins in flight over all BMCs")
	flag.DurationVar(&c.bmcIdle, "bmc-idle", 5*time.Minute, "a BMC session unused this long is logged out")
	flag.StringVar(&c.pprofListen, "pprof-listen", "", "serve Go's /debug/pprof on this address (loopback only, e.g. 127.0.0.1:6060; empty: off)")
	flag.DurationVar(&c.leaseTTL, "lease-ttl", store.DefaultLeaseTTL, "how long a run stays with an instance that stopped renewing its lease before another instance takes it over")
	flag.DurationVar(&c.statsEvery, "stats-every", time.Minute, "log the store's write statistics and the active runs this often")
	flag.StringVar(&c.instance, "instance-id", defaultInstanceID(), "this coordinator instance's name (leases, answers, logs); unique among instances sharing a database")
	flag.Var(&tlsNames, "tls-name", "another DNS name or IP the gRPC server certificate carries, besides --advertise, 127.0.0.1 and localhost: "+
		"a name operators give curectl --server (a DNS name, a VIP), which curectl verifies as given (repeatable)")
	c.netboot.register(flag.CommandLine)
	flag.StringVar(&c.metricsListen, "metrics-listen", "127.0.0.1:9464", "serve /metrics, /healthz and /readyz on this address (empty: off; keep it off the provisioning network)")
	flag.StringVar(&c.webListen, "web-listen", "", "serve the web dashboard (TLS, operator client certificate required) on this address (empty: off)")
	flag.Var(&webhooks, "webhook", "POST a signed JSON notification to this URL when a run ends or needs attention (repeatable; docs/OBSERVABILITY.md)")
	flag.StringVar(&c.webhookSecret, "webhook-secret-file", "", "HMAC key of the webhook signature (default: webhook.secret in the state dir, created on first use)")
	flag.Var(&imports, "import-artifact", "file to add to the content-addressed artifact store (repeatable)")
	flag.StringVar(&c.toolBundle, "tool-bundle", "", "the tool bundle (make toolbundle: out/toolbundle/toolbundle.tar.zst) to serve to suites that run fio, stress-ng or iperf3, and to cure-tools in a node's debug shell (nvme-cli); the image pins the one it was built with")
	var logLevel slog.Level
	flag.TextVar(&logLevel, "log-level", slog.LevelInfo, "`level` of the log: debug, info, warn or error (debug adds every request, DHCP packet and Redfish call)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "provisioner-lite: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if c.claimSettle <= 0 {
		fmt.Fprintf(os.Stderr, "provisioner-lite: --claim-settle %s: want a positive duration above the slowest server's power-on-to-iPXE time "+
			"(a boot that does not attest is given secrets only after it)\n", c.claimSettle)
		os.Exit(2)
	}
	c.imports = imports
	c.tlsNames = tlsNames
	c.procRoot = "/proc"
	c.webhooks = webhooks
	c.eventLimits.HardEvents = c.eventLimits.MaxEvents + store.DefaultEventLimits.HardEvents - store.DefaultEventLimits.MaxEvents
	c.retention.BootTokens = store.DefaultRetention.BootTokens
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel}))
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, c); err != nil {
		log.Error("provisioner-lite", "err", err)
		os.Exit(1)
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  provisioner-lite init --state-dir DIR [--operator NAME] [--advertise ADDR | --pxe-interface IFACE]
        one state dir: CA, server certificate, state key, an admin operator certificate; prints the next commands
  provisioner-lite check [--manifests DIR] [--nodes FILE] [--state-dir DIR] [--image-dir DIR]
        lint the manifests, suites and nodes file as the coordinator will read them (and the SKUs' OS images in the state dir's store, the image's CA)
  provisioner-lite pki --state-dir DIR [--operator NAME --role viewer|operator|admin]
        the CA, and one operator's curectl certificate
  provisioner-lite pki offline --keys DIR --out DIR [--host H[,H...]] [--days 90]
        on the host that keeps the Secure Boot and boot CA keys (docs/KEYS.md): make them if absent, issue the
        HTTPS boot listener's certificate, write the certificates and the listener's key to copy into STATE/pki/
  provisioner-lite artifacts add --state-dir DIR [--sku SKU.yaml] FILE...
        files into the artifact store; with --sku, FILE becomes that SKU's OS image (sha256, size, format)
  provisioner-lite [flags]
        the coordinator (-h lists its flags)
`)
}

// initCmd makes one state dir a site can start from, and says what to run
// next. Running it again reuses everything it finds.
func initCmd(args []string, out io.Writer) int {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "state", "the state dir to create (0700)")
	operator := fs.String("operator", "admin", "name of the admin operator certificate to issue (curectl's)")
	advertise := fs.String("advertise", "", "host or IP nodes reach the coordinator at (default: the address of --pxe-interface, else of the default route's interface)")
	pxeIface := fs.String("pxe-interface", "", "the interface facing the nodes")
	procRoot := "/proc"
	if fs.Parse(args) != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "init: unexpected arguments %q\n", fs.Args())
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := initState(*stateDir, *operator, *advertise, *pxeIface, procRoot, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		return 1
	}
	r.print(out)
	return 0
}

// initResult is what init made or found.
type initResult struct {
	stateDir, advertise, advertiseWhy string
	pxeIface                          string
	caFile, caFingerprint             string
	caCreated, keyCreated             bool
	secureBootOffline                 bool // secureboot.pem without its key: the image is signed on the key host
	op                                pki.OperatorCert
}

func initState(stateDir, operator, advertise, pxeIface, procRoot string, log *slog.Logger) (*initResult, error) {
	r := &initResult{advertise: advertise, advertiseWhy: "--advertise", pxeIface: pxeIface}
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, err
	}
	r.stateDir = abs
	_, statErr := os.Stat(filepath.Join(abs, statedir.KeyFile))
	r.keyCreated = statErr != nil
	_, statErr = os.Stat(filepath.Join(abs, "pki", pki.CACertFile))
	r.caCreated = statErr != nil
	// Opening takes the lock: init refuses while a coordinator runs here.
	sd, err := statedir.Open(abs, log)
	if err != nil {
		return nil, err
	}
	defer sd.Close()
	pkiDir := sd.Join("pki")
	caPEM, err := pki.EnsureCA(pkiDir)
	if err != nil {
		return nil, err
	}
	// Verified network boot: the key that signs the CURE image for Secure
	// Boot and the CA firmware verifies the HTTPS boot listener with (their
	// certificates alone where the keys are kept offline: docs/KEYS.md).
	if _, r.secureBootOffline, err = pki.EnsureSecureBootCert(pkiDir); err != nil {
		return nil, err
	}
	if _, err := pki.EnsureBootCA(pkiDir); err != nil {
		return nil, err
	}
	ca, err := pki.DescribeCA(filepath.Join(pkiDir, pki.CACertFile), caPEM)
	if err != nil {
		return nil, err
	}
	r.caFile, r.caFingerprint = filepath.Join(pkiDir, pki.CACertFile), ca.Fingerprint
	if r.advertise == "" {
		a, why, err := hostaddr.Advertise(procRoot, pxeIface, hostaddr.InterfaceAddrs)
		if err != nil {
			return nil, err
		}
		r.advertise, r.advertiseWhy = a, why
	}
	if _, err := pki.IssueServerCert(pkiDir, serverHosts(r.advertise)); err != nil {
		return nil, err
	}
	if r.op, err = pki.IssueOperatorCert(pkiDir, operator, pki.RoleAdmin); err != nil {
		return nil, err
	}
	return r, nil
}

// serverHosts are the names the server certificate carries: the address
// nodes use, and loopback for curectl on the coordinator host.
func serverHosts(advertise string, extra ...string) []string {
	hosts := []string{"127.0.0.1", "localhost"}
	if advertise != "" && advertise != "127.0.0.1" && advertise != "localhost" {
		hosts = append([]string{advertise}, hosts...)
	}
	for _, h := range extra {
		for _, n := range strings.Split(h, ",") {
			if n = strings.TrimSpace(n); n != "" && !slices.Contains(hosts, n) {
				hosts = append(hosts, n)
			}
		}
	}
	return hosts
}

func (r *initResult) print(w io.Writer) {
	made := func(created bool) string {
		if created {
			return "created"
		}
		return "kept"
	}
	opWhat := "kept"
	if r.op.Issued {
		opWhat = "issued"
	}
	rel := func(p string) string {
		if wd, err := os.Getwd(); err == nil {
			if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
				return r
			}
		}
		return p
	}
	sd := rel(r.stateDir)
	advertiseFlag := "" // the address is the --pxe-interface's unless init was told another
	if r.advertiseWhy == "--advertise" {
		advertiseFlag = " --advertise " + r.advertise
	}
	fmt.Fprintf(w, `state dir %s
  CA           %s (%s, %s)
  state key    %s (%s: it seals BMC passwords and PSIDs; back it up with cure.db)
  server cert  for %s (%s)
  operator     %s, role admin: %s (%s, valid until %s)

Next (README, "Set up a site"):
  1. Build the CURE image with this CA (the coordinator refuses an image that trusts another):
       make image STATE=%s
     (or: go run ./builder/cmd/cure-build --spec initramfs/cure.yaml --state-dir %s --out out/image)
  2. The OS image nodes get: copy a SKU into the site's manifests, import the image into it
     (make hostos builds a test one, out/hostos/disk.raw.zst):
       mkdir -p site-manifests && cp manifests/examples/qemu-nvme.yaml site-manifests/
       provisioner-lite artifacts add --state-dir %s --sku site-manifests/qemu-nvme.yaml IMAGE
  3. Write the nodes file, then check it with the manifests, the image and the artifact store:
       provisioner-lite check --manifests site-manifests --nodes nodes.yaml --state-dir %s --image-dir out/image
  4. Start the coordinator, its proxy DHCP and TFTP on the interface facing the nodes
     (or let the site's DHCP server chain to http://%s:8080/boot.ipxe: docs/NETBOOT.md):
       provisioner-lite --state-dir %s --manifests site-manifests --nodes nodes.yaml --image-dir out/image%s --pxe-interface %s --proxy-dhcp
  5. Drive it with curectl:
       export CURE_CA=%s CURE_CERT=%s CURE_KEY=%s
       curectl nodes
       curectl provision --watch NODE
`, sd, rel(r.caFile), made(r.caCreated), r.caFingerprint, rel(filepath.Join(r.stateDir, statedir.KeyFile)), made(r.keyCreated),
		r.advertise, r.advertiseWhy, r.op.Name, rel(r.op.CertFile), opWhat, r.op.NotAfter.Format(time.DateOnly),
		sd, sd, sd, sd, r.advertise, sd, advertiseFlag, nonEmpty(r.pxeIface, "IFACE"), rel(r.caFile), rel(r.op.CertFile), rel(r.op.KeyFile))
	if r.secureBootOffline {
		fmt.Fprintf(w, "\nThe Secure Boot key is kept offline (%s has no key beside it): step 1 here builds no signed cure.efi;\n"+
			"build and sign the image on the key host with %s copied there (docs/KEYS.md).\n", rel(filepath.Join(r.stateDir, "pki", pki.SecureBootCertFile)), rel(r.caFile))
	}
}

// checkCmd lints the site's configuration as the coordinator reads it at
// start: 0 when clean, 1 with every problem listed, 2 for bad usage.
func checkCmd(args []string, out io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	manifestDir := fs.String("manifests", "manifests/examples", "directory of SKU manifests and suites/, as the coordinator's --manifests")
	nodesFile := fs.String("nodes", "", "node inventory (YAML or CSV), as the coordinator's --nodes")
	stateDir := fs.String("state-dir", "", "the coordinator's state dir: check that the SKUs' OS images are in its artifact store (and, with --image-dir, that the image trusts its CA)")
	imageDir := fs.String("image-dir", "", "with --state-dir: the cure-build output to check")
	if fs.Parse(args) != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "check: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *imageDir != "" && *stateDir == "" {
		fmt.Fprintln(os.Stderr, "check: --image-dir needs --state-dir (the image's CA is checked against the state dir's)")
		return 2
	}
	res := sitecheck.Site(*manifestDir, *nodesFile)
	fmt.Fprintf(out, "manifests %s: %d SKU(s) %v, %d suite(s) %v\n", *manifestDir, len(res.SKUs), res.SKUs, len(res.Suites), res.Suites)
	if *nodesFile != "" && res.Nodes != nil {
		fmt.Fprintf(out, "nodes %s: %d node(s)\n", *nodesFile, len(res.Nodes))
	} else if *nodesFile != "" {
		fmt.Fprintf(out, "nodes %s: not read (see below)\n", *nodesFile)
	}
	if *stateDir != "" {
		res.Images(*stateDir)
	}
	if *imageDir != "" {
		caPEM, err := os.ReadFile(filepath.Join(*stateDir, "pki", pki.CACertFile))
		if err != nil {
			res.Problems = append(res.Problems, fmt.Sprintf("%s: the state dir has no CA (%v): run `provisioner-lite init --state-dir %s`", *stateDir, err, *stateDir))
		} else if ca, err := pki.CheckImageCA(*imageDir, caPEM, *stateDir); err != nil {
			res.Problems = append(res.Problems, err.Error())
		} else {
			fmt.Fprintf(out, "image %s: trusts %s's CA (%s)\n", *imageDir, *stateDir, ca.Fingerprint)
		}
	}
	if res.OK() {
		fmt.Fprintln(out, "check: no problems")
		return 0
	}
	for _, p := range res.Problems {
		fmt.Fprintln(out, p)
	}
	fmt.Fprintf(out, "check: %d problem(s)\n", len(res.Problems))
	return 1
}

// pkiCmd creates the CA and, with --operator, issues (or reuses) that
// operator's client certificate for curectl.
func pkiCmd(args []string) int {
	if len(args) > 0 && args[0] == "offline" {
		return pkiOfflineCmd(args[1:])
	}
	fs := flag.NewFlagSet("pki", flag.ExitOnError)
	stateDir := fs.String("state-dir", "state", "state directory")
	operator := fs.String("operator", "", "also issue (or reuse) the curectl client certificate of this operator (CN; e.g. a login name)")
	roleName := fs.String("role", string(pki.RoleViewer), "the operator's role: viewer (read), operator (provision, audit, verify, diagnostic, burn-in) or admin (also wipe)")
	fs.Parse(args)
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "pki: unexpected arguments %q\n", fs.Args())
		return 2
	}
	role, err := pki.ParseRole(*roleName)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := os.MkdirAll(*stateDir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "pki:", err)
		return 1
	}
	pkiDir := filepath.Join(*stateDir, "pki")
	ca, err := pki.EnsureCA(pkiDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pki:", err)
		return 1
	}
	fmt.Printf("%s (%d bytes)\n", filepath.Join(pkiDir, pki.CACertFile), len(ca))
	sbCert, sbOffline, err := pki.EnsureSecureBootCert(pkiDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pki:", err)
		return 1
	}
	where := ""
	if sbOffline {
		where = "; its key is kept offline"
	}
	fmt.Printf("%s (Secure Boot signing certificate: enrol it in the nodes' db%s)\n", sbCert, where)
	if _, err := pki.EnsureBootCA(pkiDir); err != nil {
		fmt.Fprintln(os.Stderr, "pki:", err)
		return 1
	}
	fmt.Printf("%s, %s (HTTPS boot CA: enrol it in the nodes' firmware)\n", filepath.Join(pkiDir, pki.BootCACertFile), filepath.Join(pkiDir, pki.BootCAESLFile))
	if *operator == "" {
		return 0
	}
	oc, err := pki.IssueOperatorCert(pkiDir, *operator, role)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pki:", err)
		return 1
	}
	what := "reused"
	if oc.Issued {
		what = "issued"
	}
	fmt.Printf("operator %s (%s): certificate %s, key %s (%s, valid until %s)\n", oc.Name, oc.Role, oc.CertFile, oc.KeyFile, what, oc.NotAfter.Format(time.DateOnly))
	fmt.Printf("use: curectl --ca %s --cert %s --key %s ...\n", filepath.Join(pkiDir, pki.CACertFile), oc.CertFile, oc.KeyFile)
	return 0
}

func run(ctx context.Context, log *slog.Logger, c config) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()

	// The same lint as `provisioner-lite check`, before anything is created:
	// a site's mistake is reported whole, with file:line, instead of as a
	// run that fails three times on a manifest it cannot read.
	site := sitecheck.Site(c.manifestDir, c.nodesFile)
	if err := site.Err(); err != nil {
		return fmt.Errorf("refusing to start: %w\n(`provisioner-lite check --manifests %s --nodes %s` lists the same)", err, c.manifestDir, c.nodesFile)
	}
	// The listeners' caps fit the descriptors this process may open, or
	// it refuses to start, saying what does not fit.
	fdLimit, err := nofileLimit()
	if err != nil {
		return err
	}
	plan, err := planListeners(c, fdLimit)
	if err != nil {
		return err
	}
	plan.log(log)
	if c.advertise == "" {
		a, why, err := hostaddr.Advertise(nonEmpty(c.procRoot, "/proc"), c.pxeInterface, hostaddr.InterfaceAddrs)
		if err != nil {
			return err
		}
		log.Info("advertising the address nodes reach this coordinator at", "advertise", a, "chosen_as", why)
		c.advertise = a
	}

	sd, err := statedir.Open(c.stateDir, log)
	if err != nil {
		return err
	}
	defer sd.Close()
	pkiDir := sd.Join("pki")
	caPEM, err := pki.EnsureCA(pkiDir)
	if err != nil {
		return err
	}
	// An image that trusts another CA boots runners that never register:
	// refuse now, saying which state dir to build it from.
	if ca, err := pki.CheckImageCA(c.imageDir, caPEM, c.stateDir); errors.Is(err, pki.ErrNoImageReport) {
		log.Warn("the image's CA cannot be checked: if its runners do not register, rebuild it with cure-build --state-dir", "image_dir", c.imageDir, "err", err)
	} else if err != nil {
		return fmt.Errorf("refusing to start: %w", err)
	} else {
		log.Info("the image trusts this coordinator's CA", "image_dir", c.imageDir, "ca", ca.Fingerprint)
	}
	dsn := c.db
	if dsn == "" {
		dsn = sd.Join(statedir.DBFile)
	} else if !store.IsPostgresDSN(dsn) {
		return fmt.Errorf("--db %s: not a PostgreSQL DSN (postgres://… or host=… dbname=…); leave it empty for SQLite in the state dir", store.Redacted(dsn))
	}
	// Instances sharing a database must share the state key too (copy
	// state.key and pki/ca*.pem to each instance's state dir): the secrets
	// in the database are sealed with it.
	st, err := store.OpenDSN(dsn, store.WithStateKey(sd.Key), store.WithInstance(c.instance), store.WithLeaseTTL(c.leaseTTL))
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	obs := newObservability(st)
	notifier, err := newNotifier(c.webhooks, nonEmpty(c.webhookSecret, sd.Join("webhook.secret")), obs.m, log)
	if err != nil {
		return err
	}
	defer func() {
		// Queued webhooks get a few seconds; the rest are abandoned (logged).
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		notifier.Close(cctx)
	}()

	if c.nodesFile != "" {
		for _, n := range site.Nodes {
			if n.BMCInsecure {
				log.Warn("BMC TLS verification is off for this node, as its inventory says: a peer on the BMC network can read its password",
					"node", n.ID, "bmc", n.BMCURL)
			}
		}
		// One transaction: the file is imported whole or not at all.
		added, updated, err := st.PutNodes(ctx, site.Nodes, true)
		if err != nil {
			return fmt.Errorf("import %s: %w", c.nodesFile, err)
		}
		log.Info("node inventory imported", "file", c.nodesFile, "nodes", len(site.Nodes), "added", len(added), "updated", len(updated))
		warnUnlistedNICs(ctx, st, site.Nodes, log)
	}
	artifactDir := sd.Join("artifacts")
	for _, f := range c.imports {
		sum, size, err := bootserver.ImportArtifact(artifactDir, f)
		if err != nil {
			return fmt.Errorf("import artifact %s: %w", f, err)
		}
		log.Info("artifact imported", "file", f, "sha256", sum, "size", size)
	}
	var toolBundle *pipeline.ToolBundle
	if c.toolBundle != "" {
		if toolBundle, err = importToolBundle(artifactDir, c.toolBundle); err != nil {
			return err
		}
		log.Info("tool bundle served", "file", c.toolBundle, "sha256", toolBundle.SHA256, "size", toolBundle.Size, "tools", toolBundle.Tools)
	}
	if msg := imageToolBundleProblem(c.imageDir, toolBundle); msg != "" {
		log.Warn(msg, "image_dir", c.imageDir)
	}
	// A SKU whose image is missing is not a reason to refuse: the image
	// may be added while the coordinator runs (artifacts add).
	site.Images(c.stateDir)
	for _, p := range site.Problems {
		log.Warn("the site is not ready to provision", "problem", p)
	}

	// Listeners first: the URLs nodes are given name the ports actually
	// bound (":0" and inherited sockets work).
	hl, err := openListener(c.httpListen)
	if err != nil {
		return fmt.Errorf("--http-listen: %w", err)
	}
	gl, err := openListener(c.grpcListen)
	if err != nil {
		hl.Close()
		return fmt.Errorf("--grpc-listen: %w", err)
	}
	serving := false
	defer func() {
		if !serving {
			hl.Close()
			gl.Close()
		}
	}()
	httpPort, grpcPort := listenerPort(hl), listenerPort(gl)
	baseURL := "http://" + net.JoinHostPort(c.advertise, httpPort)
	var htl net.Listener
	httpsURL := ""
	if c.httpsListen != "" {
		if htl, err = openListener(c.httpsListen); err != nil {
			return fmt.Errorf("--https-listen: %w", err)
		}
		defer func() {
			if !serving {
				htl.Close()
			}
		}()
		httpsURL = "https://" + net.JoinHostPort(c.advertise, listenerPort(htl))
	}

	tlsCfg, err := pki.ServerTLSConfig(pkiDir, serverHosts(c.advertise, c.tlsNames...))
	if err != nil {
		return err
	}
	var httpsCfg *tls.Config
	if htl != nil {
		if httpsCfg, err = httpsBootTLS(pkiDir, c, log); err != nil {
			return fmt.Errorf("refusing to start: --https-listen: %w", err)
		}
	}

	c.netboot.pxeInterface = c.pxeInterface
	nb, err := c.netboot.prepare(log)
	if err != nil {
		return err
	}
	ekRoots, err := loadEKRoots(c.ekRoots, log)
	if err != nil {
		return err
	}
	if err := attestationConfig(site.SKUs, catalogRequires(c.manifestDir), c.imageDir, ekRoots, log); err != nil {
		return err
	}
	bmcs, err := newBMCConnector(c.bmcCA, c.timeouts.BMCCall, log)
	if err != nil {
		return err
	}
	bmcs.bootMode, bmcs.httpBootURI = nb.mode, nb.httpBootURI(baseURL)
	if httpsURL != "" && nb.target == redfish.BootUefiHttp {
		// Verified network boot: the firmware loads the signed image over
		// HTTPS instead of iPXE over HTTP.
		if _, err := os.Stat(filepath.Join(c.imageDir, bootserver.UKI)); err != nil {
			log.Warn("UEFI HTTP boot points at the signed image, which is not built yet: build it with cure-build --state-dir (Secure Boot key in pki/)", "err", err)
		}
		bmcs.httpBootURI = httpsURL + "/image/" + bootserver.UKI
	}
	var groupKeys []string
	for _, k := range strings.Split(c.powerGroups, ",") {
		if k = strings.TrimSpace(k); k != "" {
			groupKeys = append(groupKeys, k)
		}
	}
	bmcPool := newBMCPool(bmcs, c.bmcIdle, c.bmcInflight, c.bmcLogins, &pacing.Pacer{Rate: c.powerRate, Burst: c.powerBurst}, groupKeys, log)
	bmcPool.onRetry = obs.m.RedfishHTTPRetry
	go bmcPool.run(ctx)
	rec := audit.New(st, log, 0)
	// What the audit budgets held back is summed periodically, and once
	// more before the store closes.
	go rec.Run(ctx)
	defer rec.Flush(context.Background())
	hub := sessions.NewHub()
	catalog := &pipeline.Catalog{Dir: c.manifestDir}
	// The pool hears every run's end and starts revalidation runs: it and
	// the engine refer to each other, the engine's hook is set first.
	var nodePool *pool.Pool
	eng := pipeline.New(ctx, pipeline.Config{
		Store: st, Hub: hub, Log: log, Audit: rec,
		ConnectBMC:      bmcPool.connect,
		Manifests:       catalog,
		ArtifactDir:     artifactDir,
		BaseURL:         baseURL,
		BMCBaseURL:      c.bmcBaseURL,
		RunnerAddr:      joinAddrs(nonEmpty(c.grpcAdv, net.JoinHostPort(c.advertise, grpcPort)), c.peerGRPC),
		Timeouts:        c.timeouts,
		Budgets:         c.budgets,
		TokensPerWindow: c.tokensPerWindow,
		ClaimSettle:     c.claimSettle,
		BootIPUnbound:   !c.bindBootIP,
		MaxRuns:         c.maxRuns,
		NetBoot:         nb.target,
		Metrics:         obs.m,
		Notify:          runNotice(notifier, func(rn pipeline.RunNotice) { nodePool.RunEnded(ctx, rn.Run) }),
		// A judgement that failed, or a day-0 run whose band filled
		// without a later judgement of its SKU, is judged again within a
		// minute (the pool then releases or quarantines the node).
		FleetSweep: time.Minute,
		OnFleetRejudged: func(ctx context.Context, nodeID, runID string, marginal bool, reason string) {
			nodePool.FleetRejudged(ctx, nodeID, runID, marginal, reason)
		},
		ToolBundle: toolBundle,
	})
	nodePool = pool.New(pool.Config{Store: st, Starter: eng, Announce: poolNotice(notifier), CheckSuite: suiteCheck(catalog), Policies: catalog, Metrics: obs.m, Log: log})

	bs, err := bootserver.New(bootserver.Config{ImageDir: c.imageDir, ArtifactDir: artifactDir, BaseURL: baseURL, Logger: log,
		Limits: bootserver.Limits{MaxConns: plan.http.Conns, MaxConnsPerSource: plan.http.PerSource}, IPXEBuilds: nb.builds(), Served: obs.m.ArtifactServed}, eng)
	if err != nil {
		return err
	}
	httpSrv := bs.HTTPServer()

	// Runners and operators share the listener: TLS verifies a client
	// certificate when one is sent, and OperatorAuth lets only the runner
	// session through without an operator certificate.
	opts := append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, server.ServerOptions(server.Limits{})...)
	opts = append(opts, server.OperatorAuth(rec, log)...)
	gs := grpc.NewServer(opts...)
	curev1.RegisterRunnerServiceServer(gs, &server.RunnerService{Store: st, Hub: hub, Log: log, Audit: rec, Guard: eng, Instance: c.instance,
		BindPeer: c.bindBootIP, Limits: c.eventLimits, Metrics: obs.m, Attestation: &pipeline.AttestPolicy{Catalog: catalog, ImageDir: c.imageDir, Log: log},
		EKRoots: ekRoots, OnMeasurementDrift: quarantineOnDrift(nodePool, log)})
	curev1.RegisterOperatorServiceServer(gs, &server.OperatorService{Store: st, Starter: eng, Auditor: eng, Canceler: eng, Pool: nodePool, Instance: c.instance,
		KnownSKU: sitecheck.KnownSKU(c.manifestDir), BMCCADir: sd.Join("bmc-ca"), Log: log, OnMeasurementsAccepted: reconsiderOnAccept(nodePool, log)})

	errc := make(chan error, 4)
	nb.onUnknownMAC = func(ctx context.Context, mac, source string) { eng.UnknownMAC(ctx, mac, "proxy DHCP", source) }
	stopNetboot, err := nb.start(ctx, log, bs.ScriptURL(), baseURL, st, errc)
	if err != nil {
		return err
	}
	defer stopNetboot()
	serving = true
	bootLn, grpcLn := bs.Listener(hl), limited(gl, "grpc", plan.grpc, log)
	var httpsLn *peerlimit.Listener
	go func() { errc <- httpSrv.Serve(bootLn) }()
	go func() { errc <- gs.Serve(grpcLn) }()
	if htl != nil {
		httpsSrv := bs.HTTPServer()
		httpsLn = httpsBootListener(htl, plan, log)
		go func() { errc <- httpsSrv.Serve(tls.NewListener(httpsLn, httpsCfg)) }()
		defer httpsSrv.Close()
		log.Info("HTTPS boot listener", "addr", htl.Addr().String(), "url", httpsURL, "http_boot_uri", bmcs.httpBootURI)
	}
	obs.h.Listener("http", true)
	obs.h.Listener("grpc", true)
	metricsLn, err := obs.serve(ctx, c.metricsListen, plan.metrics, log)
	if err != nil {
		return err
	}
	obs.admission = poolAdmission(nodePool)
	webLn, err := obs.serveDashboard(ctx, c.webListen, tlsCfg, st, plan.web, c.conns, log)
	if err != nil {
		return err
	}
	c.retention.Fleet = fleetRetention(c.retention.Fleet, c.manifestDir, site.Suites, log)
	go flushRefusals(ctx, 10*time.Second, bootLn, httpsLn, grpcLn, metricsLn, webLn)
	go st.Maintain(ctx, 10*time.Minute, c.retention, log)
	n, err := eng.Resume(ctx)
	if err != nil && ctx.Err() == nil {
		return err
	}
	if c.pprofListen != "" {
		if err := servePprof(ctx, c.pprofListen, log); err != nil {
			return err
		}
	}
	go eng.RunLeases(ctx)
	go nodePool.Run(ctx, time.Minute)
	go func() {
		if c.statsEvery <= 0 {
			return // --stats-every 0: no periodic statistics
		}
		t := time.NewTicker(c.statsEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				logStats(log, st, eng)
			}
		}
	}()
	log.Info("provisioner-lite ready", "instance", c.instance, "db", st.Path(), "http", hl.Addr().String(), "grpc", gl.Addr().String(), "advertise", c.advertise, "resumed_runs", n, "state", sd.Path)

	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("server", "err", err)
		}
	}
	obs.h.ShuttingDown()
	log.Info("shutting down; active runs resume at next start")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = httpSrv.Shutdown(sctx)
	gs.Stop()
	stop()
	eng.Wait()
	// Hand the interrupted runs' leases back: a peer instance (or this one,
	// restarted) takes them over at once instead of after the lease TTL.
	eng.ReleaseAll(sctx)
	logStats(log, st, eng)
	return nil
}

// defaultInstanceID is the host name: stable across restarts, so a restarted
// instance takes its own runs back at once instead of waiting for their leases.
func defaultInstanceID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "cure-1"
	}
	return h
}

// logStats logs the store's cumulative write counters (the fleet simulator
// reads commits= from the last line of each process).
func logStats(log *slog.Logger, st *store.Store, eng *pipeline.Engine) {
	s := st.Stats()
	var avg time.Duration
	if s.Commits > 0 {
		avg = s.CommitTime / time.Duration(s.Commits)
	}
	log.Info("store stats", "commits", s.Commits, "ops", s.Ops, "batched_ops", s.BatchedOps, "max_batch", s.MaxBatch,
		"failed_commits", s.FailedCommits, "commit_avg", avg, "active_runs", eng.Active())
}

// joinAddrs is the cure.coordinator list: this instance first, then its peers.
func joinAddrs(own, peers string) string {
	out := []string{own}
	for _, p := range strings.Split(peers, ",") {
		if p = strings.TrimSpace(p); p != "" && p != own {
			out = append(out, p)
		}
	}
	return strings.Join(out, ",")
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// loadEKRoots reads --ek-roots; without it EKs are trusted on first use,
// which the log says once at start.
func loadEKRoots(dir string, log *slog.Logger) (*attestation.EKRoots, error) {
	if dir == "" {
		log.Warn("no --ek-roots: a node's endorsement key is trusted on first use unless the nodes file pins its ek_sha256, except on a SKU that requires attestation, where only a pinned EK enrols (docs/SECURITY.md)")
		return nil, nil
	}
	r, err := attestation.LoadEKRoots(dir)
	if err != nil {
		return nil, fmt.Errorf("--ek-roots: %w", err)
	}
	log.Info("EK certificates must chain to the EK roots", "dir", dir, "roots", r.Count)
	return r, nil
}

// quarantineOnDrift keeps a node whose firmware measurements drifted out
// of service in the pool (the hold itself is in the store already).
func quarantineOnDrift(p *pool.Pool, log *slog.Logger) func(ctx context.Context, nodeID, runID, detail string) {
	return func(ctx context.Context, nodeID, runID, detail string) {
		if err := p.Quarantine(ctx, nodeID, runID, "firmware measurement drift: "+detail); err != nil {
			log.Error("node not quarantined after a measurement drift (its hold still keeps its boots out)", "node", nodeID, "run", runID, "err", err)
		}
	}
}

// reconsiderOnAccept lets the pool judge a node's admission again once
// an admin accepted its drifted measurements.
func reconsiderOnAccept(p *pool.Pool, log *slog.Logger) func(ctx context.Context, nodeID, actor, reason string) {
	return func(ctx context.Context, nodeID, actor, reason string) {
		if err := p.Reconsider(ctx, nodeID, actor, "firmware measurements accepted: "+reason); err != nil {
			log.Error("node's admission not reconsidered after its measurements were accepted", "node", nodeID, "err", err)
		}
	}
}
