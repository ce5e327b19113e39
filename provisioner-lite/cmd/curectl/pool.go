package main

import (
	"context"
	"fmt"
	"io"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
)

// poolRPC is one of the OperatorService's pool methods.
type poolRPC func(curev1.OperatorServiceClient, context.Context, *curev1.PoolRequest, ...grpc.CallOption) (*curev1.PoolResponse, error)

// poolOpts are the flags every pool command shares.
type poolOpts struct {
	selector, reason, output string
}

// poolExitCodes are the exit codes of the pool commands.
const poolExitCodes = `

Exit codes:
  0  every node moved
  1  the coordinator refused the request or could not be reached
  2  bad usage (flags, no node given)
  4  some nodes moved, others were refused (listed with why)`

// poolCmds are `curectl nodes drain|drained|revalidate|return`: a deployed
// node's way through the day-2 pool (docs/ARCHITECTURE.md, "Day 2").
func (a *app) poolCmds() []*cobra.Command {
	simple := func(use, short, long string, rpc poolRPC) *cobra.Command {
		var o poolOpts
		cmd := &cobra.Command{
			Use: use + " [NODE...]", Short: short, Long: long + poolExitCodes,
			ValidArgsFunction: a.completeNodes(0),
			RunE: func(_ *cobra.Command, args []string) error {
				format, err := parseOutput(o.output)
				if err != nil {
					return err
				}
				o.output = format
				return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
					call := func(ctx context.Context, r *curev1.PoolRequest) (*curev1.PoolResponse, error) { return rpc(c, ctx, r) }
					return poolMove(ctx, "nodes "+use, call, o, args, a.out)
				})
			},
		}
		cmd.Flags().StringVar(&o.selector, "selector", "", "also every node matching k=v,... (labels; sku)")
		cmd.Flags().StringVar(&o.reason, "reason", "", "why: stored with the node's pool state and sent in the webhook")
		addOutputFlag(cmd, &o.output, outTable, outJSON, outYAML)
		return cmd
	}
	drain := simple("drain", "Ask the scheduler to move jobs away from in-service nodes (announced by webhook)",
		`Moves in-service nodes to draining and announces it (node.pool webhook).
Moving jobs away is the scheduler's job: CURE reboots nothing until the
scheduler (or an operator) says the node is drained (curectl nodes drained).`,
		curev1.OperatorServiceClient.Drain)
	drained := simple("drained", "Say no job runs on draining nodes any more: CURE may reboot them",
		`Moves draining nodes to drained: the scheduler's word (or an operator's)
that no job runs there. Only a drained node is revalidated or serviced.`,
		curev1.OperatorServiceClient.MarkDrained)
	ret := simple("return", "Put nodes back in service (draining, drained, ready; or a node deployed before the pool)",
		`Moves nodes back to in_service and announces it. An rma node is revalidated
(or provisioned) first.`,
		curev1.OperatorServiceClient.ReturnToPool)

	var o poolOpts
	var suite, mode string
	var autoReturn bool
	reval := &cobra.Command{
		Use:   "revalidate --suite SUITE [NODE...]",
		Short: "Run a suite on drained (ready, rma) nodes: pass goes to ready, fail or marginal to rma",
		Long: `Moves drained (ready, rma) nodes to revalidating and starts a run of the
suite on each. When it ends the node goes to ready (--return: straight back
in service) if no verdict is FAIL, ERROR or MARGINAL, to rma otherwise, and
to drained again if the run is canceled. The suite's spec.end says where
the node is left: its installed OS (host-os), powered off, or in CURE.` + poolExitCodes,
		Example: `  curectl nodes drain --reason "firmware day" gpu-001
  curectl nodes drained gpu-001                       # what the scheduler calls
  curectl nodes revalidate --suite rma-quick --return gpu-001`,
		ValidArgsFunction: a.completeNodes(0),
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := parseOutput(o.output)
			if err != nil {
				return err
			}
			o.output = format
			m, err := modes.Parse(mode)
			if err != nil || (m != modes.Diagnostic && m != modes.Burnin) {
				fmt.Fprintf(stderr(), "curectl nodes revalidate: --mode %q: want diagnostic or burnin\n", mode)
				a.rc = 2
				return errDone
			}
			if suite == "" {
				fmt.Fprintln(stderr(), "curectl nodes revalidate: --suite is required")
				a.rc = 2
				return errDone
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				call := func(ctx context.Context, r *curev1.PoolRequest) (*curev1.PoolResponse, error) {
					return c.Revalidate(ctx, &curev1.RevalidateRequest{NodeIds: r.GetNodeIds(), Selector: r.GetSelector(), Reason: r.GetReason(),
						Suite: suite, Mode: modes.ToProto(m), AutoReturn: autoReturn})
				}
				return poolMove(ctx, "nodes revalidate", call, o, args, a.out)
			})
		},
	}
	reval.Flags().StringVar(&suite, "suite", "", "the ValidationSuite to run (required)")
	reval.Flags().StringVar(&mode, "mode", "diagnostic", "diagnostic (never writes) or burnin (may write a suite's scratch range)")
	reval.Flags().BoolVar(&autoReturn, "return", false, "a pass returns the node to service at once instead of leaving it ready")
	reval.Flags().StringVar(&o.selector, "selector", "", "also every node matching k=v,... (labels; sku)")
	reval.Flags().StringVar(&o.reason, "reason", "", "why: stored with the node's pool state and sent in the webhook")
	addOutputFlag(reval, &o.output, outTable, outJSON, outYAML)
	_ = reval.RegisterFlagCompletionFunc("suite", a.completeSuites)
	_ = reval.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions([]string{string(modes.Diagnostic), string(modes.Burnin)}, cobra.ShellCompDirectiveNoFileComp))
	return []*cobra.Command{drain, drained, reval, ret, a.admissionCmd()}
}

// poolMove sends one pool request and prints where each node went.
func poolMove(ctx context.Context, what string, call func(context.Context, *curev1.PoolRequest) (*curev1.PoolResponse, error), o poolOpts, nodeIDs []string, out io.Writer) int {
	sel, err := render.ParseSelector(o.selector)
	if err != nil {
		fmt.Fprintf(stderr(), "curectl %s: --selector: %v\n", what, err)
		return 2
	}
	if len(nodeIDs) == 0 && len(sel) == 0 {
		fmt.Fprintf(stderr(), "curectl %s: give NODE... or --selector\n", what)
		return 2
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resp, err := call(cctx, &curev1.PoolRequest{NodeIds: nodeIDs, Selector: sel, Reason: o.reason})
	if err != nil {
		fmt.Fprintf(stderr(), "curectl %s: %v\n", what, err)
		return 1
	}
	if structuredFormat(o.output) {
		if rc := printStructured(resp, o.output, out); rc != 0 {
			return rc
		}
	} else {
		render.PrintPool(out, resp)
	}
	if len(resp.GetRefused()) > 0 {
		return 4
	}
	return 0
}
