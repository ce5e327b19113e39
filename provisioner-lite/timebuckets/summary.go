package timebuckets

import (
	"slices"
	"sort"
	"time"
)

// Item is one run's breakdown with its node's SKU.
type Item struct {
	SKU string
	B   Breakdown
}

// Stat is a bucket's spread across runs.
type Stat struct {
	Name     string
	Runs     int // runs that had this bucket
	P50, P90 time.Duration
}

// Summary is the spread of every bucket over the runs of one SKU (SKU ""
// is every run).
type Summary struct {
	SKU     string
	Runs    int
	Wall    Stat
	Buckets []Stat // top-level buckets, then sub-buckets as "parent/sub", in first-seen order
}

// Summarize gives p50/p90 per bucket, per SKU (sorted) and over all runs
// (first). Memory is one duration per run and bucket: 5,000 runs of ~30
// buckets is ~1 MiB.
func Summarize(items []Item) []Summary {
	groups := map[string][]Breakdown{}
	var all []Breakdown
	for _, it := range items {
		groups[it.SKU] = append(groups[it.SKU], it.B)
		all = append(all, it.B)
	}
	out := []Summary{summarize("", all)}
	skus := make([]string, 0, len(groups))
	for s := range groups {
		skus = append(skus, s)
	}
	sort.Strings(skus)
	for _, s := range skus {
		out = append(out, summarize(s, groups[s]))
	}
	return out
}

func summarize(sku string, bs []Breakdown) Summary {
	var order []string
	vals := map[string][]time.Duration{}
	var walls []time.Duration
	put := func(name string, d time.Duration) {
		if _, ok := vals[name]; !ok {
			order = append(order, name)
		}
		vals[name] = append(vals[name], d)
	}
	for _, b := range bs {
		walls = append(walls, b.Wall)
		for _, x := range b.Buckets {
			put(x.Name, x.Duration)
			for _, s := range x.Sub {
				put(x.Name+"/"+s.Name, s.Duration)
			}
		}
	}
	out := Summary{SKU: sku, Runs: len(bs), Wall: stat("wall", walls)}
	for _, n := range order {
		out.Buckets = append(out.Buckets, stat(n, vals[n]))
	}
	return out
}

func stat(name string, ds []time.Duration) Stat {
	s := slices.Clone(ds)
	slices.Sort(s)
	return Stat{Name: name, Runs: len(s), P50: Percentile(s, 50), P90: Percentile(s, 90)}
}

// Percentile is the nearest-rank percentile of sorted (0 when empty).
func Percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 × n)
	return sorted[min(max(rank, 1), len(sorted))-1]
}
