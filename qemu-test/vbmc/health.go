package vbmc

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// routeHealth serves the live sensor, fan and power-supply resources the
// profile's SensorAPI offers; it reports false for paths it does not own
// (the others were taken out of the tree: a 404, as on a BMC without them).
func (b *BMC) routeHealth(w http.ResponseWriter, r *http.Request, p string) bool {
	legacy := b.cfg.SensorAPI != SensorAPISensors
	modern := b.cfg.SensorAPI != SensorAPILegacy
	var body map[string]any
	switch {
	case legacy && p == thermalURL:
		body = b.thermalBody()
	case legacy && p == powerURL:
		body = b.powerBody()
	case modern && p == sensorsURL:
		body = b.sensorsCollection(!b.cfg.NoExpand && expandsOneLevel(r.URL.RawQuery))
	case modern && strings.HasPrefix(p, sensorsURL+"/"):
		obj, ok := b.sensor(strings.TrimPrefix(p, sensorsURL+"/"))
		if !ok {
			return false
		}
		body = obj
	case modern && p == fansURL:
		body = b.partCollection(fansURL, "Fan", b.sens.fans)
	case modern && p == powerSuppliesURL:
		body = b.partCollection(powerSuppliesURL, "PowerSupply", b.sens.psus)
	case modern && strings.HasPrefix(p, fansURL+"/") && !strings.Contains(strings.TrimPrefix(p, fansURL+"/"), "/"):
		obj, ok := b.partBody(PartFan, strings.TrimPrefix(p, fansURL+"/"))
		if !ok {
			return false
		}
		body = obj
	case modern && strings.HasPrefix(p, powerSuppliesURL+"/") && !strings.Contains(strings.TrimPrefix(p, powerSuppliesURL+"/"), "/"):
		obj, ok := b.partBody(PartPSU, strings.TrimPrefix(p, powerSuppliesURL+"/"))
		if !ok {
			return false
		}
		body = obj
	default:
		return false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET, HEAD")
		return true
	}
	writeJSON(w, http.StatusOK, body)
	return true
}

// expandsOneLevel says whether a query asks for members expanded one
// level: $expand=. or $expand=*, with or without ($levels=1). The query is
// matched raw: its parentheses are not URL syntax.
func expandsOneLevel(rawQuery string) bool {
	for kv := range strings.SplitSeq(rawQuery, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if k != "$expand" && k != "%24expand" {
			continue
		}
		v = strings.NewReplacer("%28", "(", "%29", ")", "%24", "$", "%3D", "=", "%3d", "=", "%2A", "*", "%2a", "*").Replace(v)
		switch v {
		case ".", "*", ".($levels=1)", "*($levels=1)":
			return true
		}
	}
	return false
}

// shapeTree takes out of the mockup what the profile's BMC does not serve
// and what it serves live: the static sensors, the resources of the sensor
// API it lacks (and the chassis's links to them), $expand when NoExpand.
func shapeTree(tree map[string]resource, cfg Config) error {
	drop := func(prefix string) {
		for u := range tree {
			if u == prefix || strings.HasPrefix(u, prefix+"/") {
				delete(tree, u)
			}
		}
	}
	// The static sensors and the static live log: served live instead.
	drop(sensorsURL)
	logs := odataRoot + "/Systems/" + cfg.SystemID + "/LogServices"
	if cfg.EventLog.Under == "Managers" {
		logs = managerURL + "/LogServices"
	}
	drop(logs + "/" + cfg.EventLog.ID)
	var unlink []string
	switch cfg.SensorAPI {
	case SensorAPILegacy:
		for _, u := range []string{sensorsURL, thermalSubURL, powerSubURL, chassisURL + "/EnvironmentMetrics"} {
			drop(u)
		}
		unlink = []string{"Sensors", "ThermalSubsystem", "PowerSubsystem", "EnvironmentMetrics"}
	case SensorAPISensors:
		drop(thermalURL)
		drop(powerURL)
		unlink = []string{"Thermal", "Power", "Thermal@Redfish.Deprecated", "Power@Redfish.Deprecated"}
	}
	if err := editJSON(tree, chassisURL, func(obj map[string]any) {
		for _, k := range unlink {
			delete(obj, k)
		}
		if cfg.SensorAPI != SensorAPILegacy {
			obj["Sensors"] = map[string]any{"@odata.id": sensorsURL}
		}
	}); err != nil {
		return err
	}
	if cfg.NoExpand {
		if err := editJSON(tree, odataRoot, func(obj map[string]any) {
			if pf, ok := obj["ProtocolFeaturesSupported"].(map[string]any); ok {
				delete(pf, "ExpandQuery")
			}
		}); err != nil {
			return err
		}
	}
	return nil
}

// editJSON rewrites one mockup resource's JSON body.
func editJSON(tree map[string]resource, u string, edit func(map[string]any)) error {
	r, ok := tree[u]
	if !ok {
		return fmt.Errorf("mockup has no resource %s", u)
	}
	var obj map[string]any
	if err := json.Unmarshal(r.body, &obj); err != nil {
		return fmt.Errorf("parse mockup %s: %w", u, err)
	}
	edit(obj)
	b, err := json.MarshalIndent(obj, "", "    ")
	if err != nil {
		return fmt.Errorf("encode mockup %s: %w", u, err)
	}
	r.body = b
	tree[u] = r
	return nil
}

// parseMemberIDs lists a collection body's member links.
func parseMemberIDs(body []byte) []string {
	var coll struct {
		Members []struct {
			ID string `json:"@odata.id"`
		}
	}
	if json.Unmarshal(body, &coll) != nil {
		return nil
	}
	var out []string
	for _, m := range coll.Members {
		if m.ID != "" {
			out = append(out, m.ID)
		}
	}
	return out
}

// hookRequest is the body of the test hooks under /vbmc/: what a test (or
// an operator of cmd/vbmc) makes the BMC see.
type hookRequest struct {
	// /vbmc/events: an event to log.
	Severity, Message, MessageID, SensorType, EntryCode string
	MessageArgs                                         []string
	Created                                             *time.Time
	// /vbmc/sensors: pin Sensor to Reading, or Clear it; Load pins the
	// host load (negative: follow the machine).
	Sensor  string
	Reading *float64
	Clear   bool
	Load    *float64
	// /vbmc/parts: a PSU's or fan's health.
	Kind, ID, Health string
}

// serveHooks serves the test hooks: POST /vbmc/events, /vbmc/sensors and
// /vbmc/parts with a hookRequest, under the BMC's credentials (they change
// what the BMC reports).
func (b *BMC) serveHooks(w http.ResponseWriter, r *http.Request, p string) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, "POST")
		return
	}
	if !b.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="vbmc"`)
		writeError(w, http.StatusUnauthorized, "NoValidSession", "There is no valid session established with the implementation.")
		return
	}
	var req hookRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "MalformedJSON", fmt.Sprintf("The request body submitted was malformed JSON: %v", err))
		return
	}
	var err error
	var out any
	switch p {
	case "/vbmc/events":
		ev := Event{Severity: req.Severity, Message: req.Message, MessageID: req.MessageID, MessageArgs: req.MessageArgs,
			SensorType: req.SensorType, EntryCode: req.EntryCode}
		if req.Created != nil {
			ev.Created = *req.Created
		}
		var ent LogEntry
		ent, err = b.LogEvent(ev)
		out = ent
	case "/vbmc/sensors":
		switch {
		case req.Load != nil:
			b.SetLoad(*req.Load)
		case req.Clear:
			b.ClearSensor(req.Sensor)
		case req.Reading != nil:
			err = b.SetSensor(req.Sensor, *req.Reading)
		default:
			err = fmt.Errorf("want Load, Clear or Reading")
		}
		out = b.Readings()
	case "/vbmc/parts":
		err = b.SetPartHealth(req.Kind, req.ID, req.Health, req.Message)
	default:
		writeError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", p))
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "PropertyValueError", err.Error())
		return
	}
	if out == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
