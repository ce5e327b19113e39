package redfish

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// counter counts the requests whose path has a prefix.
type counter struct {
	mu   sync.Mutex
	seen []string
}

func (c *counter) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.seen = append(c.seen, r.URL.RequestURI())
		c.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (c *counter) count(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.seen {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

func readingByKey(s *Sensors, key string) (SensorReading, bool) {
	for _, r := range s.Readings {
		if r.Key == key {
			return r, true
		}
	}
	return SensorReading{}, false
}

// The driver reads the Sensors collection where the chassis offers it (in
// one request where $expand is advertised, member by member where not),
// Thermal and Power where it does not.
func TestSensorsPerAPI(t *testing.T) {
	for _, tc := range []struct {
		api      string
		noExpand bool
		source   string
		cpuKey   string
	}{
		{vbmc.SensorAPIBoth, false, SensorSourceSensors, "Sensors/CPU1Temp"},
		{vbmc.SensorAPISensors, true, SensorSourceSensors, "Sensors/CPU1Temp"},
		{vbmc.SensorAPILegacy, false, SensorSourceLegacy, "Temperatures/CPU #1 Temperature"},
	} {
		t.Run(fmt.Sprintf("%s/noexpand=%v", cmpOr(tc.api, "both"), tc.noExpand), func(t *testing.T) {
			cnt := &counter{}
			b, _, _, url := bmcServer(t, vbmc.Config{SensorAPI: tc.api, NoExpand: tc.noExpand}, cnt.wrap)
			c := connect(t, url, 5*time.Second)
			ctx := context.Background()
			if err := c.PowerOn(ctx); err != nil {
				t.Fatal(err)
			}
			b.SetLoad(1)
			if err := b.SetSensor("CPU1Temp", 91); err != nil {
				t.Fatal(err)
			}
			s, err := c.Sensors(ctx)
			if err != nil {
				t.Fatalf("Sensors: %v", err)
			}
			if s.Source != tc.source {
				t.Errorf("source %q, want %q", s.Source, tc.source)
			}
			cpu, ok := readingByKey(s, tc.cpuKey)
			if !ok || cpu.Value != 91 || cpu.Kind != "temperature" || cpu.Units != "C" || cpu.Health != "Warning" {
				t.Errorf("CPU temperature %+v (found %v), want 91 C Warning; all %+v", cpu, ok, s.Readings)
			}
			kinds := map[string]int{}
			for _, r := range s.Readings {
				kinds[r.Kind+" "+r.Units]++
			}
			if kinds["fan RPM"] != 4 || kinds["power W"] < 1 || kinds["voltage V"] != 2 {
				t.Errorf("readings by kind %v", kinds)
			}
			members := cnt.count("/redfish/v1/Chassis/1U/Sensors/")
			switch {
			case tc.source == SensorSourceLegacy && cnt.count("/redfish/v1/Chassis/1U/Sensors") > 0:
				t.Error("a BMC without Sensors was asked for them")
			case tc.source == SensorSourceSensors && !tc.noExpand && members > 0:
				t.Errorf("%d member GETs where $expand is offered", members)
			case tc.noExpand && members != len(s.Readings):
				t.Errorf("%d member GETs for %d readings", members, len(s.Readings))
			}
		})
	}
}

// PSUs and fans come with identity and health through either API.
func TestPartsPerAPI(t *testing.T) {
	for _, api := range []string{vbmc.SensorAPISensors, vbmc.SensorAPILegacy} {
		t.Run(cmpOr(api, "both"), func(t *testing.T) {
			b, _, _, url := bmcServer(t, vbmc.Config{SensorAPI: api, Serial: "SN7"}, nil)
			c := connect(t, url, 5*time.Second)
			ctx := context.Background()
			if err := b.SetPartHealth(vbmc.PartPSU, "Bay2", "Critical", ""); err != nil {
				t.Fatal(err)
			}
			psus, err := c.PowerSupplies(ctx)
			if err != nil {
				t.Fatalf("PowerSupplies: %v", err)
			}
			if len(psus) != 2 || psus[1].SerialNumber != "SN7-PSU2" || psus[1].PartNumber != "23456-133" || psus[1].Health != "Critical" ||
				psus[0].Health != "OK" || psus[0].Manufacturer != "Contoso Power" {
				t.Errorf("PSUs %+v", psus)
			}
			fans, err := c.Fans(ctx)
			if err != nil {
				t.Fatalf("Fans: %v", err)
			}
			if len(fans) != 4 || fans[3].SerialNumber != "SN7-FAN4" || fans[3].Model == "" || fans[3].Health != "OK" {
				t.Errorf("fans %+v", fans)
			}
		})
	}
}

// A BMC that offers a resource not at all answers ErrNotSupported, which
// callers record rather than fail on.
func TestHealthNotSupported(t *testing.T) {
	hide := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := r.URL.Path
			if strings.Contains(p, "/LogServices") || p == "/redfish/v1/Chassis/1U" {
				if p == "/redfish/v1/Chassis/1U" {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, `{"@odata.id":"/redfish/v1/Chassis/1U","Id":"1U","Name":"bare"}`)
					return
				}
				http.NotFound(w, r)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	_, _, _, url := bmcServer(t, vbmc.Config{}, hide)
	c := connect(t, url, 5*time.Second)
	ctx := context.Background()
	if _, err := c.Sensors(ctx); !IsNotSupported(err) {
		t.Errorf("Sensors of a bare chassis: %v, want ErrNotSupported", err)
	}
	if _, err := c.PowerSupplies(ctx); !IsNotSupported(err) {
		t.Errorf("PowerSupplies of a bare chassis: %v, want ErrNotSupported", err)
	}
	if _, err := c.EventLog(ctx, time.Time{}, time.Now(), 0); !IsNotSupported(err) {
		t.Errorf("EventLog without LogServices: %v, want ErrNotSupported", err)
	}
}

// The log is read across pages, only the window is kept, the newest-first
// log is read only back to the window's start, and the bound keeps the
// severe entries first.
func TestEventLogWindowPagingBound(t *testing.T) {
	for _, newest := range []bool{false, true} {
		t.Run(fmt.Sprintf("newestFirst=%v", newest), func(t *testing.T) {
			cnt := &counter{}
			t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
			b, _, _, url := bmcServer(t, vbmc.Config{EventLog: vbmc.LogShape{ID: "Log1", PageSize: 4, NewestFirst: newest, UTCOffset: 2 * time.Hour}}, cnt.wrap)
			c := connect(t, url, 5*time.Second)
			sev := []string{"OK", "Warning", "Critical"}
			for i := range 30 { // one a minute from t0
				if _, err := b.LogEvent(vbmc.Event{Created: t0.Add(time.Duration(i) * time.Minute), Severity: sev[i%3],
					Message: fmt.Sprintf("event %02d", i), MessageID: "Test.1.0.E", SensorType: "Temperature"}); err != nil {
					t.Fatal(err)
				}
			}
			since, until := t0.Add(20*time.Minute), t0.Add(25*time.Minute)
			log, err := c.EventLog(context.Background(), since, until, 0)
			if err != nil {
				t.Fatalf("EventLog: %v", err)
			}
			var got []string
			for _, e := range log.Entries {
				got = append(got, strings.TrimPrefix(e.Message, "event "))
				if e.Service != "Log1" || e.MessageID != "Test.1.0.E" || e.SensorType != "Temperature" || e.EntryType != "SEL" {
					t.Errorf("entry %+v", e)
				}
			}
			if strings.Join(got, ",") != "20,21,22,23,24,25" {
				t.Errorf("window [20,25]: %v", got)
			}
			if !log.Entries[0].Created.Equal(since) {
				t.Errorf("Created %v, want %v (the +02:00 the BMC wrote, read as the same instant)", log.Entries[0].Created, since)
			}
			// The live log, then the manager's (the mockup's, one entry of 2012).
			if strings.Join(log.Services, ",") != "Log1,Log" {
				t.Errorf("services read %v", log.Services)
			}
			pages := cnt.count("/redfish/v1/Systems/437XR1138R2/LogServices/Log1/Entries")
			if newest {
				// 30 newest first: 29..26, 25..22, 21..18, then 17..14 wholly
				// before since: 4 pages, not 8.
				if pages != 4 || log.Read != 16+1 {
					t.Errorf("newest first: %d pages, %d entries read; want 4 and 16+1 (stop past the window's start)", pages, log.Read)
				}
			} else if pages != 8 || log.Read != 30+1 {
				t.Errorf("oldest first: %d pages, %d entries read; want 8 and 30+1", pages, log.Read)
			}

			bounded, err := c.EventLog(context.Background(), since, until, 3)
			if err != nil {
				t.Fatal(err)
			}
			var kept []string
			for _, e := range bounded.Entries {
				kept = append(kept, e.Severity+":"+strings.TrimPrefix(e.Message, "event "))
			}
			// 20 Critical, 21 OK, 22 Warning, 23 Critical, 24 OK, 25 Warning.
			if strings.Join(kept, ",") != "Critical:20,Warning:22,Critical:23" || bounded.Dropped != 3 {
				t.Errorf("bound 3 kept %v, dropped %d; want the two Critical and the first Warning, 3 dropped", kept, bounded.Dropped)
			}
		})
	}
}

// Paging is only ever on this BMC and ends: a page that links itself, a
// log that pages forever, a link to another host (its path on this BMC).
func TestEventLogHostilePaging(t *testing.T) {
	entries := "/redfish/v1/Systems/437XR1138R2/LogServices/Log1/Entries"
	hostile := func(mode string) func(http.Handler) http.Handler {
		return func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != entries {
					h.ServeHTTP(w, r)
					return
				}
				n := 0
				fmt.Sscanf(r.URL.Query().Get("$skip"), "%d", &n)
				next := ""
				switch mode {
				case "self":
					next = entries
				case "forever":
					next = fmt.Sprintf("%s?$skip=%d", entries, n+1)
				case "elsewhere":
					if n == 0 {
						next = "https://evil.example:8443" + entries + "?$skip=1"
					}
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"Members":[{"Id":"%d","Created":"2026-05-01T10:00:%02dZ","Severity":"Critical","Message":"page %d"}],"Members@odata.nextLink":%q}`,
					n, n%60, n, next)
			})
		}
	}
	for _, mode := range []string{"self", "forever", "elsewhere"} {
		t.Run(mode, func(t *testing.T) {
			_, _, _, url := bmcServer(t, vbmc.Config{}, hostile(mode))
			c := connect(t, url, 5*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			log, err := c.EventLog(ctx, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 5, 2, 0, 0, 0, 0, time.UTC), 10)
			if err != nil {
				t.Fatalf("EventLog: %v", err)
			}
			// Read counts the manager's mockup log (one entry) too.
			switch mode {
			case "self":
				if log.Read != 1+1 || !strings.Contains(strings.Join(log.Notes, ";"), "linked twice") {
					t.Errorf("self-linked page: read %d, notes %v", log.Read, log.Notes)
				}
			case "forever":
				if log.Read != maxLogPages+1 || len(log.Entries) != 10 || log.Dropped != maxLogPages-10 {
					t.Errorf("endless paging: read %d, kept %d, dropped %d; want %d, 10, %d", log.Read, len(log.Entries), log.Dropped, maxLogPages, maxLogPages-10)
				}
			case "elsewhere":
				if log.Read != 2+1 || len(log.Entries) != 2 {
					t.Errorf("link to another host: read %d entries, kept %d; want page 2 read from this BMC", log.Read, len(log.Entries))
				}
			}
		})
	}
}

func TestIsNotSupported(t *testing.T) {
	if !IsNotSupported(fmt.Errorf("x: %w", ErrNotSupported)) || IsNotSupported(errors.New("x")) {
		t.Error("IsNotSupported")
	}
}
