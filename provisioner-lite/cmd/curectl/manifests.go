package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/spf13/cobra"
)

// manifestsCmd lists the manifests the coordinator runs: the names
// --manifest, --sku and --suite take.
func (a *app) manifestsCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "manifests",
		Short: "List the SKUs and validation suites the coordinator runs",
		Long: `List the SKU manifests and validation suites of the coordinator's manifests
(its --manifests directory, or with --manifests-from-store the bundle it
runs, whose version is printed), by the names provision --manifest, nodes
add --sku and nodes revalidate --suite take. A name whose file does not
validate is listed as invalid: a run naming it is refused until it is fixed
(provisioner-lite check names the file and line).

Exit codes:
  0  listed, every manifest valid
  1  failed: the coordinator refused the request or could not be reached
  2  bad usage (flags, arguments)
  3  listed, but some names do not validate (kind invalid)

-o json|yaml prints the ListManifestsResponse.`,
		Example: `  curectl manifests
  curectl manifests -o json | jq -r '.suites[]'`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			format, err := parseOutput(output)
			if err != nil {
				return err
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				resp, err := c.ListManifests(cctx, &curev1.ListManifestsRequest{})
				if err != nil {
					fmt.Fprintln(stderr(), "curectl manifests:", err)
					return 1
				}
				rc := 0
				if len(resp.GetInvalid()) > 0 {
					rc = 3
				}
				if structuredFormat(format) {
					if printStructured(resp, format, a.out) != 0 {
						return 1
					}
					return rc
				}
				if err := printManifests(a.out, resp); err != nil {
					fmt.Fprintln(stderr(), "curectl manifests: write:", err)
					return 1
				}
				return rc
			})
		},
	}
	addOutputFlag(cmd, &output, outTable, outJSON, outYAML)
	return cmd
}

// printManifests is the table: one name a line, SKUs, suites, then the
// invalid ones, and where they come from.
func printManifests(out io.Writer, resp *curev1.ListManifestsResponse) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME")
	for _, group := range []struct {
		kind  string
		names []string
	}{{"sku", resp.GetSkus()}, {"suite", resp.GetSuites()}, {"invalid", resp.GetInvalid()}} {
		for _, n := range group.names {
			fmt.Fprintf(tw, "%s\t%s\n", group.kind, n)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	from := "its --manifests directory"
	if v := resp.GetBundleVersion(); v > 0 {
		from = fmt.Sprintf("manifest bundle %d from the store", v)
	}
	_, err := fmt.Fprintf(out, "(instance %s: %s)\n", resp.GetInstance(), from)
	return err
}
