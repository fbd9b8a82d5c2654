package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/botctl/botctl/pkg/bots"
	"github.com/botctl/botctl/pkg/buildinfo"
	"net/http"
	"sync"

	"github.com/botctl/botctl/internal/httpjson"
	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/demoui"
	"github.com/botctl/botctl/pkg/dispatch"
	"github.com/botctl/botctl/pkg/metrics"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/redact"
	"github.com/botctl/botctl/pkg/sendapi"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// api is the node's HTTP API: status, health, the exec API of tier 2 and
// the shared-connection API (sends as a bot).
func (n *Node) api(ctx context.Context, wg *sync.WaitGroup, cli *clientv3.Client) http.Handler {
	mux := http.NewServeMux()
	// Every endpoint is behind the token (api.token_file's, or the one
	// generated in the data dir) but liveness, readiness and metrics, for
	// supervisors and Prometheus: they carry no message text and change
	// nothing.
	mux.Handle("GET /status", requireToken(n.token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		type botView struct {
			Pusher *pusher.Stats `json:"pusher,omitempty"`
		}
		// Spool depth: tasks only on this node's disk until JetStream takes
		// them (-1: unreadable).
		depth, err := n.Spool.Len()
		if err != nil {
			depth = -1
		}
		view := struct {
			node.Info
			Build     buildinfo.Info     `json:"build"`     // the binary: version, commit, build date, Go, platform
			JetStream bool               `json:"jetstream"` // bound: false while the node only spools
			Access    access.Stats       `json:"access"`
			Dispatch  dispatch.Stats     `json:"dispatch"`
			Worker    workerView         `json:"worker"`
			Spool     spoolView          `json:"spool"`
			Pushers   map[string]botView `json:"pushers"`
			// Settings: each bot's settings revision applied here (pkg/bots).
			Settings map[string]bots.View `json:"settings"`
			// Model: each bot's backend calls on this node (model.go).
			Model map[string]metrics.ModelSummary `json:"model"`
		}{Info: n.Node.Info(), Build: buildinfo.Get(), Access: n.Access.Stats(), Pushers: map[string]botView{}, Settings: n.bots.Views(), Model: n.obs.metrics.Summary(),
			Worker: workerView{Slots: n.cfg.Worker.Slots}, Spool: spoolView{Depth: depth}}
		if n.started() {
			view.JetStream, view.Dispatch, view.Worker.Busy = true, n.Dispatch.Stats(), n.Worker.Busy()
		}
		n.leaders.each(func(bot string, p *pusher.Pusher) {
			s := p.Stats()
			view.Pushers[bot] = botView{Pusher: &s}
		})
		httpjson.WriteIndented(w, http.StatusOK, view)
	})))
	n.obs.routes(mux) // GET /metrics, /healthz (alive), /readyz (ready)
	if page := n.demoPage(); page != nil {
		mux.Handle(demoui.Path, page) // the demo's chat and live view, with a simulator only
	}
	// Tier 2: one of the two endpoints that act (the other: sends, below).
	// The rest are GET only and change nothing.
	mux.Handle("POST "+dispatch.ExecPath, requireToken(n.token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m task.Message
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&m); err != nil || m.TaskID == "" || m.Bot == "" {
			httpjson.WriteIndented(w, http.StatusBadRequest, map[string]string{"error": "want a task message: {\"task_id\",\"bot\",\"msgid\",\"chat\",\"question\",…}"})
			return
		}
		if ctx.Err() != nil {
			httpjson.WriteIndented(w, http.StatusServiceUnavailable, map[string]string{"error": "node stopping"})
			return
		}
		if !n.started() {
			httpjson.WriteIndented(w, http.StatusServiceUnavailable, map[string]string{"error": "JetStream not reachable from this node yet"})
			return
		}
		if code, why := n.execRefusal(r.Context(), m); why != "" {
			httpjson.WriteIndented(w, code, map[string]string{"error": why})
			return
		}
		if err := n.Worker.Go(ctx, m, string(dispatch.TierFixed), wg); err != nil {
			// Bounded by the worker's slots (worker.ErrNoSlot) and its
			// clock (worker.ErrClockOff, named as such): nothing was started, so the caller may send the task elsewhere (the
			// dispatcher falls back) or again once a running one ends.
			w.Header().Set("Retry-After", "1")
			httpjson.WriteIndented(w, http.StatusServiceUnavailable, map[string]string{
				"error": fmt.Sprintf("%v; the task was not started: send it to another node, or again later", err)})
			return
		}
		httpjson.WriteIndented(w, http.StatusAccepted, map[string]string{"task_id": m.TaskID})
	})))
	// The shared-connection API: a proactive message as a bot, on the
	// leader's connection and budget (pkg/sendapi, docs/api.md).
	mux.Handle(sendapi.Path, requireToken(n.token, sendapi.New(sendapi.Options{Config: n.cfg, Node: sendNode{n}, Token: n.token,
		Client: n.apiCli, WriteTimeout: apiWriteTimeout, Metrics: n.obs.metrics.Registry})))
	// WeCom's MCP tools for agents, behind the node's token or an
	// agent's (pkg/mcpgw, docs/ai.md).
	n.mcp.Routes(mux)
	if n.cfg.API.Pprof {
		pprofRoutes(mux, n.token) // /debug/pprof/, off by default
	}
	return mux
}

// execRefusal is why the task message m of a POST /v1/exec is refused, with
// the status to answer ("" when it may run): its id must be its bot's and
// msgid's, and a record of that id, when there is one yet (the dispatcher
// calls before the leader writes it), must name the same bot, message and
// chat. A message that borrows a task's id for another chat would run under
// that task's record and have its answer pushed to where the record says,
// or supersede the task's running attempt.
func (n *Node) execRefusal(ctx context.Context, m task.Message) (int, string) {
	if want := task.ID(m.Bot, m.MsgID); m.TaskID != want {
		return http.StatusBadRequest, fmt.Sprintf("task_id %q is not the id of bot %q's message %q (want %q): refused", m.TaskID, m.Bot, m.MsgID, want)
	}
	rec, err := n.Lifecycle.Get(ctx, m.TaskID)
	switch {
	case errors.Is(err, natsjs.ErrKeyNotFound):
		return 0, ""
	case err != nil:
		w := "the task's record cannot be read to check the message against it: " + redact.Error(err).Error() + "; send it again later"
		return http.StatusServiceUnavailable, w
	case rec.Bot != m.Bot || rec.MsgID != m.MsgID || rec.Chat != m.Chat:
		return http.StatusConflict, fmt.Sprintf("task %s is bot %q's message %q in chat %q, not bot %q's message %q in chat %q: refused (a task message must match its task's record)",
			m.TaskID, rec.Bot, rec.MsgID, rec.Chat, m.Bot, m.MsgID, m.Chat)
	}
	return 0, ""
}

type workerView struct {
	Busy  int `json:"busy"`  // tasks running now
	Slots int `json:"slots"` // configured slots
}

type spoolView struct {
	Depth int `json:"depth"` // tasks held on this node's disk for the queue
}
