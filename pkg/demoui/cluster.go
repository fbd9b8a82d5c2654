package demoui

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/internal/oneline"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// View is what the live view shows: the same sources as `botctl status`
// and `botctl tasks list` / `botctl incidents list`, trimmed for a page.
type View struct {
	Now       time.Time  `json:"now"`
	Node      string     `json:"node"` // the node serving the page
	Nodes     []NodeView `json:"nodes"`
	Bots      []BotView  `json:"bots"`
	Tasks     []TaskView `json:"tasks"`     // newest first, at most maxTasks
	Incidents []IncView  `json:"incidents"` // newest first, at most maxIncidents
	// Errors says which part could not be read, and why (JetStream not
	// bound yet, etcd unreachable): the rest is still shown.
	Errors []string `json:"errors"`
}

// NodeView is a registered node.
type NodeView struct {
	ID      string                    `json:"id"`
	Address string                    `json:"address"`
	Version string                    `json:"version"`
	Started time.Time                 `json:"started"`
	Bots    map[string]node.BotStatus `json:"bots"`
}

// BotView is one bot: who leads it, since when, and its recent
// transitions (oldest first).
type BotView struct {
	ID          string             `json:"id"`
	Leader      string             `json:"leader"` // "" while nobody leads
	TermRev     int64              `json:"term,omitempty"`
	Since       time.Time          `json:"since,omitzero"`
	Transitions []node.LeaderEvent `json:"transitions"`
}

// TaskView is a task record, its question clipped.
type TaskView struct {
	ID       string    `json:"id"`
	Bot      string    `json:"bot"`
	Chat     string    `json:"chat"`
	Question string    `json:"question"`
	Exec     string    `json:"exec"`
	Delivery string    `json:"delivery"`
	Node     string    `json:"node,omitempty"`
	Tier     string    `json:"tier,omitempty"`
	Attempt  int       `json:"attempt"`
	Received time.Time `json:"received"`
	Error    string    `json:"error,omitempty"`
}

// IncView is an incident without its timeline.
type IncView struct {
	ID       string    `json:"id"`
	Bot      string    `json:"bot"`
	Kind     string    `json:"kind"`
	Level    string    `json:"level"`
	State    string    `json:"state"`
	Reason   string    `json:"reason"`
	Detected time.Time `json:"detected"`
	Closed   time.Time `json:"closed,omitzero"`
	Method   string    `json:"method,omitempty"`
}

// Bounds of one read: the page polls every second.
const (
	maxTasks       = 15
	maxTaskKeys    = 300 // task records read per poll (the bucket keeps days of them)
	maxIncidents   = 8
	maxTransitions = 6
	maxQuestion    = 80 // runes of a question shown
	registryPrefix = etcdkeys.Root
)

// Sources are where ReadView reads from. Store is nil until the node has
// bound JetStream (tasks and incidents are then missing, with a reason).
type Sources struct {
	NodeID string
	Bots   []string // the node's own bots; bots other nodes register are added
	Etcd   *clientv3.Client
	Store  *jetstream.Store
}

// ReadView reads the live view. It never fails as a whole: a part that
// cannot be read is left empty and named in View.Errors.
func ReadView(ctx context.Context, s Sources) View {
	v := View{Now: time.Now().UTC(), Node: s.NodeID, Nodes: []NodeView{}, Bots: []BotView{}, Tasks: []TaskView{}, Incidents: []IncView{}, Errors: []string{}}
	bots := slices.Clone(s.Bots)
	if s.Etcd == nil {
		v.Errors = append(v.Errors, "nodes and leaders: this node has no etcd client")
	} else {
		nodes, err := node.Nodes(ctx, s.Etcd, registryPrefix)
		if err != nil {
			v.Errors = append(v.Errors, "nodes: "+err.Error())
		}
		for _, n := range nodes {
			v.Nodes = append(v.Nodes, NodeView{ID: n.ID, Address: n.Address, Version: n.Version, Started: n.Started, Bots: n.Bots})
			for b := range n.Bots {
				bots = append(bots, b)
			}
		}
		slices.Sort(bots)
		for _, id := range slices.Compact(bots) {
			v.Bots = append(v.Bots, readBot(ctx, s.Etcd, id, &v.Errors))
		}
	}
	if s.Store == nil {
		v.Errors = append(v.Errors, "tasks and incidents: JetStream not bound on this node yet")
		return v
	}
	v.Tasks = readTasks(ctx, s.Store, &v.Errors)
	v.Incidents = readIncidents(ctx, s.Store, &v.Errors)
	return v
}

func readBot(ctx context.Context, cli *clientv3.Client, id string, errs *[]string) BotView {
	b := BotView{ID: id, Transitions: []node.LeaderEvent{}}
	info, err := election.Leader(ctx, cli, "", id)
	switch {
	case err == nil:
		b.Leader, b.TermRev, b.Since = info.Node, info.Rev, info.Since
	case !errors.Is(err, election.ErrNoLeader):
		*errs = append(*errs, err.Error())
	}
	if trs, err := node.LeaderEvents(ctx, cli, registryPrefix, id, maxTransitions); err != nil {
		*errs = append(*errs, err.Error())
	} else {
		b.Transitions = trs
	}
	return b
}

func readTasks(ctx context.Context, s *jetstream.Store, errs *[]string) []TaskView {
	out := []TaskView{}
	lister, err := s.Tasks().ListKeys(ctx)
	if errors.Is(err, natsjs.ErrNoKeysFound) {
		return out
	}
	if err != nil {
		*errs = append(*errs, "tasks: "+err.Error())
		return out
	}
	read := 0
	for key := range lister.Keys() {
		if read >= maxTaskKeys {
			lister.Stop()
			break
		}
		read++
		r, _, err := task.Get(ctx, s.Tasks(), key)
		if err != nil {
			continue // deleted meanwhile, or not a record
		}
		out = append(out, TaskView{ID: r.ID, Bot: r.Bot, Chat: r.Chat, Question: oneline.Clip(r.Question, maxQuestion), Exec: string(r.Exec),
			Delivery: string(r.Delivery), Node: r.Node, Tier: r.Tier, Attempt: r.Attempt, Received: r.Received, Error: r.Error})
	}
	slices.SortFunc(out, func(a, b TaskView) int { return b.Received.Compare(a.Received) })
	return out[:min(len(out), maxTasks)]
}

func readIncidents(ctx context.Context, s *jetstream.Store, errs *[]string) []IncView {
	out := []IncView{}
	incs, err := incident.NewStore(s.Incidents()).List(ctx, incident.Filter{})
	if err != nil {
		*errs = append(*errs, "incidents: "+err.Error())
		return out
	}
	for i := len(incs) - 1; i >= 0 && len(out) < maxIncidents; i-- {
		in := incs[i]
		out = append(out, IncView{ID: in.ID, Bot: in.Bot, Kind: string(in.Kind), Level: string(in.Level), State: string(in.State),
			Reason: in.Reason, Detected: in.Detected, Closed: in.Closed, Method: string(in.Method)})
	}
	return out
}
