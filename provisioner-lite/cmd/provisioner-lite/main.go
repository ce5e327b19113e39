// Command provisioner-lite is the thin coordinator: it drives BMCs over
// Redfish, serves the boot chain and artifacts over HTTP, and talks gRPC with
// the runners in CURE. Every run lives in its SQLite store, so a restart
// resumes where the runs were. The coordinator itself is the package
// provisioner-lite/coordinator; this command parses its flags (and its
// config file and CURE_* environment), handles the signals that stop it,
// and runs the site set-up subcommands.
//
//	provisioner-lite init --state-dir DIR     one state dir: CA, server certificate, state key, admin operator certificate
//	provisioner-lite check [--manifests DIR] [--nodes FILE] [--state-dir DIR [--image-dir DIR]] [-o json|yaml]
//	provisioner-lite pki --state-dir DIR [--operator NAME --role ROLE]
//	provisioner-lite pki offline --keys DIR --out DIR [--host H,...] [--days N]   on the key host (docs/KEYS.md)
//	provisioner-lite artifacts add --state-dir DIR [--sku SKU.yaml] FILE...
//	provisioner-lite config show [--config FILE] [flags] [-o yaml|json]
//	provisioner-lite completion bash|zsh|fish; provisioner-lite man --dir DIR; provisioner-lite --version
//	provisioner-lite [flags]                  the coordinator (lints the same as check first, and refuses on problems)
//
// Flags are Go-style or GNU-style alike: -state-dir and --state-dir are
// the same flag (the scripts and docs of the flag package days keep working).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/cure-oss/cure/tools/version"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func main() {
	// Everything this process creates (state, keys, logs it writes) is
	// private to the coordinator's user, whatever the caller's umask.
	syscall.Umask(0o077)
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// subcommands are the commands registered by their own files' init
// (backup, restore, manifests, ...): name → run(args, stdout) exit code.
// Each parses its own flags; cobra passes its arguments as given.
var subcommands = map[string]func(args []string, out io.Writer) int{}

// app is one command line: where its output goes and the exit code the
// command chose.
type app struct {
	out, errOut io.Writer
	rc          int
}

// errDone means the command has printed its own error and set app.rc.
var errDone = errors.New("done")

// fail prints err as what's failure and sets the exit code.
func (a *app) fail(rc int, what string, err error) error {
	fmt.Fprintf(a.errOut, "%s: %v\n", what, err)
	a.rc = rc
	return errDone
}

// execute is `provisioner-lite args...`, its exit code: 0 success, 1 failure,
// 2 usage error (never a coordinator start: a typo must not create a state
// dir and a CA).
func execute(args []string, out, errOut io.Writer) int {
	a := &app{out: out, errOut: errOut}
	root := a.rootCmd()
	root.SetArgs(normalizeArgs(root, args))
	cmd, err := root.ExecuteC()
	if err == nil || errors.Is(err, errDone) {
		return a.rc
	}
	// Flag, argument and unknown-command errors: usage errors.
	fmt.Fprintf(errOut, "provisioner-lite: %v\n", err)
	if cmd == nil || cmd == root {
		usage(errOut)
	} else {
		fmt.Fprintf(errOut, "usage: %s\n(`%s --help` lists its flags)\n", cmd.UseLine(), cmd.CommandPath())
	}
	return 2
}

// exitCodes is the exit code paragraph of a command's help.
const exitCodes = `Exit codes:
  0  success
  1  failure (the error is printed)
  2  usage error: an unknown command or flag, a bad flag value or argument`

func (a *app) rootCmd() *cobra.Command {
	o := newCoordOpts()
	root := &cobra.Command{
		Use:   "provisioner-lite [flags]",
		Short: "The CURE coordinator: BMCs over Redfish, the boot chain and artifacts over HTTP, runners over gRPC",
		Long: `provisioner-lite with no command is the coordinator. It lints its manifests and
nodes file as check does, and refuses to start on a problem.

Every flag can also be set in the config file (--config, keys the flag names,
repeatable flags as lists) and by the environment variable CURE_<FLAG> (upper
case, - as _, e.g. CURE_STATE_DIR; repeatable flags comma-separated): a flag
beats its variable, which beats the file, which beats the default.
` + "`provisioner-lite config show`" + ` prints the result.

Exit codes:
  0  stopped by SIGINT or SIGTERM
  1  failed while running (e.g. a nodes file the store refuses, a listener lost)
  2  usage error, or a configuration refused before anything starts (a bad flag,
     config file or CURE_* value; a problem check reports)`,
		Version:       version.String("provisioner-lite"),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		RunE:          func(cmd *cobra.Command, _ []string) error { return a.serve(cmd, o) },
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(a.out)
	root.SetErr(a.errOut)
	o.bind(root)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	root.AddCommand(a.initCmd(), a.checkCmd(), a.pkiCmd(), a.artifactsCmd(), a.configCmd(), a.manCmd(root), a.versionCmd())
	names := make([]string, 0, len(subcommands))
	for name := range subcommands {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		root.AddCommand(a.registeredCmd(name, subcommands[name]))
	}
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	documentExitCodes(root)
	defaultHelp := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		if c != root {
			defaultHelp(c, args)
			return
		}
		w := c.OutOrStdout()
		usage(w)
		fmt.Fprintf(w, "\n%s\n\ncoordinator flags, by topic:\n", root.Long)
		printGroupedFlags(w, root.Flags())
	})
	return root
}

// registeredCmd is a command of the subcommands registry: its function
// parses its own arguments (and answers its own -h).
func (a *app) registeredCmd(name string, fn func([]string, io.Writer) int) *cobra.Command {
	return &cobra.Command{
		Use:                name + " [flags]",
		Short:              "see `provisioner-lite " + name + " -h`",
		Long:               "provisioner-lite " + name + " parses its own flags: `provisioner-lite " + name + " -h` lists them.",
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			a.rc = fn(args, a.out)
			return nil
		},
	}
}

// documentExitCodes gives every command's help an exit code paragraph
// (cobra's own completion and help commands included).
func documentExitCodes(c *cobra.Command) {
	if !strings.Contains(c.Long, "Exit codes:") {
		long := strings.TrimSpace(c.Long)
		if long == "" {
			long = c.Short + "."
		}
		c.Long = long + "\n\n" + exitCodes + "\n"
	}
	for _, sub := range c.Commands() {
		documentExitCodes(sub)
	}
}

// normalizeArgs turns a Go-style long flag (-state-dir, -wait-cure=6m)
// into its GNU form (--state-dir), so that pflag does not read it as a
// cluster of shorthands: a single-dash word that names a long flag of some
// command, or that starts with a letter no command has as a shorthand (an
// unknown flag is then reported by its name). Arguments after "--", values
// like -1 and shorthands with their value (-ojson) are kept.
func normalizeArgs(root *cobra.Command, args []string) []string {
	long := map[string]bool{"help": true, "version": true}
	short := map[byte]bool{'h': true, 'v': true}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		add := func(f *pflag.Flag) {
			if len(f.Name) > 1 {
				long[f.Name] = true
			}
			if f.Shorthand != "" {
				short[f.Shorthand[0]] = true
			}
		}
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	out := slices.Clone(args)
	for i, arg := range out {
		if arg == "--" {
			break
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(arg, "-"), "=")
		if !strings.HasPrefix(arg, "-") || strings.HasPrefix(arg, "--") || len(name) < 2 {
			continue
		}
		if long[name] || name[0] >= 'a' && name[0] <= 'z' && !short[name[0]] {
			out[i] = "-" + arg
		}
	}
	return out
}

// usage is the commands in brief (the root's help, and after a usage error).
func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  provisioner-lite init --state-dir DIR [--operator NAME] [--advertise ADDR | --pxe-interface IFACE] [-o json|yaml]
        one state dir: CA, server certificate, state key, an admin operator certificate; prints the next commands
  provisioner-lite check [--manifests DIR] [--nodes FILE] [--state-dir DIR] [--image-dir DIR] [-o json|yaml]
        lint the manifests, suites and nodes file as the coordinator will read them (and the SKUs' OS images in the state dir's store, the image's CA)
  provisioner-lite pki --state-dir DIR [--operator NAME --role viewer|operator|admin]
        the CA, and one operator's curectl certificate
  provisioner-lite pki offline --keys DIR --out DIR [--host H[,H...]] [--days 90]
        on the host that keeps the Secure Boot and boot CA keys (docs/KEYS.md): make them if absent, issue the
        HTTPS boot listener's certificate, write the certificates and the listener's key to copy into STATE/pki/
  provisioner-lite artifacts add --state-dir DIR [--sku SKU.yaml] [-o json|yaml] FILE...
        files into the artifact store; with --sku, FILE becomes that SKU's OS image (sha256, size, format)
  provisioner-lite config show [--config FILE] [flags] [-o yaml|json]
        the coordinator's effective configuration (flags, CURE_* environment, config file, defaults), secrets redacted
  provisioner-lite completion bash|zsh|fish | man --dir DIR | version (or --version)
        shell completion, man pages, the version
`)
	names := make([]string, 0, len(subcommands))
	for name := range subcommands {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(w, "  provisioner-lite %s ...\n        (`provisioner-lite %s -h`)\n", name, name)
	}
	fmt.Fprint(w, `  provisioner-lite [flags]
        the coordinator (-h lists its flags)
`)
}
