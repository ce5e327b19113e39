package vbmc

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// LogShape is where the BMC keeps its live event log (the SEL, or the
// event log of BMCs without one) and how it serves it: vendors put it under
// the system or the manager, name it differently, page it and order it
// their own way.
type LogShape struct {
	// Under is the resource whose LogServices hold it: "Systems" (default)
	// or "Managers".
	Under string
	ID    string // LogService Id (default "Log1", the mockup's)
	Name  string // default "System Event Log"
	// EntryType of every entry: SEL (default), Event, or Oem with
	// OemRecordFormat.
	EntryType       string
	OemRecordFormat string
	// PageSize is how many entries one page of Entries lists (default 50);
	// the rest are behind @odata.nextLink ($skip).
	PageSize int
	// NewestFirst lists the newest entry first.
	NewestFirst bool
	// MaxRecords is when the log wraps, dropping its oldest entry (default 1000).
	MaxRecords int
	// UTCOffset is the zone Created times are written in, e.g.
	// 6*time.Hour for "+06:00" (default UTC, "Z").
	UTCOffset time.Duration
}

// Event is something the BMC logs: a power change it made, or what a test
// injects (a PSU or temperature event).
type Event struct {
	Created      time.Time // zero: now
	Severity     string    // OK, Warning or Critical
	Message      string
	MessageID    string
	MessageArgs  []string
	SensorType   string // Redfish SensorType: Temperature, Power Supply / Converter, Fan, System Event, ...
	SensorNumber int
	EntryCode    string // Assert, Deassert, ...
	Origin       string // OriginOfCondition: the @odata.id of the resource
}

// LogEntry is one entry of the live log.
type LogEntry struct {
	ID int
	Event
}

// MessageIds of the virtual BMC's own registry (VBMC), for what no DMTF
// registry names.
const (
	MsgHostPoweredOn  = "VBMC.1.0.HostPoweredOn"
	MsgHostPoweredOff = "VBMC.1.0.HostPoweredOff"
	MsgHostReset      = "VBMC.1.0.HostResetRequested"
	MsgManagerReset   = "VBMC.1.0.ManagerReset"
	MsgLogCleared     = "VBMC.1.0.LogCleared"
)

func (s LogShape) withDefaults() LogShape {
	if s.Under == "" {
		s.Under = "Systems"
	}
	if s.ID == "" {
		s.ID = "Log1"
	}
	if s.Name == "" {
		s.Name = "System Event Log"
	}
	if s.EntryType == "" {
		s.EntryType = "SEL"
	}
	if s.PageSize <= 0 {
		s.PageSize = 50
	}
	if s.MaxRecords <= 0 {
		s.MaxRecords = 1000
	}
	return s
}

func (s LogShape) validate() error {
	if s.Under != "Systems" && s.Under != "Managers" {
		return fmt.Errorf("EventLog.Under %q: want Systems or Managers", s.Under)
	}
	if s.ID == "" || strings.ContainsAny(s.ID, "/?#") {
		return fmt.Errorf("EventLog.ID %q: want a plain Id", s.ID)
	}
	switch s.EntryType {
	case "SEL", "Event", "Oem":
	default:
		return fmt.Errorf("EventLog.EntryType %q: want SEL, Event or Oem", s.EntryType)
	}
	return nil
}

// LogShape is the live log's shape in effect (Config.EventLog with its
// defaults).
func (b *BMC) LogShape() LogShape { return b.cfg.EventLog }

// logServicesURL is the LogServices collection the live log is listed in.
func (b *BMC) logServicesURL() string {
	if b.cfg.EventLog.Under == "Managers" {
		return managerURL + "/LogServices"
	}
	return odataRoot + "/Systems/" + b.cfg.SystemID + "/LogServices"
}

func (b *BMC) logURL() string { return b.logServicesURL() + "/" + b.cfg.EventLog.ID }

// LogEvent appends e to the live event log, as the BMC's own sensors or a
// failing part would, and returns the entry.
func (b *BMC) LogEvent(e Event) (LogEntry, error) {
	switch e.Severity {
	case "OK", "Warning", "Critical":
	default:
		return LogEntry{}, fmt.Errorf("vbmc %s: event severity %q: want OK, Warning or Critical", b.cfg.Name, e.Severity)
	}
	if e.Message == "" {
		return LogEntry{}, fmt.Errorf("vbmc %s: event without a Message", b.cfg.Name)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.logLocked(e), nil
}

// EventLog lists the live log, oldest first.
func (b *BMC) EventLog() []LogEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.events)
}

// logLocked appends e (b.mu held), dropping the oldest entry when full.
func (b *BMC) logLocked(e Event) LogEntry {
	if e.Created.IsZero() {
		e.Created = b.cfg.Now()
	}
	b.eventSeq++
	ent := LogEntry{ID: b.eventSeq, Event: e}
	b.events = append(b.events, ent)
	if over := len(b.events) - b.cfg.EventLog.MaxRecords; over > 0 {
		b.events = slices.Delete(b.events, 0, over)
	}
	b.log.Info("event logged", "id", ent.ID, "severity", e.Severity, "message", e.Message)
	return ent
}

func (b *BMC) entryBody(e LogEntry) map[string]any {
	sh := b.cfg.EventLog
	zone := time.UTC
	if sh.UTCOffset != 0 {
		zone = time.FixedZone("", int(sh.UTCOffset/time.Second))
	}
	id := strconv.Itoa(e.ID)
	obj := map[string]any{
		"@odata.type": "#LogEntry.v1_15_0.LogEntry",
		"@odata.id":   b.logURL() + "/Entries/" + id,
		"Id":          id,
		"Name":        "Log Entry " + id,
		"EntryType":   sh.EntryType,
		"Created":     e.Created.In(zone).Format(time.RFC3339),
		"Severity":    e.Severity,
		"Message":     e.Message,
	}
	if e.MessageID != "" {
		obj["MessageId"] = e.MessageID
	}
	if len(e.MessageArgs) > 0 {
		obj["MessageArgs"] = e.MessageArgs
	}
	if e.SensorType != "" {
		obj["SensorType"] = e.SensorType
	}
	if e.SensorNumber != 0 {
		obj["SensorNumber"] = e.SensorNumber
	}
	if e.EntryCode != "" {
		obj["EntryCode"] = e.EntryCode
	}
	if sh.EntryType == "Oem" && sh.OemRecordFormat != "" {
		obj["OemRecordFormat"] = sh.OemRecordFormat
	}
	if e.Origin != "" {
		obj["Links"] = map[string]any{"OriginOfCondition": map[string]any{"@odata.id": e.Origin}}
	}
	return obj
}

func (b *BMC) logServiceBody() map[string]any {
	sh := b.cfg.EventLog
	u := b.logURL()
	b.mu.Lock()
	n := len(b.events)
	b.mu.Unlock()
	return map[string]any{
		"@odata.type":        "#LogService.v1_3_0.LogService",
		"@odata.id":          u,
		"Id":                 sh.ID,
		"Name":               sh.Name,
		"MaxNumberOfRecords": sh.MaxRecords,
		"OverWritePolicy":    "WrapsWhenFull",
		"DateTime":           b.cfg.Now().UTC().Format(time.RFC3339),
		"LogEntryType":       map[string]string{"SEL": "SEL", "Event": "Event", "Oem": "OEM"}[sh.EntryType],
		"ServiceEnabled":     true,
		"Status":             map[string]any{"State": "Enabled", "Health": "OK"},
		"Entries":            map[string]any{"@odata.id": u + "/Entries"},
		"Actions": map[string]any{"#LogService.ClearLog": map[string]any{
			"target": u + "/Actions/LogService.ClearLog",
		}},
		"Oem": map[string]any{"CURE": map[string]any{"Entries": n}},
	}
}

// entriesPage is one page of Entries: $skip and $top as DSP0266 §7.3.1,
// @odata.nextLink to the next page while entries remain.
func (b *BMC) entriesPage(q url.Values) (map[string]any, error) {
	sh := b.cfg.EventLog
	skip, top := 0, sh.PageSize
	if v := q.Get("$skip"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("$skip %q: want a non-negative integer", v)
		}
		skip = n
	}
	if v := q.Get("$top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("$top %q: want a non-negative integer", v)
		}
		top = min(n, sh.PageSize)
	}
	b.mu.Lock()
	all := slices.Clone(b.events)
	b.mu.Unlock()
	if sh.NewestFirst {
		slices.Reverse(all)
	}
	u := b.logURL() + "/Entries"
	members := []any{}
	end := min(skip+top, len(all))
	for i := skip; i < end; i++ {
		members = append(members, b.entryBody(all[i]))
	}
	obj := map[string]any{
		"@odata.type":         "#LogEntryCollection.LogEntryCollection",
		"@odata.id":           u,
		"Name":                sh.Name + " Entries",
		"Members@odata.count": len(all),
		"Members":             members,
	}
	if end < len(all) {
		obj["Members@odata.nextLink"] = fmt.Sprintf("%s?$skip=%d", u, end)
	}
	return obj, nil
}

// routeEventLog serves the live log service; it reports false for paths
// it does not own.
func (b *BMC) routeEventLog(w http.ResponseWriter, r *http.Request, p string) bool {
	u := b.logURL()
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case p == b.logServicesURL():
		if !get {
			methodNotAllowed(w, "GET, HEAD")
			return true
		}
		writeJSON(w, http.StatusOK, b.logServicesBody())
	case p == u:
		if !get {
			methodNotAllowed(w, "GET, HEAD")
			return true
		}
		writeJSON(w, http.StatusOK, b.logServiceBody())
	case p == u+"/Entries":
		if !get {
			methodNotAllowed(w, "GET, HEAD")
			return true
		}
		page, err := b.entriesPage(r.URL.Query())
		if err != nil {
			writeError(w, http.StatusBadRequest, "QueryParameterValueFormatError", fmt.Sprintf("The value of a query parameter is not valid: %v.", err))
			return true
		}
		writeJSON(w, http.StatusOK, page)
	case strings.HasPrefix(p, u+"/Entries/"):
		if !get {
			methodNotAllowed(w, "GET, HEAD")
			return true
		}
		id, err := strconv.Atoi(strings.TrimPrefix(p, u+"/Entries/"))
		b.mu.Lock()
		i := slices.IndexFunc(b.events, func(e LogEntry) bool { return e.ID == id })
		var e LogEntry
		if i >= 0 {
			e = b.events[i]
		}
		b.mu.Unlock()
		if err != nil || i < 0 {
			writeError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", p))
			return true
		}
		writeJSON(w, http.StatusOK, b.entryBody(e))
	case p == u+"/Actions/LogService.ClearLog":
		if r.Method != http.MethodPost {
			methodNotAllowed(w, "POST")
			return true
		}
		b.mu.Lock()
		b.events = nil
		b.logLocked(Event{Severity: "OK", Message: "The log was cleared.", MessageID: MsgLogCleared, SensorType: "Event Logging Disabled", EntryCode: "Log Area Reset/Cleared"})
		b.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		return false
	}
	return true
}

// logServicesBody is the mockup's LogServices collection with the live log
// listed in it.
func (b *BMC) logServicesBody() map[string]any {
	u := b.logServicesURL()
	members := []any{map[string]any{"@odata.id": b.logURL()}}
	if res, ok := b.tree[u]; ok {
		for _, m := range parseMemberIDs(res.body) {
			if m != b.logURL() {
				members = append(members, map[string]any{"@odata.id": m})
			}
		}
	}
	return map[string]any{
		"@odata.type":         "#LogServiceCollection.LogServiceCollection",
		"@odata.id":           u,
		"Name":                "Log Service Collection",
		"Members@odata.count": len(members),
		"Members":             members,
	}
}
