package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/clusterkey"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/fleet"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/test/e2e/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The many-bots scenario: a fleet of bots kept in the bot registry
// (pkg/fleet), every node serving every one, each with a closed-loop user
// of its own, through a node's kill -9 and restart and, during the
// traffic, a bot added, one removed and one re-keyed with the botctl CLI
// (`botctl bots add|remove|rotate-secret`). Every fleet bot's messages
// are judged as bot2's (sideBot): answered once, none lost, none locked,
// no 45009, no expired stream, no kick beyond the one the re-key forces.
// The fleet is removed from the registry at the round's end, so the
// lane's next scenario sees the cluster it knew.

// Fleet traffic: one user a bot, thinking fleetThink (mean) between an
// answer and the next question; with answers of 5–60 s that is a message
// a bot about every minute (100 bots: under 2 a second).
const (
	fleetThink = 30 * time.Second
	fleetPoll  = 2 * time.Second // how often a fleet user reads its transcript
	// fleetWarmup: the fleet's traffic before the kill; fleetAfter: after
	// the re-key, while the balancer moves bots back.
	fleetWarmup = 30 * time.Second
	fleetAfter  = 60 * time.Second
	// addServed bounds a bot added at run time: its first subscribe after
	// `bots add` (the nodes campaign within 5 s of the watch's news).
	addServed = time.Minute
)

// keyEnv is the environment variable of secrets.key_file.
const keyEnv = "BOTCTL_SECRETS_KEY_FILE"

// writeClusterKey writes a new cluster key file (mode 600) in dir: every
// node is started with it, so it leads the registry's bots.
func writeClusterKey(dir string) (string, error) {
	raw := make([]byte, clusterkey.Size)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "cluster.key")
	return path, os.WriteFile(path, []byte(hex.EncodeToString(raw)+"\n"), 0o600)
}

// fleetRound is one round of many-bots.
type fleetRound struct {
	h     *Harness
	r     *RoundResult
	label string
	cli   *clientv3.Client
	key   *clusterkey.Key
	etcd  string // --etcd of the CLI
	demo  ai.DemoConfig

	mu    sync.Mutex
	sides map[string]*sideBot
	stops map[string]context.CancelFunc // each bot's user
	wg    sync.WaitGroup
}

// manyBots is the many-bots fault: n bots registered and served, traffic
// to each, a node killed and restarted, a bot added, one removed, one
// re-keyed, then every fleet bot's round judged into r and the fleet
// removed from the registry.
func (h *Harness) manyBots(r *RoundResult, n int) error {
	key, err := clusterkey.Load(h.keyFile)
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: h.Infra.EtcdURLs(), DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	f := &fleetRound{h: h, r: r, label: fmt.Sprintf("%s-r%d", r.Scenario, r.Round), cli: cli, key: key,
		etcd: strings.Join(h.Infra.EtcdURLs(), ","), demo: ai.DemoConfig{AnswerTime: h.Cfg.AnswerTime, AnswerTimeMax: h.Cfg.AnswerTimeMax},
		sides: map[string]*sideBot{}, stops: map[string]context.CancelFunc{}}
	defer f.cleanup()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("mb%d-%03d", r.Round, i+1)
	}
	if err := f.register(ids); err != nil {
		return err
	}
	for _, id := range ids {
		f.startUser(id, 0)
	}
	r.note("fleet traffic: one user a bot, think ~%s, patience %s", fleetThink, f.patience())
	time.Sleep(fleetWarmup)
	if err := f.killAndRestart(5 * time.Second); err != nil {
		return err
	}
	if err := f.add(fmt.Sprintf("mb%d-add", r.Round)); err != nil {
		return err
	}
	if err := f.remove(f.pickInFlight(ids)); err != nil {
		return err
	}
	rekeyed := ids[len(ids)-1]
	if f.sides[rekeyed].removed {
		rekeyed = ids[len(ids)-2]
	}
	if err := f.rekey(rekeyed); err != nil {
		return err
	}
	f.followSpread(fleetAfter)
	f.stopUsers()
	sides := f.settle()
	// Removed from the registry, no fleet bot is served: nothing can
	// change in their transcripts after this, so the final look at them
	// sees every duplicate there will ever be.
	f.cleanup()
	f.lateDuplicates(sides)
	return nil
}

// patience is a fleet user's: longer than the longest answer, so a user
// asks again only when an answer is late.
func (f *fleetRound) patience() time.Duration { return f.h.Cfg.longest() + 30*time.Second }

// register adds ids at the simulator (secret "s-"+id) and to the bot
// registry, and waits until every one is connected.
func (f *fleetRound) register(ids []string) error {
	t0 := time.Now()
	for _, id := range ids {
		if err := f.h.simPost("/control/bots", map[string]any{"bot_id": id, "secret": "s-" + id}); err != nil {
			return err
		}
		b, err := fleet.New(f.key, id, "", "", nil, config.BotSettings{}, []byte("s-"+id), time.Now())
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = fleet.Add(ctx, f.cli, etcdkeys.Root, b)
		cancel()
		if err != nil {
			return err
		}
	}
	if err := f.h.waitConnected(ids, true, 3*time.Minute); err != nil {
		return fmt.Errorf("after registering %d bots: %w", len(ids), err)
	}
	spread, _ := f.spread()
	f.r.note("%d bots registered and every one connected in %.1fs (bots led: %s)", len(ids), time.Since(t0).Seconds(), spread)
	return nil
}

// startUser gives bot a closed-loop user (kicksOK: the kicks its faults
// force) and starts it.
func (f *fleetRound) startUser(bot string, kicksOK int64) *sideBot {
	t := NewTraffic(f.h.C, bot, 1, 0, fleetThink, f.patience(), f.h.Traffic.nonce)
	t.demo, t.poll = f.demo, fleetPoll
	before, _ := f.h.C.Stats(bot)
	s := &sideBot{bot: bot, t: t, before: before, kicksOK: kicksOK}
	ctx, stop := context.WithCancel(context.Background())
	f.mu.Lock()
	f.sides[bot], f.stops[bot] = s, stop
	f.mu.Unlock()
	f.wg.Go(func() { t.Run(ctx, f.label) })
	return s
}

// stopUsers stops every fleet user and waits for them.
func (f *fleetRound) stopUsers() {
	f.mu.Lock()
	for _, stop := range f.stops {
		stop()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// killAndRestart kills -9 the node leading the most fleet bots, restarts
// it after down, and measures every bot it led: from the kill to the
// bot's next subscribe.
func (f *fleetRound) killAndRestart(down time.Duration) error {
	_, leader := f.spread()
	count := map[string][]string{}
	for b, n := range leader {
		count[n] = append(count[n], b)
	}
	var victim string
	for n, bs := range count {
		if victim == "" || len(bs) > len(count[victim]) || (len(bs) == len(count[victim]) && n < victim) {
			victim = n
		}
	}
	if victim == "" {
		return fmt.Errorf("no node leads a fleet bot")
	}
	led := count[victim]
	if l, err := f.h.C.Leaders(); err == nil {
		for _, b := range []string{bot, bot2} {
			if len(l[b]) == 1 && l[b][0] == victim {
				led = append(led, b)
			}
		}
	}
	f.r.note("kill -9 %s, which led %d bots (%d of the fleet); restarted %s later", victim, len(led), len(count[victim]), down)
	t0 := time.Now()
	f.h.C.Node(victim).Proc.Kill()
	restarted := make(chan error, 1)
	go func() {
		time.Sleep(time.Until(t0.Add(down)))
		_, err := f.h.C.RestartNode(victim)
		restarted <- err
	}()
	tk := make([]Takeover, len(led))
	var wg sync.WaitGroup
	for i, b := range led {
		wg.Go(func() {
			sub, err := f.h.C.WaitSubscribed(b, t0, f.h.Cfg.Takeover)
			if err != nil {
				tk[i] = Takeover{From: victim, Err: err.Error()}
				return
			}
			tk[i] = Takeover{From: victim, D: sub.At.Sub(t0)}
		})
	}
	wg.Wait()
	f.r.Takeovers = append(f.r.Takeovers, tk...)
	if err := <-restarted; err != nil {
		return fmt.Errorf("restart %s: %w", victim, err)
	}
	spread, _ := f.spread()
	f.r.note("every bot %s led taken over %.1fs after the kill (bots led: %s)", victim, time.Since(t0).Seconds(), spread)
	return nil
}

// add registers bot with `botctl bots add` (added at the simulator
// first), waits for its first subscribe (at most addServed: else an
// unserved violation), gives it a user and waits for its first answer
// (at most that question's answer time and 30 s more).
func (f *fleetRound) add(bot string) error {
	if err := f.h.simPost("/control/bots", map[string]any{"bot_id": bot, "secret": "s-" + bot}); err != nil {
		return err
	}
	file, err := f.secretFile(bot, "s-"+bot)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if out, err := f.h.botctlCLI(30*time.Second, "bots", "add", "--etcd", f.etcd, "--bot", bot, "--secret-file", file); err != nil {
		return fmt.Errorf("botctl bots add: %w: %s", err, out)
	}
	sub, err := f.h.C.WaitSubscribed(bot, t0, addServed)
	if err != nil {
		f.r.Violations = append(f.r.Violations, Violation{Invariant: InvUnserved, User: bot, Saw: err.Error()})
		return nil
	}
	s := f.startUser(bot, 0)
	var first *Msg
	for first == nil && time.Since(sub.At) < 10*time.Second {
		if ms := s.t.Messages(f.label); len(ms) > 0 {
			first = ms[0]
		}
		time.Sleep(100 * time.Millisecond)
	}
	if first == nil || !first.Delivered {
		f.r.Violations = append(f.r.Violations, Violation{Invariant: InvUnserved, User: bot, Saw: "its user's first message was not delivered"})
		return nil
	}
	bound := ai.DemoAnswerTime(f.demo, first.Question) + 30*time.Second
	if v := s.t.waitAnswer(context.Background(), first, bound); v.Answers() == 0 {
		f.r.Violations = append(f.r.Violations, Violation{Invariant: InvUnserved, User: bot, MsgID: first.MsgID, Question: first.Question,
			Saw: fmt.Sprintf("no answer within %s of its delivery: %s", bound, v.Saw())})
		return nil
	}
	f.r.note("`bots add %s`: subscribed %.1fs later, its first message answered %.1fs after it", bot, sub.At.Sub(t0).Seconds(), time.Since(first.PostedAt).Seconds())
	return nil
}

// pickInFlight is the first of ids whose user waits for an answer now (a
// removal then has an answer owed to drain), else the first.
func (f *fleetRound) pickInFlight(ids []string) string {
	for _, id := range ids {
		f.mu.Lock()
		s := f.sides[id]
		f.mu.Unlock()
		ms := s.t.Messages(f.label)
		if len(ms) == 0 {
			continue
		}
		last := ms[len(ms)-1]
		if !last.Delivered {
			continue
		}
		if tr, err := f.h.C.Transcript(id, last.conv()); err == nil && Judge(tr, last).Answers() == 0 {
			return id
		}
	}
	return ids[0]
}

// remove stops bot's user and removes it with `botctl bots remove`; once
// no connection holds it, the node logs' removal line says which answers
// it still owed (those are not lost).
func (f *fleetRound) remove(bot string) error {
	f.mu.Lock()
	s := f.sides[bot]
	f.stops[bot]()
	f.mu.Unlock()
	s.removed = true
	t0 := time.Now()
	if out, err := f.h.botctlCLI(30*time.Second, "bots", "remove", "--etcd", f.etcd, "--bot", bot); err != nil {
		return fmt.Errorf("botctl bots remove: %w: %s", err, out)
	}
	if err := f.h.waitConnected([]string{bot}, false, time.Minute); err != nil {
		return fmt.Errorf("after removing %s: %w", bot, err)
	}
	s.listed = map[string]bool{}
	logs := f.h.logs("")
	for _, m := range s.t.Messages(f.label) {
		for _, line := range strings.Split(mentions(logs, task.ID(bot, m.MsgID)), "\n") {
			if strings.Contains(line, "answers still owed") {
				s.listed[m.MsgID] = true
			}
		}
	}
	f.r.note("`bots remove %s`: its connection closed %.1fs later, %d answers listed as still owed", bot, time.Since(t0).Seconds(), len(s.listed))
	return nil
}

// rekey gives bot a new secret at the simulator (an admin regenerating
// it in WeCom's console), then `botctl bots rotate-secret`: the leader
// proves it by a second subscribe, which replaces its connection (the
// one kick allowed).
func (f *fleetRound) rekey(bot string) error {
	secret := "s2-" + bot
	file, err := f.secretFile(bot+"-2", secret)
	if err != nil {
		return err
	}
	if err := f.h.simPost("/control/bots/secret", map[string]any{"bot_id": bot, "secret": secret}); err != nil {
		return err
	}
	f.mu.Lock()
	f.sides[bot].kicksOK = 1
	f.mu.Unlock()
	t0 := time.Now()
	out, err := f.h.botctlCLI(90*time.Second, "bots", "rotate-secret", "--etcd", f.etcd, "--bot", bot, "--secret-file", file, "--wait", "60s")
	if err != nil || !strings.Contains(out, "proved") {
		f.r.Violations = append(f.r.Violations, Violation{Invariant: InvUnserved, User: bot, Saw: fmt.Sprintf("rotate-secret not proved (%v): %s", err, strings.TrimSpace(out))})
		return nil
	}
	f.r.note("`bots rotate-secret %s`: proved %.1fs later", bot, time.Since(t0).Seconds())
	return nil
}

// followSpread lets the traffic run for d while the balancer moves bots
// back to the restarted node, and notes the spread at its end.
func (f *fleetRound) followSpread(d time.Duration) {
	time.Sleep(d)
	spread, _ := f.spread()
	f.r.note("bots led %s after the re-key: %s", d, spread)
}

// settle waits for every fleet message's answer (at most Config.Settle),
// then probes and judges every fleet bot; it returns them.
func (f *fleetRound) settle() []*sideBot {
	f.mu.Lock()
	var sides []*sideBot
	for _, s := range f.sides {
		sides = append(sides, s)
	}
	f.mu.Unlock()
	sort.Slice(sides, func(i, j int) bool { return sides[i].bot < sides[j].bot })
	deadline := time.Now().Add(f.h.Cfg.Settle)
	pending := append([]*sideBot(nil), sides...)
	for len(pending) > 0 && time.Now().Before(deadline) {
		var still []*sideBot
		for _, s := range pending {
			if !s.removed && !allAnswered(f.h.C, s.bot, s.t.Messages(f.label)) {
				still = append(still, s)
			}
		}
		pending = still
		time.Sleep(time.Second)
	}
	f.h.judgeBots(f.r, f.label, sides)
	var kicks int64
	for _, s := range sides {
		if st, err := f.h.C.Stats(s.bot); err == nil {
			kicks += st.Kicks - s.before.Kicks
		}
	}
	f.r.note("fleet: %d bots judged, %d kicks in all", len(sides), kicks)
	return sides
}

// lateDuplicates judges every fleet bot's round once more, once none is
// served: a second answer that came after its round was judged is a
// duplicate too.
func (f *fleetRound) lateDuplicates(sides []*sideBot) {
	seen := map[string]bool{}
	for _, v := range f.r.Violations {
		seen[v.MsgID+v.Invariant] = true
	}
	for _, s := range sides {
		j, err := judgeRound(f.h.C, s.bot, s.t.Messages(f.label), s.t.Messages(""), nil)
		if err != nil {
			f.r.note("final look at %s: %v", s.bot, err)
			continue
		}
		for _, v := range j.violations {
			if v.Invariant == InvDuplicate && !seen[v.MsgID+v.Invariant] {
				v.User = s.bot + "/" + v.User
				f.r.Violations = append(f.r.Violations, v)
			}
		}
	}
}

// cleanup stops the users and removes every fleet bot still registered,
// waiting until none is connected, so the lane's next scenario starts
// with the bots it knew.
func (f *fleetRound) cleanup() {
	f.stopUsers()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bots, _, err := fleet.List(ctx, f.cli, etcdkeys.Root)
	if err != nil {
		f.r.note("cleanup: %v", err)
		return
	}
	var ids []string
	for _, b := range bots {
		if !strings.HasPrefix(b.ID, "mb") {
			continue
		}
		if _, err := fleet.Remove(ctx, f.cli, etcdkeys.Root, b.ID); err != nil {
			f.r.note("cleanup: %v", err)
		}
		ids = append(ids, b.ID)
	}
	if err := f.h.waitConnected(ids, false, 2*time.Minute); err != nil {
		f.r.note("cleanup: %v", err)
	}
}

// spread is how many fleet bots each live node leads ("n1 34, n2 33,
// n3 33") and each fleet bot's leader.
func (f *fleetRound) spread() (string, map[string]string) {
	leader := map[string]string{}
	count := map[string]int{}
	for _, n := range f.h.C.Alive() {
		info, err := n.Info()
		if err != nil {
			continue
		}
		if _, ok := count[n.ID]; !ok {
			count[n.ID] = 0
		}
		for b, st := range info.Bots {
			if st.State == "leader" && strings.HasPrefix(b, "mb") {
				leader[b] = n.ID
				count[n.ID]++
			}
		}
	}
	var parts []string
	for n, c := range count {
		parts = append(parts, fmt.Sprintf("%s %d", n, c))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", "), leader
}

// secretFile writes secret to a file of its own (mode 600) for the CLI.
func (f *fleetRound) secretFile(name, secret string) (string, error) {
	dir := filepath.Join(f.h.Cfg.Dir, "secrets")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".secret")
	return path, os.WriteFile(path, []byte(secret+"\n"), 0o600)
}

// waitConnected waits until every bot of ids is connected at the
// simulator (connected), or none is (!connected).
func (h *Harness) waitConnected(ids []string, connected bool, within time.Duration) error {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	deadline := time.Now().Add(within)
	for {
		var list struct {
			Bots []struct {
				BotID     string `json:"bot_id"`
				Connected bool   `json:"connected"`
			} `json:"bots"`
		}
		err := cluster.GetJSON(h.C.SimHTTP+"/control/bots", &list)
		var off []string
		for _, b := range list.Bots {
			if want[b.BotID] && b.Connected != connected {
				off = append(off, b.BotID)
			}
		}
		if err == nil && len(off) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			state := "connected"
			if connected {
				state = "not connected"
			}
			return fmt.Errorf("%d bots still %s after %s (%v): %s", len(off), state, within, err, strings.Join(off[:min(len(off), 10)], " "))
		}
		time.Sleep(time.Second)
	}
}

// simPost posts body to the simulator's control API at path.
func (h *Harness) simPost(path string, body any) error {
	raw, _ := json.Marshal(body)
	resp, err := http.Post(h.C.SimHTTP+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, b)
	}
	return nil
}

// botctlCLI runs the botctl binary with args and the cluster key, and
// returns its output (stdout and stderr).
func (h *Harness) botctlCLI(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.C.Opts.Bin, args...)
	cmd.Env = append(os.Environ(), keyEnv+"="+h.keyFile)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
