package metrics

import "github.com/prometheus/client_golang/prometheus"

// poolMetrics is the day-2 pool: nodes per pool state (provisioner-lite/
// pool), counted from the store so every instance shows the whole fleet.
type poolMetrics struct {
	nodes *prometheus.GaugeVec
}

func newPoolMetrics(reg *prometheus.Registry) *poolMetrics {
	p := &poolMetrics{nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "pool_nodes",
		Help: "Nodes per pool state (in_service, draining, drained, revalidating, ready, rma); nodes not in the pool are not counted."},
		[]string{"state"})}
	reg.MustRegister(p.nodes)
	return p
}

// PoolNodes sets the nodes per pool state; every state the caller knows is
// in counts (zeros included), so a state that emptied reads 0.
func (m *Metrics) PoolNodes(counts map[string]int) {
	if m == nil {
		return
	}
	for state, n := range counts {
		m.pool.nodes.WithLabelValues(state).Set(float64(n))
	}
}
