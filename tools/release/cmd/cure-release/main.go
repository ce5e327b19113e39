// Command cure-release builds CURE's .deb packages (`make release`):
// cure-provisioner and cure-build, into out/release/ (tools/release).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/cure-oss/cure/tools/release"
	"github.com/cure-oss/cure/tools/version"
)

func main() {
	out := flag.String("out", "out/release", "where the .deb files go")
	root := flag.String("root", ".", "the module's checkout")
	ver := flag.String("pkg-version", "", "package version (default: from git describe, else "+release.BaseVersion+"~git<commits>.<rev>)")
	printVersion := version.Flag(flag.CommandLine, "cure-release")
	flag.Parse()
	if printVersion(os.Stdout) {
		os.Exit(0)
	}
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "cure-release: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	debs, err := release.Build(ctx, release.Options{Root: *root, Out: *out, Version: *ver, Log: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cure-release:", err)
		os.Exit(1)
	}
	for _, d := range debs {
		fmt.Println(d)
	}
}
