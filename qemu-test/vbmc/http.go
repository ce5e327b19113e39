package vbmc

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

const registry = "Base.1.5.0"

type session struct {
	ID      string
	Token   string
	User    string
	Created time.Time
}

// Handler serves /redfish/v1 and the /vbmc/history debug endpoint.
func (b *BMC) Handler() http.Handler { return http.HandlerFunc(b.serveHTTP) }

func (b *BMC) serveHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if p != "/" {
		p = strings.TrimSuffix(p, "/")
	}
	if p == "/vbmc/history" {
		b.serveHistory(w, r)
		return
	}
	if strings.HasPrefix(p, "/vbmc/") {
		b.serveHooks(w, r, p)
		return
	}
	if !b.fault(r) {
		return
	}
	if b.take503() {
		// An overloaded BMC sheds load, as real ones do under a fleet's polling.
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "ServiceTemporarilyUnavailable",
			"The service is temporarily unavailable: too many requests.")
		return
	}
	if b.Resetting() {
		// A rebooting BMC: its web server is not there yet.
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "ServiceTemporarilyUnavailable",
			"The service is temporarily unavailable: the BMC is resetting.")
		return
	}
	w.Header().Set("OData-Version", "4.0")
	switch {
	case p == "/redfish":
		writeJSON(w, http.StatusOK, map[string]any{"v1": "/redfish/v1/"})
		return
	case p == odataRoot || p == odataRoot+"/odata" || p == odataRoot+"/$metadata":
		// The service root and metadata are readable without auth (DSP0266).
		b.serveStatic(w, r, p)
		return
	case p == odataRoot+"/SessionService/Sessions" && r.Method == http.MethodPost:
		b.login(w, r)
		return
	}
	if !b.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="vbmc"`)
		writeError(w, http.StatusUnauthorized, "NoValidSession",
			"There is no valid session established with the implementation.")
		return
	}
	if hold, cut := b.mutationFault(r, p); hold > 0 || cut {
		b.serveFaulty(w, r, hold, cut, func(w http.ResponseWriter) { b.route(w, r, p) })
		return
	}
	b.route(w, r, p)
}

// route dispatches an authenticated request.
func (b *BMC) route(w http.ResponseWriter, r *http.Request, p string) {
	if b.routeOOB(w, r, p) || b.routeHealth(w, r, p) || b.routeEventLog(w, r, p) {
		return
	}
	sysURL := odataRoot + "/Systems/" + b.cfg.SystemID
	switch {
	case p == odataRoot+"/SessionService/Sessions":
		b.serveSessions(w, r)
	case strings.HasPrefix(p, odataRoot+"/SessionService/Sessions/"):
		b.serveSession(w, r, strings.TrimPrefix(p, odataRoot+"/SessionService/Sessions/"))
	case p == sysURL:
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			b.serveSystem(w)
		case http.MethodPatch:
			b.patchSystem(w, r)
		default:
			methodNotAllowed(w, "GET, HEAD, PATCH")
		}
	case p == sysURL+"/Actions/ComputerSystem.Reset":
		if r.Method != http.MethodPost {
			methodNotAllowed(w, "POST")
			return
		}
		b.postReset(w, r)
	default:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if _, ok := b.tree[p]; ok {
				methodNotAllowed(w, "GET, HEAD")
				return
			}
		}
		b.serveStatic(w, r, p)
	}
}

// fault applies the injected latency/hang. It reports false if the request
// must not be answered.
func (b *BMC) fault(r *http.Request) bool {
	if d := time.Duration(b.latency.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return false
		case <-b.done:
			return false
		}
	}
	if b.hangNext.CompareAndSwap(true, false) {
		b.log.Warn("fault: hanging request", "method", r.Method, "path", r.URL.Path)
		select {
		case <-r.Context().Done():
		case <-b.done:
		}
		return false
	}
	return true
}

func (b *BMC) authorized(r *http.Request) bool {
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		b.mu.Lock()
		_, ok := b.sessions[tok]
		b.mu.Unlock()
		return ok
	}
	if u, pw, ok := r.BasicAuth(); ok {
		return b.credentialsOK(u, pw)
	}
	return false
}

func (b *BMC) credentialsOK(user, pw string) bool {
	if b.failAuth.Load() {
		return false
	}
	uOK := subtle.ConstantTimeCompare([]byte(user), []byte(b.cfg.Username)) == 1
	pOK := subtle.ConstantTimeCompare([]byte(pw), []byte(b.cfg.Password)) == 1
	return uOK && pOK
}

func (b *BMC) login(w http.ResponseWriter, r *http.Request) {
	var req struct {
		UserName *string
		Password *string
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "MalformedJSON",
			fmt.Sprintf("The request body submitted was malformed JSON: %v", err))
		return
	}
	if req.UserName == nil || req.Password == nil {
		writeError(w, http.StatusBadRequest, "PropertyMissing",
			"The property UserName and Password are required to create a session.")
		return
	}
	if !b.credentialsOK(*req.UserName, *req.Password) {
		b.log.Warn("login refused", "user", *req.UserName)
		writeError(w, http.StatusUnauthorized, "ResourceAtUriUnauthorized",
			"While accessing the resource at /redfish/v1/SessionService/Sessions, the service received an authorization error: invalid credentials.")
		return
	}
	s := &session{ID: randHex(8), Token: randHex(16), User: *req.UserName, Created: b.cfg.Now()}
	b.mu.Lock()
	if b.cfg.MaxSessions > 0 && len(b.sessions) >= b.cfg.MaxSessions {
		n := len(b.sessions)
		b.mu.Unlock()
		b.log.Warn("login refused: session limit", "sessions", n)
		writeError(w, http.StatusServiceUnavailable, "SessionLimitExceeded",
			fmt.Sprintf("The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation (%d open).", n))
		return
	}
	b.sessions[s.Token] = s
	b.mu.Unlock()
	loc := odataRoot + "/SessionService/Sessions/" + s.ID
	w.Header().Set("X-Auth-Token", s.Token)
	w.Header().Set("Location", loc)
	writeJSON(w, http.StatusCreated, sessionBody(s))
}

func sessionBody(s *session) map[string]any {
	return map[string]any{
		"@odata.type": "#Session.v1_7_0.Session",
		"@odata.id":   odataRoot + "/SessionService/Sessions/" + s.ID,
		"Id":          s.ID,
		"Name":        "User Session",
		"UserName":    s.User,
		"CreatedTime": s.Created.Format(time.RFC3339),
		"SessionType": "Redfish",
		"Password":    nil,
	}
}

func (b *BMC) serveSessions(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET, HEAD, POST")
		return
	}
	b.mu.Lock()
	members := []map[string]string{}
	for _, s := range b.sessions {
		members = append(members, map[string]string{"@odata.id": odataRoot + "/SessionService/Sessions/" + s.ID})
	}
	b.mu.Unlock()
	slices.SortFunc(members, func(a, c map[string]string) int { return strings.Compare(a["@odata.id"], c["@odata.id"]) })
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.type":         "#SessionCollection.SessionCollection",
		"@odata.id":           odataRoot + "/SessionService/Sessions",
		"Name":                "Session Collection",
		"Members":             members,
		"Members@odata.count": len(members),
	})
}

func (b *BMC) serveSession(w http.ResponseWriter, r *http.Request, id string) {
	b.mu.Lock()
	var found *session
	for _, s := range b.sessions {
		if s.ID == id {
			found = s
		}
	}
	if found != nil && r.Method == http.MethodDelete {
		delete(b.sessions, found.Token)
	}
	b.mu.Unlock()
	if found == nil {
		writeError(w, http.StatusNotFound, "ResourceMissingAtURI",
			fmt.Sprintf("The resource at the URI /redfish/v1/SessionService/Sessions/%s was not found.", id))
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		writeJSON(w, http.StatusOK, sessionBody(found))
	case http.MethodDelete:
		b.log.Info("logout", "session", id)
		w.WriteHeader(http.StatusNoContent)
	default:
		methodNotAllowed(w, "GET, HEAD, DELETE")
	}
}

func (b *BMC) serveStatic(w http.ResponseWriter, r *http.Request, p string) {
	res, ok := b.tree[p]
	if !ok {
		writeError(w, http.StatusNotFound, "ResourceMissingAtURI",
			fmt.Sprintf("The resource at the URI %s was not found.", p))
		return
	}
	w.Header().Set("Content-Type", res.contentType)
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(res.body)
	}
}

// systemBody renders the mockup system with the live state on top.
func (b *BMC) systemBodyLocked() map[string]any {
	obj := maps.Clone(b.sys)
	obj["Id"] = b.cfg.SystemID
	obj["Name"] = b.cfg.Name
	obj["Manufacturer"] = b.cfg.Manufacturer
	obj["Model"] = b.cfg.Model
	if b.cfg.Serial != "" {
		obj["SerialNumber"] = b.cfg.Serial
	}
	if b.cfg.UUID != "" {
		obj["UUID"] = b.cfg.UUID
	}
	obj["PowerState"] = b.power
	obj["@odata.etag"] = b.etagLocked()
	if !b.lastReset.IsZero() {
		obj["LastResetTime"] = b.lastReset.Format(time.RFC3339)
	}
	delete(obj, "BootProgress") // the mockup's is static fiction
	for _, f := range b.fw {
		if f.spec.Kind == KindBIOS {
			obj["BiosVersion"] = f.active // what the running BIOS reports
			break
		}
	}
	boot := map[string]any{
		"BootSourceOverrideTarget":                          b.target,
		"BootSourceOverrideTarget@Redfish.AllowableValues":  b.allowedTargets(),
		"BootSourceOverrideEnabled":                         b.enabled,
		"BootSourceOverrideEnabled@Redfish.AllowableValues": b.allowedEnabled(),
	}
	if b.cfg.UefiHTTP {
		boot["HttpBootUri"] = b.httpBootURI
	}
	if !b.cfg.NoBootMode {
		boot["BootSourceOverrideMode"] = b.mode
		boot["BootSourceOverrideMode@Redfish.AllowableValues"] = b.allowedModes()
	}
	obj["Boot"] = boot
	acts := map[string]any{}
	if old, ok := obj["Actions"].(map[string]any); ok {
		acts = maps.Clone(old)
	}
	acts["#ComputerSystem.Reset"] = map[string]any{
		"target":                            odataRoot + "/Systems/" + b.cfg.SystemID + "/Actions/ComputerSystem.Reset",
		"ResetType@Redfish.AllowableValues": b.servedResets(),
	}
	delete(acts, "Oem") // the mockup's OEM reset does nothing here
	obj["Actions"] = acts
	return obj
}

func (b *BMC) serveSystem(w http.ResponseWriter) {
	b.mu.Lock()
	body, etag := b.systemBodyLocked(), b.etagLocked()
	b.mu.Unlock()
	w.Header().Set("ETag", etag)
	writeJSON(w, http.StatusOK, body)
}

// bootProps are the writable Boot properties.
var bootProps = []string{"BootSourceOverrideTarget", "BootSourceOverrideEnabled", "BootSourceOverrideMode"}

type fieldError struct {
	id, prop, msg string
}

func (b *BMC) patchSystem(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "MalformedJSON",
			fmt.Sprintf("The request body submitted was malformed JSON: %v", err))
		return
	}
	var errs []fieldError
	var boot map[string]any
	for k, v := range body {
		switch {
		case strings.HasPrefix(k, "@"):
		case k == "Boot":
			if err := json.Unmarshal(v, &boot); err != nil {
				errs = append(errs, fieldError{"PropertyValueTypeError", "Boot", "The value for the property Boot is not an object."})
			}
		case b.sys[k] != nil:
			errs = append(errs, fieldError{"PropertyNotWritable", k, fmt.Sprintf("The property %s is a read only property and cannot be assigned a value.", k)})
		default:
			errs = append(errs, fieldError{"PropertyUnknown", k, fmt.Sprintf("The property %s is not in the list of valid properties for the resource.", k)})
		}
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	newVals := map[string]string{}
	for k, v := range boot {
		if k == "HttpBootUri" && b.cfg.UefiHTTP {
			u, ok := v.(string)
			if pu, err := url.Parse(u); !ok || err != nil || (u != "" && ((pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "")) {
				errs = append(errs, fieldError{"PropertyValueFormatError", "Boot/" + k, fmt.Sprintf("The value %v for the property HttpBootUri is not an http:// or https:// URI.", v)})
				continue
			}
			newVals[k] = u
			continue
		}
		if !slices.Contains(bootProps, k) || (k == "BootSourceOverrideMode" && b.cfg.NoBootMode) {
			errs = append(errs, fieldError{"PropertyUnknown", "Boot/" + k, fmt.Sprintf("The property %s is not in the list of valid properties for the resource.", k)})
			continue
		}
		s, ok := v.(string)
		if !ok {
			errs = append(errs, fieldError{"PropertyValueTypeError", "Boot/" + k, fmt.Sprintf("The value %v for the property %s is of a different type than the property can accept.", v, k)})
			continue
		}
		var allowed []string
		switch k {
		case "BootSourceOverrideTarget":
			allowed = b.allowedTargets()
		case "BootSourceOverrideEnabled":
			allowed = b.allowedEnabled()
		case "BootSourceOverrideMode":
			allowed = b.allowedModes()
		}
		if !slices.Contains(allowed, s) {
			errs = append(errs, fieldError{"PropertyValueNotInList", "Boot/" + k, fmt.Sprintf("The value %s for the property %s is not in the list of acceptable values %v.", s, k, allowed)})
			continue
		}
		newVals[k] = s
	}
	if len(errs) > 0 {
		b.log.Warn("PATCH refused", "errors", len(errs), "first", errs[0].msg)
		writeFieldErrors(w, http.StatusBadRequest, errs)
		return
	}
	// Preconditions are checked after validation, as a BMC checks the body
	// before it looks at state.
	if im := r.Header.Get("If-Match"); im != "" {
		if im != "*" && !etagMatches(im, b.etagLocked()) {
			writeError(w, http.StatusPreconditionFailed, "PreconditionFailed",
				fmt.Sprintf("The ETag supplied did not match the ETag required to change this resource: got %s, current %s.", im, b.etagLocked()))
			return
		}
	} else if b.cfg.RequireIfMatch {
		writeError(w, http.StatusPreconditionRequired, "PreconditionRequired",
			"A precondition header or annotation is required to change this resource.")
		return
	}
	if len(newVals) > 0 {
		if v, ok := newVals["BootSourceOverrideTarget"]; ok {
			b.target = v
		}
		if v, ok := newVals["BootSourceOverrideEnabled"]; ok {
			b.enabled = v
		}
		if v, ok := newVals["BootSourceOverrideMode"]; ok {
			b.mode = v
		}
		if v, ok := newVals["HttpBootUri"]; ok {
			b.httpBootURI = v
		}
		b.gen++
		b.overrides = append(b.overrides, OverrideChange{Time: b.cfg.Now(), Target: b.target, Enabled: b.enabled, Mode: b.mode})
		b.log.Info("boot override set", "target", b.target, "enabled", b.enabled, "mode", b.mode, "http_boot_uri", b.httpBootURI)
	}
	w.Header().Set("ETag", b.etagLocked())
	writeJSON(w, http.StatusOK, b.systemBodyLocked())
}

// etagMatches compares If-Match (possibly a list, possibly weak) with ours.
func etagMatches(header, etag string) bool {
	for c := range strings.SplitSeq(header, ",") {
		c = strings.TrimPrefix(strings.TrimSpace(c), "W/")
		if c == etag || `"`+c+`"` == etag {
			return true
		}
	}
	return false
}

func (b *BMC) postReset(w http.ResponseWriter, r *http.Request) {
	var req struct{ ResetType *string }
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "MalformedJSON",
			fmt.Sprintf("The request body submitted was malformed JSON: %v", err))
		return
	}
	if req.ResetType == nil {
		writeError(w, http.StatusBadRequest, "ActionParameterMissing",
			"The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body.")
		return
	}
	err := b.reset(r.Context(), *req.ResetType)
	switch {
	case errors.Is(err, errBadReset):
		writeError(w, http.StatusBadRequest, "ActionParameterValueNotInList",
			fmt.Sprintf("The value %s for the parameter ResetType in the action ComputerSystem.Reset is not in the list of acceptable values %v.", *req.ResetType, b.allowedResets()))
	case err != nil:
		b.log.Error("reset failed", "type", *req.ResetType, "err", err)
		writeError(w, http.StatusInternalServerError, "InternalError",
			fmt.Sprintf("The request failed due to an internal service error: %v", err))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// historyDoc is the /vbmc/history body.
type historyDoc struct {
	Name       string
	PowerState string
	Target     string
	Enabled    string
	Sessions   int
	Boots      []BootRecord
	Overrides  []OverrideChange
}

func (b *BMC) serveHistory(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, "GET")
		return
	}
	b.mu.Lock()
	doc := historyDoc{
		Name: b.cfg.Name, PowerState: b.power, Target: b.target, Enabled: b.enabled,
		Sessions: len(b.sessions), Boots: slices.Clone(b.history), Overrides: slices.Clone(b.overrides),
	}
	b.mu.Unlock()
	if doc.Boots == nil {
		doc.Boots = []BootRecord{}
	}
	if doc.Overrides == nil {
		doc.Overrides = []OverrideChange{}
	}
	writeJSON(w, http.StatusOK, doc)
}

// writeJSON answers compact JSON: a real BMC's answers are compact too,
// and indenting cost the fleet simulator ~290 allocations a GET on the
// cores the coordinator shares with it.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, code int, id, msg string) {
	writeFieldErrors(w, code, []fieldError{{id: id, msg: msg}})
}

// writeFieldErrors writes a Redfish error body (DSP0266 "Error responses").
func writeFieldErrors(w http.ResponseWriter, code int, errs []fieldError) {
	var ext []map[string]any
	for _, e := range errs {
		m := map[string]any{
			"@odata.type": "#Message.v1_1_1.Message",
			"MessageId":   registry + "." + e.id,
			"Message":     e.msg,
			"Severity":    "Warning",
			"Resolution":  "Correct the request and resubmit it.",
		}
		if e.prop != "" {
			m["RelatedProperties"] = []string{"#/" + e.prop}
		}
		ext = append(ext, m)
	}
	writeJSON(w, code, map[string]any{"error": map[string]any{
		"code":                  registry + "." + errs[0].id,
		"message":               errs[0].msg,
		"@Message.ExtendedInfo": ext,
	}})
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "OperationNotAllowed",
		"The HTTP method is not allowed on this resource.")
}

func randHex(n int) string {
	buf := make([]byte, n)
	_, _ = rand.Read(buf) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(buf)
}
