package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func want(b []byte) Want {
	s := sha256.Sum256(b)
	return Want{Size: int64(len(b)), SHA256: hex.EncodeToString(s[:])}
}

// server serves body at /ok, half of it then a dropped connection at /cut,
// and nothing until the client gives up at /hang.
func server(t *testing.T, body []byte) *httptest.Server {
	t.Helper()
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.Write(body)
		case "/cut":
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body[:len(body)/2])
			hj, ok := w.(http.Hijacker)
			if !ok {
				t.Error("no hijacker")
				return
			}
			c, _, _ := hj.Hijack()
			c.Close()
		case "/hang":
			select {
			case <-r.Context().Done():
			case <-hang:
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() { close(hang); srv.Close() })
	return srv
}

func TestFetch(t *testing.T) {
	body := []byte(strings.Repeat("firmware image ", 1000))
	srv := server(t, body)
	good := want(body)
	short := good
	short.Size--
	long := good
	long.Size++
	badHash := good
	badHash.SHA256 = strings.Repeat("ab", 32)
	f := Fetcher{Limit: 1 << 20}
	for _, tc := range []struct {
		name, path string
		f          Fetcher
		want       Want
		err        string // "" = success
		mismatch   bool
	}{
		{"good", "/ok", f, good, "", false},
		{"upper-case digest", "/ok", f, Want{good.Size, strings.ToUpper(good.SHA256)}, "", false},
		{"server sends more", "/ok", f, short, "size: expected " + strconv.Itoa(len(body)-1) + " bytes, got more", true},
		{"server sends less", "/ok", f, long, "size: expected " + strconv.Itoa(len(body)+1) + " bytes, got " + strconv.Itoa(len(body)), true},
		{"wrong hash", "/ok", f, badHash, "sha256 mismatch: expected " + badHash.SHA256 + ", got " + good.SHA256, true},
		{"cut body", "/cut", f, good, "read failed after " + strconv.Itoa(len(body)/2) + " of " + strconv.Itoa(len(body)) + " bytes", false},
		{"404", "/missing", f, good, "HTTP 404 Not Found", false},
		{"timeout", "/hang", Fetcher{Limit: 1 << 20, Timeout: 50 * time.Millisecond}, good, "context deadline exceeded", false},
		{"over the limit", "/ok", Fetcher{Limit: 10}, good, "size " + strconv.Itoa(len(body)) + " outside 1..10 bytes", false},
		{"zero size", "/ok", f, Want{0, good.SHA256}, "size 0 outside 1..", false},
		{"no limit", "/ok", Fetcher{}, good, "no size limit configured", false},
		{"digest not hex", "/ok", f, Want{good.Size, "xyz"}, `expected sha256 "xyz" is not 64 hex digits`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := srv.URL + tc.path
			check := func(what string, err error) {
				t.Helper()
				if tc.err == "" {
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), url) {
					t.Fatalf("%s: error %v, want one naming %s and containing %q", what, err, url, tc.err)
				}
				if errors.Is(err, ErrMismatch) != tc.mismatch {
					t.Errorf("%s: errors.Is(ErrMismatch) = %v", what, !tc.mismatch)
				}
				var se *StatusError
				if errors.As(err, &se) != (tc.name == "404") || (se != nil && se.Code != http.StatusNotFound) {
					t.Errorf("%s: StatusError = %v, want one only for the 404", what, se)
				}
			}
			b, err := tc.f.Bytes(context.Background(), url, tc.want)
			check("Bytes", err)
			if err == nil && string(b) != string(body) {
				t.Errorf("Bytes returned %d bytes, not the body", len(b))
			}
			dir := t.TempDir()
			p, err := tc.f.File(context.Background(), url, tc.want, dir, "a-*.bin")
			check("File", err)
			left, _ := os.ReadDir(dir)
			if err != nil && len(left) != 0 {
				t.Errorf("File left %s behind after an error", left[0].Name())
			}
			if err == nil {
				got, rerr := os.ReadFile(p)
				if rerr != nil || string(got) != string(body) || filepath.Dir(p) != dir {
					t.Errorf("File %s: %d bytes, %v", p, len(got), rerr)
				}
			}
			check("Check", tc.f.Check(context.Background(), url, tc.want))
		})
	}
}

func TestVerifyCopies(t *testing.T) {
	body := []byte("abc")
	var sb strings.Builder
	if err := Verify(strings.NewReader("abc"), want(body), &sb); err != nil || sb.String() != "abc" {
		t.Fatalf("Verify: %v, copied %q", err, sb.String())
	}
	if err := Verify(strings.NewReader("abd"), want(body), nil); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Verify of other bytes: %v", err)
	}
}
