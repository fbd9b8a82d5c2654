package demoui

import (
	"bytes"
	"context"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/botctl/botctl/internal/httpjson"
	"github.com/botctl/botctl/internal/oneline"
)

//go:embed static
var static embed.FS

// Path is where the page is served on the node API.
const Path = "/demo/"

// Texts are the lines the pusher writes, so the page can label each
// frame: the receipt, the heartbeat line, the note of a truncated stream.
type Texts struct {
	Receipt       string
	HeartbeatLine string // a format with two integer verbs (minutes, seconds)
	QueuedLine    string // the same, while the task waits for a worker
	TruncatedNote string
}

// Config configures the page's handler.
type Config struct {
	NodeID string
	Bots   []string // the bots a user may talk to (the node's)
	// Sim is the simulator's base URL (http://host:port), "" when the node
	// talks to real WeCom: the chat is off and only the live view works.
	Sim   string
	Texts Texts
	// View reads the live view (ReadView on the node's sources).
	View func(context.Context) View
	// Protect wraps the chat's endpoints: the one that writes (a user
	// message) and the one that reads what users asked and were answered
	// (a chat's transcript). The node API's token check; nil: none.
	Protect func(http.Handler) http.Handler
	// Client calls the simulator; nil: a client with a 5 s timeout.
	Client *http.Client
}

// Limits of a posted user message.
const (
	maxText     = 4000 // bytes
	maxUserID   = 64
	maxBody     = 16 << 10
	maxImage    = 8 << 20 // an image's bytes, decoded
	maxSimReply = 4 << 20 // a transcript of long answers
)

var userIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.@-]+$`)

// Handler serves the page under Path and its API under Path+"api/".
func Handler(cfg Config) http.Handler {
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 5 * time.Second}
	}
	protect := cfg.Protect
	if protect == nil {
		protect = func(h http.Handler) http.Handler { return h }
	}
	files, _ := fs.Sub(static, "static")
	h := &pageAPI{cfg: cfg}
	mux := http.NewServeMux()
	mux.Handle(Path, http.StripPrefix(Path, readOnly(noCache(http.FileServerFS(files)))))
	mux.HandleFunc("GET "+Path+"api/config", h.config)
	mux.HandleFunc("GET "+Path+"api/cluster", h.cluster)
	mux.Handle("GET "+Path+"api/transcript", protect(http.HandlerFunc(h.transcript)))
	mux.Handle("POST "+Path+"api/messages", protect(http.HandlerFunc(h.postMessage)))
	mux.Handle("GET "+Path+"api/images", protect(http.HandlerFunc(h.image)))
	mux.Handle("POST "+Path+"api/clicks", protect(http.HandlerFunc(h.postClick)))
	mux.HandleFunc(Path+"api/", unknownEndpoint)
	return mux
}

// endpoints are the page's API, for the error of a wrong request.
var endpoints = map[string]string{"config": "GET", "cluster": "GET", "transcript": "GET", "messages": "POST", "images": "GET", "clicks": "POST"}

// unknownEndpoint answers what no route took: a wrong method (405) or a
// wrong path (404), saying which requests there are.
func unknownEndpoint(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, Path+"api/")
	list := "GET api/config, GET api/cluster, GET api/transcript?bot=&chat=, POST api/messages, GET api/images?id=, POST api/clicks"
	if m, ok := endpoints[name]; ok {
		w.Header().Set("Allow", m)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s is not supported: use %s", r.Method, r.URL.Path, m))
		return
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("no demo endpoint %s: there are %s", r.URL.Path, list))
}

type pageAPI struct{ cfg Config }

// readOnly refuses every method but GET and HEAD.
func readOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: the page is read-only (GET)", r.Method, r.URL.Path))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// noCache: a page served by a node of a newer version must not be the
// cached one of an older node on the same port.
func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// pageConfig is what the page needs to know before it polls.
type pageConfig struct {
	Node string   `json:"node"`
	Bots []string `json:"bots"`
	// Chat is false when the node has no simulator; ChatOff says why.
	Chat    bool   `json:"chat"`
	ChatOff string `json:"chat_off,omitempty"`
	// The pusher's lines, and the heartbeat line as a regular expression
	// (JavaScript syntax) to recognise it with its minutes and seconds.
	Receipt       string `json:"receipt"`
	Heartbeat     string `json:"heartbeat_pattern"`
	TruncatedNote string `json:"truncated_note"`
}

func (h *pageAPI) config(w http.ResponseWriter, r *http.Request) {
	pc := pageConfig{Node: h.cfg.NodeID, Bots: h.cfg.Bots, Chat: h.cfg.Sim != "",
		Receipt: h.cfg.Texts.Receipt, TruncatedNote: h.cfg.Texts.TruncatedNote,
		Heartbeat: linePattern(h.cfg.Texts.HeartbeatLine, h.cfg.Texts.QueuedLine)}
	if !pc.Chat {
		pc.ChatOff = "this node talks to WeCom itself, not to the simulator: the chat works only with serve --demo or a ws:// simulator URL (wecom.url)"
	}
	httpjson.Write(w, http.StatusOK, pc)
}

// linePattern turns printf formats with integer verbs ("已进行 %d 分 %02d
// 秒") into one regular expression matching any of them.
func linePattern(formats ...string) string {
	verb := regexp.MustCompile(`%0?\d*d`)
	var alts []string
	for _, f := range formats {
		if f == "" {
			continue
		}
		parts := verb.Split(f, -1)
		for i := range parts {
			parts[i] = regexp.QuoteMeta(strings.ReplaceAll(parts[i], "%%", "%"))
		}
		alts = append(alts, strings.Join(parts, `\d+`))
	}
	if len(alts) == 0 {
		return "$^" // matches nothing
	}
	return strings.Join(alts, "|")
}

func (h *pageAPI) cluster(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	httpjson.Write(w, http.StatusOK, h.cfg.View(ctx))
}

// chatOff answers 409 when there is no simulator to talk to.
func (h *pageAPI) chatOff(w http.ResponseWriter) bool {
	if h.cfg.Sim != "" {
		return false
	}
	writeError(w, http.StatusConflict, "no simulator: this node talks to WeCom itself, so the demo chat is off (run serve --demo, or give a ws:// simulator URL as wecom.url)")
	return true
}

func (h *pageAPI) knownBot(w http.ResponseWriter, bot string) bool {
	if bot == "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("bot is required: one of %v", h.cfg.Bots))
		return false
	}
	if !slices.Contains(h.cfg.Bots, bot) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("bot %q is not served by this node: use one of %v", bot, h.cfg.Bots))
		return false
	}
	return true
}

func validUser(w http.ResponseWriter, name, id string) bool {
	if id == "" || len(id) > maxUserID || !userIDPattern.MatchString(id) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s %q: want 1 to %d letters, digits or _ . @ -", name, oneline.Clip(id, maxUserID), maxUserID))
		return false
	}
	return true
}

// transcript is GET /demo/api/transcript?bot=B&chat=C: the simulator's
// transcript of that chat, as the simulator returns it.
func (h *pageAPI) transcript(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if h.chatOff(w) || !h.knownBot(w, q.Get("bot")) || !validUser(w, "chat", q.Get("chat")) {
		return
	}
	u := h.cfg.Sim + "/control/transcript?" + url.Values{"bot_id": {q.Get("bot")}, "chat": {q.Get("chat")}}.Encode()
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u, nil)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	h.relay(w, req)
}

// message is the body of POST /demo/api/messages.
type message struct {
	Bot  string `json:"bot"`
	User string `json:"user"`
	Text string `json:"text"`
	// Image, if set, is sent with the text: an image message alone, or
	// with text a mixed message (text, then the image).
	Image *image `json:"image,omitempty"`
}

// image is an image a demo user attaches.
type image struct {
	Base64   string `json:"base64"`
	Filename string `json:"filename,omitempty"`
}

// postMessage is POST /demo/api/messages {"bot","user","text","image"?}:
// the user sends text, an image ({"base64","filename"}) or both (a mixed
// message) to the bot, through the simulator (as WeCom would deliver it:
// the image encrypted at a URL that expires).
func (h *pageAPI) postMessage(w http.ResponseWriter, r *http.Request) {
	if h.chatOff(w) {
		return
	}
	// A cross-site form can post text/plain or a form, not JSON, without
	// a preflight this API never answers; a script on another site that
	// tries shows its Origin.
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: send a JSON body with Content-Type: application/json", ct))
		return
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			writeError(w, http.StatusForbidden, fmt.Sprintf("Origin %q is not this node (%s): the demo chat posts only from its own page", o, r.Host))
			return
		}
	}
	var m message
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody+maxImage*4/3+1024))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("body: %v: want {\"bot\":\"demo\",\"user\":\"alice\",\"text\":\"hello\"}", err))
		return
	}
	if !h.knownBot(w, m.Bot) || !validUser(w, "user", m.User) {
		return
	}
	if m.Image != nil {
		raw, err := base64.StdEncoding.DecodeString(m.Image.Base64)
		switch {
		case err != nil || len(raw) == 0:
			writeError(w, http.StatusBadRequest, "image.base64: want the image's bytes in standard base64")
			return
		case len(raw) > maxImage:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("image: %d bytes, at most %d", len(raw), maxImage))
			return
		case len(m.Image.Filename) > 200 || !utf8.ValidString(m.Image.Filename):
			writeError(w, http.StatusBadRequest, "image.filename: want valid UTF-8 of at most 200 bytes")
			return
		}
	}
	switch {
	case strings.TrimSpace(m.Text) == "" && m.Image == nil:
		writeError(w, http.StatusBadRequest, "text is empty: type a question")
		return
	case len(m.Text) > maxText || !utf8.ValidString(m.Text):
		writeError(w, http.StatusBadRequest, fmt.Sprintf("text: want valid UTF-8 of at most %d bytes, got %d bytes", maxText, len(m.Text)))
		return
	}
	body, _ := json.Marshal(simMessage(m))
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, h.cfg.Sim+"/control/messages", bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	req.Header.Set("Content-Type", "application/json")
	h.relay(w, req)
}

// relay sends req to the simulator and copies its answer (status and JSON
// body); an unreachable simulator is a 502 that says so.
func (h *pageAPI) relay(w http.ResponseWriter, req *http.Request) {
	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("the simulator at %s did not answer: %v", h.cfg.Sim, unwrapURL(err)))
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSimReply))
	if err != nil {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("reading the simulator's answer: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

// unwrapURL drops url.Error's repetition of the method and URL.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func writeError(w http.ResponseWriter, code int, msg string) {
	httpjson.Write(w, code, map[string]string{"error": msg})
}

// SimulatorURL is the simulator's control base URL for a WeCom URL, or ""
// when it is not a simulator's. Real WeCom is reached over TLS (wss://);
// a plain ws:// URL is the project's simulator (serve --demo, botctl sim).
func SimulatorURL(wecomURL string) string {
	u, err := url.Parse(wecomURL)
	if err != nil || u.Scheme != "ws" || u.Host == "" {
		return ""
	}
	return "http://" + u.Host
}

// simMessage is m as the simulator's POST /control/messages takes it.
func simMessage(m message) map[string]any {
	out := map[string]any{"bot_id": m.Bot, "user_id": m.User}
	switch {
	case m.Image == nil:
		out["text"] = m.Text
	case strings.TrimSpace(m.Text) == "":
		out["msgtype"], out["content_base64"], out["filename"] = "image", m.Image.Base64, m.Image.Filename
	default:
		out["msgtype"] = "mixed"
		out["items"] = []map[string]string{{"msgtype": "text", "text": m.Text},
			{"msgtype": "image", "content_base64": m.Image.Base64, "filename": m.Image.Filename}}
	}
	return out
}
