package manifests

import "testing"

func TestSmoke(t *testing.T) {
	for _, p := range []string{"examples/hgx-b200.yaml", "examples/qemu-nvme.yaml"} {
		d, err := LoadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", b)
	}
}
