package vbmc

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
)

// biosAttr is one attribute of the BIOS attribute registry. The mockup
// names BiosAttributeRegistryP89 but does not ship it; this is that
// registry as far as the mockup's attributes show it.
type biosAttr struct {
	Type     string // String, Integer, Enumeration
	Values   []string
	Min, Max int
}

var biosRegistry = map[string]biosAttr{
	"AdminPhone":         {Type: "String"},
	"BootMode":           {Type: "Enumeration", Values: []string{"Uefi", "LegacyBios"}},
	"EmbeddedSata":       {Type: "Enumeration", Values: []string{"Raid", "Ahci"}},
	"NicBoot1":           {Type: "Enumeration", Values: []string{"NetworkBoot", "Disabled"}},
	"NicBoot2":           {Type: "Enumeration", Values: []string{"NetworkBoot", "Disabled"}},
	"PowerProfile":       {Type: "Enumeration", Values: []string{"MaxPerf", "SysDbpm", "OsDbpm"}},
	"ProcCoreDisable":    {Type: "Integer", Min: 0, Max: 63},
	"ProcHyperthreading": {Type: "Enumeration", Values: []string{"Enabled", "Disabled"}},
	"ProcTurboMode":      {Type: "Enumeration", Values: []string{"Enabled", "Disabled"}},
	"UsbControl":         {Type: "Enumeration", Values: []string{"UsbEnabled", "UsbDisabled"}},
}

func (b *BMC) biosURL() string     { return odataRoot + "/Systems/" + b.cfg.SystemID + "/Bios" }
func (b *BMC) settingsURL() string { return b.biosURL() + "/Settings" }

func (b *BMC) biosETagLocked() string     { return fmt.Sprintf(`"bios-%d"`, b.biosGen) }
func (b *BMC) settingsETagLocked() string { return fmt.Sprintf(`"settings-%d"`, b.settingsGen) }

// loadBios reads the mockup's current attributes (the pending ones in the
// mockup's Settings are its fiction: a fresh BMC has nothing pending).
func (b *BMC) loadBios() error {
	res, ok := b.tree[b.biosURL()]
	if !ok {
		return fmt.Errorf("mockup has no Bios at %s", b.biosURL())
	}
	var doc struct{ Attributes map[string]any }
	if err := json.Unmarshal(res.body, &doc); err != nil {
		return fmt.Errorf("parse mockup %s: %w", b.biosURL(), err)
	}
	for k := range doc.Attributes {
		if _, ok := biosRegistry[k]; !ok {
			return fmt.Errorf("mockup %s: attribute %s is not in the BIOS registry", b.biosURL(), k)
		}
	}
	b.biosCur, b.biosPending = doc.Attributes, map[string]any{}
	b.biosGen, b.settingsGen = 1, 1
	return nil
}

// BiosAttributes returns the attributes in effect.
func (b *BMC) BiosAttributes() map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.biosCur)
}

// StagedBiosAttributes returns the attributes waiting for the next host
// boot.
func (b *BMC) StagedBiosAttributes() map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.biosPending)
}

// BiosApplied counts attribute changes applied at host boots.
func (b *BMC) BiosApplied() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.biosApplied
}

// applyBiosLocked is the BIOS reading its pending settings at POST.
func (b *BMC) applyBiosLocked() {
	if len(b.biosPending) == 0 {
		return
	}
	b.log.Info("BIOS settings applied at boot", "attributes", b.biosPending)
	maps.Copy(b.biosCur, b.biosPending)
	b.biosApplied += len(b.biosPending)
	clear(b.biosPending)
	b.biosGen++
	b.settingsGen++
}

func (b *BMC) serveBios(w http.ResponseWriter) {
	var obj map[string]any
	if err := json.Unmarshal(b.tree[b.biosURL()].body, &obj); err != nil {
		writeError(w, http.StatusInternalServerError, "InternalError", "mockup Bios unreadable: "+err.Error())
		return
	}
	b.mu.Lock()
	obj["Attributes"] = maps.Clone(b.biosCur)
	obj["@odata.etag"] = b.biosETagLocked()
	if b.cfg.NoBiosSettings {
		// Pending values are not shown anywhere, as on BMCs without a
		// settings object; a PATCH here stages them for the next boot.
		obj["@odata.etag"] = b.settingsETagLocked()
		etag := b.settingsETagLocked()
		b.mu.Unlock()
		delete(obj, "@Redfish.Copyright")
		delete(obj, "@Redfish.Settings")
		w.Header().Set("ETag", etag)
		writeJSON(w, http.StatusOK, obj)
		return
	}
	obj["@Redfish.Settings"] = map[string]any{
		"@odata.type":         "#Settings.v1_4_0.Settings",
		"ETag":                b.settingsETagLocked(),
		"SettingsObject":      map[string]any{"@odata.id": b.settingsURL()},
		"SupportedApplyTimes": []string{"OnReset"},
		"Messages":            []any{},
	}
	etag := b.biosETagLocked()
	b.mu.Unlock()
	obj["ResetBiosToDefaultsPending"] = false
	delete(obj, "@Redfish.Copyright")
	w.Header().Set("ETag", etag)
	writeJSON(w, http.StatusOK, obj)
}

func (b *BMC) settingsBodyLocked() map[string]any {
	future := maps.Clone(b.biosCur)
	maps.Copy(future, b.biosPending)
	return map[string]any{
		"@odata.type":                "#Bios.v1_2_3.Bios",
		"@odata.id":                  b.settingsURL(),
		"@odata.etag":                b.settingsETagLocked(),
		"Id":                         "Settings",
		"Name":                       "BIOS Configuration Pending Settings",
		"AttributeRegistry":          "BiosAttributeRegistryP89.v1_0_0",
		"Attributes":                 future,
		"@Redfish.SettingsApplyTime": map[string]any{"ApplyTime": "OnReset", "ApplyTime@Redfish.AllowableValues": []string{"OnReset"}},
	}
}

func (b *BMC) serveSettings(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		b.mu.Lock()
		body, etag := b.settingsBodyLocked(), b.settingsETagLocked()
		b.mu.Unlock()
		w.Header().Set("ETag", etag)
		writeJSON(w, http.StatusOK, body)
	case http.MethodPatch:
		b.patchSettings(w, r)
	default:
		methodNotAllowed(w, "GET, HEAD, PATCH")
	}
}

// patchSettings stages attributes for the next boot; every name, type and
// value is checked against the registry first.
func (b *BMC) patchSettings(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "MalformedJSON", fmt.Sprintf("The request body submitted was malformed JSON: %v", err))
		return
	}
	var errs []fieldError
	var attrs map[string]any
	for k, v := range body {
		switch k {
		case "Attributes":
			if err := json.Unmarshal(v, &attrs); err != nil || attrs == nil {
				errs = append(errs, fieldError{"PropertyValueTypeError", "Attributes", "The value for the property Attributes is not an object."})
			}
		case "@Redfish.SettingsApplyTime":
			var at struct{ ApplyTime string }
			if err := json.Unmarshal(v, &at); err != nil || at.ApplyTime != "OnReset" {
				errs = append(errs, fieldError{"PropertyValueNotInList", k,
					fmt.Sprintf("The value %s for the property @Redfish.SettingsApplyTime is not in the list of acceptable values [OnReset].", v)})
			}
		case "@odata.etag", "@odata.id", "@odata.type":
		default:
			errs = append(errs, fieldError{"PropertyUnknown", k, fmt.Sprintf("The property %s is not in the list of valid properties for the resource.", k)})
		}
	}
	names := slices.Sorted(maps.Keys(attrs))
	for _, k := range names {
		if msg := checkBiosAttr(k, attrs[k]); msg != "" {
			errs = append(errs, fieldError{"PropertyValueNotInList", "Attributes/" + k, msg})
		}
	}
	if _, given := body["Attributes"]; len(errs) == 0 && !given {
		errs = append(errs, fieldError{"PropertyMissing", "Attributes", "The PATCH changes no attribute: Attributes is missing."})
	}
	// An empty Attributes object is a valid PATCH that changes nothing
	// (Ironic's sushy sends one); it still passes the If-Match check below.
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].prop < errs[j].prop })
		b.log.Warn("BIOS settings PATCH refused", "errors", len(errs), "first", errs[0].msg)
		writeFieldErrors(w, http.StatusBadRequest, errs)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if im := r.Header.Get("If-Match"); im != "" {
		if im != "*" && !etagMatches(im, b.settingsETagLocked()) {
			writeError(w, http.StatusPreconditionFailed, "PreconditionFailed",
				fmt.Sprintf("The ETag supplied did not match the ETag required to change this resource: got %s, current %s.", im, b.settingsETagLocked()))
			return
		}
	} else if b.cfg.RequireIfMatch {
		writeError(w, http.StatusPreconditionRequired, "PreconditionRequired", "A precondition header or annotation is required to change this resource.")
		return
	}
	if len(attrs) == 0 {
		w.Header().Set("ETag", b.settingsETagLocked())
		writeJSON(w, http.StatusOK, b.settingsBodyLocked())
		return
	}
	maps.Copy(b.biosPending, attrs)
	b.settingsGen++
	b.log.Info("BIOS settings staged for the next boot", "attributes", attrs)
	w.Header().Set("ETag", b.settingsETagLocked())
	writeJSON(w, http.StatusOK, b.settingsBodyLocked())
}

// checkBiosAttr returns why v is not a valid value for attribute k ("" if
// it is).
func checkBiosAttr(k string, v any) string {
	a, ok := biosRegistry[k]
	if !ok {
		return fmt.Sprintf("The attribute %s is not in the BIOS attribute registry (known: %s).", k, strings.Join(slices.Sorted(maps.Keys(biosRegistry)), ", "))
	}
	switch a.Type {
	case "Integer":
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) || f < float64(a.Min) || f > float64(a.Max) {
			return fmt.Sprintf("The value %v for the attribute %s is not an integer in [%d, %d].", v, k, a.Min, a.Max)
		}
	case "Enumeration":
		s, ok := v.(string)
		if !ok || !slices.Contains(a.Values, s) {
			return fmt.Sprintf("The value %v for the attribute %s is not in the list of acceptable values %v.", v, k, a.Values)
		}
	default:
		if _, ok := v.(string); !ok {
			return fmt.Sprintf("The value %v for the attribute %s is not a string.", v, k)
		}
	}
	return ""
}
