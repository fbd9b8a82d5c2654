package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/botctl/botctl/internal/httpjson"
	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/demoui"
	"github.com/botctl/botctl/pkg/dispatch"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// api is the node's HTTP API: status, health, and the exec API of tier 2.
func (n *Node) api(ctx context.Context, wg *sync.WaitGroup, cli *clientv3.Client) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
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
			JetStream bool               `json:"jetstream"` // bound: false while the node only spools
			Access    access.Stats       `json:"access"`
			Dispatch  dispatch.Stats     `json:"dispatch"`
			Worker    workerView         `json:"worker"`
			Spool     spoolView          `json:"spool"`
			Pushers   map[string]botView `json:"pushers"`
		}{Info: n.Node.Info(), Access: n.Access.Stats(), Pushers: map[string]botView{},
			Worker: workerView{Slots: n.cfg.Worker.Slots}, Spool: spoolView{Depth: depth}}
		if n.started() {
			view.JetStream, view.Dispatch, view.Worker.Busy = true, n.Dispatch.Stats(), n.Worker.Busy()
		}
		n.leaders.each(func(bot string, p *pusher.Pusher) {
			s := p.Stats()
			view.Pushers[bot] = botView{Pusher: &s}
		})
		httpjson.WriteIndented(w, http.StatusOK, view)
	})
	n.obs.routes(mux) // GET /metrics, /healthz (alive), /readyz (ready)
	if page := n.demoPage(); page != nil {
		mux.Handle(demoui.Path, page) // the demo's chat and live view, with a simulator only
	}
	// Tier 2: the one endpoint that acts, behind the cluster's token. The
	// others are GET only and change nothing.
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
		if err := n.Worker.Go(ctx, m, string(dispatch.TierFixed), wg); err != nil {
			// Bounded by the worker's slots (worker.ErrNoSlot): nothing
			// was started, so the caller may send the task elsewhere (the
			// dispatcher falls back) or again once a running one ends.
			w.Header().Set("Retry-After", "1")
			httpjson.WriteIndented(w, http.StatusServiceUnavailable, map[string]string{
				"error": fmt.Sprintf("%v; the task was not started: send it to another node, or again later", err)})
			return
		}
		httpjson.WriteIndented(w, http.StatusAccepted, map[string]string{"task_id": m.TaskID})
	})))
	return mux
}

type workerView struct {
	Busy  int `json:"busy"`  // tasks running now
	Slots int `json:"slots"` // configured slots
}

type spoolView struct {
	Depth int `json:"depth"` // tasks held on this node's disk for the queue
}
