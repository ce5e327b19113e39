package suite

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
)

// TestRegistryCoversManifests: every check type the manifests package
// accepts has exactly one spec, and the registry has no other.
func TestRegistryCoversManifests(t *testing.T) {
	count := map[string]int{}
	for _, s := range Specs() {
		count[s.Type]++
	}
	accepted := manifests.CheckTypes()
	for _, typ := range accepted {
		if count[typ] != 1 {
			t.Errorf("check type %s: %d registry entries, want 1", typ, count[typ])
		}
	}
	for typ := range count {
		if !slices.Contains(accepted, typ) {
			t.Errorf("registry entry %s: not a check type manifests accepts", typ)
		}
	}
	if len(registry) != len(accepted) {
		t.Errorf("registry has %d types, manifests accepts %d", len(registry), len(accepted))
	}
}

// TestSpecDeclarations: each spec's declaration agrees with its builder
// and with the rest of the tree: the params its builder reads are the
// ones it declares, of the declared kind; it writes exactly when it takes
// allowWrite; its first tool is the one manifests.CheckTools names.
func TestSpecDeclarations(t *testing.T) {
	for _, s := range Specs() {
		if s.build == nil {
			t.Errorf("%s: no builder", s.Type)
		}
		if first := manifests.CheckTools(s.Type); first != "" && (len(s.Tools) == 0 || s.Tools[0] != first) ||
			first == "" && len(s.Tools) > 0 {
			t.Errorf("%s: tools %v, manifests.CheckTools says %q", s.Type, s.Tools, first)
		}
		_, takesWrite := s.param("allowWrite")
		if s.Writes != takesWrite {
			t.Errorf("%s: Writes %v but allowWrite declared %v", s.Type, s.Writes, takesWrite)
		}
		if s.OpenParams {
			if len(s.Params) > 0 {
				t.Errorf("%s: open params, yet declares %v", s.Type, s.Params)
			}
			continue
		}
		declared := map[string]Kind{}
		for _, d := range s.Params {
			if _, dup := declared[d.Name]; dup {
				t.Errorf("%s: param %s declared twice", s.Type, d.Name)
			}
			declared[d.Name] = d.Kind
		}
		p := newParams(0, buildable(s.Type))
		var c checks.Check
		build(&c, buildable(s.Type), p, Env{Root: "/"})
		if !maps.Equal(p.read, declared) {
			t.Errorf("%s: builder reads %v, spec declares %v", s.Type, p.read, declared)
		}
	}
}

// buildable is a check of type typ that builds without a problem.
func buildable(typ string) manifests.Check {
	mc := manifests.Check{Name: "c", Type: typ}
	switch typ {
	case manifests.CheckMemory:
		mc.Params = map[string]any{"fraction": 0.5}
	case manifests.CheckCPU:
		mc.Duration = manifests.Duration(time.Second)
	case manifests.CheckNICThroughput:
		mc.Params = map[string]any{"server": "10.0.0.1"}
	case manifests.CheckSite:
		mc.Program = &manifests.SiteProgram{URL: "p", SHA256: strings.Repeat("ab", 32), Size: 10}
	case manifests.CheckNodePair:
		floor := 1000.0
		mc.Thresholds = map[string]manifests.Threshold{PairMetricEthernet: {Min: &floor}}
	}
	return mc
}

// TestBuildEachType builds one check of every registered type, with and
// without the GPU helper and the disk-write permission: each builds
// without a problem into a check that can run.
func TestBuildEachType(t *testing.T) {
	gpu := func(manifests.Check) (checks.Func, error) {
		return func(context.Context) ([]checks.Verdict, error) { return nil, nil }, nil
	}
	for _, s := range Specs() {
		for _, env := range []Env{{}, {GPU: gpu, AllowDiskWrites: true}} {
			suite := &manifests.ValidationSuite{Metadata: manifests.Metadata{Name: "one"}}
			suite.Spec.Checks = []manifests.Check{buildable(s.Type)}
			cs, err := Build(suite, env)
			if err != nil {
				t.Errorf("%s: %v", s.Type, err)
				continue
			}
			if len(cs) != 1 || cs[0].Func == nil || cs[0].Type != s.Type {
				t.Errorf("%s: built %+v", s.Type, cs)
			}
		}
	}
}

// TestUnknownParamNamesField: a param the type does not declare is an
// error naming the field and the params the type takes; an unregistered
// type is an error and a check that cannot run.
func TestUnknownParamNamesField(t *testing.T) {
	mc := buildable(manifests.CheckThermal)
	mc.Params = map[string]any{"margin": 5}
	p := newParams(3, mc)
	var c checks.Check
	build(&c, mc, p, Env{Root: "/"})
	errs := p.done()
	want := "spec.checks[3] (c, type thermal): params.margin: unknown parameter for this check type (want marginC, ignoreMax)"
	if len(errs) != 1 || errs[0] != want {
		t.Errorf("errors %q, want [%q]", errs, want)
	}

	mc = manifests.Check{Name: "x", Type: "no-such-type"}
	p = newParams(0, mc)
	build(&c, mc, p, Env{})
	if errs := p.done(); len(errs) != 1 || !strings.Contains(errs[0], `type: "no-such-type" has no implementation`) {
		t.Errorf("errors %q", errs)
	}
	if _, err := c.Func(context.Background()); err == nil {
		t.Error("an unregistered type's check ran")
	}
}

// TestWriteNeedsMode: a storage check's scratch write runs only when the
// mode allows writes; otherwise its verdicts say it was not run.
func TestWriteNeedsMode(t *testing.T) {
	mc := buildable(manifests.CheckStorageThroughput)
	mc.Params = map[string]any{"allowWrite": true, "scratchDevice": "nvme1n1", "scratchLength": int64(4096)}
	for _, allow := range []bool{false, true} {
		p := newParams(0, mc)
		sc, note := scratchWrite(p, Env{AllowDiskWrites: allow})
		if errs := p.done(); len(errs) > 0 {
			t.Fatal(errs)
		}
		if allow != (sc != nil) || allow != (note == "") {
			t.Errorf("allow %v: scratch %v, note %q", allow, sc, note)
		}
	}
}
