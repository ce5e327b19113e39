package main

import (
	"context"
	"fmt"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/spf13/cobra"
)

// fleetBandsCmd: the distributions fleet bands judge against (computed on
// the coordinator: the history stays there), and where a node sits.
func (a *app) fleetBandsCmd() *cobra.Command {
	var sku, check, metric, node, output string
	var window time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "fleet-bands [--node NODE] [--sku SKU] [--check CHECK] [--metric METRIC]",
		Short: "Print the fleet's distribution of each measured metric (n, median, MAD, p5/p50/p95) and where a node sits",
		Long: `fleet-bands prints, per SKU, check and measured metric, the recent passing
results of the fleet that fleet bands judge a node against (each node's
latest value per component), and with --node where that node's components
sit in it (the node left out of its own fleet, as when it is judged).`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			format, err := parseOutput(output)
			if err != nil {
				return err
			}
			if asJSON {
				format = outJSON
			}
			if window < 0 {
				return fmt.Errorf("--window %s: want a positive duration (0: the default)", window)
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				resp, err := c.FleetBands(cctx, &curev1.FleetBandsRequest{Sku: sku, Check: check, Metric: metric, NodeId: node, WindowMs: window.Milliseconds()})
				if err != nil {
					fmt.Fprintln(stderr(), "curectl fleet-bands:", err)
					return 1
				}
				switch format {
				case outJSON, outYAML:
					return printStructured(resp, format, a.out)
				}
				render.PrintFleetBands(a.out, resp)
				return 0
			})
		},
	}
	cmd.Flags().StringVar(&sku, "sku", "", "only this SKU (default: every SKU, or --node's)")
	cmd.Flags().StringVar(&check, "check", "", "only this check (a suite's check name)")
	cmd.Flags().StringVar(&metric, "metric", "", "only this metric (readMBps, ...)")
	cmd.Flags().StringVar(&node, "node", "", "mark where this node's components sit")
	cmd.Flags().DurationVar(&window, "window", 0, "how recent a result must be (default: the coordinator's default fleet window)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output (same as -o json)")
	addOutputFlag(cmd, &output, outTable, outJSON, outYAML)
	_ = cmd.RegisterFlagCompletionFunc("node", a.completeNodeFlag)
	_ = cmd.RegisterFlagCompletionFunc("sku", a.completeSKUs)
	return cmd
}
