package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/spf13/cobra"
)

// acceptMeasurementsCmd is `curectl nodes accept-measurements NODE
// --reason "..."`: an admin ends a node's firmware measurement hold
// (docs/SECURITY.md, "Measured boot").
func (a *app) acceptMeasurementsCmd() *cobra.Command {
	var reason, output string
	cmd := &cobra.Command{
		Use:   "accept-measurements NODE --reason REASON",
		Short: "Accept a node's drifted firmware measurements and end its hold (admin)",
		Long: `A firmware measurement drift the pipeline did not cause (PCRs 0-3, 7 differ
from the node's record: firmware updated by hand, a setting changed, or an
implant) holds the node out of service. After checking the change is
legitimate, an admin accepts it: the drifted values become the node's
recorded measurements and the hold ends. The reason is required and kept in
the audit log with what was adopted. A reflash by the pipeline also ends a
hold (the next attested boot re-records).`,
		Example:           `  curectl nodes accept-measurements gpu-001 --reason "BIOS 2.21 flashed by hand, ticket OPS-1234"`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNodes(1),
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := parseOutput(output)
			if err != nil {
				return err
			}
			if strings.TrimSpace(reason) == "" {
				fmt.Fprintln(stderr(), "curectl nodes accept-measurements: --reason is required (it is the audit log's record of why the drift is legitimate)")
				a.rc = 2
				return errDone
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				return acceptMeasurements(ctx, c, args[0], reason, format, a.out)
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the drift is legitimate (required; audited)")
	addOutputFlag(cmd, &output, outTable, outJSON, outYAML)
	return cmd
}

func acceptMeasurements(ctx context.Context, c curev1.OperatorServiceClient, node, reason, format string, out io.Writer) int {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resp, err := c.AcceptMeasurements(cctx, &curev1.AcceptMeasurementsRequest{NodeId: node, Reason: reason})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl nodes accept-measurements:", err)
		return 1
	}
	if format == outJSON || format == outYAML {
		return printStructured(resp, format, out)
	}
	fmt.Fprintf(out, "node %s: measurement hold of run %s (since %s) ended\n", resp.GetNodeId(), resp.GetHeldByRun(),
		time.UnixMilli(resp.GetHeldAtUnixMs()).UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "  drift:    %s\n", resp.GetDetail())
	fmt.Fprintf(out, "  adopted:  firmware %q, %s (replacing run %s's)\n", resp.GetFirmware(), pcrList(resp.GetPcrs()), resp.GetPreviousRun())
	return 0
}

func pcrList(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return x - y
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = "PCR" + k + "=" + m[k]
	}
	return strings.Join(parts, " ")
}
