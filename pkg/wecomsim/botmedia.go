package wecomsim

// What a bot showed users beyond text, kept for the demo page to show:
// the images of finishing frames (msg_item) and the uploaded images a
// bot sent, served at GET /control/images?id=<id>, the id listed on the
// transcript entry (ImageIDs). Bounded: the newest keptImages only.

import (
	"crypto/md5"
	"encoding/hex"
	"net/http"
	"sync"
)

// keptImages bounds the images kept (each at most 10 MB).
const keptImages = 32

type botImages struct {
	mu    sync.Mutex
	byID  map[string][]byte
	order []string
}

// keep stores an image under id (first kept wins).
func (k *botImages) keep(id string, data []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.byID == nil {
		k.byID = make(map[string][]byte)
	}
	if _, ok := k.byID[id]; ok {
		return
	}
	k.byID[id] = data
	k.order = append(k.order, id)
	if len(k.order) > keptImages {
		delete(k.byID, k.order[0])
		k.order = k.order[1:]
	}
}

func (k *botImages) get(id string) []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.byID[id]
}

// keepImage keeps an image shown to a user and returns its id (the md5).
func (s *Server) keepImage(data []byte) string {
	sum := md5.Sum(data)
	id := hex.EncodeToString(sum[:])
	s.shown.keep(id, data)
	return id
}

// httpImage is GET /control/images?id=<id>: an image a bot showed.
func (s *Server) httpImage(w http.ResponseWriter, r *http.Request) {
	data := s.shown.get(r.URL.Query().Get("id"))
	if data == nil {
		writeError(w, http.StatusNotFound, "no such image kept: the simulator keeps the newest 32 images bots showed")
		return
	}
	w.Header().Set("Content-Type", http.DetectContentType(data))
	w.Header().Set("Cache-Control", "private, max-age=3600")
	w.Write(data)
}

// shownIDs is [id] when an image is kept under id (an uploaded image).
func (s *Server) shownIDs(id string) []string {
	if s.shown.get(id) == nil {
		return nil
	}
	return []string{id}
}
