package gpu

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestIdentities: every answering GPU is named by its serial, UUID, VBIOS
// and board part number; the HBM peak appears where the board has the
// sensor; a lost GPU has no identity, and a failed query leaves its field
// empty without hiding the others.
func TestIdentities(t *testing.T) {
	l := newFakeLib(3)
	l.devs[0].memTemp = 47
	l.devs[1].lost = true
	obs := Collect(context.Background(), l, Expect{}, Options{Duration: 0, Interval: time.Millisecond})
	ids := Identities(obs)
	if len(ids) != 2 {
		t.Fatalf("identities %+v", ids)
	}
	a := ids[0]
	if a.Component != "gpu/0" || a.BusID != "0000:18:00.0" || a.Serial != "1654024085490" || a.UUID != "GPU-00000000:18:00.0" ||
		a.VBIOS != "96.00.A5.00.1A" || a.BoardPartNumber != "692-2G520-0282-000" || a.Name != "NVIDIA H100 80GB HBM3" || a.MemoryTempPeakC != 47 {
		t.Errorf("gpu/0 identity %+v", a)
	}
	if ids[1].Component != "gpu/2" || ids[1].MemoryTempPeakC != 0 {
		t.Errorf("gpu/2 identity %+v", ids[1])
	}
	want := []string{"name: NVIDIA H100 80GB HBM3", "serial: 1654024085490", "uuid: GPU-00000000:18:00.0", "vbios: 96.00.A5.00.1A",
		"board part number: 692-2G520-0282-000", "pci: 0000:18:00.0", "memory temp peak: 47 C"}
	if !slices.Equal(a.Lines(), want) {
		t.Errorf("lines %q", a.Lines())
	}
	for _, v := range Evaluate(obs, Expect{MaxTemperatureC: 85}) {
		if v.Check != CheckTemperature {
			continue
		}
		switch v.Component {
		case "gpu/0":
			if v.Observed != "peak 71 C, HBM peak 47 C" {
				t.Errorf("gpu/0 temperature observed %q", v.Observed)
			}
		case "gpu/2":
			if v.Observed != "peak 71 C" {
				t.Errorf("gpu/2 (no HBM sensor) observed %q", v.Observed)
			}
		}
	}
	obs.Devices[0].Serial = reading[string]{Err: errors.New("nvmlDeviceGetSerial: Unknown Error")}
	if id := Identities(obs)[0]; id.Serial != "" || id.UUID == "" {
		t.Errorf("a failed serial read: %+v", id)
	}
}
