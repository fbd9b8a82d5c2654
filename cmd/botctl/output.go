package main

import (
	"encoding/json"
	"io"
)

// printJSON writes v to w as indented JSON and a newline: what every
// subcommand's --json prints (scripts parse it; a person can read it).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
