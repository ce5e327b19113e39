// Package mstflint updates NVIDIA/Mellanox ConnectX (and BlueField NIC)
// firmware in-band through the mstflint tools: `mstflint query` on the
// device and on the image, a PSID check that refuses a wrong image before
// anything is burnt, `mstflint burn`, and activation with `mstfwreset` or,
// when that cannot be done, a reboot the caller performs.
//
// The tools are reached through the Runner exec seam, so tests drive the
// package with recorded output.
package mstflint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
)

// Runner runs a command and returns its output. A non-zero exit is an
// error (stdout and stderr are still returned).
type Runner interface {
	Run(ctx context.Context, name string, args ...string) (stdout, stderr []byte, err error)
}

// ExecRunner runs real processes.
type ExecRunner struct{}

// Run implements Runner with os/exec; ctx kills the process.
func (ExecRunner) Run(ctx context.Context, name string, args ...string) ([]byte, []byte, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.Bytes(), errb.Bytes(), err
}

// SkipError means the adapter cannot run here (tool or device absent):
// the phase reports SKIP with Reason, not a failure.
type SkipError struct{ Reason string }

func (e *SkipError) Error() string { return "skip: " + e.Reason }

// IsSkip reports whether err is (or wraps) a *SkipError.
func IsSkip(err error) bool {
	var s *SkipError
	return errors.As(err, &s)
}

// cmdError renders a failed command with what it printed, since mstflint
// reports problems as "-E- ..." on either stream.
func cmdError(what string, args []string, stdout, stderr []byte, err error) error {
	msg := bytes.TrimSpace(append(append([]byte(nil), stderr...), stdout...))
	if len(msg) > 600 {
		msg = append(msg[:600], "..."...)
	}
	// The cut can split a character, and the adapter's strings need not be
	// UTF-8; the message ends up in a protobuf string.
	return fmt.Errorf("%s (%v): %w: %s", what, args, err, bytes.ToValidUTF8(msg, []byte("\uFFFD")))
}
