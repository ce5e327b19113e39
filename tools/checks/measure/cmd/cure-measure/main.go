// Command cure-measure runs one measured check for the runner, from the
// tool bundle it travels in:
//
//	cure-measure -archive BUNDLE.tar.zst -dir DIR < request.json > response.json
//
// The runner has verified BUNDLE (size and sha256) and took this program
// out of it. cure-measure unpacks the program the request's check runs
// (fio, stress-ng or iperf3, with its libraries and the bundle's loader)
// into a directory of its own under DIR (tmpfs), runs the check
// (tools/checks/measure), removes what it unpacked and prints the verdicts
// as JSON. SIGTERM stops the check (and its program) and still cleans up.
// A check that cannot run is a Response.Error, not an exit status: the
// exit status is for a request it could not read.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/measure"
	"github.com/cure-oss/cure/tools/toolbundle"
	"github.com/cure-oss/cure/tools/version"
)

func main() {
	archive := flag.String("archive", "", "the tool bundle, verified by the runner")
	dir := flag.String("dir", "", "where the programs are unpacked (tmpfs)")
	printVersion := version.Flag(flag.CommandLine, "cure-measure")
	flag.Parse()
	if printVersion(os.Stdout) {
		os.Exit(0)
	}
	if *archive == "" || *dir == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: cure-measure -archive BUNDLE.tar.zst -dir DIR < request.json")
		os.Exit(2)
	}
	var req measure.Request
	if err := json.NewDecoder(io.LimitReader(os.Stdin, 1<<20)).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "cure-measure: request:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	vs, err := run(ctx, req, *archive, *dir)
	resp := measure.Response{Verdicts: vs}
	if err != nil {
		resp.Error = err.Error()
		resp.ToolMissing = checks.ToolMissing(err) || errors.Is(err, toolbundle.ErrNoTool)
	}
	if err := json.NewEncoder(os.Stdout).Encode(resp); err != nil {
		fmt.Fprintln(os.Stderr, "cure-measure:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, req measure.Request, archive, dir string) ([]checks.Verdict, error) {
	tools := req.Tools()
	if len(tools) == 0 {
		return nil, fmt.Errorf("cure-measure: %q is not a check of the tool bundle", req.Type)
	}
	own, err := os.MkdirTemp(dir, "measure-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(own)
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	b, err := toolbundle.Unpack(f, filepath.Join(own, "bundle"), toolbundle.Options{Tools: tools})
	f.Close()
	if err != nil {
		return nil, err
	}
	work := filepath.Join(own, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		return nil, err
	}
	return measure.Run(ctx, req, b.Command, work)
}
