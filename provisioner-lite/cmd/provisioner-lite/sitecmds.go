package main

import (
	"cmp"
	"context"
	"encoding/json"
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
	"github.com/cure-oss/cure/provisioner-lite/statedir"
	"github.com/cure-oss/cure/tools/version"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"gopkg.in/yaml.v3"
)

// serve is the coordinator: the flags, CURE_* variables and config file
// resolved into a coordinator.Config, New, and Serve until a signal.
func (a *app) serve(cmd *cobra.Command, o *coordOpts) error {
	if _, err := o.resolve(cmd.Flags(), os.LookupEnv); err != nil {
		return a.fail(2, "provisioner-lite", err)
	}
	log, err := newLogger(a.errOut, o.logFormat, o.logLevel)
	if err != nil {
		return a.fail(2, "provisioner-lite", err)
	}
	slog.SetDefault(log)
	c := o.config()
	c.Log = log
	c.TuneMemory = true // the process is the coordinator's: its GC follows the fleet (docs/OPERATIONS.md, Memory)
	co, err := coordinator.New(c)
	if err != nil {
		return a.fail(2, "provisioner-lite", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := co.Serve(ctx); err != nil {
		log.Error("provisioner-lite", "err", err)
		a.rc = 1
		return errDone
	}
	return nil
}

// newLogger is the log of --log-format at level, to w.
func newLogger(w io.Writer, format string, level slog.Leveler) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// logFormatFlag gives a subcommand --log-format (the coordinator's is
// among its own flags).
func logFormatFlag(cmd *cobra.Command, format *string) {
	cmd.Flags().StringVar(format, "log-format", "text", "format of the log on stderr: text (key=value) or json (one object a line)")
}

// outputFlag gives cmd -o/--output with the formats it prints.
func outputFlag(cmd *cobra.Command, format *string, def, help string) {
	cmd.Flags().StringVarP(format, "output", "o", def, help)
	cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
}

// checkOutput refuses an -o value cmd does not print (a usage error).
func checkOutput(format string, allowed ...string) error {
	for _, f := range allowed {
		if f == format {
			return nil
		}
	}
	return fmt.Errorf("-o %q: want %s", format, strings.Join(allowed, ", "))
}

// emit writes v as JSON or YAML.
func emit(w io.Writer, format string, v any) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return err
	}
	return enc.Close()
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version (as --version does)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(a.out, version.String("provisioner-lite"))
			return nil
		},
	}
}

// manCmd writes the man pages, as curectl's man does.
func (a *app) manCmd(root *cobra.Command) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "man --dir DIR",
		Short: "Write man pages (section 1) for provisioner-lite and every command",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return a.fail(1, "man", fmt.Errorf("--dir %s: %w", dir, err))
			}
			root.DisableAutoGenTag = true
			hdr := &doc.GenManHeader{Title: "PROVISIONER-LITE", Section: "1", Source: "CURE " + version.Get().Version}
			if err := doc.GenManTree(root, hdr, dir); err != nil {
				return a.fail(1, "man", fmt.Errorf("--dir %s: %w", dir, err))
			}
			fmt.Fprintf(a.out, "man pages written to %s\n", dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "man", "directory to write provisioner-lite.1 and provisioner-lite-COMMAND.1 into")
	cmd.MarkFlagDirname("dir")
	return cmd
}

// initCmd makes one state dir a site can start from, and says what to run
// next. Running it again reuses everything it finds.
func (a *app) initCmd() *cobra.Command {
	var stateDir, operator, advertise, pxeIface, format, logFormat string
	cmd := &cobra.Command{
		Use:   "init --state-dir DIR [--operator NAME] [--advertise ADDR | --pxe-interface IFACE]",
		Short: "Make one state dir: CA, server certificate, state key, an admin operator certificate",
		Long: `Make one state dir a site can start from (0700): the CA, the server certificate
for --advertise, the state key, the Secure Boot and boot CA certificates, and an
admin operator certificate for curectl; then print the next commands.
Running it again reuses everything it finds. It refuses while a coordinator
runs on the state dir.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(format, "text", "json", "yaml"); err != nil {
				return err
			}
			log, err := newLogger(a.errOut, logFormat, slog.LevelWarn)
			if err != nil {
				return err
			}
			r, err := initState(stateDir, operator, advertise, pxeIface, "/proc", log)
			if err != nil {
				return a.fail(1, "init", err)
			}
			if format != "text" {
				return emit(a.out, format, r.view())
			}
			r.print(a.out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&stateDir, "state-dir", "state", "the state dir to create (0700)")
	f.StringVar(&operator, "operator", "admin", "name of the admin operator certificate to issue (curectl's)")
	f.StringVar(&advertise, "advertise", "", "host or IP nodes reach the coordinator at (default: the address of --pxe-interface, else of the default route's interface)")
	f.StringVar(&pxeIface, "pxe-interface", "", "the interface facing the nodes")
	cmd.MarkFlagDirname("state-dir")
	outputFlag(cmd, &format, "text", "text (the next commands), json or yaml (what was made or kept)")
	logFormatFlag(cmd, &logFormat)
	return cmd
}

// initView is init's -o json|yaml.
type initView struct {
	StateDir          string    `json:"state_dir" yaml:"state_dir"`
	Advertise         string    `json:"advertise" yaml:"advertise"`
	AdvertiseFrom     string    `json:"advertise_from" yaml:"advertise_from"`
	PXEInterface      string    `json:"pxe_interface,omitempty" yaml:"pxe_interface,omitempty"`
	CAFile            string    `json:"ca_file" yaml:"ca_file"`
	CAFingerprint     string    `json:"ca_fingerprint" yaml:"ca_fingerprint"`
	CACreated         bool      `json:"ca_created" yaml:"ca_created"`
	StateKeyCreated   bool      `json:"state_key_created" yaml:"state_key_created"`
	SecureBootOffline bool      `json:"secure_boot_key_offline" yaml:"secure_boot_key_offline"`
	Operator          string    `json:"operator" yaml:"operator"`
	OperatorCert      string    `json:"operator_cert" yaml:"operator_cert"`
	OperatorKey       string    `json:"operator_key" yaml:"operator_key"`
	OperatorIssued    bool      `json:"operator_issued" yaml:"operator_issued"`
	OperatorNotAfter  time.Time `json:"operator_not_after" yaml:"operator_not_after"`
}

func (r *initResult) view() initView {
	return initView{StateDir: r.stateDir, Advertise: r.advertise, AdvertiseFrom: r.advertiseWhy, PXEInterface: r.pxeIface,
		CAFile: r.caFile, CAFingerprint: r.caFingerprint, CACreated: r.caCreated, StateKeyCreated: r.keyCreated,
		SecureBootOffline: r.secureBootOffline, Operator: r.op.Name, OperatorCert: r.op.CertFile, OperatorKey: r.op.KeyFile,
		OperatorIssued: r.op.Issued, OperatorNotAfter: r.op.NotAfter.UTC()}
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

Next (docs/SITE.md):
  1. Build the CURE image with this CA (the coordinator refuses an image that trusts another):
       make image STATE=%s
     (or: go run ./builder/cmd/cure-build --spec initramfs/cure.yaml --state-dir %s --out out/image)
  2. The OS image nodes get: copy your servers' SKU into the site's manifests (hgx-b200.yaml is a
     real server's; qemu-nvme.yaml is the QEMU test node's), then import your OS disk image into it
     (raw, .gz, .zst, .xz or qcow2; make hostos builds the QEMU node's test one, out/hostos/disk.raw.zst):
       mkdir -p site-manifests && cp manifests/examples/hgx-b200.yaml site-manifests/
       provisioner-lite artifacts add --state-dir %s --sku site-manifests/hgx-b200.yaml IMAGE
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
