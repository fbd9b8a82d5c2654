package wecomsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"
)

// Errors the Go API returns; the control API maps them to HTTP statuses.
var (
	// ErrUnknownBot: no bot with that id was added (AddBot, --bot, POST /control/bots).
	ErrUnknownBot = errors.New("wecomsim: unknown bot")
	// ErrBotExists: AddBot with an id already in use.
	ErrBotExists = errors.New("wecomsim: bot already exists")
	// ErrInvalidRequest: a control request with a missing or wrong field.
	ErrInvalidRequest = errors.New("wecomsim: invalid request")
	// ErrClosed: the server was closed.
	ErrClosed = errors.New("wecomsim: server closed")
)

// Server is the simulated WeCom endpoint. Create it with New, add bots with
// AddBot, mount Handler (or call Serve), and Close it when done.
type Server struct {
	cfg      Config
	log      zerolog.Logger
	upgrader websocket.Upgrader

	mu      sync.Mutex
	bots    map[string]*bot
	conns   map[*conn]struct{}
	nextID  uint64
	closed  bool
	httpSrv *http.Server

	rec   recorder   // opt-in latency recording (recording.go)
	robot robots     // the group robot's webhook (robot.go)
	files mediaFiles // media users sent, served encrypted (media.go)
	shown botImages  // images bots showed, for the demo page (botmedia.go)
	mcp   mcpState   // the MCP servers' tokens, sessions and authorizations (mcp.go)

	wg sync.WaitGroup // one per connection handler
}

// New returns a server with cfg's zero fields set to their defaults.
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:   cfg,
		log:   cfg.Logger.With().Str("component", "wecomsim").Logger(),
		bots:  make(map[string]*bot),
		conns: make(map[*conn]struct{}),
	}
	if cfg.Record {
		s.rec.on.Store(true)
	}
	s.upgrader = websocket.Upgrader{
		ReadBufferSize:  4096,
		WriteBufferSize: 4096,
		// The simulator is a test endpoint: any origin may connect.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	return s
}

func (s *Server) now() time.Time { return s.cfg.Now() }

// AddBot registers a bot and its secret. The secret is never logged.
func (s *Server) AddBot(id, secret string) error {
	if id == "" {
		return fmt.Errorf("%w: bot_id is empty: give the bot an id", ErrInvalidRequest)
	}
	if secret == "" {
		return fmt.Errorf("%w: secret of bot %s is empty: give the bot a secret", ErrInvalidRequest, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.bots[id]; ok {
		return fmt.Errorf("%w: %s (pick another bot_id)", ErrBotExists, id)
	}
	s.bots[id] = newBot(id, secret)
	s.log.Info().Str("bot", id).Msg("bot added")
	return nil
}

func (s *Server) bot(id string) (*bot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.bots[id]
	if !ok {
		return nil, fmt.Errorf("%w %q: add it first (--bot ID with $BOTCTL_BOT_<ID>_SECRET set, or POST /control/bots)", ErrUnknownBot, id)
	}
	return b, nil
}

// Handler serves the WebSocket at "/" and the control API under "/control/".
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/control/", s.serveControl)
	mux.HandleFunc("POST /cgi-bin/webhook/send", s.httpRobotSend)
	mux.HandleFunc("GET /media/{id}", s.httpMedia)
	mux.HandleFunc("POST /mcp/{token}", s.httpMCP)
	mux.HandleFunc("POST /control/mcp_access", s.httpMCPAccess)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no such path %s: the WebSocket is at / and the control API under /control/", r.URL.Path))
			return
		}
		if !websocket.IsWebSocketUpgrade(r) {
			writeError(w, http.StatusUpgradeRequired, "connect to / with a WebSocket client (ws://HOST/)")
			return
		}
		s.serveWS(w, r)
	})
	return mux
}

// Serve accepts connections on ln until Shutdown or Close. It returns nil
// after a Shutdown or Close, or the listener's error.
func (s *Server) Serve(ln net.Listener) error {
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	s.httpSrv = hs
	s.mu.Unlock()
	err := hs.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting, waits for control requests in flight (until ctx
// ends), then closes every WebSocket connection as Close does.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	hs := s.httpSrv
	s.mu.Unlock()
	var err error
	if hs != nil {
		err = hs.Shutdown(ctx)
	}
	s.Close()
	return err
}

// Close closes every connection and waits until every goroutine the server
// started has ended. It is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	hs := s.httpSrv
	s.mu.Unlock()
	if first {
		s.log.Info().Int("connections", len(conns)).Msg("closing")
	}
	if hs != nil {
		hs.Close()
	}
	// Say goodbye to every connection at once: a peer that does not read
	// holds its goodbye up to its write deadline, not everyone else's.
	var bye sync.WaitGroup
	for _, c := range conns {
		bye.Add(1)
		go func() {
			defer bye.Done()
			c.shutdown()
		}()
	}
	bye.Wait()
	s.wg.Wait()
}

func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "the simulator is shutting down")
		return
	}
	s.wg.Add(1)
	s.nextID++
	id := s.nextID
	s.mu.Unlock()
	defer s.wg.Done()

	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		s.log.Debug().Err(err).Msg("websocket upgrade failed")
		return
	}
	c := newConn(s, id, ws)
	c.base = "http://" + r.Host
	if r.TLS != nil {
		c.base = "https://" + r.Host
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ws.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()

	c.run()

	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}
