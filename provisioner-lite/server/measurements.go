package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/inventory"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// Bounds of a verdict's measurements as a runner sends them.
const (
	maxMetricName = 64
	maxUnit       = 16
)

// verdictMeasurements cleans a runner verdict's measurements for the store:
// more than store.MaxVerdictMeasurements, a metric without a plain name or
// repeated is refused (a runner bug or a peer probing the bounds); a value that is not
// finite is not a measurement and is left out.
func verdictMeasurements(in []*curev1.Measurement) ([]store.Measurement, error) {
	if len(in) > store.MaxVerdictMeasurements {
		return nil, fmt.Errorf("%d measurements in one verdict (at most %d)", len(in), store.MaxVerdictMeasurements)
	}
	out := make([]store.Measurement, 0, len(in))
	seen := map[string]bool{}
	for i, m := range in {
		name := m.GetMetric()
		if !metricName(name) {
			return nil, fmt.Errorf("measurement %d: metric name %q is not 1 to %d of A-Z a-z 0-9 _ . - /", i, textsafe.BoundedLine(name, maxMetricName), maxMetricName)
		}
		if seen[name] {
			return nil, fmt.Errorf("measurement %d: metric %q twice in one verdict", i, name)
		}
		seen[name] = true
		if v := m.GetValue(); math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		out = append(out, store.Measurement{Metric: name, Value: m.GetValue(), Unit: textsafe.BoundedLine(m.GetUnit(), maxUnit)})
	}
	return out, nil
}

// metricName: a metric is a key of the fleet history and a word in
// reports, so its name is plain.
func metricName(s string) bool {
	if s == "" || len(s) > maxMetricName {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' || c == '/') {
			return false
		}
	}
	return true
}

// measurementsProto puts stored measurements back on the wire.
func measurementsProto(ms []store.MeasurementRecord) []*curev1.Measurement {
	out := make([]*curev1.Measurement, 0, len(ms))
	for _, m := range ms {
		out = append(out, &curev1.Measurement{Metric: m.Metric, Value: m.Value, Unit: m.Unit})
	}
	return out
}

// auditMeasuredComponent is the security event of a verdict whose
// measurements name a component its node's stored inventory does not list.
const auditMeasuredComponent = "measurement_component_refused"

// inventoryParts are the parts a node's stored inventory lists, by the
// component kinds checks name them with (kind -> instance): "gpu" -> "7",
// "0000:c1:00.0"; "disk" -> "nvme0n1". A kind not in names is one the
// inventory does not describe (pair links, sensors, site programs' names).
type inventoryParts struct {
	names map[string]map[string]bool
	count map[string]int // parts listed per kind
}

// partsOf lists inv's parts under every name a check gives them: its
// position and its own name or index, PCI address, locator.
func partsOf(inv *curev1.Inventory) inventoryParts {
	p := inventoryParts{names: map[string]map[string]bool{}, count: map[string]int{}}
	add := func(kind string, names ...string) {
		if p.names[kind] == nil {
			p.names[kind] = map[string]bool{}
		}
		for _, n := range names {
			if n != "" {
				p.names[kind][strings.ToLower(n)] = true
			}
		}
		if len(names) > 0 {
			p.count[kind]++
		}
	}
	pos := strconv.Itoa
	// Every kind is present even when the inventory lists none of it: a
	// GPU measured on a node that reported no GPU is refused.
	for _, k := range []string{"gpu", "nvme", "disk", "nic", "dimm", "cpu", "memory"} {
		add(k)
	}
	for i, g := range inv.GetGpus() {
		add("gpu", pos(i), pos(int(g.GetIndex())), g.GetPciAddress())
	}
	for i, c := range inv.GetNvme() {
		add("nvme", pos(i), c.GetName(), c.GetPciAddress())
	}
	for _, d := range inv.GetDisks() {
		add("disk", d.GetName())
	}
	for _, c := range inv.GetNvme() {
		for _, ns := range c.GetNamespaces() {
			if !p.names["disk"][strings.ToLower(ns)] {
				add("disk", ns)
			}
		}
	}
	for i, n := range inv.GetNics() {
		add("nic", pos(i), n.GetName(), n.GetPciAddress())
	}
	for i, d := range inv.GetDimms() {
		add("dimm", pos(i), d.GetLocator())
	}
	for _, c := range inv.GetProcessors() {
		add("cpu", pos(int(c.GetId())))
	}
	if len(inv.GetProcessors()) == 0 && inv.GetCpuCount() > 0 {
		add("cpu", "0") // sockets unread: the one every machine has
	}
	for _, n := range inv.GetNumaNodes() {
		add("memory", "node"+pos(int(n.GetId())))
	}
	if !p.names["memory"]["node0"] {
		add("memory", "node0") // a check on a node without NUMA information measures node0
	}
	return p
}

// check says whether component names a part of the inventory: its kind
// (before the first '/') is one the inventory describes, then its instance
// (up to the next '/'; "a-b" for a pair of GPUs, both) must be listed. A
// component of a kind the inventory does not describe passes: nil.
func (p inventoryParts) check(component string) error {
	kind, rest, sliced := strings.Cut(component, "/")
	kind = strings.ToLower(kind)
	names, described := p.names[kind]
	if !described || !sliced {
		return nil
	}
	inst, _, _ := strings.Cut(rest, "/")
	insts := []string{inst}
	if kind == "gpu" && strings.Contains(inst, "-") {
		insts = strings.Split(inst, "-")
	}
	for _, i := range insts {
		if i == "" || !names[strings.ToLower(i)] {
			return fmt.Errorf("component %q: the node's inventory lists no %s %q (it lists %d %s)",
				textsafe.BoundedLine(component, maxName), kind, textsafe.BoundedLine(i, maxName), p.count[kind], kind)
		}
	}
	return nil
}

// partsCache is one session's inventory parts, read from the store once
// (a read that failed is tried again at the next verdict).
type partsCache struct {
	loaded bool
	parts  *inventoryParts // nil: no inventory stored for the run
	err    error
}

// load reads the run's newest stored inventory into c.
func (c *partsCache) load(ctx context.Context, st *store.Store, runID string) (bool, error) {
	rec, err := st.RunInventory(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	inv, err := inventory.Unmarshal(rec.JSON)
	if err != nil {
		return true, err
	}
	p := partsOf(inv)
	c.parts = &p
	return true, nil
}

// measuredInInventory keeps v's measurements only when its component is a
// part of the node's inventory as the coordinator stored it for the run
// (what its Hello reported, cleaned and bounded): measurements of a
// component the inventory does not list are refused, never stored, so
// never a fleet sample, and the verdict says so; the refusal is a security
// event. A run with no stored inventory has no part to measure: the
// measurements of every component of a kind an inventory describes are
// refused (fail closed). The verdict itself stands as the runner sent it.
func (s *RunnerService) measuredInInventory(ctx context.Context, sess *sessions.Session, peerIP string, v *store.Verdict, c *partsCache, log *slog.Logger) {
	if v == nil || len(v.Measurements) == 0 {
		return
	}
	if !c.loaded {
		c.loaded, c.err = c.load(ctx, s.Store, sess.RunID)
	}
	var why error
	switch {
	case c.err != nil:
		why = fmt.Errorf("component %q: the node's inventory could not be read: %w", textsafe.BoundedLine(v.Component, maxName), c.err)
	case c.parts == nil:
		if partsOf(nil).check(v.Component) != nil {
			why = fmt.Errorf("component %q: no inventory is stored for run %s", textsafe.BoundedLine(v.Component, maxName), sess.RunID)
		}
	default:
		why = c.parts.check(v.Component)
	}
	if why == nil {
		return
	}
	detail := fmt.Sprintf("verdict %s %s: %d measurements refused: %v", v.Component, v.Check, len(v.Measurements), why)
	log.Warn("measurements refused: the component is not in the node's inventory", "component", v.Component, "check", v.Check, "err", why)
	s.security(ctx, auditMeasuredComponent, sess, peerIP, detail)
	v.Measurements = nil
	// First, so that a runner's message at its bound cannot cut it off.
	v.Message = textsafe.Bounded(strings.TrimSpace("[coordinator: measurements refused, never fleet samples: "+why.Error()+"] "+v.Message), maxMessage)
}
