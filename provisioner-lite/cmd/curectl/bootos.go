package main

import (
	"context"
	"fmt"
	"io"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/spf13/cobra"
)

// nodesBootOSCmd is `curectl nodes boot-os NODE`: a node without an active
// run (one a diagnostic left in CURE, say) sent to its installed OS.
func (a *app) nodesBootOSCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "boot-os NODE",
		Short: "Boot a node without an active run into its installed OS (BMC boot to disk, then reset)",
		Long: `Boot a node without an active run into its installed OS: the coordinator sets
the BMC's boot override to the disk and resets the node (powers it on if it is
off). A diagnostic leaves the node in CURE by default; this sends it home.
Refused while the node has an active run (cancel it first). Needs the operator
role.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNodes(1),
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := parseOutput(output)
			if err != nil {
				return err
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				return nodesBootOS(ctx, c, args[0], format, a.out)
			})
		},
	}
	addOutputFlag(cmd, &output, outTable, outJSON, outYAML)
	return cmd
}

func nodesBootOS(ctx context.Context, c curev1.OperatorServiceClient, node, format string, out io.Writer) int {
	// The BMC's calls are the coordinator's to bound; this covers them.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resp, err := c.BootInstalledOS(cctx, &curev1.BootInstalledOSRequest{NodeId: node})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl nodes boot-os:", err)
		return 1
	}
	if structuredFormat(format) {
		return printStructured(resp, format, out)
	}
	fmt.Fprintf(out, "node %s sent to its installed OS: %s\n", resp.GetNodeId(), resp.GetMessage())
	return 0
}
