// Package schema publishes the JSON Schema of CURE's YAML files: SKU
// manifests, validation suites and nodes files (sku.schema.json,
// suite.schema.json, nodes.schema.json, generated from the Go types by
// Generate) and validates a file against them with the file's lines
// (`provisioner-lite check`, through sitecheck). The loaders
// (manifests.Parse, nodes.ParseYAML) check more than a schema can say;
// the schema is what an editor checks as one types.
package schema

//go:generate go run ./gen
