package redfish

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// maxResponseBytes bounds every body a BMC sends, whoever reads it (this
// package or gofish): a Redfish document is kilobytes, a large expanded
// collection page a few megabytes. A body past it is an error naming the
// URI and the limit, never a silent truncation.
const maxResponseBytes = 8 << 20

// BodyTooLargeError is a BMC response past maxResponseBytes.
type BodyTooLargeError struct {
	URI   string
	Limit int64
	// Size is the announced Content-Length, or 0 when the body was cut
	// while being read.
	Size int64
}

func (e *BodyTooLargeError) Error() string {
	if e.Size > 0 {
		return fmt.Sprintf("GET %s: response body of %d bytes exceeds the limit of %d bytes", e.URI, e.Size, e.Limit)
	}
	return fmt.Sprintf("GET %s: response body exceeds the limit of %d bytes", e.URI, e.Limit)
}

// boundResponse refuses a response that announces more than limit bytes
// and cuts any other at limit with a *BodyTooLargeError.
func boundResponse(r *http.Request, resp *http.Response, limit int64) (*http.Response, error) {
	uri := r.URL.RequestURI()
	if resp.ContentLength > limit {
		resp.Body.Close()
		return nil, &BodyTooLargeError{URI: uri, Limit: limit, Size: resp.ContentLength}
	}
	resp.Body = &boundedBody{rc: resp.Body, left: limit, err: &BodyTooLargeError{URI: uri, Limit: limit}}
	return resp, nil
}

// boundedBody reads at most left bytes of rc; a byte past them is err,
// and stays err on every later read (json.Decoder.More drops a read
// error and reads again: the next read must not look like the end).
type boundedBody struct {
	rc   io.ReadCloser
	left int64
	err  *BodyTooLargeError
	over bool
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.over {
		return 0, b.err
	}
	if b.left <= 0 {
		// One byte more says whether the body ends at the limit.
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			b.over = true
			return 0, b.err
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }

// maxValueBytes bounds one value of a collection page (a member, or a
// field the decoder skips): json.Decoder buffers a whole value before it
// decodes it, and its buffer doubles as it fills, so without it one 8 MiB
// member would cost four times that. A SoftwareInventory member is a
// kilobyte or two.
const maxValueBytes = 256 << 10

// valueGuard feeds a json.Decoder and refuses to read on once the value
// the decoder is working on (what it buffered and has not consumed) is
// past max.
type valueGuard struct {
	r    io.Reader
	read int64
	dec  *json.Decoder
	max  int64
}

func (g *valueGuard) Read(p []byte) (int, error) {
	if g.read-g.dec.InputOffset() > g.max {
		return 0, fmt.Errorf("a value of the page runs past %d bytes (the limit of one member or field)", g.max)
	}
	n, err := g.r.Read(p)
	g.read += int64(n)
	return n, err
}

// maxSkipDepth bounds the nesting of a value the page decoder skips: the
// decoder's token stack grows with it.
const maxSkipDepth = 64

// decodeInventoryPage reads one page of a FirmwareInventory collection as
// it streams in: the members expanded in it, the paths of those given as
// links (to be read on their own), and the next page's path. Members are
// decoded one at a time, a page may list at most maxInventoryMembers and
// no value of it may be larger than maxValueBytes, so what a page costs
// is what it keeps (bounded by the body's limit), not its length (an 8 MiB page of empty members, decoded whole, allocated ~395
// MB). Every path stays on the BMC. Keys match as encoding/json matches a
// struct's fields (case-insensitively; a repeated key's last value wins).
func decodeInventoryPage(r io.Reader) (items []FirmwareItem, links []string, next string, err error) {
	g := &valueGuard{r: r, max: maxValueBytes}
	dec := json.NewDecoder(g)
	g.dec = dec
	if err := expectDelim(dec, '{'); err != nil {
		return nil, nil, "", fmt.Errorf("parse collection: %w", err)
	}
	nextLink := ""
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, nil, "", fmt.Errorf("parse collection: %w", err)
		}
		switch k, _ := key.(string); {
		case strings.EqualFold(k, "Members"):
			if items, links, err = decodeMembers(dec); err != nil {
				return nil, nil, "", err
			}
		case strings.EqualFold(k, "Members@odata.nextLink"):
			var s *string
			if err := dec.Decode(&s); err != nil {
				return nil, nil, "", fmt.Errorf("parse collection: Members@odata.nextLink: %w", err)
			}
			if s != nil {
				nextLink = *s
			}
		default:
			if err := skipValue(dec); err != nil {
				return nil, nil, "", fmt.Errorf("parse collection: %q: %w", truncate(k, 64), err)
			}
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, nil, "", fmt.Errorf("parse collection: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, nil, "", errors.New("parse collection: data after the collection's object")
	}
	if nextLink != "" {
		if next, err = bmcPath(nextLink); err != nil {
			return nil, nil, "", fmt.Errorf("Members@odata.nextLink %q: %w", truncate(nextLink, 128), err)
		}
	}
	return items, links, next, nil
}

// decodeMembers reads the Members array (or null) one member at a time.
func decodeMembers(dec *json.Decoder) (items []FirmwareItem, links []string, err error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, fmt.Errorf("parse collection: Members: %w", err)
	}
	if tok == nil {
		return nil, nil, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, nil, fmt.Errorf("parse collection: Members is %v, want an array", tok)
	}
	for i := 0; dec.More(); i++ {
		if i == maxInventoryMembers {
			return nil, nil, fmt.Errorf("a page lists more than %d members (limit %d)", maxInventoryMembers, maxInventoryMembers)
		}
		var doc inventoryDoc
		if err := dec.Decode(&doc); err != nil {
			return nil, nil, fmt.Errorf("member %d: %w", i, err)
		}
		if doc.ID != "" || doc.Version != "" {
			items = append(items, doc.item())
			continue
		}
		p, err := bmcPath(doc.ODataID)
		if err != nil {
			return nil, nil, fmt.Errorf("member %d %q: %w", i, truncate(doc.ODataID, 128), err)
		}
		links = append(links, p)
	}
	if err := expectDelim(dec, ']'); err != nil {
		return nil, nil, fmt.Errorf("parse collection: Members: %w", err)
	}
	return items, links, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("found %v, want %q", tok, string(want))
	}
	return nil
}

// skipValue reads past one value token by token: nothing of it is kept
// but the current token, and its nesting is bounded.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if depth++; depth > maxSkipDepth {
				return fmt.Errorf("nested deeper than %d", maxSkipDepth)
			}
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
