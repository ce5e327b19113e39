package checks_test

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/netcheck"
	"github.com/cure-oss/cure/tools/checks/nvmehealth"
	"github.com/cure-oss/cure/tools/checks/thermal"
	"github.com/cure-oss/cure/tools/nvme"
)

// tree writes files (path -> content) under a new root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func byComponent(t *testing.T, vs []checks.Verdict) map[string]checks.Verdict {
	t.Helper()
	m := map[string]checks.Verdict{}
	for _, v := range vs {
		if _, dup := m[v.Component]; dup {
			t.Errorf("two verdicts for %s", v.Component)
		}
		m[v.Component] = v
	}
	return m
}

func expect(t *testing.T, m map[string]checks.Verdict, comp string, st checks.Status, contains ...string) {
	t.Helper()
	v, ok := m[comp]
	if !ok {
		t.Errorf("no verdict for %s (have %v)", comp, keys(m))
		return
	}
	if v.Status != st {
		t.Errorf("%s: status %s, want %s: %s", comp, v.Status, st, v)
	}
	all := v.Observed + " | " + v.Expected + " | " + v.Message
	for _, c := range contains {
		if !strings.Contains(all, c) {
			t.Errorf("%s: %q not in %q", comp, c, all)
		}
	}
}

func keys(m map[string]checks.Verdict) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// smartLog builds a SMART / Health log page at NVMe 2.0 Figure 207 offsets.
func smartLog(warn, spare, spareThresh, used uint8, mediaErrors uint64, tempK uint16) []byte {
	b := make([]byte, nvme.SMARTLogSize)
	b[0] = warn
	binary.LittleEndian.PutUint16(b[1:], tempK)
	b[3], b[4], b[5] = spare, spareThresh, used
	binary.LittleEndian.PutUint64(b[128:], 1234) // power-on hours
	binary.LittleEndian.PutUint64(b[160:], mediaErrors)
	return b
}

// fakeNVMe answers Get Log Page 02h with a per-device page.
type fakeNVMe struct {
	page   []byte
	closed *int
}

func (f fakeNVMe) AdminCommand(cmd *nvme.Command) (uint32, error) {
	if cmd.Opcode != nvme.OpGetLogPage || cmd.CDW10&0xff != uint32(nvme.LogSMARTHealth) || cmd.NSID != nvme.NSIDAll {
		return 0, &nvme.StatusError{SCT: nvme.SCTGeneric, SC: 0x02, Opcode: cmd.Opcode}
	}
	copy(cmd.Data, f.page)
	return 0, nil
}

func (f fakeNVMe) Close() error { *f.closed++; return nil }

func TestSysfsChecks(t *testing.T) {
	ctx := context.Background()

	t.Run("nvme", func(t *testing.T) {
		files := map[string]string{}
		for _, c := range []string{"nvme0", "nvme1", "nvme2", "nvme3", "nvme4"} {
			d := "sys/class/nvme/" + c + "/"
			files[d+"model"] = "Test U.2"
			files[d+"serial"] = "S" + c
			files[d+"firmware_rev"] = "1.0"
			files[d+"address"] = "0000:01:00.0"
		}
		root := tree(t, files)
		pages := map[string][]byte{
			"nvme0": smartLog(0, 100, 10, 1, 0, 310),                            // healthy
			"nvme1": smartLog(nvme.WarnReliabilityDegraded, 100, 10, 1, 0, 310), // critical warning
			"nvme2": smartLog(0, 5, 10, 1, 0, 310),                              // spare below its threshold
			"nvme3": smartLog(0, 100, 10, 97, 3, 310),                           // worn out, media errors
		}
		closed := 0
		open := func(path string) (nvmehealth.Device, error) {
			if filepath.Dir(path) != filepath.Join(root, "dev") {
				t.Errorf("opened %s, want a node under %s/dev", path, root)
			}
			p, ok := pages[filepath.Base(path)]
			if !ok {
				return nil, os.ErrPermission
			}
			return fakeNVMe{page: p, closed: &closed}, nil
		}
		vs, err := nvmehealth.Check(ctx, nvmehealth.Options{
			Root: root, Open: open,
			PercentageUsed: checks.AtMost(80), MediaErrors: checks.AtMost(0),
		})
		if err != nil {
			t.Fatal(err)
		}
		m := byComponent(t, vs)
		expect(t, m, "nvme/0", checks.Pass, "criticalWarning=0", "availableSpare=100", "availableSpare>=10", "tempC=37", "powerOnHours=1234", "nvme0 Test U.2 serial Snvme0")
		expect(t, m, "nvme/1", checks.Fail, "criticalWarning=4 outside criticalWarning<=0", "reliability degraded")
		expect(t, m, "nvme/2", checks.Fail, "availableSpare=5 outside availableSpare>=10")
		expect(t, m, "nvme/3", checks.Fail, "percentageUsed=97 outside percentageUsed<=80", "mediaErrors=3 outside mediaErrors<=0")
		expect(t, m, "nvme/4", checks.Error, "permission denied")
		if closed != 4 {
			t.Errorf("closed %d devices, want 4", closed)
		}
		// A warning bit the suite masks does not fail the drive.
		v := nvmehealth.Judge("nvme/9", mustParse(t, smartLog(nvme.WarnTemperature, 100, 10, 0, 0, 300)), nvmehealth.Options{IgnoreWarnings: nvme.WarnTemperature})
		if v.Status != checks.Pass || !strings.Contains(v.Message, "temperature") {
			t.Errorf("masked temperature warning: %s", v)
		}
	})

	t.Run("infiniband", func(t *testing.T) {
		port := func(dev, n, state, phys, rate string, counters map[string]string) map[string]string {
			d := "sys/class/infiniband/" + dev + "/ports/" + n + "/"
			f := map[string]string{d + "state": state, d + "phys_state": phys, d + "rate": rate, d + "link_layer": "InfiniBand"}
			for k, v := range counters {
				f[d+"counters/"+k] = v
			}
			return f
		}
		files := map[string]string{}
		for _, p := range []map[string]string{
			port("mlx5_0", "1", "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", map[string]string{"link_downed": "0", "symbol_error": "7"}),
			port("mlx5_1", "1", "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)", map[string]string{"link_downed": "0", "symbol_error": "0"}),
			port("mlx5_2", "1", "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", map[string]string{"link_downed": "2", "symbol_error": "0"}),
			port("mlx5_3", "1", "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", map[string]string{"link_downed": "1"}),
		} {
			for k, v := range p {
				files[k] = v
			}
		}
		root := tree(t, files)
		// Counters grow while the check waits out its window: mlx5_0 gets
		// symbol errors within its bar, mlx5_3 flaps once more.
		waited := time.Duration(0)
		wait := func(_ context.Context, d time.Duration) error {
			waited = d
			write(t, root, "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error", "9")
			write(t, root, "sys/class/infiniband/mlx5_3/ports/1/counters/link_downed", "2")
			return nil
		}
		vs, err := netcheck.InfiniBand(ctx, netcheck.InfiniBandOptions{
			SysRoot: root, RateGbps: checks.AtLeast(400), Window: 300 * time.Millisecond, Wait: wait,
			Counters: map[string]checks.Limit{"link_downed": checks.AtMost(0), "symbol_error": checks.AtMost(10)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if waited != 300*time.Millisecond {
			t.Errorf("waited %s between counter reads, want the 300ms window", waited)
		}
		m := byComponent(t, vs)
		expect(t, m, "ib/mlx5_0/1", checks.Pass, "state=ACTIVE", "physState=LinkUp", "rateGbps=400", "symbol_error=2", "link_downed=0", "counter deltas over 300ms")
		expect(t, m, "ib/mlx5_1/1", checks.Fail, "state=DOWN outside state=ACTIVE", "physState=Disabled outside physState=LinkUp", "rateGbps=10 outside rateGbps>=400")
		// link_downed was already 2 before the window: only growth counts.
		expect(t, m, "ib/mlx5_2/1", checks.Fail, "rateGbps=200 outside", "link_downed=0")
		if strings.Contains(m["ib/mlx5_2/1"].Message, "link_downed") {
			t.Errorf("mlx5_2 blamed for a pre-existing link_downed count: %s", m["ib/mlx5_2/1"])
		}
		expect(t, m, "ib/mlx5_3/1", checks.Fail, "link_downed=1 outside link_downed<=0", "symbol_error not reported by the device")

		if _, err := netcheck.InfiniBand(ctx, netcheck.InfiniBandOptions{SysRoot: root, Counters: map[string]checks.Limit{"symbol_errors": checks.AtMost(0)}}); err == nil || !strings.Contains(err.Error(), `"symbol_errors"`) {
			t.Errorf("misspelt counter: err = %v", err)
		}
	})

	t.Run("ethernet", func(t *testing.T) {
		nic := func(name, typ, oper, speed string, physical bool) map[string]string {
			d := "sys/class/net/" + name + "/"
			f := map[string]string{d + "type": typ, d + "operstate": oper, d + "speed": speed, d + "duplex": "full"}
			if physical {
				f[d+"device/vendor"] = "0x15b3"
			}
			return f
		}
		files := map[string]string{}
		for _, n := range []map[string]string{
			nic("ens1f0np0", "1", "up", "200000", true),
			nic("ens1f1np1", "1", "up", "100000", true), // negotiated down
			nic("ens2f0np0", "1", "down", "-1", true),   // no link
			nic("lo", "772", "unknown", "", false),      // loopback: not Ethernet
			nic("br0", "1", "up", "10000", false),       // bridge: no device
			nic("ib0", "32", "up", "400000", true),      // IPoIB: the IB check's
		} {
			for k, v := range n {
				files[k] = v
			}
		}
		root := tree(t, files)
		vs, err := netcheck.Ethernet(ctx, netcheck.EthernetOptions{SysRoot: root, SpeedMbps: checks.AtLeast(200000)})
		if err != nil {
			t.Fatal(err)
		}
		m := byComponent(t, vs)
		if len(m) != 3 {
			t.Errorf("verdicts for %v, want only the three physical Ethernet ports", keys(m))
		}
		expect(t, m, "nic/ens1f0np0", checks.Pass, "operstate=up", "speedMbps=200000", "speedMbps>=200000")
		expect(t, m, "nic/ens1f1np1", checks.Fail, "speedMbps=100000 outside speedMbps>=200000")
		expect(t, m, "nic/ens2f0np0", checks.Fail, "operstate=down outside operstate=up", "speedMbps not reported")
	})

	t.Run("hwmon", func(t *testing.T) {
		root := tree(t, map[string]string{
			"sys/class/hwmon/hwmon0/name":            "coretemp",
			"sys/class/hwmon/hwmon0/temp1_label":     "Package id 0",
			"sys/class/hwmon/hwmon0/temp1_input":     "65000",
			"sys/class/hwmon/hwmon0/temp1_max":       "90000",
			"sys/class/hwmon/hwmon0/temp1_crit":      "100000",
			"sys/class/hwmon/hwmon0/temp2_label":     "Core 4",
			"sys/class/hwmon/hwmon0/temp2_input":     "101000", // over crit
			"sys/class/hwmon/hwmon0/temp2_max":       "90000",
			"sys/class/hwmon/hwmon0/temp2_crit":      "100000",
			"sys/class/hwmon/hwmon1/name":            "nvme",
			"sys/class/hwmon/hwmon1/temp1_label":     "Composite",
			"sys/class/hwmon/hwmon1/temp1_input":     "40850",
			"sys/class/hwmon/hwmon1/temp1_max":       "84850",
			"sys/class/hwmon/hwmon1/temp1_crit":      "84850",
			"sys/class/hwmon/hwmon2/name":            "nvme",
			"sys/class/hwmon/hwmon2/temp1_label":     "Composite",
			"sys/class/hwmon/hwmon2/temp1_input":     "50000",
			"sys/class/hwmon/hwmon2/temp1_max":       "84850",
			"sys/class/hwmon/hwmon2/temp1_max_alarm": "1", // the drive says it overheated
			"sys/class/hwmon/hwmon3/name":            "acpitz",
			"sys/class/hwmon/hwmon3/temp1_input":     "27800", // no limits published
		})
		vs, err := thermal.Check(ctx, thermal.Options{SysRoot: root, MarginC: 5})
		if err != nil {
			t.Fatal(err)
		}
		m := byComponent(t, vs)
		expect(t, m, "hwmon/coretemp/Package id 0", checks.Pass, "tempC=65", "tempC<=85", "temp1_crit=100", "temp1_max=90", "margin 5")
		expect(t, m, "hwmon/coretemp/Core 4", checks.Fail, "tempC=101 outside tempC<=85")
		expect(t, m, "hwmon/nvme-1/Composite", checks.Pass, "tempC=40.85", "tempC<=79.85")
		expect(t, m, "hwmon/nvme-2/Composite", checks.Fail, "max_alarm=1 outside max_alarm<=0")
		expect(t, m, "hwmon/acpitz/temp1", checks.Skip, "no temp_crit or temp_max")
		// An absolute bar judges a sensor that publishes no limits.
		vs, err = thermal.Check(ctx, thermal.Options{SysRoot: root, TempC: checks.AtMost(25)})
		if err != nil {
			t.Fatal(err)
		}
		expect(t, byComponent(t, vs), "hwmon/acpitz/temp1", checks.Fail, "tempC=27.80 outside tempC<=25")
	})
}

func write(t *testing.T, root, p, v string) {
	if err := os.WriteFile(filepath.Join(root, p), []byte(v+"\n"), 0o644); err != nil {
		t.Error(err)
	}
}

func mustParse(t *testing.T, b []byte) *nvme.SMARTLog {
	t.Helper()
	l, err := nvme.ParseSMARTLog(b)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
