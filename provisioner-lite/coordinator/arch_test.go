package coordinator

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArm64SKUNeedsArm64Image: a SKU with spec.arch arm64 is refused at
// start without --image-dir-arm64 (naming the SKU file and the field), and
// an --image-dir-arm64 holding another architecture's image is refused.
func TestArm64SKUNeedsArm64Image(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "grace.yaml"), []byte("apiVersion: cure.dev/v1\nkind: SKU\nmetadata: {name: grace}\nspec:\n  arch: arm64\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "x86.yaml"), []byte("apiVersion: cure.dev/v1\nkind: SKU\nmetadata: {name: x86}\nspec: {}\n"), 0o644)
	log := slog.New(slog.DiscardHandler)
	c := &Config{ManifestDir: dir, StateDir: t.TempDir()}
	if err := checkArchImages(c, []string{"x86"}, nil, log); err != nil {
		t.Fatalf("amd64 SKUs only: %v", err)
	}
	err := checkArchImages(c, []string{"x86", "grace"}, nil, log)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "grace.yaml")+": spec.arch: arm64, and this coordinator has no arm64 CURE image") ||
		!strings.Contains(err.Error(), "--image-dir-arm64 DIR") {
		t.Fatalf("arm64 SKU without an arm64 image: %v", err)
	}
	img := t.TempDir()
	os.WriteFile(filepath.Join(img, "report.json"), []byte(`{"kind":"image","arch":"amd64"}`), 0o644)
	c.ImageDirArm64 = img
	if err := checkArchImages(c, []string{"grace"}, nil, log); err == nil || !strings.Contains(err.Error(), `report.json says arch "amd64": build it with cure-build --arch arm64`) {
		t.Fatalf("an amd64 image as the arm64 one: %v", err)
	}
	if got := c.imageDirs(); got["arm64"] != img || len(got) != 1 {
		t.Errorf("imageDirs = %v", got)
	}
}
