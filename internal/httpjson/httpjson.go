// Package httpjson writes JSON HTTP responses: the simulator's control
// API, the demo page's API and the node API.
package httpjson

import (
	"encoding/json"
	"net/http"
)

// Write sends v as a JSON body (one line, then a newline) with status code
// and Content-Type application/json. Once the header is written the status
// cannot change, so an encoding error (a client gone mid-body, a value
// json cannot encode) is not reported: the client sees a truncated body.
func Write(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteIndented is Write with the body indented by two spaces: for the
// node API, which people read with curl.
func WriteIndented(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
