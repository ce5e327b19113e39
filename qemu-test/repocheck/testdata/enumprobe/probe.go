// Package enumprobe holds switches TestEnumsExhaustive knows the verdict on:
// the analyzer must report exactly the two marked "reported".
package enumprobe

import (
	"net/http"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

type color int

const (
	red color = iota
	green
	blue
)

// reported: a default clause does not stand in for RUN_FAILED and the rest.
func partialProto(s curev1.RunStatus) int {
	switch s {
	case curev1.RunStatus_RUN_RUNNING, curev1.RunStatus_RUN_PENDING:
		return 1
	default:
		return 0
	}
}

// reported: a const-iota enum of this module missing blue.
func partialIota(c color) int {
	switch c {
	case red, green:
		return 1
	}
	return 0
}

func whole(c color) int {
	switch c {
	case red, green, blue:
		return 1
	}
	return 0
}

// Another module's enum: a switch may handle the values it cares about.
func foreign(s http.ConnState) bool {
	switch s {
	case http.StateClosed:
		return true
	default:
		return false
	}
}
