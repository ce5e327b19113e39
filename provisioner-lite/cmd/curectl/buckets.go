package main

import (
	"context"
	"fmt"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/spf13/cobra"
)

// bucketsCmd: p50/p90 of each time bucket per SKU, computed on the
// coordinator (at most 5,000 runs travel nowhere).
func (a *app) bucketsCmd() *cobra.Command {
	var selector, output string
	var failed, asJSON bool
	var maxRuns uint
	cmd := &cobra.Command{
		Use:   "buckets",
		Short: "Print where runs spend their time: p50/p90 per time bucket, per SKU",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			format, err := parseOutput(output)
			if err != nil {
				return err
			}
			if asJSON {
				format = outJSON
			}
			sel, err := render.ParseSelector(selector)
			if err != nil {
				return fmt.Errorf("--selector: %w", err)
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				defer cancel()
				s, err := c.TimeBuckets(cctx, &curev1.TimeBucketsRequest{Selector: sel, IncludeFailed: failed, MaxRuns: uint32(maxRuns)})
				if err != nil {
					fmt.Fprintln(stderr(), "curectl buckets:", err)
					return 1
				}
				switch format {
				case outJSON, outYAML:
					return printStructured(s, format, a.out)
				}
				render.PrintBucketSummary(a.out, s)
				return 0
			})
		},
	}
	cmd.Flags().StringVar(&selector, "selector", "", "only nodes matching k=v,... (labels; sku)")
	cmd.Flags().BoolVar(&failed, "failed", false, "include failed and attention runs (default: succeeded only)")
	cmd.Flags().UintVar(&maxRuns, "max-runs", 5000, "summarize at most this many runs (the coordinator caps it at 5000)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output (same as -o json)")
	addOutputFlag(cmd, &output, outTable, outJSON, outYAML)
	return cmd
}
