// Command provisioner-lite is the thin coordinator: it drives BMCs over
// Redfish, serves the boot chain and artifacts over HTTP, and talks gRPC with
// the runners in CURE. Every run lives in its SQLite store, so a restart
// resumes where the runs were. The coordinator itself is the package
// provisioner-lite/coordinator; this command parses its flags, handles the
// signals that stop it, and runs the site set-up subcommands.
//
//	provisioner-lite init --state-dir DIR     one state dir: CA, server certificate, state key, admin operator certificate
//	provisioner-lite check [--manifests DIR] [--nodes FILE] [--state-dir DIR [--image-dir DIR]]
//	provisioner-lite pki --state-dir DIR [--operator NAME --role ROLE]
//	provisioner-lite pki offline --keys DIR --out DIR [--host H,...] [--days N]   on the key host (docs/KEYS.md)
//	provisioner-lite artifacts add --state-dir DIR [--sku SKU.yaml] FILE...
//	provisioner-lite [flags]                  the coordinator (lints the same as check first, and refuses on problems)
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/coordinator"
	"github.com/cure-oss/cure/provisioner-lite/hostaddr"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/sitecheck"
	"github.com/cure-oss/cure/provisioner-lite/statedir"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

func main() {
	// Everything this process creates (state, keys, logs it writes) is
	// private to the coordinator's user, whatever the caller's umask.
	syscall.Umask(0o077)
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") {
		os.Exit(subcommand(os.Args[1], os.Args[2:]))
	}
	c, logLevel := parseFlags()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel}))
	slog.SetDefault(log)
	c.Log = log
	co, err := coordinator.New(c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "provisioner-lite: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := co.Serve(ctx); err != nil {
		log.Error("provisioner-lite", "err", err)
		os.Exit(1)
	}
}

// subcommands are the commands registered by their own files' init
// (backup, restore, manifests, ...): name → run(args, stdout) exit code.
var subcommands = map[string]func(args []string, out io.Writer) int{}

// subcommand runs `provisioner-lite name args...` and is its exit code.
func subcommand(name string, args []string) int {
	switch name {
	case "init":
		return initCmd(args, os.Stdout)
	case "check":
		return checkCmd(args, os.Stdout)
	case "pki":
		return pkiCmd(args)
	case "artifacts":
		return artifactsCmd(args, os.Stdout)
	default:
		if run, ok := subcommands[name]; ok {
			return run(args, os.Stdout)
		}
		// Never a coordinator start: a typo must not create a state dir and a CA.
		fmt.Fprintf(os.Stderr, "provisioner-lite: unknown command %q\n", name)
		usage(os.Stderr)
		return 2
	}
}

// parseFlags is the coordinator's command line as a coordinator.Config
// (exit 2 on a usage error), and the log level.
func parseFlags() (coordinator.Config, slog.Level) {
	c := coordinator.DefaultConfig()
	var imports, tlsNames, webhooks multiFlag
	flag.Usage = func() {
		usage(flag.CommandLine.Output())
		fmt.Fprintln(flag.CommandLine.Output(), "\ncoordinator flags, by topic:")
		printGroupedFlags(flag.CommandLine.Output(), flag.CommandLine)
	}
	registerFlags(flag.CommandLine, &c, &imports, &tlsNames, &webhooks)
	var logLevel slog.Level
	flag.TextVar(&logLevel, "log-level", slog.LevelInfo, "`level` of the log: debug, info, warn or error (debug adds every request, DHCP packet and Redfish call)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "provisioner-lite: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	c.ImportArtifacts = imports
	c.TLSNames = tlsNames
	c.Webhooks = webhooks
	c.EventLimits.HardEvents = c.EventLimits.MaxEvents + store.DefaultEventLimits.HardEvents - store.DefaultEventLimits.MaxEvents
	c.Retention.BootTokens = store.DefaultRetention.BootTokens
	return c, logLevel
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
	if _, err := pki.IssueServerCert(pkiDir, coordinator.ServerHosts(r.advertise)); err != nil {
		return nil, err
	}
	if r.op, err = pki.IssueOperatorCert(pkiDir, operator, pki.RoleAdmin); err != nil {
		return nil, err
	}
	return r, nil
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
		sd, sd, sd, sd, r.advertise, sd, advertiseFlag, cmp.Or(r.pxeIface, "IFACE"), rel(r.caFile), rel(r.op.CertFile), rel(r.op.KeyFile))
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
