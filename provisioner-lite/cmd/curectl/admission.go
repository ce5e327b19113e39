package main

import (
	"context"
	"fmt"
	"io"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/spf13/cobra"
)

// admissionCmd is `curectl nodes admission NODE`: each requirement of the
// node's SKU's spec.admission, met or not, with the run and evidence.
func (a *app) admissionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "admission NODE",
		Short: "Show what a node must show before it is in service, and where it stands",
		Long: `Lists each requirement of the node's SKU's spec.admission (the join gate:
provisioned, boot path, attestation, measurements, acceptance suite, fleet
band) with its state (met, pending, failed, error), the run its evidence
comes from and what was required and found, and the decision they make:
admit, wait (the node stays accepting) or refuse (quarantined).

Exit codes:
  0  admit (or the SKU has no policy)
  1  the call failed
  2  bad usage
  3  wait
  4  refuse`,
		Example: `  curectl nodes admission gpu-001
  curectl nodes admission gpu-001 -o json`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNodes(1),
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := parseOutput(output)
			if err != nil {
				return err
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				return nodeAdmission(ctx, c, args[0], format, a.out)
			})
		},
	}
	addOutputFlag(cmd, &output, outTable, outJSON, outYAML)
	return cmd
}

func nodeAdmission(ctx context.Context, c curev1.OperatorServiceClient, node, format string, out io.Writer) int {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := c.NodeAdmission(cctx, &curev1.NodeAdmissionRequest{NodeId: node})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl nodes admission:", err)
		return 1
	}
	rc := 0
	switch resp.GetDecision() {
	case "wait":
		rc = 3
	case "refuse":
		rc = 4
	}
	if format == outJSON || format == outYAML {
		if r := printStructured(resp, format, out); r != 0 {
			return r
		}
		return rc
	}
	render.PrintAdmission(out, resp)
	return rc
}
