// Command cure-tools gives a person in a CURE node's debug shell the
// operator tools that are not in the image (nvme-cli, fio, stress-ng,
// iperf3): they are in the tool bundle the coordinator serves, whose sha256
// and size the image pins (/etc/cure/toolbundle.json).
//
//	cure-tools list                   what the bundle offers, what is fetched
//	cure-tools fetch nvme [TOOL...]   download, verify, unpack into /run/cure-tools
//	cure-tools run nvme list          run a fetched tool (what its wrapper does)
//
// After a fetch, `export PATH=/run/cure-tools/bin:$PATH` and `nvme list`
// work: /run/cure-tools/bin/nvme is a script cure-tools itself interprets.
// Flags before the subcommand: -http URL (default: cure.http= of the
// kernel command line), -pin FILE, -dir DIR. See runner/optools.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/cure-oss/cure/runner/boot"
	"github.com/cure-oss/cure/runner/optools"
	"github.com/cure-oss/cure/tools/toolbundle"
	"github.com/cure-oss/cure/tools/version"
)

// The pin's default path and the wrappers' interpreter (this command in
// the image's busybox): variables so tests can build the command against a
// pin of their own (-ldflags -X), since a wrapper starts it with no flags.
var (
	pinFile = optools.PinFile
	self    = optools.Self
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "cure-tools:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage: cure-tools [-http URL] [-pin FILE] [-dir DIR] list | fetch TOOL... | run TOOL [ARGS...]")

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cure-tools", flag.ContinueOnError)
	fs.SetOutput(stderr)
	httpURL := fs.String("http", "", "the coordinator's artifact server (default: cure.http= of the kernel command line)")
	pin := fs.String("pin", pinFile, "the tool bundle pin the image was built with")
	dir := fs.String("dir", optools.Dir, "where fetched tools are unpacked (tmpfs)")
	printVersion := version.Flag(fs, "cure-tools")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if printVersion(stdout) {
		return nil
	}
	if fs.NArg() == 0 {
		return errUsage
	}
	raw, err := os.ReadFile(*pin)
	if err != nil {
		return fmt.Errorf("this image pins no tool bundle (%w): it was built without one (cure-build --pin-tool-bundle)", err)
	}
	p, err := toolbundle.ParsePin(*pin, raw)
	if err != nil {
		return err
	}
	c := optools.Config{Pin: p, PinFile: *pin, BaseURL: *httpURL, Dir: *dir, Self: self}
	if c.BaseURL == "" {
		// Absent /proc (a test host) reads as no cure.http=.
		if cl, err := boot.ReadCmdline("/proc"); err == nil {
			c.BaseURL = cl.HTTP
		}
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	switch cmd {
	case "list":
		c.List(stdout)
		return nil
	case "fetch":
		plan, err := c.MakePlan(rest)
		if err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		fmt.Fprintf(stdout, "fetching tool bundle %.12s (%d bytes) from %s\n", plan.Want.SHA256, plan.Want.Size, plan.URL)
		got, err := c.Fetch(ctx, plan)
		for _, t := range got {
			fmt.Fprintf(stdout, "%s (%s %s): verified, %d files, %.1f MB in %s\n", t.Name, t.Package, t.Version, t.Files, float64(t.Bytes)/1e6, t.Dir)
		}
		if err != nil {
			return err
		}
		ex := got[0].Name
		if ex == "nvme" {
			ex = "nvme list"
		} else {
			ex += " --help"
		}
		fmt.Fprintf(stdout, "run it:  export PATH=%s:$PATH; %s   (or: cure-tools run %s)\n", filepath.Join(c.Dir, "bin"), ex, ex)
		return nil
	case "run":
		if len(rest) == 0 {
			return errUsage
		}
		argv, err := optools.Command(c.Dir, p, rest[0], rest[1:])
		if err != nil {
			return err
		}
		if err := syscall.Exec(argv[0], argv, os.Environ()); err != nil {
			return fmt.Errorf("run %s: %w", argv[0], err)
		}
		return nil
	}
	return fmt.Errorf("unknown subcommand %q: %w", cmd, errUsage)
}
