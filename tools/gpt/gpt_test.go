package gpt

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// image makes an 8 MiB GPT image with sfdisk: an ESP-like partition and a
// root partition ending 1 MiB before the backup table, as image builders do.
func image(t *testing.T, script string) string {
	t.Helper()
	if _, err := exec.LookPath("sfdisk"); err != nil {
		t.Skip("sfdisk not installed")
	}
	p := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 8<<20); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", p)
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	return p
}

const twoParts = "label: gpt\nstart=2048, size=4096, type=U, name=EFI\nstart=6144, size=8192, type=L, name=root\n"

type sfdiskDump struct {
	PartitionTable struct {
		LastLBA    uint64 `json:"lastlba"`
		Partitions []struct {
			Node  string `json:"node"`
			Start uint64 `json:"start"`
			Size  uint64 `json:"size"`
			Name  string `json:"name"`
		} `json:"partitions"`
	} `json:"partitiontable"`
}

func dump(t *testing.T, p string) sfdiskDump {
	t.Helper()
	out, err := exec.Command("sfdisk", "--json", p).Output()
	if err != nil {
		t.Fatalf("sfdisk --json: %v", err)
	}
	var d sfdiskDump
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("sfdisk --json output: %v\n%s", err, out)
	}
	return d
}

func verify(t *testing.T, p string) string {
	t.Helper()
	out, err := exec.Command("sfdisk", "--verify", p).CombinedOutput()
	if err != nil {
		t.Fatalf("sfdisk --verify: %v\n%s", err, out)
	}
	return string(out)
}

func TestFixRelocatesBackupAndGrows(t *testing.T) {
	p := image(t, twoParts)
	if err := os.Truncate(p, 64<<20); err != nil { // the "real disk" is larger
		t.Fatal(err)
	}
	// sfdisk exits 0 either way; its text is the verdict.
	if out := verify(t, p); !strings.Contains(out, "The backup GPT table is not on the end of the device") {
		t.Fatalf("sfdisk --verify did not see the misplaced backup before the fix: %s", out)
	}
	plan, err := FixDevice(p, GrowLast) // root, partition 2, ends last
	if err != nil {
		t.Fatal(err)
	}
	const last = 64<<20/512 - 1
	if plan.NewAlternateLBA != last || plan.OldAlternateLBA != 8<<20/512-1 {
		t.Errorf("plan = %s", plan)
	}
	if plan.Grow == nil || plan.Grow.Number != 2 || plan.Grow.Name != "root" {
		t.Fatalf("plan does not grow root: %s", plan)
	}
	// Last usable = last - 33 (32 entry sectors + header); the partition
	// ends on the last 1 MiB boundary at or before it.
	if plan.NewLastUsableLBA != last-33 || plan.Grow.NewLast != (last-33+1)/2048*2048-1 {
		t.Errorf("plan = %s", plan)
	}
	if out := verify(t, p); !strings.Contains(out, "No errors detected") {
		t.Errorf("sfdisk --verify after fix: %s", out)
	}
	d := dump(t, p)
	if d.PartitionTable.LastLBA != last-33 {
		t.Errorf("sfdisk sees last LBA %d, want %d", d.PartitionTable.LastLBA, last-33)
	}
	parts := d.PartitionTable.Partitions
	if len(parts) != 2 || parts[0].Start != 2048 || parts[0].Size != 4096 || parts[1].Start != 6144 ||
		parts[1].Start+parts[1].Size-1 != plan.Grow.NewLast || parts[1].Name != "root" {
		t.Errorf("partitions after fix: %+v", parts)
	}
	// The image's old backup header is gone.
	f, _ := os.Open(p)
	defer f.Close()
	sec := make([]byte, 512)
	f.ReadAt(sec, int64(plan.OldAlternateLBA)*512)
	if string(sec[:8]) == signature {
		t.Error("stale backup header left at the image's end")
	}
	// Running again changes nothing.
	again, err := FixDevice(p, 2)
	if err != nil || !again.Noop() {
		t.Errorf("second run: plan %v, err %v", again, err)
	}
}

func TestFixWithoutGrowKeepsPartitions(t *testing.T) {
	p := image(t, twoParts)
	os.Truncate(p, 16<<20)
	plan, err := FixDevice(p, 0)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Grow != nil || plan.NewAlternateLBA != 16<<20/512-1 {
		t.Errorf("plan = %s", plan)
	}
	if out := verify(t, p); !strings.Contains(out, "No errors detected") {
		t.Errorf("sfdisk --verify after fix: %s", out)
	}
	parts := dump(t, p).PartitionTable.Partitions
	if parts[1].Size != 8192 {
		t.Errorf("root resized without being asked: %+v", parts[1])
	}
}

func TestGrowRefusals(t *testing.T) {
	p := image(t, twoParts)
	os.Truncate(p, 16<<20)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := Read(f, 512, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PlanFix(tab, 16<<20, 1, 0); err == nil || !strings.Contains(err.Error(), `partition 2 ("root") lies after it at LBA 6144: refusing`) {
		t.Errorf("grow of a middle partition: %v", err)
	}
	if _, err := PlanFix(tab, 16<<20, 7, 0); err == nil || !strings.Contains(err.Error(), "grow partition 7: no such partition (table has partitions 1,2)") {
		t.Errorf("grow of a missing partition: %v", err)
	}
	if _, err := PlanFix(tab, 16<<20, 2, 1000); err == nil || !strings.Contains(err.Error(), "alignment 1000 bytes") {
		t.Errorf("bad alignment: %v", err)
	}
	// A disk smaller than the image.
	if _, err := Read(f, 512, 4<<20); err == nil || !strings.Contains(err.Error(), "image larger than the disk?") {
		t.Errorf("small disk: %v", err)
	}
}

func TestReadRejectsCorruption(t *testing.T) {
	p := image(t, twoParts)
	orig, _ := os.ReadFile(p)
	tests := []struct {
		name    string
		mut     func(b []byte)
		wantErr string
	}{
		{"no MBR signature", func(b []byte) { b[510] = 0 }, "LBA 0: expected MBR signature 55 AA"},
		{"no protective entry", func(b []byte) { b[446+4] = 0x83 }, "no protective MBR entry"},
		{"header signature", func(b []byte) { b[512] = 'X' }, `primary header at LBA 1: expected signature "EFI PART"`},
		{"header CRC", func(b []byte) { b[512+40] ^= 1 }, "primary header at LBA 1: header CRC32"},
		{"entries CRC", func(b []byte) { b[1024+60] ^= 1 }, "partition entry array at LBA 2: CRC32"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), orig...)
			tc.mut(b)
			q := filepath.Join(t.TempDir(), "x.img")
			os.WriteFile(q, b, 0o644)
			_, err := FixDevice(q, 2)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), q) {
				t.Errorf("err = %v, want containing %q and the path", err, tc.wantErr)
			}
			after, _ := os.ReadFile(q)
			if string(after) != string(b) {
				t.Error("a rejected table was modified")
			}
		})
	}
}
