package main

import (
	"encoding/json"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"
)

// Output formats of -o. JSON and YAML are the API's own JSON (protojson,
// every field present), so scripts see the same field names either way.
const (
	outTable = "table"
	outWide  = "wide"
	outJSON  = "json"
	outYAML  = "yaml"
)

func parseOutput(s string) (string, error) {
	switch s {
	case "", outTable:
		return outTable, nil
	case outWide, outJSON, outYAML:
		return s, nil
	case "yml":
		return outYAML, nil
	}
	return "", fmt.Errorf("-o %q: want table, wide, json or yaml", s)
}

// structured is m as generic JSON values, from protojson.
func structured(m proto.Message) (any, error) {
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// printStructured writes m as indented JSON or as YAML; 0 or 1 as exit code.
func printStructured(m proto.Message, format string, out io.Writer) int {
	v, err := structured(m)
	if err != nil {
		fmt.Fprintln(stderr(), "curectl: encode:", err)
		return 1
	}
	if format == outYAML {
		enc := yaml.NewEncoder(out)
		enc.SetIndent(2)
		err = enc.Encode(v)
		if err == nil {
			err = enc.Close()
		}
	} else {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		err = enc.Encode(v)
	}
	if err != nil {
		fmt.Fprintln(stderr(), "curectl: write:", err)
		return 1
	}
	return 0
}

// structuredFormat reports whether format is one of -o's machine formats.
func structuredFormat(format string) bool { return format == outJSON || format == outYAML }

// printStreamed writes one element of a stream (watch): JSON as one
// compact object per line (JSON Lines), YAML as a document after "---".
func printStreamed(m proto.Message, format string, out io.Writer) int {
	v, err := structured(m)
	if err != nil {
		fmt.Fprintln(stderr(), "curectl: encode:", err)
		return 1
	}
	if format == outYAML {
		fmt.Fprintln(out, "---")
		enc := yaml.NewEncoder(out)
		enc.SetIndent(2)
		err = enc.Encode(v)
		if err == nil {
			err = enc.Close()
		}
	} else {
		err = json.NewEncoder(out).Encode(v)
	}
	if err != nil {
		fmt.Fprintln(stderr(), "curectl: write:", err)
		return 1
	}
	return 0
}
