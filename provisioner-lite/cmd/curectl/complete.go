package main

import (
	"context"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// completionTimeout bounds what a shell completion asks the coordinator:
// the operator waits on it at each TAB.
const completionTimeout = 2 * time.Second

// nodeList asks the coordinator for its nodes, quietly: a completion that
// cannot reach it offers nothing and prints nothing (the shell would show
// the error in the middle of the command line).
func (a *app) nodeList() []*curev1.NodeInfo {
	a.quiet = true
	defer func() { a.quiet, a.rc = false, 0 }()
	c, err := a.client()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	resp, err := c.ListNodes(ctx, &curev1.ListNodesRequest{})
	if err != nil {
		return nil
	}
	return resp.GetNodes()
}

// candidates are the values starting with prefix, sorted, without
// duplicates and without those in skip.
func candidates(values []string, prefix string, skip []string) []string {
	var out []string
	for _, v := range values {
		if v != "" && strings.HasPrefix(v, prefix) && !slices.Contains(skip, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// completeNodes completes NODE arguments with the coordinator's node ids
// (an id already on the line is not offered again). max > 0 stops after
// that many NODE arguments (nodes show NODE, nodes label NODE k=v...).
func (a *app) completeNodes(max int) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if max > 0 && len(args) >= max {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var ids []string
		for _, n := range a.nodeList() {
			ids = append(ids, n.GetNodeId())
		}
		return candidates(ids, toComplete, args), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeNodeFlag completes a flag that names one node.
func (a *app) completeNodeFlag(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return a.completeNodes(0)(nil, nil, toComplete)
}

// manifestList asks the coordinator for its manifests, as quietly as
// nodeList; ok is false when it could not say.
func (a *app) manifestList() (resp *curev1.ListManifestsResponse, unimplemented, ok bool) {
	a.quiet = true
	defer func() { a.quiet, a.rc = false, 0 }()
	c, err := a.client()
	if err != nil {
		return nil, false, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	resp, err = c.ListManifests(ctx, &curev1.ListManifestsRequest{})
	if err != nil {
		return nil, status.Code(err) == codes.Unimplemented, false
	}
	return resp, false, true
}

// completeSKUs completes a SKU with the coordinator's SKU manifests (a
// coordinator without ListManifests: the SKUs of its inventory).
func (a *app) completeSKUs(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	resp, unimplemented, ok := a.manifestList()
	if ok {
		return candidates(resp.GetSkus(), toComplete, nil), cobra.ShellCompDirectiveNoFileComp
	}
	var skus []string
	if unimplemented {
		for _, n := range a.nodeList() {
			skus = append(skus, n.GetSku())
		}
	}
	return candidates(skus, toComplete, nil), cobra.ShellCompDirectiveNoFileComp
}

// completeSuites completes a validation suite with the coordinator's.
func (a *app) completeSuites(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	resp, _, _ := a.manifestList()
	return candidates(resp.GetSuites(), toComplete, nil), cobra.ShellCompDirectiveNoFileComp
}

// completeRunManifest completes provision --manifest by the --mode on the
// line: a diagnostic or burn-in runs a suite, every other mode a SKU.
func (a *app) completeRunManifest(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	mode, _ := cmd.Flags().GetString("mode")
	if m, err := modes.Parse(mode); err == nil && (m == modes.Diagnostic || m == modes.Burnin) {
		return a.completeSuites(cmd, args, toComplete)
	}
	return a.completeSKUs(cmd, args, toComplete)
}

// completeModes completes --mode with the run modes this curectl knows.
func completeModes(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	var names []string
	for _, m := range modes.All() {
		names = append(names, string(m))
	}
	return candidates(names, toComplete, nil), cobra.ShellCompDirectiveNoFileComp
}
