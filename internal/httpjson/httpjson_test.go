package httpjson

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, http.StatusTeapot, map[string]string{"error": "no"})
	if rec.Code != http.StatusTeapot {
		t.Errorf("code %d, want %d", rec.Code, http.StatusTeapot)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if got, want := rec.Body.String(), "{\"error\":\"no\"}\n"; got != want {
		t.Errorf("body %q, want %q", got, want)
	}
}
