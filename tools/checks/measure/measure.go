// Package measure runs the checks that drive the tool bundle's programs
// (storage-random with fio, cpu-throughput and memory-bandwidth with
// stress-ng, nic-throughput with iperf3). On a node they run in
// cure-measure, a helper that travels in the tool bundle with the
// programs, not in the image: the runner plans a check (tools/checks/suite
// turns the manifest into a Request), starts the helper with the Request
// on stdin (Exec) and reads its verdicts back. The image thus carries
// neither the programs nor the code that parses their output.
package measure

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/fiocheck"
	"github.com/cure-oss/cure/tools/checks/iperfcheck"
	"github.com/cure-oss/cure/tools/checks/paircheck"
	"github.com/cure-oss/cure/tools/checks/stresscheck"
	"github.com/cure-oss/cure/tools/tail"
)

// Helper is the helper's name in the tool bundle.
const Helper = "cure-measure"

// Request is one check to run: its type and the options of that type.
type Request struct {
	Type    string
	Storage *fiocheck.Options          `json:",omitempty"`
	CPU     *stresscheck.CPUOptions    `json:",omitempty"`
	Memory  *stresscheck.MemoryOptions `json:",omitempty"`
	NIC     *iperfcheck.Options        `json:",omitempty"`
	// Pair is one slot of the node-pair burn-in (node-pair).
	Pair *paircheck.Slot `json:",omitempty"`
	// Disks are the runner's disks, boot medium marked (storage-random).
	Disks []blockdev.Disk `json:",omitempty"`
}

// Response is what the helper prints.
type Response struct {
	Verdicts []checks.Verdict
	// Error is the check's error as a whole (the runner's ERROR verdict).
	Error string `json:",omitempty"`
	// ToolMissing says Error is a program the check drives not being in
	// the bundle: the runner's Error wraps checks.ErrToolMissing, so an
	// optional check stays SKIP.
	ToolMissing bool `json:",omitempty"`
}

// Tool is the bundle program the request's check runs.
func (r Request) Tool() string { return manifests.CheckTools(r.Type) }

// Tools are the bundle programs the request runs (a node-pair slot over
// RDMA runs perftest's two programs).
func (r Request) Tools() []string {
	if r.Type == manifests.CheckNodePair && r.Pair != nil {
		return paircheck.Tools(r.Pair.Transport)
	}
	if t := r.Tool(); t != "" {
		return []string{t}
	}
	return nil
}

// Run runs the request's check in this process with tools (the helper's
// bundle, or the host's in tests); tmp is where tools write reports.
func Run(ctx context.Context, r Request, tools checks.Tools, tmp string) ([]checks.Verdict, error) {
	switch {
	case r.Type == manifests.CheckStorageRandom && r.Storage != nil:
		o := *r.Storage
		o.Tools = tools
		if r.Disks != nil {
			disks := r.Disks
			o.Disks = func() ([]blockdev.Disk, error) { return disks, nil }
		}
		return fiocheck.Check(ctx, o)
	case r.Type == manifests.CheckCPUThroughput && r.CPU != nil:
		o := *r.CPU
		o.Tools, o.TmpDir = tools, tmp
		return stresscheck.CPU(ctx, o)
	case r.Type == manifests.CheckMemoryBandwidth && r.Memory != nil:
		o := *r.Memory
		o.Tools, o.TmpDir = tools, tmp
		return stresscheck.Memory(ctx, o)
	case r.Type == manifests.CheckNodePair && r.Pair != nil:
		s := *r.Pair
		s.Tools = tools
		if s.Role == paircheck.Server {
			return nil, paircheck.Serve(ctx, s)
		}
		res, err := paircheck.Measure(ctx, s)
		if err != nil {
			return nil, err
		}
		return []checks.Verdict{res.Verdict(s.Partner)}, nil
	case r.Type == manifests.CheckNICThroughput && r.NIC != nil:
		o := *r.NIC
		o.Tools = tools
		return iperfcheck.Check(ctx, o)
	}
	return nil, fmt.Errorf("measure: request of type %q has no options for it", r.Type)
}

// Exec runs the request through the helper cmd (stdin: the request; stdout:
// the response) and returns its verdicts; a helper that fails or answers
// nonsense is an error naming what it printed last.
func Exec(cmd *exec.Cmd, r Request) ([]checks.Verdict, error) {
	in, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Helper, err)
	}
	var out bytes.Buffer
	errTail := &tail.Buffer{Max: 2048}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &out, errTail
	runErr := cmd.Run()
	if runErr != nil {
		if msg := strings.TrimSpace(errTail.String()); msg != "" {
			runErr = fmt.Errorf("%w: %s", runErr, msg)
		}
	}
	var resp Response
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		if runErr != nil {
			return nil, fmt.Errorf("%s: %w", Helper, runErr)
		}
		return nil, fmt.Errorf("%s: answer: %w", Helper, err)
	}
	if resp.Error != "" && resp.ToolMissing {
		return resp.Verdicts, fmt.Errorf("%w: %s", checks.ErrToolMissing, resp.Error)
	}
	if resp.Error != "" {
		return resp.Verdicts, errors.New(resp.Error)
	}
	if runErr != nil {
		return resp.Verdicts, fmt.Errorf("%s: %w", Helper, runErr)
	}
	return resp.Verdicts, nil
}
