package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"github.com/stmcginnis/gofish"
)

// Bounds on reading a BMC's logs: a SEL holds hundreds to thousands of
// entries; a BMC that pages forever, or links a page to itself, stops here.
const (
	maxLogServices = 4     // hardware-event logs read per call
	maxLogPages    = 200   // pages per log
	maxLogRead     = 20000 // entries examined per log
	// DefaultLogEntries is how many entries of the window EventLog keeps
	// when asked for no bound.
	DefaultLogEntries = 1000
)

// LogEntry is one entry of a BMC log service.
type LogEntry struct {
	Service    string // the LogService Id
	ID         string
	Created    time.Time
	Severity   string // OK, Warning, Critical, or "" where not given
	Message    string
	MessageID  string
	SensorType string
	EntryType  string // SEL, Event, Oem
	EntryCode  string
}

// EventLog is what EventLog read: the entries of the window, and how.
type EventLog struct {
	Entries  []LogEntry // oldest first
	Services []string   // the log services read
	Read     int        // entries examined, in and out of the window
	Dropped  int        // in the window but over the bound
	Notes    []string   // logs skipped, paging cut short, entries without a time
}

// noiseLog matches the log services that hold no hardware events (audit,
// lifecycle, journal, dumps, POST codes): not read.
var noiseLog = regexp.MustCompile(`(?i)audit|lifecycle|lclog|journal|dump|crash|postcode|post code|debug|security`)

// logServiceDoc is a LogService resource.
type logServiceDoc struct {
	ID, Name, LogEntryType string
	Entries                string // a path on the BMC
}

// parseLogService reads a LogService: its Id, name, entry type and
// Entries link (a path on the BMC).
func parseLogService(raw []byte) (logServiceDoc, error) {
	var doc struct {
		ID           string `json:"Id"`
		Name         string
		LogEntryType string
		Entries      link
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return logServiceDoc{}, fmt.Errorf("parse: %w", err)
	}
	p, err := optPath("Entries", doc.Entries.ID)
	if err != nil {
		return logServiceDoc{}, err
	}
	return logServiceDoc{ID: textsafe.BoundedLine(doc.ID, maxTextLen), Name: textsafe.BoundedLine(doc.Name, maxTextLen),
		LogEntryType: textsafe.BoundedLine(doc.LogEntryType, 32), Entries: p}, nil
}

// entryPage is one page of a log's Entries.
type entryPage struct {
	Entries []LogEntry
	Next    string // the next page, a path on the BMC ("" on the last)
	Undated int    // entries without a readable Created
}

// parseEntryPage reads a page of LogEntry members and its next-page link
// (Members@odata.nextLink, or @odata.nextLink as some BMCs write it).
func parseEntryPage(raw []byte, service string) (entryPage, error) {
	var doc struct {
		Members   []json.RawMessage
		NextLink  string `json:"Members@odata.nextLink"`
		NextLink2 string `json:"@odata.nextLink"`
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &doc); err != nil {
			return entryPage{}, fmt.Errorf("parse: %w", err)
		}
	}
	if len(doc.Members) > maxMembers {
		return entryPage{}, fmt.Errorf("page lists %d members (limit %d)", len(doc.Members), maxMembers)
	}
	var pg entryPage
	var err error
	if pg.Next, err = optPath("Members@odata.nextLink", cmpOr(doc.NextLink, doc.NextLink2)); err != nil {
		return entryPage{}, err
	}
	for _, m := range doc.Members {
		e, ok := parseLogEntry(m, service)
		if !ok {
			pg.Undated++
			continue
		}
		pg.Entries = append(pg.Entries, e)
	}
	return pg, nil
}

// parseLogEntry reads one LogEntry; ok is false without a readable Created
// (it cannot be placed in a window).
func parseLogEntry(raw []byte, service string) (LogEntry, bool) {
	var d struct {
		ID                               string `json:"Id"`
		Created                          string
		Severity, Message                string
		MessageID                        string `json:"MessageId"`
		SensorType, EntryType, EntryCode string
	}
	if json.Unmarshal(raw, &d) != nil {
		return LogEntry{}, false
	}
	t, ok := parseCreated(d.Created)
	if !ok {
		return LogEntry{}, false
	}
	l := func(s string, n int) string { return textsafe.BoundedLine(s, n) }
	return LogEntry{
		Service: service, ID: l(d.ID, maxTextLen), Created: t, Severity: health(d.Severity),
		Message: l(d.Message, maxMessageLen), MessageID: l(d.MessageID, maxTextLen),
		SensorType: l(d.SensorType, maxTextLen), EntryType: l(d.EntryType, 32), EntryCode: l(d.EntryCode, maxTextLen),
	}, true
}

// parseCreated reads a LogEntry's Created: RFC 3339 with its offset, or
// without one (then UTC, as BMCs that omit it keep UTC).
func parseCreated(s string) (time.Time, bool) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), true
	}
	if t, err := time.Parse("2006-01-02T15:04:05", s); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// EventLog reads the entries of the BMC's hardware-event logs (the SEL,
// the event log, HPE's IML) created in [since, until], since taken to its
// whole second as BMCs write Created: the system's log services first, then
// the manager's, audit and lifecycle logs left out, at most maxLogServices.
// Pages are followed through their next link (each a path on this BMC, none
// twice); a log listed newest first is read only back to a page wholly
// before since; every log is bounded in pages and entries. At most max
// entries of the window are kept (0: DefaultLogEntries): Critical, then
// Warning, then the earliest. ErrNotSupported: the BMC has no log service.
func (c *Client) EventLog(ctx context.Context, since, until time.Time, max int) (*EventLog, error) {
	if max <= 0 {
		max = DefaultLogEntries
	}
	// BMCs write Created in whole seconds, truncated: an entry made after
	// since, in the same second, reads as before it.
	since = since.Truncate(time.Second)
	var services []logServiceDoc
	out := &EventLog{}
	err := c.call(ctx, "find log services", func(api *gofish.APIClient) error {
		var err error
		services, out.Notes, err = c.logServices(api)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(services) == 0 {
		if len(out.Notes) > 0 {
			return nil, fmt.Errorf("redfish %s: %w: no hardware-event log (%s)", c.ep.URL, ErrNotSupported, strings.Join(out.Notes, "; "))
		}
		return nil, fmt.Errorf("redfish %s: %w: no LogServices under the system or the manager", c.ep.URL, ErrNotSupported)
	}
	seen := map[string]bool{}
	var in []LogEntry
	for _, s := range services {
		out.Services = append(out.Services, s.ID)
		ents, read, notes, err := c.readLog(ctx, s, since)
		out.Read += read
		out.Notes = append(out.Notes, notes...)
		if err != nil {
			return nil, fmt.Errorf("log %s: %w", s.ID, err)
		}
		for _, e := range ents {
			key := e.Service + "\x00" + e.ID
			if e.Created.Before(since) || e.Created.After(until) || (e.ID != "" && seen[key]) {
				continue
			}
			seen[key] = true
			in = append(in, e)
		}
	}
	out.Entries, out.Dropped = boundEntries(in, max)
	return out, nil
}

// boundEntries keeps at most max entries, oldest first: Critical, then
// Warning, then the rest, each the earliest first.
func boundEntries(in []LogEntry, max int) ([]LogEntry, int) {
	rank := func(e LogEntry) int {
		switch e.Severity {
		case "Critical":
			return 0
		case "Warning":
			return 1
		}
		return 2
	}
	slices.SortStableFunc(in, func(a, b LogEntry) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return a.Created.Compare(b.Created)
	})
	dropped := 0
	if len(in) > max {
		dropped, in = len(in)-max, in[:max]
	}
	slices.SortStableFunc(in, func(a, b LogEntry) int { return a.Created.Compare(b.Created) })
	return in, dropped
}

// logServices finds the hardware-event logs: the system's LogServices
// members, then the manager's, less the noise, at most maxLogServices.
func (c *Client) logServices(api *gofish.APIClient) ([]logServiceDoc, []string, error) {
	var colls []string
	sysRaw, _, err := c.systemRaw(api)
	if err != nil {
		return nil, nil, err
	}
	var doc struct{ LogServices link }
	if json.Unmarshal(sysRaw, &doc) == nil {
		if p, err := bmcPath(doc.LogServices.ID); err == nil {
			colls = append(colls, p)
		}
	}
	if m, err := c.manager(api); err == nil {
		doc.LogServices.ID = ""
		if json.Unmarshal(m.RawData, &doc) == nil {
			if p, err := bmcPath(doc.LogServices.ID); err == nil && !slices.Contains(colls, p) {
				colls = append(colls, p)
			}
		}
	}
	var out []logServiceDoc
	var notes []string
	for _, coll := range colls {
		var raw json.RawMessage
		if _, err := getJSON(api, coll, &raw); err != nil {
			notes = append(notes, fmt.Sprintf("%s unreadable: %v", coll, err))
			continue
		}
		members, err := parseMembers(raw)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: %v", coll, err))
			continue
		}
		for _, m := range members {
			if len(out) >= maxLogServices {
				notes = append(notes, fmt.Sprintf("log service %s not read: %d logs at most", m, maxLogServices))
				continue
			}
			if _, err := getJSON(api, m, &raw); err != nil {
				notes = append(notes, fmt.Sprintf("log service %s unreadable: %v", m, err))
				continue
			}
			s, err := parseLogService(raw)
			if err != nil {
				notes = append(notes, fmt.Sprintf("log service %s: %v", m, err))
				continue
			}
			if s.ID == "" {
				s.ID = textsafe.BoundedLine(m[strings.LastIndexByte(m, '/')+1:], maxTextLen)
			}
			switch {
			case s.Entries == "":
				notes = append(notes, fmt.Sprintf("log service %s links no Entries", s.ID))
			case noiseLog.MatchString(s.ID + " " + s.Name):
				// Not hardware events.
			default:
				out = append(out, s)
			}
		}
	}
	return out, notes, nil
}

// readLog pages through one log's entries. A log listed newest first is
// read until a page wholly older than since; any other to its end (within
// the bounds).
func (c *Client) readLog(ctx context.Context, s logServiceDoc, since time.Time) (ents []LogEntry, read int, notes []string, err error) {
	next := s.Entries
	visited := map[string]bool{}
	undated := 0
	var last time.Time
	descending, ascending := false, false
	for pages := 0; next != ""; pages++ {
		if visited[next] {
			notes = append(notes, fmt.Sprintf("log %s: page %s linked twice; stopped there", s.ID, next))
			break
		}
		if pages >= maxLogPages || read >= maxLogRead {
			notes = append(notes, fmt.Sprintf("log %s: stopped after %d pages and %d entries (the bound)", s.ID, pages, read))
			break
		}
		visited[next] = true
		var pg entryPage
		uri := next
		err := c.call(ctx, "read log "+s.ID, func(api *gofish.APIClient) error {
			var raw json.RawMessage
			if _, err := getJSON(api, uri, &raw); err != nil {
				return err
			}
			var err error
			if pg, err = parseEntryPage(raw, s.ID); err != nil {
				return fmt.Errorf("%s: %w", uri, err)
			}
			return nil
		})
		if err != nil {
			return nil, read, notes, err
		}
		read += len(pg.Entries) + pg.Undated
		undated += pg.Undated
		older := len(pg.Entries) > 0
		for _, e := range pg.Entries {
			if !last.IsZero() {
				descending = descending || e.Created.Before(last)
				ascending = ascending || e.Created.After(last)
			}
			last = e.Created
			older = older && e.Created.Before(since)
			ents = append(ents, e)
		}
		// Newest first (and only ever so), and a whole page before the
		// window: what follows is older still. A whole page, not one
		// entry: a BMC whose clock was set mid-log (NTP after a reset)
		// lists one entry out of order.
		if descending && !ascending && older {
			break
		}
		next = pg.Next
	}
	if undated > 0 {
		notes = append(notes, fmt.Sprintf("log %s: %d entries without a readable Created time left out", s.ID, undated))
	}
	return ents, read, notes, nil
}
