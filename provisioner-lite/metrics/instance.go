package metrics

import "github.com/prometheus/client_golang/prometheus"

// instanceMetrics are what one of several instances behind one address
// shares with the others: whether it holds the network boot front door's
// lease, the manifest bundle it runs, the artifacts it fetched from peers.
type instanceMetrics struct {
	frontDoor    prometheus.Gauge
	bundle       prometheus.Gauge
	fetchedBytes *prometheus.CounterVec
}

func newInstanceMetrics(reg *prometheus.Registry) *instanceMetrics {
	i := &instanceMetrics{
		frontDoor: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "front_door_held",
			Help: "1 while this instance holds the proxy DHCP/TFTP lease and answers network boot clients, 0 while it stands by."}),
		bundle: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "manifest_bundle_version",
			Help: "The version of the manifest bundle from the store this instance runs (0: its own --manifests directory)."}),
		fetchedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "artifact_bytes_fetched_total",
			Help: "Bytes of artifacts fetched on a local miss and verified, by source (peer, mirror)."}, []string{"source"}),
	}
	reg.MustRegister(i.frontDoor, i.bundle, i.fetchedBytes)
	return i
}

// FrontDoorHeld says whether this instance holds the front door's lease.
func (m *Metrics) FrontDoorHeld(held bool) {
	if m == nil {
		return
	}
	v := 0.0
	if held {
		v = 1
	}
	m.inst.frontDoor.Set(v)
}

// ManifestBundle sets the manifest bundle version this instance runs.
func (m *Metrics) ManifestBundle(version int64) {
	if m == nil {
		return
	}
	m.inst.bundle.Set(float64(version))
}

// ArtifactFetched counts an artifact fetched from a peer or the mirror.
func (m *Metrics) ArtifactFetched(source string, bytes int64) {
	if m == nil {
		return
	}
	if source != "mirror" {
		source = "peer" // peer ids are not labels: one series per kind
	}
	m.inst.fetchedBytes.WithLabelValues(source).Add(float64(bytes))
}
