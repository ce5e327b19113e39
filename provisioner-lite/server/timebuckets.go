package server

import (
	"context"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/timebuckets"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RunBuckets computes a stored run's time buckets.
func RunBuckets(ctx context.Context, st *store.Store, r store.Run) (timebuckets.Breakdown, error) {
	phases, err := st.Phases(ctx, r.ID)
	if err != nil {
		return timebuckets.Breakdown{}, err
	}
	events, err := timebuckets.RunEvents(ctx, st, r.ID) // what Compute reads, paged
	if err != nil {
		return timebuckets.Breakdown{}, err
	}
	return timebuckets.Compute(r, phases, events, time.Now()), nil
}

// BucketsProto converts buckets for the API.
func BucketsProto(bs []timebuckets.Bucket) []*curev1.TimeBucket {
	var out []*curev1.TimeBucket
	for _, b := range bs {
		out = append(out, &curev1.TimeBucket{Name: b.Name, DurationMs: b.Duration.Milliseconds(), Reboots: uint32(b.Reboots),
			Attempts: uint32(b.Attempts), Sub: BucketsProto(b.Sub)})
	}
	return out
}

const defaultBucketRuns = 5000

// TimeBuckets summarizes the time buckets of the selected nodes' latest
// ended runs by SKU. Each run's events are read once; at 5,000 runs this is
// one pass over their stored timelines (metrics and logs of finished runs
// are pruned after the retention, which bounds it).
func (o *OperatorService) TimeBuckets(ctx context.Context, req *curev1.TimeBucketsRequest) (*curev1.TimeBucketSummary, error) {
	nodes, latest, err := o.fleetState(ctx)
	if err != nil {
		return nil, err
	}
	maxRuns := int(req.GetMaxRuns())
	if maxRuns <= 0 || maxRuns > defaultBucketRuns {
		maxRuns = defaultBucketRuns
	}
	type pick struct{ id, sku string }
	var picks []pick
	for _, n := range nodes {
		if !selectorMatches(n, req.GetSelector()) {
			continue
		}
		r, ok := latest[n.ID]
		if !ok || r.EndedAt.IsZero() || (r.Status != curev1.RunStatus_RUN_SUCCEEDED && !req.GetIncludeFailed()) {
			continue
		}
		picks = append(picks, pick{r.ID, n.SKU})
	}
	resp := &curev1.TimeBucketSummary{}
	if len(picks) > maxRuns {
		resp.Truncated = true
		picks = picks[:maxRuns]
	}
	items := make([]timebuckets.Item, 0, len(picks))
	for _, p := range picks {
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		r, err := o.Store.GetRun(ctx, p.id)
		if err != nil {
			continue // deleted meanwhile
		}
		b, err := RunBuckets(ctx, o.Store, r)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "run %s: %v", p.id, err)
		}
		items = append(items, timebuckets.Item{SKU: p.sku, B: b})
	}
	resp.Runs = int64(len(items))
	for _, s := range timebuckets.Summarize(items) {
		sk := &curev1.SkuTimeBuckets{Sku: s.SKU, Runs: int64(s.Runs), Wall: statProto(s.Wall)}
		for _, b := range s.Buckets {
			sk.Buckets = append(sk.Buckets, statProto(b))
		}
		resp.Skus = append(resp.Skus, sk)
	}
	return resp, nil
}

func statProto(s timebuckets.Stat) *curev1.BucketStat {
	return &curev1.BucketStat{Name: s.Name, Runs: int64(s.Runs), P50Ms: s.P50.Milliseconds(), P90Ms: s.P90.Milliseconds()}
}

// TimelineEntry is a stored event as the API shows it (the dashboard's RMA
// report uses it too).
func TimelineEntry(ev store.Event) *curev1.TimelineEntry { return timelineEntry(ev) }
