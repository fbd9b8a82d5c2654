// Package drill forces an outage on purpose and measures how botctl came
// through it: T1, T2 and T3 of the incident it caused, the downtime, and
// every user message sent through it that did not get its answer.
//
// A round: wait until the bot is online with no open incident; start user
// traffic through the simulator's control API (one message per Interval,
// each from its own conversation, so none is refused as busy); inject the
// fault; wait for the incident it opens to close (for revoke, play the
// person: restore the secret after FixAfter and acknowledge the incident);
// stop the traffic; wait up to Settle for every message to be answered
// (a finished stream or a pushed markdown, read from the simulator's
// transcript, never from botctl's own view). A message accepted by the
// simulator and not answered is lost.
//
// Drills run only against `botctl sim`: New checks that the control API
// answers as the simulator does, and refuses anything else.
package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/pause"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Kinds of drill.
const (
	KindDrop       = "drop"        // the simulator closes the connection (no close frame); with a Duration, a gap
	KindRevoke     = "revoke"      // the bot's secret is revoked, restored after FixAfter
	KindSilence    = "silence"     // callbacks are not delivered for Duration
	KindStall      = "stall"       // acks are not sent for Duration
	KindKillLeader = "kill-leader" // SIGKILL of the leading node's process (on this machine)
	// KindGroupSilence: the simulator withholds group callbacks from the
	// subscribed connection (direct ones still arrive) until the next
	// subscribe. Expected: a route_silence incident, exactly one
	// resubscribe, and the group's messages answered again.
	KindGroupSilence = "group-silence"
)

// Kinds lists every kind, for usage text.
var Kinds = []string{KindDrop, KindRevoke, KindSilence, KindStall, KindKillLeader, KindGroupSilence}

// DefaultGroup is the group chat a group-silence drill talks in.
const DefaultGroup = "drill-group"

// ErrNotSimulator: the WeCom endpoint is not botctl's simulator.
var ErrNotSimulator = errors.New("drill: not a botctl simulator")

// Config shapes a drill. Zero values take the defaults named.
type Config struct {
	Bot    string
	Kind   string
	Rounds int // default 1
	// Sim is the simulator's control API base (http://HOST:PORT).
	Sim string
	// ConnectWait is how long New waits for the bot's first connection
	// to the simulator (a cluster just started). Default 15s.
	ConnectWait time.Duration
	Incidents   *incident.Store
	Health      natsjs.KeyValue
	// Nodes lists the registered nodes (kill-leader only).
	Nodes func(ctx context.Context) ([]node.Info, error)
	// Interval between user messages. Default 1s.
	Interval time.Duration
	// Duration of a silence (default 30s) or stall (default 20s). For a
	// drop, a Duration makes it a gap: reconnecting is refused (a non-auth
	// errcode) for Duration after the drop, so messages pile up unanswered
	// for that long. Default 0: a plain drop.
	Duration time.Duration
	// FixAfter: a revoked secret is restored this long after the incident
	// opened, and the incident acknowledged by "drill". Default 10s.
	FixAfter time.Duration
	// Settle bounds the wait for answers after the incident closed.
	// Default 3m (answers take minutes).
	Settle time.Duration
	// Timeout bounds one round until its incident closes (a long outage
	// recovers half-open: 5 minutes of observation). Default 20m. The wait
	// for answers after that has its own bound, Settle.
	Timeout time.Duration
	// AlertWait: after the last round, wait until this long after each
	// incident's detection before reading the alerts recorded for it (an
	// automatic incident's open alert waits for the merge window, 60 s by
	// default). Default 75s; negative: read them at once.
	AlertWait time.Duration
	// WeComHistory (a drop with a Duration only): the gap is read from
	// WeCom's own message history, not from backfill.history_url. Each
	// round authorizes the bot's msg history at the simulator (POST
	// /control/mcp_access; it stays authorized afterwards) and fails
	// unless the bot asked for its msg MCP server (aibot_get_mcp_config)
	// and the incident's backfill answered messages late. The bot's
	// nodes must run with backfill.history_url unset.
	WeComHistory bool
	// Group is the group chat of a group-silence drill. Default
	// DefaultGroup.
	Group string
	// WarmUp bounds a group-silence round's wait for the group's own
	// silence baseline to have an opinion (group traffic meanwhile).
	// Default 20m.
	WarmUp time.Duration
	// MinWatched is the nodes' health.silence_min_watched (default 10m):
	// how much of the group's traffic the warm-up must have shown.
	MinWatched time.Duration
	// Progress, if set, gets one line per step.
	Progress io.Writer
	Client   *http.Client
	// Clock is what the drill's polls and traffic wait on. Default
	// clock.Real.
	Clock clock.Clock
}

func (c *Config) setDefaults() {
	if c.Rounds <= 0 {
		c.Rounds = 1
	}
	if c.ConnectWait <= 0 {
		c.ConnectWait = 15 * time.Second
	}
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.Duration <= 0 {
		switch c.Kind {
		case KindSilence:
			c.Duration = 30 * time.Second
		case KindStall:
			c.Duration = 20 * time.Second
		}
	}
	if c.FixAfter <= 0 {
		c.FixAfter = 10 * time.Second
	}
	if c.Settle <= 0 {
		c.Settle = 3 * time.Minute
	}
	if c.Timeout <= 0 {
		c.Timeout = 20 * time.Minute
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.WarmUp <= 0 {
		c.WarmUp = 20 * time.Minute
	}
	if c.AlertWait == 0 {
		c.AlertWait = 75 * time.Second
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 10 * time.Second}
	}
}

// Round is what one round measured. Times are seconds.
type Round struct {
	N        int       `json:"round"`
	Kind     string    `json:"kind"`
	Injected time.Time `json:"injected"`
	Incident string    `json:"incident,omitempty"`
	// T1 counts from the injection (the drill knows when the drop was);
	// T1Recorded is the incident's own (from its last evidence).
	T1         float64 `json:"t1_s"`
	T1Recorded float64 `json:"t1_recorded_s"`
	T2         float64 `json:"t2_s"`
	// T2Auto is detected → botctl's first automatic step, T2Human
	// detected → a person's first acknowledgement (the revoke drill plays
	// the person); -1: none of that kind.
	T2Auto   float64 `json:"t2_auto_s"`
	T2Human  float64 `json:"t2_human_s"`
	T3       float64 `json:"t3_s"`
	Downtime float64 `json:"downtime_s"`
	Level    string  `json:"level,omitempty"`
	Method   string  `json:"method,omitempty"`
	Alerts   int     `json:"alerts"`
	// AlertKinds are the alerts recorded for the incident (open,
	// recovered, merged…), read after the answers settled; FirstAlert is
	// detected → the first of them, Page detected → the first at level
	// human (-1: none).
	AlertKinds []string `json:"alert_kinds,omitempty"`
	FirstAlert float64  `json:"first_alert_s"`
	Page       float64  `json:"page_s"`
	// Signal is the incident's (outage, route_silence…); Resubscribes
	// counts the bot's subscribes at the simulator from the injection to
	// the incident's close (group-silence: exactly 1 expected).
	Signal       string `json:"signal,omitempty"`
	Resubscribes int64  `json:"resubscribes"`
	// Filled and NotFilled are the incident's backfill: messages of the
	// gap answered late, and marked "may be incomplete" instead.
	Filled    int `json:"filled"`
	NotFilled int `json:"not_filled"`
	// GroupSent counts the group messages of a group-silence round (also
	// in Sent), GroupAnswered the bot's answers in the group since the
	// round began.
	GroupSent     int      `json:"group_sent,omitempty"`
	GroupAnswered int      `json:"group_answered,omitempty"`
	Sent          int      `json:"sent"`
	Answered      int      `json:"answered"`
	Lost          int      `json:"lost"`
	LostIDs       []string `json:"lost_msgids,omitempty"`
	Error         string   `json:"error,omitempty"`
}

// Drill runs rounds of one kind.
type Drill struct {
	cfg    Config
	runCtx context.Context // Run's (a round's own context has the round timeout)
}

// New checks cfg and that cfg.Sim is botctl's simulator.
func New(ctx context.Context, cfg Config) (*Drill, error) {
	cfg.setDefaults()
	if !slices.Contains(Kinds, cfg.Kind) {
		return nil, fmt.Errorf("drill: kind %q: want one of %s", cfg.Kind, strings.Join(Kinds, ", "))
	}
	if cfg.Bot == "" {
		return nil, errors.New("drill: which bot? give --bot ID")
	}
	if cfg.Kind == KindKillLeader && cfg.Nodes == nil {
		return nil, errors.New("drill: kill-leader needs the node registry (etcd)")
	}
	if cfg.WeComHistory && (cfg.Kind != KindDrop || cfg.Duration <= 0) {
		return nil, errors.New("drill: --wecom-history reads a gap from WeCom's message history: give it with --kind drop and a --duration (e.g. 2m)")
	}
	u, err := url.Parse(cfg.Sim)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: %q is not the simulator's control API (want http://HOST:PORT of `botctl sim`)", ErrNotSimulator, cfg.Sim)
	}
	if h := strings.ToLower(u.Hostname()); h == "qq.com" || strings.HasSuffix(h, ".qq.com") {
		return nil, fmt.Errorf("%w: %s is WeCom itself: drills inject faults and run only against `botctl sim`", ErrNotSimulator, u.Host)
	}
	d := &Drill{cfg: cfg}
	var st struct {
		BotID       string `json:"bot_id"`
		Connected   bool   `json:"connected"`
		Connections int64  `json:"connections"`
	}
	if err := d.get(ctx, "/control/stats?bot_id="+url.QueryEscape(cfg.Bot), &st); err != nil || st.BotID != cfg.Bot {
		return nil, fmt.Errorf("%w: %s does not answer GET /control/stats for bot %s as `botctl sim` does (%v)", ErrNotSimulator, cfg.Sim, cfg.Bot, err)
	}
	// The faults land on this simulator: the bot's nodes must be using
	// it, not a WeCom URL elsewhere (a real WeCom the drill would not
	// touch, while it reported an outage that never happened). A bot that
	// has connected here at least once is (a cluster just started gets a
	// few seconds to connect).
	for deadline := time.Now().Add(cfg.ConnectWait); !st.Connected && st.Connections == 0; {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: bot %s has never connected to the simulator at %s: its nodes use another WeCom URL (wecom.url); drills run only against `botctl sim`", ErrNotSimulator, cfg.Bot, cfg.Sim)
		}
		if !clock.Sleep(ctx, cfg.Clock, 200*time.Millisecond) {
			return nil, ctx.Err()
		}
		if err := d.get(ctx, "/control/stats?bot_id="+url.QueryEscape(cfg.Bot), &st); err != nil {
			return nil, fmt.Errorf("%w: %s stopped answering GET /control/stats (%v)", ErrNotSimulator, cfg.Sim, err)
		}
	}
	return d, nil
}

func (d *Drill) logf(format string, args ...any) {
	fmt.Fprintf(d.cfg.Progress, "%s  %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// Run runs the rounds, calling each with its result as it ends.
func (d *Drill) Run(ctx context.Context, each func(Round)) ([]Round, error) {
	d.runCtx = ctx
	var out []Round
	for n := 1; n <= d.cfg.Rounds; n++ {
		rctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
		r := d.round(rctx, n)
		cancel()
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		out = append(out, r)
		if each != nil {
			each(r)
		}
	}
	d.readAlerts(ctx, out)
	return out, nil
}

// readAlerts fills each round's alerts from its incident, once the alerts
// of the last one had time to be decided (AlertWait).
func (d *Drill) readAlerts(ctx context.Context, rounds []Round) {
	var last time.Time
	for _, r := range rounds {
		if r.Injected.After(last) {
			last = r.Injected
		}
	}
	if wait := time.Until(last.Add(d.cfg.AlertWait)); wait > 0 && d.cfg.AlertWait > 0 {
		d.logf("waiting %s for the alerts of the last incident (the merge window)", wait.Round(time.Second))
		pause.For(ctx, wait)
	}
	for i := range rounds {
		r := &rounds[i]
		r.FirstAlert, r.Page, r.Alerts, r.AlertKinds = -1, -1, 0, nil
		if r.Incident == "" {
			continue
		}
		final, err := d.cfg.Incidents.Get(ctx, d.cfg.Bot, r.Incident)
		if err != nil {
			continue
		}
		r.Alerts = len(final.Alerts)
		for _, a := range final.Alerts {
			r.AlertKinds = append(r.AlertKinds, a.Kind)
			after := a.At.Sub(final.Detected).Seconds()
			if r.FirstAlert < 0 || after < r.FirstAlert {
				r.FirstAlert = after
			}
			if a.Level == incident.Human && (r.Page < 0 || after < r.Page) {
				r.Page = after
			}
		}
	}
}

func (d *Drill) round(ctx context.Context, n int) Round {
	r := Round{N: n, Kind: d.cfg.Kind}
	fail := func(err error) Round {
		r.Error = err.Error()
		d.logf("round %d: %v", n, err)
		return r
	}
	d.logf("round %d: waiting for bot %s to be online with no open incident", n, d.cfg.Bot)
	if err := d.waitHealthy(ctx); err != nil {
		return fail(err)
	}

	if err := d.prepare(ctx); err != nil {
		return fail(err)
	}
	before, err := d.stats(ctx)
	if err != nil {
		return fail(err)
	}
	groupSeq, _, err := d.groupAnswers(ctx, 0)
	if err != nil {
		return fail(err)
	}

	// Traffic runs from before the fault until the incident closes.
	traffic := &traffic{d: d, round: n}
	if d.cfg.Kind == KindGroupSilence {
		traffic.group = d.cfg.Group
	}
	tctx, stopTraffic := context.WithCancel(ctx)
	trafficDone := make(chan struct{})
	go func() { defer close(trafficDone); traffic.run(tctx) }()
	defer func() { stopTraffic(); <-trafficDone }()
	if !pause.For(ctx, 2*d.cfg.Interval) {
		return fail(ctx.Err())
	}

	r.Injected = time.Now().UTC()
	if err := d.inject(ctx); err != nil {
		return fail(fmt.Errorf("inject %s: %w", d.cfg.Kind, err))
	}
	d.logf("round %d: %s injected", n, d.cfg.Kind)
	inc, err := d.waitIncident(ctx, r.Injected)
	if err != nil {
		return fail(err)
	}
	r.Incident = inc.ID
	d.logf("round %d: incident %s opened (%s, %s): %s", n, inc.ID, inc.Signal, inc.Level, inc.Reason)
	if d.cfg.Kind == KindRevoke {
		if !pause.For(ctx, d.cfg.FixAfter) {
			return fail(ctx.Err())
		}
		if err := d.fault(ctx, "restore", 0); err != nil {
			return fail(err)
		}
		if _, err := d.cfg.Incidents.Ack(ctx, inc.ID, "drill", "secret restored by the drill"); err != nil {
			return fail(err)
		}
		d.logf("round %d: secret restored and incident acknowledged (playing the person)", n)
	}
	closed, err := d.waitClosed(ctx, inc)
	if err != nil {
		return fail(err)
	}
	stopTraffic()
	<-trafficDone
	r.T1 = closed.Detected.Sub(r.Injected).Seconds()
	r.T1Recorded, r.T2, r.T3 = closed.T1().Seconds(), closed.T2().Seconds(), closed.T3().Seconds()
	r.T2Auto, r.T2Human = -1, -1
	if t, ok := closed.T2Auto(); ok {
		r.T2Auto = t.Seconds()
	}
	if t, ok := closed.T2Human(); ok {
		r.T2Human = t.Seconds()
	}
	r.Downtime = closed.Downtime(closed.Closed).Seconds()
	r.Level, r.Method = string(closed.Level), string(closed.Method)
	d.logf("round %d: incident closed (%s): T1 %.2fs (recorded %.2fs), T2 %.3fs, T3 %.2fs, down %.2fs; waiting for %d answers",
		n, closed.Method, r.T1, r.T1Recorded, r.T2, r.T3, r.Downtime, len(traffic.sent))
	r.Signal = string(closed.Signal)
	r.Sent = len(traffic.sent) + len(traffic.groupSent)
	r.GroupSent = len(traffic.groupSent)
	// Bounded by Settle, not by what is left of the round's timeout: a
	// check cut short would count answered messages as lost.
	r.LostIDs = d.waitAnswers(d.runCtx, traffic.sent)
	r.Lost = len(r.LostIDs)
	if r.GroupSent > 0 {
		r.GroupAnswered = d.waitGroupAnswers(d.runCtx, groupSeq, r.GroupSent)
		r.Lost += r.GroupSent - r.GroupAnswered
	}
	r.Answered = r.Sent - r.Lost
	d.logf("round %d: %d sent, %d answered, %d lost", n, r.Sent, r.Answered, r.Lost)
	// The late answers are the backfill's, recorded once it ran (the
	// trailing pass may come after the close).
	if final, err := d.cfg.Incidents.Get(d.runCtx, d.cfg.Bot, inc.ID); err == nil {
		closed = final
	}
	r.Filled, r.NotFilled = closed.Backfill.Filled, closed.Backfill.NotFilled
	after, err := d.stats(d.runCtx)
	if err != nil {
		return fail(err)
	}
	r.Resubscribes = after.Connections - before.Connections
	if err := d.expect(r, before, after); err != nil {
		return fail(err)
	}
	return r
}

// prepare readies a round before its traffic: a group-silence's group
// gets its baseline (warmGroup); a WeComHistory drill authorizes the
// bot's message history at the simulator.
func (d *Drill) prepare(ctx context.Context) error {
	if d.cfg.Kind == KindGroupSilence {
		if err := d.warmGroup(ctx); err != nil {
			return err
		}
	}
	if d.cfg.WeComHistory {
		if err := d.post(ctx, "/control/mcp_access", map[string]any{"bot_id": d.cfg.Bot, "authorized": true}, nil); err != nil {
			return fmt.Errorf("authorize the bot's message history at the simulator: %w", err)
		}
	}
	return nil
}

// expect checks what the kind promises beyond "nothing lost": an error
// says what did not happen.
func (d *Drill) expect(r Round, before, after simStats) error {
	switch {
	case d.cfg.Kind == KindGroupSilence && r.Signal != string(incident.SignalRouteSilence):
		return fmt.Errorf("the incident's signal is %q, want %s (the group's own silence while direct messages arrive)", r.Signal, incident.SignalRouteSilence)
	case d.cfg.Kind == KindGroupSilence && r.Resubscribes != 1:
		return fmt.Errorf("%d resubscribes for one silent group, want 1", r.Resubscribes)
	case d.cfg.WeComHistory && after.Frames[cmdGetMCPConfig] <= before.Frames[cmdGetMCPConfig]:
		return fmt.Errorf("the bot never asked for its msg MCP server (%s): its nodes read the gap elsewhere (is backfill.history_url set?)", cmdGetMCPConfig)
	case d.cfg.WeComHistory && r.Filled == 0:
		return fmt.Errorf("no message of the gap answered late from WeCom's message history (backfill: %d answered late, %d marked)", r.Filled, r.NotFilled)
	}
	return nil
}

// cmdGetMCPConfig is the frame a bot sends for its msg MCP server
// (backfill.CmdGetMCPConfig), counted by the simulator.
const cmdGetMCPConfig = "aibot_get_mcp_config"

func (d *Drill) inject(ctx context.Context) error {
	switch d.cfg.Kind {
	case KindDrop:
		if d.cfg.Duration > 0 {
			if err := d.fault(ctx, "refuse_subscribe", d.cfg.Duration.Seconds()); err != nil {
				return err
			}
		}
		return d.fault(ctx, "drop", 0)
	case KindRevoke:
		return d.fault(ctx, "revoke", 0)
	case KindSilence:
		return d.fault(ctx, "silence", d.cfg.Duration.Seconds())
	case KindStall:
		return d.fault(ctx, "stall_acks", d.cfg.Duration.Seconds())
	case KindKillLeader:
		return d.killLeader(ctx)
	case KindGroupSilence:
		return d.fault(ctx, "group_silence", 0)
	}
	return fmt.Errorf("unknown kind %q", d.cfg.Kind)
}

// killLeader SIGKILLs the process of the node the health record names as
// the bot's holder, if it runs on this machine.
func (d *Drill) killLeader(ctx context.Context) error {
	rec, err := health.Load(ctx, d.cfg.Health, d.cfg.Bot)
	if err != nil {
		return err
	}
	nodes, err := d.cfg.Nodes(ctx)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	for _, n := range nodes {
		if n.ID != rec.Node {
			continue
		}
		if n.PID <= 0 || n.Host != host {
			return fmt.Errorf("the leader %s runs on %q (pid %d), not on this machine (%s): run the drill there", n.ID, n.Host, n.PID, host)
		}
		if err := syscall.Kill(n.PID, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill -9 %d (node %s): %w", n.PID, n.ID, err)
		}
		d.logf("kill -9 %d (node %s, the leader of %s)", n.PID, n.ID, d.cfg.Bot)
		return nil
	}
	return fmt.Errorf("the bot's holder %q is not registered", rec.Node)
}

func (d *Drill) waitHealthy(ctx context.Context) error {
	return poll(ctx, 250*time.Millisecond, func() (bool, error) {
		rec, err := health.Load(ctx, d.cfg.Health, d.cfg.Bot)
		if err != nil {
			return false, nil
		}
		open, err := d.cfg.Incidents.OpenFor(ctx, d.cfg.Bot, incident.Outage)
		if err != nil {
			return false, nil
		}
		return rec.State == health.Online && open == nil, nil
	})
}

// waitIncident waits for the bot's outage incident detected after t.
func (d *Drill) waitIncident(ctx context.Context, t time.Time) (*incident.Incident, error) {
	var found *incident.Incident
	err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		open, err := d.cfg.Incidents.OpenFor(ctx, d.cfg.Bot, incident.Outage)
		if err == nil && open != nil && !open.Detected.Before(t.Add(-time.Second)) && d.wants(open) {
			found = open
			return true, nil
		}
		// Opened and closed between two polls (a fast drop).
		all, err := d.cfg.Incidents.List(ctx, incident.Filter{Bot: d.cfg.Bot, Since: t.Add(-time.Second)})
		if err == nil {
			for i := range all {
				if all[i].Kind == incident.Outage && d.wants(&all[i]) {
					found = &all[i]
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no incident after the fault (is the bot's node running botctl with health on?): %w", err)
	}
	return found, nil
}

// wants reports whether inc is the incident the kind causes: a
// group-silence's is its route's silence, any outage for the others.
func (d *Drill) wants(inc *incident.Incident) bool {
	return d.cfg.Kind != KindGroupSilence || inc.Signal == incident.SignalRouteSilence
}

func (d *Drill) waitClosed(ctx context.Context, inc *incident.Incident) (*incident.Incident, error) {
	var cur *incident.Incident
	err := poll(ctx, 200*time.Millisecond, func() (bool, error) {
		i, err := d.cfg.Incidents.Get(ctx, inc.Bot, inc.ID)
		if err != nil {
			return false, nil
		}
		cur = i
		return i.State == incident.Closed, nil
	})
	if err != nil {
		return nil, fmt.Errorf("incident %s not closed: %w", inc.ID, err)
	}
	return cur, nil
}
