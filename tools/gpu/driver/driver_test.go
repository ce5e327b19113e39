package driver

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

var hgx = &Manifest{Version: "570.86.15", Modules: []string{"nvidia", "nvidia-uvm", "nvidia_modeset"},
	FabricManager: "/usr/bin/nv-fabricmanager", FabricManagerArgs: []string{"-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg"}}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    *Manifest
		s    State
		want []string
		err  string
	}{
		{"no bundle", nil, State{GPUs: 8}, nil, ""},
		{"no GPU", hgx, State{NVSwitches: 4}, nil, ""},
		{"HGX from scratch", hgx, State{GPUs: 8, NVSwitches: 4},
			[]string{"load nvidia", "load nvidia-uvm", "load nvidia_modeset", "start /usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg"}, ""},
		{"PCIe GPUs need no fabric manager", hgx, State{GPUs: 2}, []string{"load nvidia", "load nvidia-uvm", "load nvidia_modeset"}, ""},
		{"already up", hgx, State{GPUs: 8, NVSwitches: 4, FMRunning: true,
			Loaded: map[string]bool{"nvidia": true, "nvidia_uvm": true, "nvidia_modeset": true}}, nil, ""},
		{"half loaded", hgx, State{GPUs: 8, NVSwitches: 4, FMRunning: true, Loaded: map[string]bool{"nvidia": true}},
			[]string{"load nvidia-uvm", "load nvidia_modeset"}, ""},
		{"NVSwitches without fabric manager", &Manifest{Version: "570", Modules: []string{"nvidia"}}, State{GPUs: 8, NVSwitches: 4}, nil,
			"4 NVSwitches on the bus but driver bundle 570 has no fabric manager"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acts, err := Plan(tc.m, tc.s)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range acts {
				got = append(got, strings.TrimSpace(strings.Split(a.String(), " (")[0]))
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("plan = %q, want %q", got, tc.want)
			}
		})
	}
}

// hgxRoot is an HGX-like node: 2 GPUs, 1 NVSwitch, nvidia already loaded,
// the bundle's manifest and a stub fabric manager that records its start.
func hgxRoot(t *testing.T) (root, marker string) {
	root = t.TempDir()
	for addr, class := range map[string]string{"0000:1b:00.0": "0x030200", "0000:43:00.0": "0x030200", "0000:05:00.0": "0x068000", "0000:06:00.0": "0x040300"} {
		write(t, root, "sys/bus/pci/devices/"+addr+"/vendor", "0x10de\n")
		write(t, root, "sys/bus/pci/devices/"+addr+"/class", class+"\n")
	}
	write(t, root, "sys/bus/pci/devices/0000:00:03.0/vendor", "0x1af4\n")
	write(t, root, "sys/bus/pci/devices/0000:00:03.0/class", "0x068000\n")
	write(t, root, "proc/modules", "nvidia 1 0 - Live 0x0000000000000000 (POE)\nvirtio_net 1 0 - Live 0x0\n")
	write(t, root, "proc/1/comm", "init\n")
	marker = filepath.Join(root, "fm-started")
	fm := filepath.Join(root, "usr/bin/nv-fabricmanager")
	write(t, root, "usr/bin/nv-fabricmanager", "#!/bin/sh\n[ \"$1\" = -c ] || exit 3\necho \"$2\" > "+marker+"\n")
	m := *hgx
	m.FabricManager = fm
	b, _ := json.Marshal(m)
	write(t, root, ManifestPath, string(b))
	return root, marker
}

func TestEnsureLoadsThenStartsFabricManager(t *testing.T) {
	root, marker := hgxRoot(t)
	var loaded []string
	acts, err := Ensure(context.Background(), root, Seams{
		Load: func(name string) error {
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("module %s loaded after the fabric manager started", name)
			}
			loaded = append(loaded, name)
			return nil
		},
		Start: ExecStart, // the stub, really executed
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(loaded, ",") != "nvidia-uvm,nvidia_modeset" || len(acts) != 3 {
		t.Errorf("loaded %v, actions %v", loaded, acts)
	}
	if b, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(b)) != "/usr/share/nvidia/nvswitch/fabricmanager.cfg" {
		t.Errorf("fabric manager not started with its config: %q %v", b, err)
	}
	// Running now: a second Ensure does nothing.
	write(t, root, "proc/77/comm", "nv-fabricmanager\n")
	write(t, root, "proc/modules", "nvidia 1\nnvidia_uvm 1\nnvidia_modeset 1\n")
	acts, err = Ensure(context.Background(), root, Seams{})
	if err != nil || len(acts) != 0 {
		t.Errorf("second ensure: %v %v", acts, err)
	}
}

func TestEnsureFailuresNamed(t *testing.T) {
	root, _ := hgxRoot(t)
	_, err := Ensure(context.Background(), root, Seams{Load: func(name string) error {
		if name == "nvidia_modeset" {
			return errors.New("Unknown symbol drm_fb_helper_alloc_info")
		}
		return nil
	}, Start: ExecStart})
	if err == nil || !strings.Contains(err.Error(), "load nvidia_modeset") || !strings.Contains(err.Error(), "Unknown symbol") {
		t.Errorf("err = %v", err)
	}
	write(t, root, "usr/bin/nv-fabricmanager", "#!/bin/sh\necho 'NVSwitch 0 not found' >&2\nexit 1\n")
	_, err = Ensure(context.Background(), root, Seams{Load: func(string) error { return nil }, Start: ExecStart})
	if err == nil || !strings.Contains(err.Error(), "start ") || !strings.Contains(err.Error(), "NVSwitch 0 not found") {
		t.Errorf("err = %v", err)
	}
	// No bundle in the image: nothing to do, not an error.
	if acts, err := Ensure(context.Background(), t.TempDir(), Seams{}); acts != nil || err != nil {
		t.Errorf("no bundle: %v %v", acts, err)
	}
}
