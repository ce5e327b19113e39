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
