package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// actionInfoShape plays a BMC whose ComputerSystem has no @odata.etag
// (the ETag only in the header, as a compressing proxy writes it) and whose
// reset action lists its ResetType values in an ActionInfo.
func actionInfoShape(next http.Handler) http.Handler {
	const info = "/redfish/v1/Systems/437XR1138R2/ResetActionInfo"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == info:
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"@odata.id":"` + info + `","Parameters":[{"Name":"ResetType","DataType":"String","AllowableValues":["On","ForceOff"]}]}`))
		case r.Method == http.MethodGet && r.URL.Path == "/redfish/v1/Systems/437XR1138R2":
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			var doc map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			etag, _ := doc["@odata.etag"].(string)
			delete(doc, "@odata.etag")
			doc["Actions"] = map[string]any{"#ComputerSystem.Reset": map[string]any{
				"target": "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset", "@Redfish.ActionInfo": info}}
			w.Header().Set("ETag", strings.TrimSuffix(etag, `"`)+`-gzip"`)
			w.WriteHeader(rec.Code)
			json.NewEncoder(w).Encode(doc)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

func TestSystemHeaderETagAndActionInfo(t *testing.T) {
	b, m, rec, url := bmcServer(t, vbmc.Config{RequireIfMatch: true}, actionInfoShape)
	c := connect(t, url, 5*time.Second)
	ctx := context.Background()
	etag := b.ETag()
	if err := c.SetBootOverride(ctx, BootPxe, true); err != nil {
		t.Fatal(err)
	}
	if p := rec.Patches(); len(p) != 1 || p[0].ifMatch != etag {
		t.Fatalf("PATCHes = %+v, want one with If-Match %s (the header's ETag without -gzip)", p, etag)
	}
	if err := c.Reset(ctx, "ForceRestart"); err != nil { // off: a restart is an On
		t.Fatal(err)
	}
	if ps, err := c.PowerState(ctx); err != nil || ps != "On" || !m.Running() {
		t.Fatalf("after ForceRestart of an off system: PowerState %q, %v, running %v; want On", ps, err, m.Running())
	}
	err := c.Reset(ctx, "Nmi")
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "ForceOff") {
		t.Fatalf("Nmi against the ActionInfo's On and ForceOff: %v, want not supported naming the allowed values", err)
	}
}

// The lazily read parts fail alone: a Boot that is not an object leaves the
// power state readable.
func TestSystemDocLazyParts(t *testing.T) {
	d, err := parseSystemDoc([]byte(`{"@odata.id":"/redfish/v1/Systems/1","PowerState":"On","Boot":"x","Actions":{"#ComputerSystem.Reset":{"target":"/redfish/v1/Systems/1/Actions/ComputerSystem.Reset","ResetType@Redfish.AllowableValues":["On"]}}}`))
	if err != nil || d.PowerState != "On" {
		t.Fatalf("parse = %+v, %v", d, err)
	}
	if _, err := d.bootState(); err == nil {
		t.Fatal("a Boot string read as a Boot object")
	}
	if tgt, err := d.resetTarget(); err != nil || tgt != "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset" {
		t.Fatalf("resetTarget = %q, %v", tgt, err)
	}
	if _, err := parseSystemDoc(bytes.Repeat([]byte("{"), 3)); err == nil {
		t.Fatal("truncated body parsed")
	}
}
