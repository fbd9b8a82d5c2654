package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/internal/oneline"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/metrics"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/redact"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Status is `botctl status --json`. Other tools rely on its shape:
// {"nodes":[{"id",…}],"bots":[{"id","leader","since",…}]}.
type Status struct {
	Nodes []NodeStatus `json:"nodes"`
	Bots  []BotStatus  `json:"bots"`
	// HealthError says why the bots' health and incidents are missing
	// (JetStream not given or not reachable).
	// (Not in the JSON, whose top level is exactly nodes and bots: a bot
	// without "health" says the same; the reason goes to stderr.)
	HealthError string `json:"-"`
}

// NodeStatus is a node's registration plus what its own API says now:
// tasks held in its spool (only on its disk until JetStream takes them)
// and worker slots busy. Unreachable says why they are missing.
type NodeStatus struct {
	node.Info
	SpoolDepth  *int   `json:"spool_depth,omitempty"`
	WorkerBusy  *int   `json:"worker_busy,omitempty"`
	WorkerSlots *int   `json:"worker_slots,omitempty"`
	Unreachable string `json:"unreachable,omitempty"`
	// Model is each bot's backend calls on this node since it started.
	Model map[string]metrics.ModelSummary `json:"model,omitempty"`
	// Spread is how many bots the node leads against its even share and
	// the band the balancer keeps it in (botctl bots balance); absent
	// when the election queues could not be read.
	Spread *node.NodeSpread `json:"spread,omitempty"`
	// settings are each bot's settings on this node (GET /status's),
	// shown per bot (BotStatus.SettingsRefused).
	settings map[string]liveSettings
}

// liveSettings is one bot's settings on a node, as its GET /status says.
type liveSettings struct {
	Revision        int64  `json:"revision"`
	RefusedRevision int64  `json:"refused_revision"`
	Refused         string `json:"refused"`
}

// apiClient is how botctl reaches the nodes' APIs: api.ca_file trusted,
// and every request carrying the API token (config.API.CallerToken), except over plain
// http:// to another machine, where it would cross the network in clear
// text (such a node answers 401, shown as the reason its live fields are
// missing).
func apiClient(a config.API, dataDir string) (*http.Client, error) {
	tc, err := a.ClientTLS()
	if err != nil {
		return nil, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tc
	token, _ := a.CallerToken(dataDir) // none: the nodes say 401, with the fix
	return &http.Client{Transport: bearer{token: token, next: t}}, nil
}

// bearer adds "Authorization: Bearer <token>" to requests over https or to
// this machine.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" && (r.URL.Scheme == "https" || config.LoopbackHost(r.URL.Hostname())) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

// live asks a node's API for what only it knows.
func live(ctx context.Context, hc *http.Client, n *NodeStatus) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.Address+"/status", nil)
	if err != nil {
		n.Unreachable = err.Error()
		return
	}
	resp, err := hc.Do(req)
	if err != nil {
		n.Unreachable = redact.String(err.Error())
		return
	}
	defer resp.Body.Close()
	var v struct {
		Spool    struct{ Depth int }             `json:"spool"`
		Worker   struct{ Busy, Slots int }       `json:"worker"`
		Model    map[string]metrics.ModelSummary `json:"model"`
		Settings map[string]liveSettings         `json:"settings"`
	}
	if resp.StatusCode == http.StatusUnauthorized {
		n.Unreachable = "GET /status: " + resp.Status + ": the node asks for its API token; give --config with its api.token_file " +
			"(sent over https, or to this machine only), or the --data-dir of a node on this machine"
		return
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&v) != nil {
		n.Unreachable = "GET /status: " + resp.Status
		return
	}
	n.SpoolDepth, n.WorkerBusy, n.WorkerSlots, n.Model, n.settings = &v.Spool.Depth, &v.Worker.Busy, &v.Worker.Slots, v.Model, v.Settings
}

// BotStatus is one bot across the cluster.
type BotStatus struct {
	ID          string                    `json:"id"`
	Leader      string                    `json:"leader"` // "" when nobody leads
	Since       *time.Time                `json:"since"`  // the leader's term start
	Term        int64                     `json:"term,omitempty"`
	OldLayout   bool                      `json:"old_layout,omitempty"` // the leader is an older botctl (key /botctl/election/<bot>)
	Gate        string                    `json:"gate,omitempty"`       // the env allowed to connect
	Nodes       map[string]node.BotStatus `json:"nodes,omitempty"`      // each node's view
	Transitions []node.LeaderEvent        `json:"transitions"`          // recent, oldest first
	// Health is the bot's shared health record, Incident its open outage
	// incident, DataIncident its open data incident (a final answer not
	// delivered, a gap not filled: the bot is up, its users are still owed
	// something, and only a person's ack closes it), Incomplete how many of
	// its conversations are marked "may be incomplete" (from JetStream;
	// absent when it was not reachable). The two incidents are apart
	// because a bot can have one of each open at once.
	Health       *health.Record     `json:"health,omitempty"`
	Incident     *incident.Incident `json:"incident,omitempty"`
	DataIncident *incident.Incident `json:"data_incident,omitempty"`
	Incomplete   int                `json:"incomplete,omitempty"`
	// Queue is how many of its tasks are in the JetStream work queue
	// (queued or running: one per busy conversation).
	Queue *int `json:"queue,omitempty"`
	// Model is the bot's backend calls on the nodes that answered, summed
	// (absent when none has made one since it started).
	Model *ModelStatus `json:"model,omitempty"`
	// SettingsRefused: the nodes that refuse the bot's latest override in
	// etcd (botctl bots set), each serving the bot with the settings it
	// had; absent when every node that answered applied it.
	SettingsRefused []SettingsRefusal `json:"settings_refused,omitempty"`
}

// SettingsRefusal is one node's refusal of a bot's override.
type SettingsRefusal struct {
	Node string `json:"node"`
	// Revision is the override refused, Reason why.
	Revision int64  `json:"revision"`
	Reason   string `json:"reason"`
	// Serving is the override the node serves the bot with (0: the
	// config file's settings).
	Serving int64 `json:"serving"`
}

// addRefused adds to each bot the nodes that refuse its override; a bot
// no node registers but one refuses is added.
func addRefused(st *Status) {
	at := map[string]int{}
	for i, b := range st.Bots {
		at[b.ID] = i
	}
	for _, n := range st.Nodes {
		for bot, v := range n.settings {
			if v.RefusedRevision == 0 {
				continue
			}
			i, ok := at[bot]
			if !ok {
				i = len(st.Bots)
				at[bot] = i
				st.Bots = append(st.Bots, BotStatus{ID: bot, Nodes: map[string]node.BotStatus{}, Transitions: []node.LeaderEvent{}})
			}
			st.Bots[i].SettingsRefused = append(st.Bots[i].SettingsRefused,
				SettingsRefusal{Node: n.ID, Revision: v.RefusedRevision, Reason: v.Refused, Serving: v.Revision})
		}
	}
	sort.Slice(st.Bots, func(i, j int) bool { return st.Bots[i].ID < st.Bots[j].ID })
}

// ModelStatus is a bot's backend calls across the nodes: counts summed;
// the time to first token's p50 and p99 are the slowest node's (each
// node's of its latest 512 calls), in milliseconds.
type ModelStatus struct {
	Calls     int64 `json:"calls"`
	Errors    int64 `json:"errors"`
	TokensIn  int64 `json:"tokens_in"`
	TokensOut int64 `json:"tokens_out"`
	TTFTp50   int64 `json:"ttft_p50_ms"`
	TTFTp99   int64 `json:"ttft_p99_ms"`
}

// addModel sums each bot's model summary over the nodes.
func addModel(st *Status) {
	for i := range st.Bots {
		b := &st.Bots[i]
		for _, n := range st.Nodes {
			s, ok := n.Model[b.ID]
			if !ok {
				continue
			}
			if b.Model == nil {
				b.Model = &ModelStatus{}
			}
			m := b.Model
			m.Calls, m.Errors, m.TokensIn, m.TokensOut = m.Calls+s.Calls, m.Errors+s.Errors, m.TokensIn+s.TokensIn, m.TokensOut+s.TokensOut
			m.TTFTp50, m.TTFTp99 = max(m.TTFTp50, s.TTFTp50), max(m.TTFTp99, s.TTFTp99)
		}
	}
}

// line is the model's status line: "calls 120, errors 2 (1.7%), ttft
// p50 800ms p99 2.1s, tokens 10234 in / 5120 out".
func (m *ModelStatus) line() string {
	s := fmt.Sprintf("calls %d, errors %d", m.Calls, m.Errors)
	if m.Calls > 0 && m.Errors > 0 {
		s += fmt.Sprintf(" (%.1f%%)", 100*float64(m.Errors)/float64(m.Calls))
	}
	if m.TTFTp99 > 0 {
		ms := func(n int64) time.Duration { return (time.Duration(n) * time.Millisecond).Round(10 * time.Millisecond) }
		s += fmt.Sprintf(", ttft p50 %s p99 %s", ms(m.TTFTp50), ms(m.TTFTp99))
	}
	if m.TokensIn+m.TokensOut > 0 {
		s += fmt.Sprintf(", tokens %d in / %d out", m.TokensIn, m.TokensOut)
	}
	return s
}

// addHealth adds each bot's health record, open incidents (outage and
// data) and "may be incomplete" count from JetStream, or says why it
// cannot.
func addHealth(ctx context.Context, cf *clusterFlags, st *Status) {
	s, closeFn, err := cf.store()
	if err != nil {
		st.HealthError = err.Error()
		return
	}
	defer closeFn()
	recs, err := health.LoadAll(ctx, s.Health())
	if err != nil {
		st.HealthError = err.Error()
		return
	}
	incs := incident.NewStore(s.Incidents())
	known := map[string]bool{}
	for _, b := range st.Bots {
		known[b.ID] = true
	}
	for id := range recs {
		if !known[id] {
			st.Bots = append(st.Bots, BotStatus{ID: id, Nodes: map[string]node.BotStatus{}, Transitions: []node.LeaderEvent{}})
		}
	}
	sort.Slice(st.Bots, func(i, j int) bool { return st.Bots[i].ID < st.Bots[j].ID })
	for i := range st.Bots {
		b := &st.Bots[i]
		if r, ok := recs[b.ID]; ok {
			b.Health = &r
		}
		if inc, err := incs.OpenFor(ctx, b.ID, incident.Outage); err == nil && inc != nil {
			inc.Events = nil // the list view; botctl incidents show has the timeline
			b.Incident = inc
		}
		if inc, err := incs.OpenFor(ctx, b.ID, incident.Data); err == nil && inc != nil {
			inc.Events = nil
			b.DataIncident = inc
		}
		if marks, err := health.Marks(ctx, s.Health(), b.ID); err == nil {
			b.Incomplete = len(marks)
		}
		if convs, err := s.QueuedConversations(ctx, b.ID); err == nil {
			q := len(convs)
			b.Queue = &q
		}
	}
}

func newStatusCmd() *cobra.Command {
	var (
		cf       clusterFlags
		asJSON   bool
		history  int
		watch    bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster: nodes, and per bot its leader, term start and recent transitions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if watch && interval <= 0 {
				return usageErrorf("--interval %s: want a positive duration (e.g. 2s)", interval)
			}
			cli, err := cf.etcdClient()
			if err != nil {
				return err
			}
			defer cli.Close()
			hc, err := apiClient(cf.api, cf.tokenDir(cmd))
			if err != nil {
				return usageError{err}
			}
			once := func() error {
				ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
				defer cancel()
				st, err := readStatus(ctx, cli, hc, history)
				if err != nil {
					return err
				}
				addHealth(ctx, &cf, &st)
				if asJSON {
					if st.HealthError != "" {
						fmt.Fprintf(cmd.ErrOrStderr(), "botctl status: health and incidents not shown: %s\n", st.HealthError)
					}
					if watch {
						return json.NewEncoder(cmd.OutOrStdout()).Encode(st) // one object per line
					}
					return printJSON(cmd.OutOrStdout(), st)
				}
				printStatus(cmd.OutOrStdout(), st)
				return nil
			}
			if !watch {
				return once()
			}
			return watchStatus(cmd.Context(), clock.Real, cmd.OutOrStdout(), cmd.ErrOrStderr(), interval, asJSON, once)
		},
	}
	cf.registerEtcd(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: {\"nodes\":[…],\"bots\":[…]}")
	cmd.Flags().IntVar(&history, "transitions", 10, "recent transitions to show per bot")
	cmd.Flags().BoolVar(&watch, "watch", false, "redraw every --interval until Ctrl-C (with --json: one JSON object per line)")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often --watch redraws")
	cmd.Flags().StringVar(&cf.nats, "nats", "", "NATS URL for the bots' health and incidents (default $BOTCTL_NATS_URL, else the embedded NATS of --data-dir)")
	return cmd
}

const prefix = etcdkeys.Root

func readStatus(ctx context.Context, cli *clientv3.Client, hc *http.Client, history int) (Status, error) {
	nodes, err := node.Nodes(ctx, cli, prefix)
	if err != nil {
		return Status{}, err
	}
	gates, err := node.Gates(ctx, cli, prefix)
	if err != nil {
		return Status{}, err
	}
	ids := map[string]bool{}
	for id := range gates {
		ids[id] = true
	}
	for _, n := range nodes {
		for id := range n.Bots {
			ids[id] = true
		}
	}
	st := Status{Nodes: make([]NodeStatus, len(nodes)), Bots: []BotStatus{}}
	var wg sync.WaitGroup
	for i, n := range nodes {
		st.Nodes[i].Info = n
		wg.Go(func() { live(ctx, hc, &st.Nodes[i]) })
	}
	wg.Wait()
	for id := range ids {
		b := BotStatus{ID: id, Gate: gates[id], Nodes: map[string]node.BotStatus{}}
		// During a rolling upgrade a node of the old layout may hold the
		// bot; new nodes yield to it, so it is the one connected.
		info, err := election.LegacyLeader(ctx, cli, "", id)
		if err == nil {
			b.OldLayout = true
		} else if errors.Is(err, election.ErrNoLeader) {
			info, err = election.Leader(ctx, cli, "", id)
		}
		switch {
		case err == nil:
			b.Leader, b.Term = info.Node, info.Rev
			if !info.Since.IsZero() {
				since := info.Since
				b.Since = &since
			}
		case !errors.Is(err, election.ErrNoLeader):
			return Status{}, err
		}
		for _, n := range nodes {
			if v, ok := n.Bots[id]; ok {
				b.Nodes[n.ID] = v
			}
		}
		if b.Transitions, err = node.LeaderEvents(ctx, cli, prefix, id, history); err != nil {
			return Status{}, err
		}
		st.Bots = append(st.Bots, b)
	}
	addRefused(&st) // sorts the bots
	addModel(&st)
	addSpread(ctx, cli, &st)
	return st, nil
}

// addSpread adds each node's spread, as the balancer's plan reads it; a
// failed read leaves it out (the rest of the status stands).
func addSpread(ctx context.Context, cli *clientv3.Client, st *Status) {
	plan, _, err := node.ReadBalancePlan(ctx, cli, prefix, "", time.Now())
	if err != nil {
		return
	}
	for _, s := range plan.Spread {
		for i := range st.Nodes {
			if st.Nodes[i].ID == s.Node {
				st.Nodes[i].Spread = &s
			}
		}
	}
}

// printSpread is each node's bots led against its even share.
func printSpread(w io.Writer, nodes []NodeStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SPREAD\tLEADS\tSHARE\tBAND\t")
	shown := false
	for _, n := range nodes {
		if s := n.Spread; s != nil {
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%d–%d\t%s\n", n.ID, s.Leads, s.Share, s.Low, s.High, strings.TrimSpace(offMark(*s)))
			shown = true
		}
	}
	if shown {
		tw.Flush()
		fmt.Fprintln(w, "(what the balancer would move now: botctl bots balance --dry-run)")
		fmt.Fprintln(w)
	}
}

func printStatus(w io.Writer, st Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tENV\tADDRESS\tVERSION\tUP SINCE\tSPOOL\tWORKERS\tBOTS")
	for _, n := range st.Nodes {
		var bots []string
		for id, b := range n.Bots {
			bots = append(bots, id+"="+string(b.State))
		}
		sort.Strings(bots)
		spool, workers := "?", "?"
		if n.SpoolDepth != nil {
			spool, workers = fmt.Sprint(*n.SpoolDepth), fmt.Sprintf("%d/%d", *n.WorkerBusy, *n.WorkerSlots)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.Env, n.Address, n.Version, n.Started.Format(time.RFC3339), spool, workers, strings.Join(bots, " "))
	}
	if len(st.Nodes) == 0 {
		fmt.Fprintln(tw, "(no nodes registered)")
	}
	fmt.Fprintln(tw)
	tw.Flush()
	printSpread(w, st.Nodes)
	fmt.Fprintln(tw, "BOT\tLEADER\tSINCE\tTERM\tGATE\tQUEUE\tHEALTH\tINCIDENT")
	for _, b := range st.Bots {
		leader, since := b.Leader, "-"
		if leader == "" {
			leader = "(none)"
		}
		if b.OldLayout {
			leader += " (old layout)"
		}
		if b.Since != nil {
			since = fmt.Sprintf("%s (%s ago)", b.Since.Format(time.RFC3339), time.Since(*b.Since).Round(time.Second))
		}
		hl, inc := "?", "-"
		if b.Health != nil {
			hl = string(b.Health.State)
			if b.Health.Reason != "" {
				hl += " (" + oneline.Clip(b.Health.Reason, 50) + ")"
			}
			if b.Incomplete > 0 {
				hl += fmt.Sprintf(", %d conversation(s) may be incomplete", b.Incomplete)
			}
		}
		var open []string
		if b.Incident != nil {
			open = append(open, fmt.Sprintf("%s %s %s", b.Incident.ID, b.Incident.Level, b.Incident.State))
		}
		if b.DataIncident != nil {
			open = append(open, fmt.Sprintf("%s %s %s (data)", b.DataIncident.ID, b.DataIncident.Level, b.DataIncident.State))
		}
		if len(open) > 0 {
			inc = strings.Join(open, ", ")
		}
		queue := "?"
		if b.Queue != nil {
			queue = fmt.Sprint(*b.Queue)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", b.ID, leader, since, b.Term, b.Gate, queue, hl, inc)
	}
	tw.Flush()
	if st.HealthError != "" {
		fmt.Fprintf(w, "\n(health and incidents not shown: %s)\n", st.HealthError)
	}
	models := false
	for _, b := range st.Bots {
		if b.Model != nil {
			if !models {
				fmt.Fprintln(w, "\nmodel, since each node started (ttft: the slowest node's):")
				models = true
			}
			fmt.Fprintf(w, "  %s  %s\n", b.ID, b.Model.line())
		}
	}
	for _, b := range st.Bots {
		if len(b.SettingsRefused) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s, settings override in etcd refused (botctl bots show --bot %s; fix or clear it):\n", b.ID, b.ID)
		for _, r := range b.SettingsRefused {
			serving := "the config file's settings"
			if r.Serving != 0 {
				serving = fmt.Sprintf("the override of revision %d", r.Serving)
			}
			fmt.Fprintf(w, "  %s  revision %d refused: %s; serves the bot with %s\n", r.Node, r.Revision, oneline.Clip(r.Reason, 200), serving)
		}
	}
	for _, b := range st.Bots {
		if len(b.Transitions) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s, recent transitions:\n", b.ID)
		for _, tr := range b.Transitions {
			reason := ""
			if tr.Reason != "" {
				reason = " (" + tr.Reason + ")"
			}
			fmt.Fprintf(w, "  %s  %-8s %-10s term %d%s\n", tr.At.Format("2006-01-02 15:04:05.000"), tr.Node, tr.Event, tr.TermRev, reason)
		}
	}
}
