package render

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ParseSelector reads "k=v,k2=v2" (label selector; "sku" also matches the
// node's SKU). Keys and values are trimmed; an empty string is no selector.
func ParseSelector(s string) (map[string]string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	sel := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("selector %q: %q is not key=value", s, part)
		}
		if old, dup := sel[k]; dup && old != v {
			return nil, fmt.Errorf("selector %q: %s given twice (%s, %s)", s, k, old, v)
		}
		sel[k] = v
	}
	return sel, nil
}

// Provisioner is the slice of the operator client Provision needs.
type Provisioner interface {
	Provision(ctx context.Context, in *curev1.ProvisionRequest, opts ...grpc.CallOption) (*curev1.ProvisionResponse, error)
}

// Target is one coordinator instance.
type Target struct {
	Addr   string
	Client Provisioner
}

// ProvisionResult is what every instance tried answered, merged.
type ProvisionResult struct {
	Runs []*curev1.RunRef
	// Instance that started each run (by run id).
	Instance map[string]string
	// Refused holds the nodes no instance started, with the last reason.
	Refused []*curev1.Refusal
}

// ProvisionAcross asks the instances in order: nodes an instance refuses for
// capacity (or all of them, when it is unreachable) go to the next one. A
// selector is resolved by the first instance that answers; the nodes it did
// not start are then named explicitly to the next. Any other error (unknown
// node, permission) stops at once: every instance shares the inventory and
// would say the same. progress, if not nil, gets one line per instance tried.
func ProvisionAcross(ctx context.Context, targets []Target, req *curev1.ProvisionRequest, progress io.Writer) (*ProvisionResult, error) {
	res := &ProvisionResult{Instance: map[string]string{}}
	pending := req
	var lastErr error
	for i, t := range targets {
		resp, err := t.Client.Provision(ctx, pending)
		if err != nil {
			st, _ := status.FromError(err)
			switch st.Code() {
			case codes.Unavailable, codes.DeadlineExceeded:
				lastErr = fmt.Errorf("%s: %w", t.Addr, err)
				if progress != nil {
					fmt.Fprintf(progress, "%s unreachable (%s); trying the next instance\n", t.Addr, st.Message())
				}
				continue
			case codes.ResourceExhausted:
				// Every node refused for capacity: the answer rides in the details.
				resp = detailResponse(st)
				if resp == nil {
					lastErr = fmt.Errorf("%s: %w", t.Addr, err)
					continue
				}
			case codes.FailedPrecondition:
				if resp = detailResponse(st); resp == nil {
					return res, fmt.Errorf("%s: %w", t.Addr, err)
				}
			default:
				return res, fmt.Errorf("%s: %w", t.Addr, err)
			}
		}
		inst := resp.GetInstance()
		if inst == "" {
			inst = t.Addr
		}
		for _, r := range resp.GetRuns() {
			res.Runs = append(res.Runs, r)
			res.Instance[r.GetRunId()] = inst
		}
		var retry []string
		res.Refused = res.Refused[:0]
		for _, r := range resp.GetRefused() {
			if r.GetReason() == "capacity" && i+1 < len(targets) {
				retry = append(retry, r.GetNodeId())
				continue
			}
			res.Refused = append(res.Refused, r)
		}
		if progress != nil {
			fmt.Fprintf(progress, "%s (%s): %d started, %d refused for capacity, %d refused otherwise\n",
				t.Addr, inst, len(resp.GetRuns()), len(retry), len(res.Refused))
		}
		if len(retry) == 0 {
			return res, nil
		}
		next := &curev1.ProvisionRequest{NodeIds: retry, Mode: req.GetMode(), Manifest: req.GetManifest(), Resume: req.GetResume(), ConfirmNodeIds: req.GetConfirmNodeIds()}
		pending = next
		lastErr = nil
	}
	if lastErr != nil && len(res.Runs) == 0 && len(res.Refused) == 0 {
		return res, lastErr
	}
	return res, nil
}

// detailResponse extracts the ProvisionResponse a refusing coordinator put
// in the status details.
func detailResponse(st *status.Status) *curev1.ProvisionResponse {
	for _, d := range st.Details() {
		if pr, ok := d.(*curev1.ProvisionResponse); ok {
			return pr
		}
	}
	return nil
}

// ErrNothingStarted is returned by callers when every node was refused.
var ErrNothingStarted = errors.New("no node started")

// PrintRefusals writes one line per refused node.
func PrintRefusals(w io.Writer, rs []*curev1.Refusal) {
	for _, r := range rs {
		line := fmt.Sprintf("refused %s: %s: %s", r.GetNodeId(), r.GetReason(), r.GetMessage())
		if ms := r.GetRetryAfterMs(); ms > 0 {
			line += fmt.Sprintf(" (retry after %s)", time.Duration(ms)*time.Millisecond)
		}
		fmt.Fprintln(w, line)
	}
}

// PrintFleet writes a fleet summary: counts per status (failures first),
// active runs per phase, then the newest failures. It fits a terminal at any
// fleet size: the lists are bounded by the server.
func PrintFleet(w io.Writer, fs *curev1.FleetStatus) {
	at := time.UnixMilli(fs.GetTimeUnixMs()).Format(time.TimeOnly)
	fmt.Fprintf(w, "fleet at %s: %d nodes, %d active runs\n", at, fs.GetNodes(), fs.GetActive())
	// The counts are keyed by name ("none": never run).
	order := make([]string, len(runOrder))
	for i, s := range runOrder {
		order[i] = RunLabel(s)
	}
	var parts []string
	for _, k := range order {
		if n := fs.GetByStatus()[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(fs.GetByStatus())) {
		if !slices.Contains(order, k) {
			parts = append(parts, fmt.Sprintf("%s %d", k, fs.GetByStatus()[k]))
		}
	}
	fmt.Fprintf(w, "  status: %s\n", strings.Join(parts, ", "))
	if len(fs.GetByPhase()) > 0 {
		type kv struct {
			k string
			v int64
		}
		var ph []kv
		for k, v := range fs.GetByPhase() {
			ph = append(ph, kv{k, v})
		}
		sort.Slice(ph, func(i, j int) bool { return ph[i].v > ph[j].v || (ph[i].v == ph[j].v && ph[i].k < ph[j].k) })
		parts = parts[:0]
		for _, p := range ph {
			parts = append(parts, fmt.Sprintf("%s %d", p.k, p.v))
		}
		fmt.Fprintf(w, "  active by phase: %s\n", strings.Join(parts, ", "))
	}
	if len(fs.GetByInstance()) > 0 {
		parts = parts[:0]
		for _, k := range slices.Sorted(maps.Keys(fs.GetByInstance())) {
			parts = append(parts, fmt.Sprintf("%s %d", k, fs.GetByInstance()[k]))
		}
		fmt.Fprintf(w, "  active by instance: %s\n", strings.Join(parts, ", "))
	}
	if len(fs.GetFailures()) > 0 {
		fmt.Fprintf(w, "  failures (newest first):\n")
		for _, f := range fs.GetFailures() {
			fmt.Fprintf(w, "    %-20s %-9s %-18s %s\n", f.GetNodeId(), RunLabel(fleetRunStatus(f)), f.GetPhase(), f.GetMessage())
		}
	}
}
