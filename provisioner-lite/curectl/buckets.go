package curectl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"google.golang.org/protobuf/encoding/protojson"
)

// BucketsCmd is `curectl buckets [--selector k=v,...] [--failed]
// [--max-runs N] [--json]`: p50/p90 of each time bucket over the selected
// nodes' latest finished runs, per SKU. The coordinator computes it (one
// answer, not 5,000 reports).
func BucketsCmd(ctx context.Context, c curev1.OperatorServiceClient, args []string, out io.Writer) int {
	fs := flag.NewFlagSet("buckets", flag.ContinueOnError)
	selector := fs.String("selector", "", "only nodes matching k=v,... (labels; sku)")
	failed := fs.Bool("failed", false, "include failed and attention runs (default: succeeded only)")
	maxRuns := fs.Uint("max-runs", 5000, "summarize at most this many runs (the coordinator caps it at 5000)")
	asJSON := fs.Bool("json", false, "JSON output")
	if fs.Parse(args) != nil {
		return 2
	}
	sel, err := ParseSelector(*selector)
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl buckets: --selector:", err)
		return 2
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	s, err := c.TimeBuckets(cctx, &curev1.TimeBucketsRequest{Selector: sel, IncludeFailed: *failed, MaxRuns: uint32(*maxRuns)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl buckets:", err)
		return 1
	}
	if *asJSON {
		b, err := protojson.MarshalOptions{Multiline: true}.Marshal(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, "curectl buckets:", err)
			return 1
		}
		fmt.Fprintln(out, string(b))
		return 0
	}
	PrintBucketSummary(out, s)
	return 0
}
