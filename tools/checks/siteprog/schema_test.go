package siteprog

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cure-oss/cure/tools/checks"
)

func TestParseLine(t *testing.T) {
	l, err := ParseLine([]byte(`{"component":"bmc/sel","status":"FAIL","observed":"2 critical","expected":"0 critical","detail":"PSU 2 AC lost",` +
		`"measurements":[{"metric":"selCritical","value":2,"unit":"entries"},{"metric":"sel.total","value":-1.5e3,"unit":"entries"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := checks.Verdict{Component: "bmc/sel", Status: checks.Fail, Observed: "2 critical", Expected: "0 critical", Message: "PSU 2 AC lost",
		Measurements: []checks.Measurement{{Metric: "selCritical", Value: 2, Unit: "entries"}, {Metric: "sel.total", Value: -1500, Unit: "entries"}}}
	if l.Metadata != nil || !reflect.DeepEqual(*l.Verdict, want) {
		t.Fatalf("verdict %+v", l.Verdict)
	}
	l, err = ParseLine([]byte(` {"metadata":{"name":"bmc-sel","description":"no critical SEL entry","timeout":"90s","parameters":["maxEntries","ipmi_dev"]}} `))
	if err != nil {
		t.Fatal(err)
	}
	if md := l.Metadata; l.Verdict != nil || md.Name != "bmc-sel" || md.Timeout.Seconds() != 90 || !reflect.DeepEqual(md.Parameters, []string{"maxEntries", "ipmi_dev"}) {
		t.Fatalf("metadata %+v", l.Metadata)
	}
	for _, tc := range []struct{ line, want string }{
		// No field can name a run, a node or a check: attribution is the coordinator's.
		{`{"component":"gpu/0","status":"PASS","run_id":"runB"}`, `unknown field "run_id"`},
		{`{"component":"gpu/0","status":"PASS","node":"nodeB"}`, `unknown field "node"`},
		{`{"component":"gpu/0","status":"PASS","check":"firmware"}`, `unknown field "check"`},
		{`{"Component":"gpu/0","status":"PASS"}`, `unknown field "Component"`}, // encoding/json would match it
		{`{"component":"gpu/0","status":"PASS","status":"FAIL"}`, `field "status" twice`},
		{`{"component":"gpu/0","status":"MARGINAL"}`, "MARGINAL is the coordinator's"},
		{`{"component":"gpu/0","status":"pass"}`, `status "pass" is not one of PASS, FAIL, SKIP, ERROR`},
		{`{"component":"gpu/0"}`, "status is missing"},
		{`{"status":"PASS"}`, "component is missing"},
		{`{"component":" gpu/0","status":"PASS"}`, "leading or trailing spaces"},
		{`{"component":"` + strings.Repeat("c", MaxComponent+1) + `","status":"PASS"}`, "component is 129 bytes, longer than 128"},
		{`{"component":"gpu/0","status":"PASS","detail":"` + strings.Repeat("d", MaxDetail+1) + `"}`, "detail is 2049 bytes"},
		{`{"component":"gpu/0","status":"PASS","observed":"a\u001b[31mred"}`, "observed holds a control character (U+001B)"},
		{`{"component":"gpu/0","status":"PASS","observed":3}`, "observed: expected a string"},
		{`{"component":"gpu/0","status":"PASS","measurements":[{"metric":"x","value":1e999,"unit":"u"}]}`, "not a finite number"},
		{`{"component":"gpu/0","status":"PASS","measurements":[{"metric":"x","value":"1","unit":"u"}]}`, "expected a number"},
		{`{"component":"gpu/0","status":"PASS","measurements":[{"metric":"x","value":1}]}`, "unit is missing"},
		{`{"component":"gpu/0","status":"PASS","measurements":[{"metric":"x y","value":1,"unit":"u"}]}`, `metric "x y" is not a name`},
		{`{"component":"gpu/0","status":"PASS","measurements":[{"metric":"x","value":1,"unit":"u","run":"r"}]}`, `measurements[0]: unknown field "run"`},
		{`{"component":"gpu/0","status":"PASS","measurements":{}}`, "measurements: expected a list"},
		{`{"component":"gpu/0","status":"PASS"} {"component":"gpu/1","status":"PASS"}`, "more than one JSON value"},
		{`{"component":"gpu/0","status":"PASS"`, "not a complete JSON object"},
		{`PASS gpu/0`, "not JSON"},
		{`["gpu/0","PASS"]`, "expected a JSON object"},
		{`{"metadata":{"name":"x"},"component":"gpu/0","status":"PASS"}`, "a metadata line holds only the metadata object"},
		{`{"metadata":{"name":"x","runAs":"root"}}`, `unknown field metadata."runAs"`},
		{`{"metadata":{"timeout":"soon"}}`, `metadata.timeout "soon" is not a positive Go duration`},
		{`{"metadata":{"parameters":["ok","1bad"]}}`, `"1bad" is not a parameter name`},
		{"{\"component\":\"gpu/0\",\"status\":\"PASS\",\"detail\":\"\xff\"}", "not UTF-8"},
		{`{"component":"gpu/0","status":"PASS","detail":"` + strings.Repeat("d", MaxLine) + `"}`, "longer than 16384"},
	} {
		if _, err := ParseLine([]byte(tc.line)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.80s\nerror %v, want one containing %q", tc.line, err, tc.want)
		}
	}
	many := `{"component":"gpu/0","status":"PASS","measurements":[` + strings.Repeat(`{"metric":"m","value":1,"unit":"u"},`, MaxMeasurements) + `{"metric":"m","value":1,"unit":"u"}]}`
	if _, err := ParseLine([]byte(many)); err == nil || !strings.Contains(err.Error(), "more than 32") {
		t.Errorf("33 measurements: %v", err)
	}
}

func TestParseOutput(t *testing.T) {
	out, err := ParseOutput([]byte("{\"metadata\":{\"name\":\"n\",\"parameters\":[\"a\"]}}\n\n{\"component\":\"x/0\",\"status\":\"PASS\"}\r\n{\"component\":\"x/1\",\"status\":\"SKIP\"}"), 10)
	if err != nil || len(out.Verdicts) != 2 || out.Metadata == nil || out.Verdicts[1].Status != checks.Skip {
		t.Fatalf("%+v %v", out, err)
	}
	for _, tc := range []struct {
		out  string
		max  int
		want string
	}{
		{"{\"component\":\"x/0\",\"status\":\"PASS\"}\n{\"metadata\":{}}\n", 10, "line 2: metadata only on the first line"},
		{"{\"component\":\"x/0\",\"status\":\"PASS\"}\n{\"component\":\"x/0\",\"status\":\"FAIL\"}\n", 10, `line 2: component "x/0" already reported on line 1`},
		{"{\"component\":\"x/0\",\"status\":\"PASS\"}\n{\"component\":\"x/1\",\"status\":\"PASS\"}\n{\"component\":\"x/2\",\"status\":\"PASS\"}\n", 2, "line 3: more than 2 verdicts"},
		{"{\"component\":\"x/0\",\"status\":\"PASS\"}\nchecking the BMC...\n", 10, "line 2: not JSON"},
	} {
		if _, err := ParseOutput([]byte(tc.out), tc.max); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.out, err, tc.want)
		}
	}
	if err := CheckParams(&Metadata{Parameters: []string{"a"}}, map[string]any{"a": 1, "b": 2, "c": 3}); err == nil ||
		err.Error() != "params b, c: the program's metadata does not declare them (it reads a)" {
		t.Errorf("undeclared params: %v", err)
	}
	if CheckParams(nil, map[string]any{"b": 1}) != nil || CheckParams(&Metadata{Parameters: []string{"a"}}, map[string]any{"a": 1}) != nil {
		t.Error("declared or undeclarable params refused")
	}
}

func TestEnviron(t *testing.T) {
	env, err := Environ(Program{Check: "bmc-sel", Limit: 90e9, Params: map[string]any{"max": int64(3), "ratio": 0.5, "dev": "/dev/ipmi0", "on": true, "ports": []any{"a", int64(2)}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=" + Path, "HOME=/tmp/work", "TMPDIR=/tmp/work", "CURE_CHECK=bmc-sel", "CURE_TIMEOUT_SECONDS=90",
		`CURE_PARAMS={"dev":"/dev/ipmi0","max":3,"on":true,"ports":["a",2],"ratio":0.5}`,
		"CURE_PARAM_dev=/dev/ipmi0", "CURE_PARAM_max=3", "CURE_PARAM_on=true", "CURE_PARAM_ports=a,2", "CURE_PARAM_ratio=0.5"}
	if !reflect.DeepEqual(env, want) {
		t.Fatalf("env\n%q\nwant\n%q", env, want)
	}
	if _, err := Environ(Program{Check: "c", Params: map[string]any{"max-entries": 1}}); err == nil || !strings.Contains(err.Error(), `param "max-entries" is not a parameter name`) {
		t.Errorf("dash in a param: %v", err)
	}
	if _, err := Environ(Program{Check: "c", Params: map[string]any{"x": "a\x00b"}}); err == nil {
		t.Error("NUL in a param accepted")
	}
}

// FuzzParseLine: whatever a program prints, ParseLine returns an error or
// a line within the schema's bounds.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"component":"gpu/0","status":"PASS","observed":"1","expected":"1","detail":"d","measurements":[{"metric":"m","value":1,"unit":"u"}]}`,
		`{"metadata":{"name":"n","description":"d","timeout":"1s","parameters":["a"]}}`,
		`{"component":"gpu/0","status":"PASS","run_id":"x"}`,
		`{"component":"gpu/0","status":"PASS","status":"FAIL"}`,
		`{"measurements":[{"value":1e400}]}`,
		`[1,2,3]`, `{`, ``, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseLine(b)
		if err != nil {
			if l.Verdict != nil || l.Metadata != nil {
				t.Fatal("error with a result")
			}
			return
		}
		if (l.Verdict == nil) == (l.Metadata == nil) {
			t.Fatalf("want exactly one of verdict and metadata: %+v", l)
		}
		if v := l.Verdict; v != nil {
			switch v.Status {
			case checks.Pass, checks.Fail, checks.Skip, checks.Error:
			default:
				t.Fatalf("status %q", v.Status)
			}
			if v.Component == "" || len(v.Component) > MaxComponent || len(v.Observed) > MaxText || len(v.Expected) > MaxText ||
				len(v.Message) > MaxDetail || len(v.Measurements) > MaxMeasurements || !utf8.ValidString(v.Message) {
				t.Fatalf("out of bounds: %+v", v)
			}
			for _, m := range v.Measurements {
				if m.Unit == "" || len(m.Metric) > MaxMetric || m.Value != m.Value {
					t.Fatalf("measurement %+v", m)
				}
			}
		}
	})
}
