package demoui

// What the bot answers beyond text, on the page: the images it showed
// (kept by the simulator) and clicks on its template cards.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

var imageIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// maxShownImage bounds an image relayed to the page (WeCom's 10 MB).
const maxShownImage = 10<<20 + 1

// image is GET /demo/api/images?id=<id>: an image a bot showed, as the
// simulator kept it (an entry's image_ids).
func (h *pageAPI) image(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if h.chatOff(w) {
		return
	}
	if !imageIDPattern.MatchString(id) {
		writeError(w, http.StatusBadRequest, "id: want an image id of a transcript entry's image_ids")
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, h.cfg.Sim+"/control/images?"+url.Values{"id": {id}}.Encode(), nil)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("the simulator at %s did not answer: %v", h.cfg.Sim, unwrapURL(err)))
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxShownImage))
	if err != nil {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("reading the simulator's answer: %v", err))
		return
	}
	ct := http.DetectContentType(body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "image/") {
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

// click is the body of POST /demo/api/clicks: a user clicks a button of
// a card the bot sent.
type click struct {
	Bot      string `json:"bot"`
	User     string `json:"user"`
	TaskID   string `json:"task_id"`
	EventKey string `json:"event_key"`
}

// postClick is POST /demo/api/clicks {"bot","user","task_id","event_key"}:
// the simulator sends the bot a template_card_event, as WeCom does when
// a user clicks a card's button.
func (h *pageAPI) postClick(w http.ResponseWriter, r *http.Request) {
	if h.chatOff(w) || !sameOriginJSON(w, r) {
		return
	}
	var c click
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("body: %v: want {\"bot\",\"user\",\"task_id\",\"event_key\"}", err))
		return
	}
	if !h.knownBot(w, c.Bot) || !validUser(w, "user", c.User) {
		return
	}
	if c.TaskID == "" || len(c.TaskID) > 128 || c.EventKey == "" || len(c.EventKey) > 128 {
		writeError(w, http.StatusBadRequest, "task_id and event_key are required (at most 128 bytes): the card's task_id and the button's key")
		return
	}
	body, _ := json.Marshal(map[string]string{"bot_id": c.Bot, "user_id": c.User, "eventtype": "template_card_event",
		"task_id": c.TaskID, "event_key": c.EventKey})
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, h.cfg.Sim+"/control/events", bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	req.Header.Set("Content-Type", "application/json")
	h.relay(w, req)
}

// sameOriginJSON refuses what a cross-site form could post: a body that
// is not JSON, or one from another Origin.
func sameOriginJSON(w http.ResponseWriter, r *http.Request) bool {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: send a JSON body with Content-Type: application/json", ct))
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			writeError(w, http.StatusForbidden, fmt.Sprintf("Origin %q is not this node (%s): the demo chat posts only from its own page", o, r.Host))
			return false
		}
	}
	return true
}
