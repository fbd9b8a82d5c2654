package demoui

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
)

// An image posted through the page reaches the simulator as an image
// message, with text as a mixed one; bad images are refused saying why.
func TestImageThroughTheSimulator(t *testing.T) {
	base, sim := page(t, nil)
	msgs := base + Path + "api/messages"
	img := base64.StdEncoding.EncodeToString([]byte("not much of an image"))
	if r := do(t, "POST", msgs, "application/json", `{"bot":"b1","user":"alice","image":{"base64":"`+img+`","filename":"a.png"}}`); r.code != http.StatusOK {
		t.Fatalf("image: %d %v", r.code, r.body)
	}
	if r := do(t, "POST", msgs, "application/json", `{"bot":"b1","user":"bob","text":"and this?","image":{"base64":"`+img+`"}}`); r.code != http.StatusOK {
		t.Fatalf("mixed: %d %v", r.code, r.body)
	}
	a, b := sim.Transcript("b1", "alice"), sim.Transcript("b1", "bob")
	if len(a) != 1 || a[0].Kind != "image" || len(a[0].Media) != 1 || a[0].Media[0].Filename != "a.png" || a[0].Media[0].Size != 20 {
		t.Fatalf("alice's transcript %+v", a)
	}
	if len(b) != 1 || b[0].Kind != "mixed" || b[0].Content != "and this?" || len(b[0].Media) != 1 {
		t.Fatalf("bob's transcript %+v", b)
	}
	for _, c := range []struct{ body, says string }{
		{`{"bot":"b1","user":"a","image":{"base64":"!!"}}`, "image.base64"},
		{`{"bot":"b1","user":"a","image":{"base64":""}}`, "image.base64"},
		{`{"bot":"b1","user":"a","image":{"base64":"` + base64.StdEncoding.EncodeToString(make([]byte, maxImage+1)) + `"}}`, "at most"},
	} {
		r := do(t, "POST", msgs, "application/json", c.body)
		if e, _ := r.body["error"].(string); r.code != http.StatusBadRequest || !strings.Contains(e, c.says) {
			t.Fatalf("%.60s: %d %v, want 400 saying %q", c.body, r.code, r.body, c.says)
		}
	}
}
