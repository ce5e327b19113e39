package boot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseCmdline(t *testing.T) {
	c := ParseCmdline(`console=ttyS0 panic=-1 cure.coordinator=10.0.2.2:7443 cure.token=abc123 cure.node=node-1 cure.http=http://10.0.2.2:8080/ cure.debug=1 quiet note="a b"` + "\n")
	if c.Coordinator != "10.0.2.2:7443" || c.Token != "abc123" || c.Node != "node-1" {
		t.Errorf("coordinator/token/node = %q %q %q", c.Coordinator, c.Token, c.Node)
	}
	if c.HTTP != "http://10.0.2.2:8080" {
		t.Errorf("HTTP = %q, want trailing slash trimmed", c.HTTP)
	}
	if !c.Debug {
		t.Error("Debug = false, want true")
	}
	if v, ok := c.Params["quiet"]; !ok || v != "" {
		t.Errorf("bare flag quiet = %q,%v", v, ok)
	}
	if c.Params["note"] != "a b" {
		t.Errorf("quoted value = %q, want %q", c.Params["note"], "a b")
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestCmdlineValidate(t *testing.T) {
	err := ParseCmdline("console=ttyS0 cure.debug=0").Validate()
	if err == nil || !strings.Contains(err.Error(), "cure.coordinator") || !strings.Contains(err.Error(), "cure.token") {
		t.Fatalf("Validate() = %v, want both missing parameters named", err)
	}
	if ParseCmdline("cure.debug=0").Debug {
		t.Error("cure.debug=0 parsed as true")
	}
	err = ParseCmdline("cure.coordinator=host cure.token=x").Validate()
	if err == nil || !strings.Contains(err.Error(), "HOST:PORT") {
		t.Fatalf("Validate() = %v, want HOST:PORT complaint", err)
	}
}

func TestReadCmdline(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cmdline"), []byte("cure.node=n7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := ReadCmdline(dir)
	if err != nil || c.Node != "n7" {
		t.Fatalf("ReadCmdline = %+v, %v", c, err)
	}
	if _, err := ReadCmdline(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("ReadCmdline on missing dir: want error")
	}
}

// An enlisting machine's command line: inspect mode with a discovery
// token and no boot token; another mode, or inspect without its token, is
// refused.
func TestCmdlineInspect(t *testing.T) {
	c := ParseCmdline("cure.coordinator=10.0.2.2:8443 cure.http=http://10.0.2.2:8080 cure.mode=inspect cure.enlist=abc")
	if err := c.Validate(); err != nil || !c.Inspect() || c.Enlist != "abc" || c.Token != "" {
		t.Fatalf("inspect command line: %+v, %v", c, err)
	}
	if err := ParseCmdline("cure.coordinator=h:1 cure.mode=inspect cure.token=x").Validate(); err == nil || !strings.Contains(err.Error(), "cure.enlist=") {
		t.Fatalf("inspect without a discovery token: %v", err)
	}
	if err := ParseCmdline("cure.coordinator=h:1 cure.mode=wipe cure.token=x").Validate(); err == nil || !strings.Contains(err.Error(), "cure.mode") {
		t.Fatalf("cure.mode=wipe: %v", err)
	}
}
