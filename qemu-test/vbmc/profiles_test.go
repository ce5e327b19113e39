package vbmc

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every profile names captures that exist, are JSON and are listed in
// profiles/README.md with their source; every profile builds a BMC.
func TestProfilesCapturesAndConfigs(t *testing.T) {
	readme, err := os.ReadFile("profiles/README.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range Profiles() {
		if seen[p.Name] {
			t.Errorf("duplicate profile %s", p.Name)
		}
		seen[p.Name] = true
		for _, c := range p.Captures {
			if strings.HasPrefix(c, "mockups/") {
				if _, err := os.Stat(c); err != nil {
					t.Errorf("%s: %v", p.Name, err)
				}
				continue
			}
			b, err := os.ReadFile(c)
			if err != nil {
				t.Errorf("%s: %v", p.Name, err)
				continue
			}
			if !json.Valid(b) {
				t.Errorf("%s: %s is not JSON", p.Name, c)
			}
			rel := strings.TrimPrefix(c, "profiles/")
			if !strings.Contains(string(readme), "`"+rel+"`") && !strings.Contains(string(readme), "`"+filepath.Dir(rel)+"/*.json`") {
				t.Errorf("%s: %s has no row in profiles/README.md", p.Name, c)
			}
		}
		b, err := New(p.Apply(Config{Name: p.Name, Logger: testLogger(t)}), NewFakeMachine())
		if err != nil {
			t.Errorf("%s: %v", p.Name, err)
			continue
		}
		b.Close(t.Context())
	}
	if _, err := ProfileByName("no-such"); err == nil {
		t.Error("ProfileByName(no-such) succeeded")
	}
}
