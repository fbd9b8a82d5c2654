package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/serve"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/test/e2e/cluster"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// taskMaxDeliver is the task queue's MaxDeliver (jetstream.DefaultTaskMaxDeliver,
// not imported: the scenario states what it expects of the deployment).
const taskMaxDeliver = 5

// Standby waits for a stable cluster and returns a node that is standby
// for the bot.
func (h *Harness) Standby() (*cluster.Node, error) {
	l, err := h.C.WaitStable(h.Cfg.Takeover)
	if err != nil {
		return nil, err
	}
	for _, n := range h.C.Alive() {
		if n.ID != l[bot] {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no standby: only %s is alive", l[bot])
}

// cutNode blackholes the leader's (or a standby's) links to etcd and/or
// NATS for d, then heals them. A leader cut from etcd must lose its lock:
// the takeover is measured.
func (h *Harness) cutNode(r *RoundResult, leader, etcd, nats bool, d time.Duration) error {
	pick := h.Standby
	if leader {
		pick = h.Leader
	}
	n, err := pick()
	if err != nil {
		return err
	}
	links := h.links[n.ID]
	t0 := time.Now()
	links.Cut(etcd, nats)
	defer links.Heal()
	r.note("cut %s (%s) from%s%s for %s", n.ID, map[bool]string{true: "leader", false: "standby"}[leader],
		map[bool]string{true: " etcd"}[etcd], map[bool]string{true: " NATS"}[nats], d)
	if leader && etcd {
		r.Takeovers = append(r.Takeovers, h.waitTakeover(n.ID, t0))
	}
	time.Sleep(time.Until(t0.Add(d)))
	return nil
}

// cli runs a botctl subcommand against the cluster's NATS (directly, not
// through any node's proxy) and returns its stdout.
func (h *Harness) cli(args ...string) (string, error) {
	args = append(args, "--nats", h.Infra.NATSURLs())
	code, stdout, stderr, err := cluster.Run(h.C.Opts.Bin, time.Minute, args...)
	if err != nil {
		return stdout, err
	}
	if code != 0 {
		return stdout, fmt.Errorf("botctl %s: exit %d: %s", strings.Join(args, " "), code, strings.TrimSpace(stderr))
	}
	return stdout, nil
}

// incidentRow is the part of `botctl incidents list --json` a scenario reads.
type incidentRow struct {
	ID       string    `json:"id"`
	Kind     string    `json:"kind"`
	Level    string    `json:"level"`
	State    string    `json:"state"`
	Signal   string    `json:"signal"`
	Reason   string    `json:"reason"`
	Detected time.Time `json:"detected"`
	Events   []struct {
		What string `json:"what"`
	} `json:"events"`
}

// names reports whether the incident's reason or timeline names s: an
// incident already open for the bot takes a later fault of its kind into
// its timeline (its reason names the first).
func (i incidentRow) names(s string) bool {
	if strings.Contains(i.Reason, s) {
		return true
	}
	for _, e := range i.Events {
		if strings.Contains(e.What, s) {
			return true
		}
	}
	return false
}

func (h *Harness) openIncidents() ([]incidentRow, error) {
	return h.incidents("--open")
}

// incidentsSince lists the bot's incidents detected since t, open or
// closed.
func (h *Harness) incidentsSince(t time.Time) ([]incidentRow, error) {
	return h.incidents("--since", t.UTC().Format(time.RFC3339))
}

func (h *Harness) incidents(filter ...string) ([]incidentRow, error) {
	out, err := h.cli(append([]string{"incidents", "list", "--bot", bot, "--json"}, filter...)...)
	if err != nil {
		return nil, err
	}
	var v struct {
		Incidents []incidentRow `json:"incidents"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return nil, fmt.Errorf("incidents list --json: %w: %s", err, out)
	}
	return v.Incidents, nil
}

// revokeAndRestore revokes the bot's secret at the simulator, waits for
// botctl to open a human-level outage incident for it, then plays the
// person paged: after think, restores the secret and acknowledges the
// incident with `botctl incidents ack`. The takeover is from the ack to
// the next subscribe.
func (h *Harness) revokeAndRestore(r *RoundResult, think time.Duration) error {
	if _, err := h.Leader(); err != nil {
		return err
	}
	t0 := time.Now()
	if err := h.simFault("revoke", 0); err != nil {
		return err
	}
	var inc incidentRow
	deadline := time.Now().Add(90 * time.Second)
	for inc.ID == "" {
		if time.Now().After(deadline) {
			// Leave the bot usable for the rounds after this one.
			h.simFault("restore", 0)
			if incs, err := h.openIncidents(); err == nil {
				for _, i := range incs {
					h.cli("incidents", "ack", i.ID, "--by", "chaos", "--note", "the chaos harness cleans up after a failed revoke round")
				}
			}
			return fmt.Errorf("no open human incident for %s within 90s of the revoke", bot)
		}
		time.Sleep(time.Second)
		incs, err := h.openIncidents()
		if err != nil {
			h.Cfg.Logf("incidents list: %v", err)
			continue
		}
		// The revoke may escalate an incident that was already open (the
		// bot has one open incident at a time): its Detected is then
		// older than the revoke.
		for _, i := range incs {
			if i.Level == "human" && i.Kind == "outage" {
				inc = i
			}
		}
	}
	r.note("incident %s (%s, %s, detected %s, %.1f s after the revoke): %s", inc.ID, inc.Level, inc.Signal,
		inc.Detected.UTC().Format("15:04:05"), time.Since(t0).Seconds(), inc.Reason)
	time.Sleep(think)
	if err := h.simFault("restore", 0); err != nil {
		return err
	}
	acked := time.Now()
	if _, err := h.cli("incidents", "ack", inc.ID, "--by", "chaos", "--note", "secret restored by the chaos harness"); err != nil {
		return err
	}
	tk := h.waitTakeover("ack", acked)
	r.Takeovers = append(r.Takeovers, tk)
	return nil
}

// taskRow is the part of a task record (`botctl tasks list --json`) a
// scenario reads.
type taskRow struct {
	ID         string `json:"id"`
	MsgID      string `json:"msgid"`
	Chat       string `json:"chat"`
	Exec       string `json:"exec"`
	Node       string `json:"node"`
	Deliveries int    `json:"deliveries"`
	Tier       string `json:"tier"`
}

func (h *Harness) tasks(state string) ([]taskRow, error) { return h.tasksOf(bot, state) }

// bots are the bots the lane's traffic writes to: the first, and the
// second where it has one.
func (h *Harness) bots() []string {
	if h.Traffic2 != nil {
		return []string{bot, bot2}
	}
	return []string{bot}
}

// tasksOf is b's tasks in state (botctl tasks list).
func (h *Harness) tasksOf(b, state string) ([]taskRow, error) {
	out, err := h.cli("tasks", "list", "--bot", b, "--state", state, "--json", "--limit", "0")
	if err != nil {
		return nil, err
	}
	var v struct {
		Tasks []taskRow `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return nil, fmt.Errorf("tasks list --json: %w: %s", err, out)
	}
	return v.Tasks, nil
}

func (h *Harness) task(id string) (taskRow, error) {
	out, err := h.cli("tasks", "show", id, "--json")
	if err != nil {
		return taskRow{}, err
	}
	var v struct {
		Task taskRow `json:"task"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return v.Task, fmt.Errorf("tasks show --json: %w: %s", err, out)
	}
	return v.Task, nil
}

// runningOnStandby waits up to timeout for a task of this round's traffic
// running from the queue on a live standby.
func (h *Harness) runningOnStandby(timeout time.Duration) (taskRow, *cluster.Node, error) {
	l, err := h.Leader()
	if err != nil {
		return taskRow{}, nil, err
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ts, err := h.tasks("running")
		if err != nil {
			h.Cfg.Logf("tasks list: %v", err)
		}
		for _, t := range ts {
			if t.Node == "" || t.Node == l.ID || t.Tier != "queue" || !strings.HasPrefix(t.Chat, "chaos-"+h.Traffic.nonce) {
				continue
			}
			if n := h.C.Node(t.Node); n != nil && alive(n) {
				return t, n, nil
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	return taskRow{}, nil, fmt.Errorf("no task running on a standby within %v", timeout)
}

func alive(n *cluster.Node) bool {
	select {
	case <-n.Proc.Done():
		return false
	default:
		return true
	}
}

// killWorker kills -9 a standby while it computes an answer and restarts
// it 5 s later. The task must be redelivered to another worker after the
// queue's ack wait and answered once.
func (h *Harness) killWorker(r *RoundResult) error {
	t, n, err := h.runningOnStandby(20 * time.Second)
	if err != nil {
		return err
	}
	n.Proc.Kill()
	r.note("killed %s computing task %s (delivery %d)", n.ID, t.ID, t.Deliveries)
	time.Sleep(5 * time.Second)
	if _, err := h.C.RestartNode(n.ID); err != nil {
		return fmt.Errorf("restart %s: %w", n.ID, err)
	}
	return nil
}

// killWorkerEveryDelivery chases one task: whichever node computes it is
// killed -9 (and restarted 5 s later), delivery after delivery, up to the
// queue's last. The task can then never finish: botctl must give it up,
// tell the user once, and free the conversation (the probe checks that).
func (h *Harness) killWorkerEveryDelivery(r *RoundResult) error {
	t, n, err := h.runningOnStandby(20 * time.Second)
	if err != nil {
		return err
	}
	r.ExpectFailed = map[string]bool{t.MsgID: true}
	// Any other task the killed node was computing dies with it; one that
	// happened to be on the killed node at every one of its deliveries
	// could never finish either: its failure notice is the fault's too.
	killed := map[string]int{} // msgid → deliveries killed
	restarts := make(chan error, taskMaxDeliver)
	pending := 0
	defer func() {
		for ; pending > 0; pending-- {
			<-restarts
		}
		for id, k := range killed {
			if k >= taskMaxDeliver {
				r.ExpectFailed[id] = true
			}
		}
	}()
	for {
		leader, _ := h.C.Leaders()
		wasLeader := len(leader[bot]) == 1 && leader[bot][0] == n.ID
		for _, b := range h.bots() {
			if ts, err := h.tasksOf(b, "running"); err == nil {
				for _, o := range ts {
					if o.Node == n.ID {
						killed[o.MsgID]++
					}
				}
			}
		}
		t0 := time.Now()
		n.Proc.Kill()
		r.note("killed %s (leader: %v) computing task %s, delivery %d", n.ID, wasLeader, t.ID, t.Deliveries)
		id := n.ID
		pending++
		go func() {
			time.Sleep(5 * time.Second)
			_, err := h.C.RestartNode(id)
			restarts <- err
		}()
		if wasLeader {
			r.Takeovers = append(r.Takeovers, h.waitTakeover(id, t0))
		}
		if t.Deliveries >= taskMaxDeliver {
			return nil
		}
		// The next delivery comes after the ack wait (30 s) on any node.
		prev := t.Deliveries
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if time.Now().After(deadline) {
				return fmt.Errorf("task %s: no delivery after %d within 2m (last seen: %s on %q, delivery %d)", t.ID, prev, t.Exec, t.Node, t.Deliveries)
			}
			time.Sleep(300 * time.Millisecond)
			cur, err := h.task(t.ID)
			if err != nil {
				continue
			}
			t = cur
			if t.Exec != "running" || t.Deliveries <= prev {
				if t.Exec == "succeeded" || t.Exec == "failed" || t.Exec == "canceled" {
					return fmt.Errorf("task %s ended (%s) at delivery %d before the chase reached the last delivery", t.ID, t.Exec, t.Deliveries)
				}
				continue
			}
			if n = h.C.Node(t.Node); n != nil && alive(n) {
				break
			}
		}
	}
}

// churnStream steps the leader of JetStream stream down every period for
// d: each time its replicas elect a new one, and until they have, every
// read and write of it fails or waits. The rest of JetStream is not
// touched: one bucket (the task records' stream, say) fails on and off
// while the queue and every other bucket work.
func (h *Harness) churnStream(r *RoundResult, stream string, d, period time.Duration) error {
	nc, err := nats.Connect(h.Infra.NATSURLs(), nats.Name("chaos-churn"))
	if err != nil {
		return err
	}
	defer nc.Close()
	r.note("step %s's leader down every %s for %s", stream, period, d)
	subject := "$JS.API.STREAM.LEADER.STEPDOWN." + stream
	steps, failed := 0, 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(period) {
		m, err := nc.Request(subject, nil, 5*time.Second)
		if err != nil || strings.Contains(string(m.Data), `"error"`) {
			failed++ // no leader to step down yet: the fault holds anyway
			continue
		}
		steps++
	}
	r.note("%s: %d step-downs, %d refused (no leader yet)", stream, steps, failed)
	if steps == 0 {
		return fmt.Errorf("no step-down of %s was accepted", stream)
	}
	return nil
}

// corruptRecord puts a task record that does not decode by hand (a
// bitflip, a bad restore, a buggy tool), with the undelivered index entry
// and the queue message a real task would have, in a conversation no user
// of the traffic has; then hands the bot over (SIGTERM the leader) so the
// new leader's pusher rebuilds from the index and meets it. The record
// must be skipped, counted and reported as one data incident while every
// real message is answered. Then the harness plays the person: `botctl
// tasks release` frees the conversation and the keys are deleted.
func (h *Harness) corruptRecord(r *RoundResult) error {
	nc, err := nats.Connect(h.Infra.NATSURLs(), nats.Name("chaos-corrupt"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := jetstream.NamesFor("")
	tasks, err := js.KeyValue(ctx, names.TasksBucket)
	if err != nil {
		return err
	}
	index, err := js.KeyValue(ctx, names.PendingBucket)
	if err != nil {
		return err
	}
	chat := fmt.Sprintf("chaos-corrupt-%d", r.Round)
	msgid := fmt.Sprintf("chaos-corrupt-%d-%d", r.Round, time.Now().UnixNano())
	id := task.ID(bot, msgid)
	raw, _ := json.Marshal(task.Message{TaskID: id, Bot: bot, MsgID: msgid, Chat: chat, ChatType: "single", User: chat, Question: "q", Received: time.Now()})
	if _, err := js.Publish(ctx, names.TaskSubject(bot, chat), raw, natsjs.WithMsgID(msgid)); err != nil {
		return fmt.Errorf("queue message of the corrupt task: %w", err)
	}
	if _, err := tasks.Put(ctx, id, []byte("{\"id\":\""+id+"\",\"exec\":\x00garbage")); err != nil {
		return err
	}
	if _, err := index.Put(ctx, jetstream.UndeliveredKey(bot, id), nil); err != nil {
		return err
	}
	r.note("corrupt record %s put by hand (conversation %s, in the undelivered index, with a queue message)", id, chat)
	defer func() {
		h.cli("tasks", "release", "--bot", bot, "--chat", chat)
		tasks.Delete(context.Background(), id)
		index.Delete(context.Background(), jetstream.UndeliveredKey(bot, id))
	}()
	l, err := h.Leader()
	if err != nil {
		return err
	}
	if err := h.stopNode(r, l.ID); err != nil {
		return err
	}
	if _, err := h.C.RestartNode(l.ID); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		incs, err := h.openIncidents()
		if err == nil {
			for _, i := range incs {
				if i.Signal == "corrupt_record" && i.names(id) {
					r.note("data incident %s names %s", i.ID, id)
					// The person paged mends the record (the deferred
					// delete) and acknowledges: the next round's record
					// opens an incident of its own.
					h.cli("incidents", "ack", i.ID, "--by", "chaos", "--note", "the chaos harness removes the corrupt record it put")
					return nil
				}
			}
		}
		time.Sleep(2 * time.Second)
	}
	return fmt.Errorf("no open corrupt_record incident naming %s within 2 minutes of the handover", id)
}

// clockSkew hands the bot over (SIGTERM the leader), starts that node
// again with its clock probe shifted by off, waits until it says its clock
// is off (clock_off), holds it so for d under traffic, then restarts it
// with its true clock.
func (h *Harness) clockSkew(r *RoundResult, off, d time.Duration) error {
	l, err := h.Leader()
	if err != nil {
		return err
	}
	if err := h.stopNode(r, l.ID); err != nil {
		return err
	}
	links := h.links[l.ID]
	n, err := h.C.StartNodeWith(l.ID, cluster.NodeOptions{EtcdURL: links.EtcdURLs(), NATSURL: links.NATSURLs(),
		Env: []string{serve.TestClockOffsetEnv + "=" + off.String()}})
	if err != nil {
		return err
	}
	r.note("%s restarted with its clock probe %s off", l.ID, off)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if i, err := n.Info(); err == nil && i.Bots[bot].State == "clock_off" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s, %s off, is not clock_off after 2 minutes", l.ID, off)
		}
		time.Sleep(time.Second)
	}
	r.note("%s: clock_off", l.ID)
	time.Sleep(d)
	_, err = h.C.RestartNode(l.ID)
	return err
}

// rollingNATSRestart upgrades the NATS servers one after another as
// docs/operations.md tells an operator to: SIGTERM a server, start it
// again, and before the next one wait for its /healthz to say ok, which it
// says once every replica of every stream and consumer is current again.
// Restarting the next server as soon as JetStream answers (about 0.1 s
// later) takes a second replica away from R3 groups whose first still
// catches up, and JetStream stalls for 20–30 s: a fault of the harness,
// not one an operator makes. Each wait is noted in the report; a wait
// past timeout stops the upgrade there and fails the round, as it would
// stop an operator.
func (h *Harness) rollingNATSRestart(r *RoundResult, timeout time.Duration) error {
	for _, m := range h.Infra.NATS {
		if err := h.Infra.Stop(m, 30*time.Second); err != nil {
			return err
		}
		if err := h.Infra.Restart(m, time.Minute); err != nil {
			return fmt.Errorf("restart %s: %w", m.Name, err)
		}
		t0 := time.Now()
		err := h.waitReplicasCurrent(timeout)
		took := time.Since(t0)
		if err != nil {
			r.note("%s restarted: replicas NOT current after %.1fs (the upgrade stops here)", m.Name, took.Seconds())
			return fmt.Errorf("after restarting %s: %w", m.Name, err)
		}
		r.note("%s restarted: replicas current after %.1fs", m.Name, took.Seconds())
		h.Cfg.Logf("rolling-nats-restart: %s's replicas current %.1fs after its restart", m.Name, took.Seconds())
	}
	return nil
}

// waitReplicasCurrent waits, within timeout in all, for what nats-server's
// /healthz checks on every server: JetStream answers through each (the
// meta group has a leader), every stream has a leader and every replica
// current (infracluster.WaitStreamsCurrent), and so has every replicated
// consumer (the task queue's workers).
func (h *Harness) waitReplicasCurrent(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if err := h.Infra.WaitHealthy(timeout); err != nil {
		return err
	}
	return h.Infra.WaitReplicasCurrent(time.Until(deadline))
}

// chaosGroup is the group chat the group-silence row talks in.
const chaosGroup = "chaos-group"

// groupSilence gives chaosGroup a baseline of its own (a group message
// every 2 s, from three users, for silenceMinWatched and 20 s more; a
// direct message every 2 s beside it, from six users),
// withholds group callbacks from the subscribed connection until the next
// subscribe (direct messages still arrive), and keeps the
// group talking until botctl has resubscribed on a fresh connection. The
// round fails unless it resubscribed exactly once and the route_silence
// incident was seen; the group's messages are judged like every other:
// those withheld are owed a late answer (the backfill over the group's
// gap), those after the resubscribe an answer.
func (h *Harness) groupSilence(r *RoundResult, timeout time.Duration) error {
	label := fmt.Sprintf("%s-r%d", r.Scenario, r.Round)
	k := 0
	talk := func() {
		k++
		h.Traffic.PostGroup(label, fmt.Sprintf("chaos-%s-g%d", h.Traffic.nonce, k%3+1), chaosGroup)
		// Direct messages keep arriving too, every 2 s (a user's every
		// 12 s): only the group is silent, never the whole bot, which the
		// closed-loop users alone (waiting on their answers) may leave
		// quiet for longer than the bot's silence baseline.
		h.Traffic.Post(label, fmt.Sprintf("chaos-%s-d%d", h.Traffic.nonce, k%6+1), false)
	}
	for end := time.Now().Add(silenceMinWatched + 20*time.Second); time.Now().Before(end); time.Sleep(2 * time.Second) {
		talk()
	}
	before, err := h.C.Stats(bot)
	if err != nil {
		return err
	}
	if err := h.simFault("group_silence", 0); err != nil {
		return err
	}
	r.note("group_silence injected after %d group messages", k)
	injected := time.Now()
	seen := false
	deadline := time.Now().Add(timeout)
	for {
		talk()
		if !seen {
			if open, err := h.openIncidents(); err == nil {
				for _, i := range open {
					if i.Signal == "route_silence" {
						seen = true
						r.note("incident %s: %s", i.ID, i.Reason)
					}
				}
			}
		}
		st, err := h.C.Stats(bot)
		if err == nil && st.Connections > before.Connections && !st.GroupsSilenced {
			// Heard on the fresh connection: a few more answered again.
			for range 3 {
				time.Sleep(2 * time.Second)
				talk()
			}
			after, err := h.C.Stats(bot)
			if err != nil {
				return err
			}
			if n := after.Connections - before.Connections; n != 1 {
				return fmt.Errorf("%d resubscribes for one silent group, want 1", n)
			}
			if !seen {
				// Opened and closed between two looks: the list since
				// the fault has it, closed.
				if err := h.routeSilenceSince(r, injected); err != nil {
					return err
				}
			}
			r.note("resubscribed once; %d group messages in all", k)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no resubscribe within %s of the group silence (route_silence seen: %v)", timeout, seen)
		}
		time.Sleep(2 * time.Second)
	}
}

// routeSilenceSince finds a route_silence incident detected since t
// (open or closed, noted); if there is none, the error lists the
// incidents that were.
func (h *Harness) routeSilenceSince(r *RoundResult, t time.Time) error {
	incs, err := h.incidentsSince(t.Add(-time.Second))
	if err != nil {
		return err
	}
	var others []string
	for _, i := range incs {
		if i.Signal == "route_silence" {
			r.note("incident %s (%s when looked at): %s", i.ID, i.State, i.Reason)
			return nil
		}
		others = append(others, fmt.Sprintf("%s %s/%s: %s", i.ID, i.Kind, i.Signal, i.Reason))
	}
	return fmt.Errorf("resubscribed, but no route_silence incident since the fault; incidents since: %v", others)
}

// wecomHistoryGap restarts the nodes one by one with backfill.history_url
// unset (the standbys first), authorizes the bot's message history at the
// simulator, makes a gap (subscribes refused for gap after a drop), waits
// until the gap's incident has closed and the bot asked for its msg MCP
// server, then restarts the nodes with their usual flags again. The
// round fails if the gap was not read from WeCom's history.
func (h *Harness) wecomHistoryGap(r *RoundResult, gap, timeout time.Duration) error {
	if err := h.C.SetMCPAccess(bot, true); err != nil {
		return err
	}
	defer h.C.SetMCPAccess(bot, false)
	if err := h.restartNodesWith(r, []string{"--backfill-history-url="}); err != nil {
		return err
	}
	// Put back even when the gap went wrong: later rounds read the
	// simulator's history as they always do.
	defer func() {
		if err := h.restartNodesWith(r, nil); err != nil {
			r.note("restarting the nodes with their usual flags: %v", err)
		}
	}()
	before, err := h.C.Stats(bot)
	if err != nil {
		return err
	}
	l, err := h.Leader()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := h.simFault("refuse_subscribe", int(gap.Seconds())); err != nil {
		return err
	}
	if err := h.simFault("drop", 0); err != nil {
		return err
	}
	// Subscribes are refused for the gap, and a node retries a refused
	// subscribe after a backoff that doubles up to node.Config.BackoffMax
	// (30 s): the bot is subscribed again up to that long after the gap.
	r.Takeovers = append(r.Takeovers, h.waitTakeoverWithin(l.ID, t0, gap+subscribeBackoffMax+h.Cfg.Takeover))
	deadline := time.Now().Add(timeout)
	for {
		st, err := h.C.Stats(bot)
		open, ierr := h.openIncidents()
		if err == nil && ierr == nil && len(open) == 0 && time.Since(t0) > gap && st.Frames["aibot_get_mcp_config"] > before.Frames["aibot_get_mcp_config"] {
			r.note("the gap's incident closed; the bot asked for its msg MCP server %d time(s)", st.Frames["aibot_get_mcp_config"]-before.Frames["aibot_get_mcp_config"])
			return nil
		}
		if time.Now().After(deadline) {
			asked := st.Frames["aibot_get_mcp_config"] - before.Frames["aibot_get_mcp_config"]
			if asked <= 0 {
				return fmt.Errorf("%s after the gap the bot never asked for its msg MCP server (aibot_get_mcp_config frames %d → %d): the gap was not read from WeCom's history",
					timeout, before.Frames["aibot_get_mcp_config"], st.Frames["aibot_get_mcp_config"])
			}
			return fmt.Errorf("%s after the gap its incident is still open (open incidents %d, %v; the bot asked for its msg MCP server %d time(s)): the gap's backfill has not ended",
				timeout, len(open), ierr, asked)
		}
		time.Sleep(time.Second)
	}
}

// subscribeBackoffMax is the nodes' longest wait between two refused
// subscribes (node.Config.BackoffMax's default).
const subscribeBackoffMax = 30 * time.Second

// restartNodesWith restarts every node, standbys first, with args added
// to their usual flags (nil: the usual flags only), waiting for a stable
// cluster after each.
func (h *Harness) restartNodesWith(r *RoundResult, args []string) error {
	l, err := h.Leader()
	if err != nil {
		return err
	}
	order := slices.DeleteFunc(slices.Clone(h.nodeIDs), func(id string) bool { return id == l.ID })
	for _, id := range append(order, l.ID) {
		if err := h.stopNode(r, id); err != nil {
			return err
		}
		links := h.links[id]
		if _, err := h.C.StartNodeWith(id, cluster.NodeOptions{EtcdURL: links.EtcdURLs(), NATSURL: links.NATSURLs(), Args: args}); err != nil {
			return fmt.Errorf("restart %s: %w", id, err)
		}
		if _, err := h.C.WaitStable(h.Cfg.Takeover); err != nil {
			return fmt.Errorf("after restarting %s: %w", id, err)
		}
	}
	r.note("nodes restarted with %q added to their flags", args)
	return nil
}
