package wecom

import (
	"encoding/json"
	"sync"
	"time"
)

// Routes: the callbacks a connection read, counted by the way WeCom
// delivers them. A server may stop delivering one route (a group's
// callbacks) while it still delivers the others (direct messages): a
// connection's total then looks alive while a group is deaf, so the
// health monitor watches each route against its own baseline.

// RouteDirect is the route of every single chat's callbacks (and of events
// that name no group).
const RouteDirect = "direct"

// RouteGroupPrefix starts a group's route: "group:<chatid>".
const RouteGroupPrefix = "group:"

// maxRoutes bounds the routes one connection counts; a group first heard
// past it is counted under no route (the connection's total still counts
// it).
const maxRoutes = 1024

// RouteVitals are one route's callbacks on a connection.
type RouteVitals struct {
	Callbacks    int64
	LastCallback time.Time
}

// RouteOf is the route of a callback's body: RouteGroupPrefix and the
// chat id for a group chat, RouteDirect otherwise (a body that does not
// decode is direct: it names no group).
func RouteOf(body json.RawMessage) string {
	var chat struct {
		ChatID   string `json:"chatid"`
		ChatType string `json:"chattype"`
	}
	if json.Unmarshal(body, &chat) == nil && chat.ChatType == ChatGroup && chat.ChatID != "" {
		return RouteGroupPrefix + chat.ChatID
	}
	return RouteDirect
}

// IsGroupRoute reports whether route is a group's.
func IsGroupRoute(route string) bool {
	return len(route) > len(RouteGroupPrefix) && route[:len(RouteGroupPrefix)] == RouteGroupPrefix
}

type routeCounts struct {
	mu sync.Mutex
	m  map[string]*RouteVitals
}

func (r *routeCounts) heard(route string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*RouteVitals{}
	}
	v := r.m[route]
	if v == nil {
		if len(r.m) >= maxRoutes {
			return
		}
		v = &RouteVitals{}
		r.m[route] = v
	}
	v.Callbacks++
	v.LastCallback = at
}

// Routes returns the callbacks read on this connection by route (a copy).
func (c *Conn) Routes() map[string]RouteVitals {
	c.routes.mu.Lock()
	defer c.routes.mu.Unlock()
	out := make(map[string]RouteVitals, len(c.routes.m))
	for k, v := range c.routes.m {
		out[k] = *v
	}
	return out
}
