// Package conformance holds the tests that hold the coordinator and the
// runner to each other and the Redfish driver to the virtual BMC's vendor
// profiles. It has no code of its own: it is the one place allowed to import
// both sides (the coordinator and the runner never import each other).
package conformance
