package wecomsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/botctl/botctl/internal/httpjson"
)

const maxControlBody = 1 << 20

// maxMessageBody bounds POST /control/messages, which may carry a file's
// bytes as base64.
const maxMessageBody = 64 << 20

func writeError(w http.ResponseWriter, status int, msg string) {
	httpjson.Write(w, status, map[string]string{"error": msg})
}

func writeErr(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrUnknownBot):
		status = http.StatusNotFound
	case errors.Is(err, ErrBotExists):
		status = http.StatusConflict
	case errors.Is(err, ErrInvalidRequest):
		status = http.StatusBadRequest
	case errors.Is(err, ErrClosed):
		status = http.StatusServiceUnavailable
	}
	writeError(w, status, err.Error())
}

func decodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	return decodeJSONUpTo(w, r, v, maxControlBody)
}

func decodeJSONUpTo(w http.ResponseWriter, r *http.Request, v any, limit int64) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	if err := dec.Decode(v); err != nil {
		msg := fmt.Sprintf("request body is not valid JSON (%v): send a JSON object", err)
		if errors.Is(err, io.EOF) {
			msg = "request body is empty: send a JSON object"
		}
		writeError(w, http.StatusBadRequest, msg)
		return false
	}
	return true
}

func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	type route struct {
		method string
		handle func(http.ResponseWriter, *http.Request) // the control API's handler of method on the path
	}
	routes := map[string][]route{
		"/control/messages":    {{http.MethodPost, s.httpMessages}},
		"/control/events":      {{http.MethodPost, s.httpEvents}},
		"/control/transcript":  {{http.MethodGet, s.httpTranscript}},
		"/control/stats":       {{http.MethodGet, s.httpStats}},
		"/control/history":     {{http.MethodGet, s.httpHistory}},
		"/control/faults":      {{http.MethodPost, s.httpFaults}},
		"/control/quota":       {{http.MethodPost, s.httpQuota}},
		"/control/bots":        {{http.MethodPost, s.httpAddBot}, {http.MethodGet, s.httpListBots}},
		"/control/bots/secret": {{http.MethodPost, s.httpSetSecret}},
		"/control/recording":   {{http.MethodGet, s.httpRecording}},
		"/control/robot":       {{http.MethodGet, s.httpRobotMessages}},
		"/control/media":       {{http.MethodGet, s.httpMediaList}},
		"/control/images":      {{http.MethodGet, s.httpImage}},
	}
	rs, found := routes[r.URL.Path]
	if !found {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such control endpoint %s: see docs/simulator.md", r.URL.Path))
		return
	}
	var allow []string
	for _, rt := range rs {
		if rt.method == r.Method {
			rt.handle(w, r)
			return
		}
		allow = append(allow, rt.method)
	}
	w.Header().Set("Allow", fmt.Sprint(allow))
	writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s is not supported: use %v", r.Method, r.URL.Path, allow))
}

func (s *Server) httpMessages(w http.ResponseWriter, r *http.Request) {
	var req MessageRequest
	if !decodeJSONUpTo(w, r, &req, maxMessageBody) {
		return
	}
	res, err := s.PostMessage(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, res)
}

func (s *Server) httpEvents(w http.ResponseWriter, r *http.Request) {
	var req EventRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	res, err := s.PostEvent(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, res)
}

func (s *Server) httpTranscript(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("chat") == "" {
		writeError(w, http.StatusBadRequest, "query parameter chat is required: the user id for a single chat, the group chat id for a group")
		return
	}
	t, err := s.transcript(q.Get("bot_id"), q.Get("chat"))
	if err != nil {
		writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"messages": t})
}

func (s *Server) httpStats(w http.ResponseWriter, r *http.Request) {
	st, err := s.Stats(r.URL.Query().Get("bot_id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, st)
}

func (s *Server) httpHistory(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	hq := HistoryQuery{BotID: q.Get("bot_id")}
	var err error
	if v := q.Get("after_seq"); v != "" {
		if hq.AfterSeq, err = strconv.ParseInt(v, 10, 64); err != nil || hq.AfterSeq < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("after_seq %q: want a non-negative integer", v))
			return
		}
	}
	if v := q.Get("limit"); v != "" {
		if hq.Limit, err = strconv.Atoi(v); err != nil || hq.Limit < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want a non-negative integer (0: no limit)", v))
			return
		}
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &hq.Since}, {"until", &hq.Until}} {
		if v := q.Get(p.name); v != "" {
			if *p.dst, err = time.Parse(time.RFC3339, v); err != nil {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("%s %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", p.name, v))
				return
			}
		}
	}
	msgs, err := s.History(hq)
	if err != nil {
		writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"messages": msgs})
}

func (s *Server) httpFaults(w http.ResponseWriter, r *http.Request) {
	var req FaultRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if err := s.Fault(req); err != nil {
		writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"ok": true})
}

func (s *Server) httpAddBot(w http.ResponseWriter, r *http.Request) {
	var req BotRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if err := s.AddBot(req.BotID, req.Secret); err != nil {
		writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusCreated, map[string]any{"bot_id": req.BotID})
}

// httpSetSecret changes a bot's secret, as an admin regenerating it in
// WeCom's console (SetSecret): the connection subscribed now is kept.
func (s *Server) httpSetSecret(w http.ResponseWriter, r *http.Request) {
	var req BotRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if err := s.SetSecret(req.BotID, req.Secret); err != nil {
		writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"bot_id": req.BotID})
}

// httpListBots lists bot ids and whether each is connected; never secrets.
func (s *Server) httpListBots(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.bots))
	for id := range s.bots {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	sort.Strings(ids)
	type entry struct {
		BotID     string `json:"bot_id"`
		Connected bool   `json:"connected"`
	}
	out := []entry{}
	for _, id := range ids {
		if b, err := s.bot(id); err == nil {
			b.mu.Lock()
			out = append(out, entry{BotID: id, Connected: b.live != nil})
			b.mu.Unlock()
		}
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"bots": out})
}

func (s *Server) httpMediaList(w http.ResponseWriter, r *http.Request) {
	items, err := s.Media(r.URL.Query().Get("bot_id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"media": items})
}
