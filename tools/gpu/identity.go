package gpu

import "fmt"

// Identity is what names one GPU for a replacement: NVML's serial (the
// board label's), UUID, VBIOS version and board part number, with where it
// sits, and the HBM temperature peak seen while sampling. cure-nvml prints
// one per GPU beside the verdicts; the runner puts them in the GPU
// verdicts and the report.
type Identity struct {
	Component       string `json:"component"`
	BusID           string `json:"busId,omitempty"`
	Name            string `json:"name,omitempty"`
	UUID            string `json:"uuid,omitempty"`
	Serial          string `json:"serial,omitempty"`
	VBIOS           string `json:"vbios,omitempty"`
	BoardPartNumber string `json:"boardPartNumber,omitempty"`
	// MemoryTempPeakC is the highest HBM temperature sampled (°C); 0 when
	// the board has no memory sensor NVML reads.
	MemoryTempPeakC int `json:"memoryTempPeakC,omitempty"`
}

// Lines are the identity as "key: value" lines (api/curev1's identity
// evidence block), empty values left out.
func (id Identity) Lines() []string {
	var out []string
	for _, kv := range [][2]string{{"name", id.Name}, {"serial", id.Serial}, {"uuid", id.UUID}, {"vbios", id.VBIOS},
		{"board part number", id.BoardPartNumber}, {"pci", id.BusID}} {
		if kv[1] != "" {
			out = append(out, kv[0]+": "+kv[1])
		}
	}
	if id.MemoryTempPeakC > 0 {
		out = append(out, fmt.Sprintf("memory temp peak: %d C", id.MemoryTempPeakC))
	}
	return out
}

// MemoryPeakC is the highest HBM temperature sampled, if any was read.
func (d *DeviceObservation) MemoryPeakC() (uint32, bool) {
	peak, ok := uint32(0), false
	for _, s := range d.Samples {
		if s.MemC.Err == nil && s.MemC.V > 0 {
			peak, ok = max(peak, s.MemC.V), true
		}
	}
	return peak, ok
}

// Identities lists the identity of every GPU that answered, in the
// observation's order; a query that failed leaves its field empty.
func Identities(obs *Observation) []Identity {
	var out []Identity
	for i := range obs.Devices {
		d := &obs.Devices[i]
		if d.Err != nil {
			continue
		}
		id := Identity{Component: d.Component, BusID: d.BusID}
		id.Name, _ = value(d.Name)
		id.UUID, _ = value(d.UUID)
		id.Serial, _ = value(d.Serial)
		id.VBIOS, _ = value(d.VBIOS)
		id.BoardPartNumber, _ = value(d.BoardPN)
		if m, ok := d.MemoryPeakC(); ok {
			id.MemoryTempPeakC = int(m)
		}
		out = append(out, id)
	}
	return out
}

func value(r reading[string]) (string, bool) {
	if r.Err != nil {
		return "", false
	}
	return r.V, true
}
