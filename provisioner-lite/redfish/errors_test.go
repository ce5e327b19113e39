package redfish

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stmcginnis/gofish/schemas"
)

// An error answer reaches an operator as its status and first message, in
// one bounded line; the status is still readable by the driver.
func TestBriefErrorAnswer(t *testing.T) {
	body := `{"error":{"code":"Base.1.8.GeneralError","message":"A general error has occurred. See ExtendedInfo for more information.",` +
		`"@Message.ExtendedInfo":[{"@odata.type":"#Message.v1_1_1.Message","MessageId":"Base.1.8.PropertyValueNotInList",` +
		`"Message":"The value Floppy for the property BootSourceOverrideTarget is not in the list of acceptable values.","Severity":"Warning",` +
		`"Resolution":"` + strings.Repeat("Choose a value from the enumeration list. ", 20) + `"}]}}`
	err := brief(fmt.Errorf("redfish https://bmc: set boot override: %w", schemas.ConstructError(http.StatusBadRequest, []byte(body))))
	want := "redfish https://bmc: set boot override: HTTP 400 Base.1.8.PropertyValueNotInList: The value Floppy for the property BootSourceOverrideTarget is not in the list of acceptable values."
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
	if statusOf(err) != http.StatusBadRequest {
		t.Errorf("status %d after brief, want 400", statusOf(err))
	}
	// A body that is not Redfish JSON is not shown either.
	err = brief(schemas.ConstructError(http.StatusInternalServerError, []byte("<html><body>"+strings.Repeat("x", 2000)+"</body></html>")))
	if err.Error() != "HTTP 500" {
		t.Errorf("an HTML answer became %q", err)
	}
	if brief(nil) != nil || brief(errors.New("plain")).Error() != "plain" {
		t.Error("brief changed an error that carries no answer")
	}
}

// FuzzBriefErrorAnswer: whatever a BMC answers with an error status, what
// reaches an operator is one clean line of bounded length that keeps the
// driver's own words around it, and the status stays readable.
func FuzzBriefErrorAnswer(f *testing.F) {
	f.Add(400, []byte(`{"error":{"code":"Base.1.8.GeneralError","message":"x","@Message.ExtendedInfo":[{"MessageId":"Base.1.8.PropertyValueNotInList","Message":"The value Floppy is not in the list."}]}}`))
	f.Add(401, []byte(`{"error":{"code":"Base.1.8.NoValidSession","message":"There is no valid session established with the implementation."}}`))
	f.Add(500, []byte("<html>"+strings.Repeat("x", 4000)+"</html>"))
	f.Add(404, []byte("line one\nline two\x1b[31m\u202e"))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 100 || status > 599 {
			return
		}
		err := brief(fmt.Errorf("redfish https://bmc: read power state: %w", schemas.ConstructError(status, body)))
		msg := err.Error()
		if !strings.HasPrefix(msg, "redfish https://bmc: read power state: HTTP "+fmt.Sprint(status)) {
			t.Fatalf("the driver's context or the status is lost: %q", msg)
		}
		if strings.ContainsAny(msg, "\n\r\x1b\u202e") {
			t.Fatalf("not one clean line: %q", msg)
		}
		if len(msg) > len("redfish https://bmc: read power state: HTTP 400 ")+80+2+maxBMCMessage+8 {
			t.Fatalf("%d bytes: %q", len(msg), msg)
		}
		if statusOf(err) != status {
			t.Fatalf("status %d after brief, want %d", statusOf(err), status)
		}
	})
}
