package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// inventoryPath is where the virtual BMC keeps its firmware inventory.
const inventoryPath = "/redfish/v1/UpdateService/FirmwareInventory"

// floodPage is a FirmwareInventory page of exactly size bytes: one member
// (Id, Version), then whatever fill makes it up.
func floodPage(size int, fill func(b *bytes.Buffer, room int)) []byte {
	var b bytes.Buffer
	b.WriteString(`{"@odata.id":"` + inventoryPath + `","Members":[{"Id":"BMC","Version":"1.0"}`)
	fill(&b, size-b.Len()-2)
	b.WriteString(`]}`)
	return b.Bytes()
}

// A page of a BMC's firmware inventory is decoded as it streams in, its
// body bounded by the transport: an 8 MiB page served by the BMC costs a
// small multiple of the limit, however it is made (millions of empty
// members, members given as links, one huge value, a thousand large
// members), and a body past the limit, a page past the member cap or a
// value past maxValueBytes is an error naming the URI and the limit.
func TestInventoryPageStreamed(t *testing.T) {
	const limit = maxResponseBytes
	empties := func(b *bytes.Buffer, room int) {
		b.WriteString(strings.Repeat(",{}", room/3) + strings.Repeat(" ", room%3))
	}
	link := `,{"@odata.id":"` + inventoryPath + `/x"}`
	links := func(b *bytes.Buffer, room int) {
		b.WriteString(strings.Repeat(link, room/len(link)) + strings.Repeat(" ", room%len(link)))
	}
	big := func(b *bytes.Buffer, room int) {
		// The fill goes in the first member's unknown field: rebuild.
		b.Truncate(b.Len() - len(`"}`))
		pad := room - len(`","Junk":""}`) + len(`"}`)
		b.WriteString(`","Junk":"` + strings.Repeat("j", pad) + `"}`)
	}
	const fat = 1000
	largeMembers := func(b *bytes.Buffer, room int) {
		per := room / fat
		for i := range fat - 1 {
			m := fmt.Sprintf(`,{"Id":"FW%d","Version":"2","Name":"`, i)
			n := per - len(m) - len(`"}`)
			if i == fat-2 {
				n += room - fat*per + per
			}
			b.WriteString(m + strings.Repeat("n", n) + `"}`)
		}
	}
	for _, tc := range []struct {
		name    string
		size    int
		fill    func(*bytes.Buffer, int)
		wantErr []string // empty: the read succeeds
		wantN   int
	}{
		{"2.8 million empty members", limit, empties, []string{"FirmwareInventory " + inventoryPath, "member 1", "empty URI"}, 0},
		{"links past the member cap", limit, links, []string{"FirmwareInventory " + inventoryPath, "more than 1024 members (limit 1024)"}, 0},
		{"one 8 MiB value", limit, big, []string{"FirmwareInventory " + inventoryPath, fmt.Sprintf("runs past %d bytes", maxValueBytes)}, 0},
		{"a thousand large members", limit, largeMembers, nil, fat},
		{"a byte past the limit", limit + 1, largeMembers, []string{"GET " + inventoryPath, fmt.Sprintf("exceeds the limit of %d bytes", limit)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page := floodPage(tc.size, tc.fill)
			if len(page) != tc.size {
				t.Fatalf("page of %d bytes, want %d", len(page), tc.size)
			}
			if tc.wantErr == nil && !json.Valid(page) {
				t.Fatal("the page is not JSON")
			}
			for _, chunked := range []bool{false, true} {
				_, _, _, url := bmcServer(t, vbmc.Config{NoExpand: true}, func(h http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.URL.Path != inventoryPath {
							h.ServeHTTP(w, r)
							return
						}
						if chunked { // no Content-Length: the body is cut while read
							w.Header().Set("Transfer-Encoding", "chunked")
							w.Write(page[:1])
							w.(http.Flusher).Flush()
							w.Write(page[1:])
							return
						}
						w.Header().Set("Content-Length", fmt.Sprint(len(page)))
						w.Write(page)
					})
				})
				c := connect(t, url, 30*time.Second)
				if _, err := c.System(context.Background()); err != nil { // log in and warm up outside the measure
					t.Fatal(err)
				}
				var items []FirmwareItem
				var err error
				alloc := allocated(func() { items, err = c.FirmwareInventory(context.Background()) })
				t.Logf("chunked %v: %d MiB allocated, %d items, err %v", chunked, alloc>>20, len(items), err)
				if alloc > 2*limit {
					t.Errorf("chunked %v: reading an %d-byte page allocated %d MiB (limit %d MiB)", chunked, tc.size, alloc>>20, 2*limit>>20)
				}
				if tc.wantErr == nil {
					if err != nil || len(items) != tc.wantN {
						t.Fatalf("chunked %v: %d items, %v; want %d", chunked, len(items), err, tc.wantN)
					}
					continue
				}
				if err == nil {
					t.Fatalf("chunked %v: read %d items, want an error", chunked, len(items))
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("chunked %v: error %q does not say %q", chunked, err, w)
					}
				}
				if tc.size > limit {
					var tooBig *BodyTooLargeError
					if !errors.As(err, &tooBig) {
						t.Errorf("chunked %v: %v is no *BodyTooLargeError", chunked, err)
					}
				}
			}
		})
	}
}

// allocated is the bytes fn allocates (the whole process: the test BMC's
// handler writes a prepared page and allocates little).
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// The body bound: a body of exactly the limit reads whole; one byte more
// is a *BodyTooLargeError naming the URI, whether announced or not.
func TestBoundedBody(t *testing.T) {
	req, _ := http.NewRequest("GET", "https://bmc/redfish/v1/x?y=1", nil)
	for _, tc := range []struct {
		size     int
		announce bool
		ok       bool
	}{{16, true, true}, {16, false, true}, {17, false, false}, {17, true, false}} {
		resp := &http.Response{Body: io.NopCloser(bytes.NewReader(make([]byte, tc.size))), ContentLength: -1}
		if tc.announce {
			resp.ContentLength = int64(tc.size)
		}
		got, err := boundResponse(req, resp, 16)
		if err == nil {
			_, err = io.ReadAll(got.Body)
			// The refusal stays: a reader that reads again after an
			// error (json.Decoder.More does) must not see an end.
			if _, again := got.Body.Read(make([]byte, 4)); err != nil && again != err {
				t.Errorf("%d bytes: read after %v: %v", tc.size, err, again)
			}
		}
		var tooBig *BodyTooLargeError
		if tc.ok != (err == nil) || !tc.ok && (!errors.As(err, &tooBig) || !strings.Contains(err.Error(), "GET /redfish/v1/x?y=1") || !strings.Contains(err.Error(), "limit of 16 bytes")) {
			t.Errorf("%d bytes (announced %v): %v", tc.size, tc.announce, err)
		}
	}
}

// FuzzInventoryPageStream holds the streaming decoder to what decoding
// the page whole said (encoding/json into the collection's struct): the
// same items, links and next page for every page the whole decode
// accepts within the member cap, and an error for every page it refuses.
func FuzzInventoryPageStream(f *testing.F) {
	f.Add([]byte(`{"Members":[{"Id":"BMC","Version":"1"},{"@odata.id":"/redfish/v1/UpdateService/FirmwareInventory/2"}],"Members@odata.nextLink":"/redfish/v1/UpdateService/FirmwareInventory?$skip=2"}`))
	f.Add([]byte(`{"members":null,"MEMBERS":[{"Id":"a"}],"Junk":[[{"x":[1,2,{"y":null}]}]],"Members@odata.nextLink":null}`))
	f.Add([]byte(`{"Members":[{"Id":"a"}]} {}`))
	f.Add([]byte(`{"Members":{"Id":"a"}}`))
	f.Add([]byte(`{"Members":[{"Id":5}]}`))
	f.Add([]byte(` null `))
	f.Fuzz(func(t *testing.T, body []byte) {
		items, links, next, err := decodeInventoryPage(bytes.NewReader(body))
		wItems, wLinks, wNext, wErr := wholeInventoryPage(body)
		if wErr == nil && len(wItems)+len(wLinks) > maxInventoryMembers {
			if err == nil {
				t.Fatalf("a page of %d members accepted (limit %d)", len(wItems)+len(wLinks), maxInventoryMembers)
			}
			return
		}
		if (err == nil) != (wErr == nil) {
			// A top-level null decodes whole as an empty page; streamed, a
			// page is an object.
			if wErr == nil && bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
				return
			}
			t.Fatalf("streamed: %v; whole: %v", err, wErr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(items, wItems) || !reflect.DeepEqual(links, wLinks) || next != wNext {
			t.Fatalf("streamed %+v %q %q\nwhole %+v %q %q", items, links, next, wItems, wLinks, wNext)
		}
	})
}

// wholeInventoryPage is the page decoded whole, as before streaming: the
// reference FuzzInventoryPageStream holds the decoder to.
func wholeInventoryPage(raw []byte) (items []FirmwareItem, links []string, next string, err error) {
	var coll struct {
		Members  []inventoryDoc
		NextLink string `json:"Members@odata.nextLink"`
	}
	if err := json.Unmarshal(raw, &coll); err != nil {
		return nil, nil, "", err
	}
	for _, doc := range coll.Members {
		if doc.ID != "" || doc.Version != "" {
			items = append(items, doc.item())
			continue
		}
		p, err := bmcPath(doc.ODataID)
		if err != nil {
			return nil, nil, "", err
		}
		links = append(links, p)
	}
	if coll.NextLink != "" {
		if next, err = bmcPath(coll.NextLink); err != nil {
			return nil, nil, "", err
		}
	}
	return items, links, next, nil
}
