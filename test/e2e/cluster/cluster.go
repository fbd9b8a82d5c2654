package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure a Cluster. Zero values take the defaults named.
type Options struct {
	Bin string // the botctl binary (Build)
	Dir string // data directories go here
	// Bots are the bot ids; each bot's secret is "s-"+id. Default ["b1"].
	Bots []string
	// TTL and Margin are passed to every node as --election-ttl and
	// --election-safety-margin. Default 3s and 1s.
	TTL, Margin time.Duration
	// SimArgs are extra `botctl sim` flags (e.g. --rate-limit).
	SimArgs []string
	// NodeArgs are extra `botctl serve` flags for every node.
	NodeArgs []string
	// NodeEnv is added to every node's environment (before
	// NodeOptions.Env), on every start and restart: e.g. the cluster key,
	// BOTCTL_SECRETS_KEY_FILE.
	NodeEnv []string
	// StartTimeout bounds waiting for each process's ready line. Default 30s.
	StartTimeout time.Duration
	// LogDir, if set, gets every process's whole stderr, one file per
	// process name (<name>.log, appended across restarts).
	LogDir string
	// External, if set, is shared state already running (e.g. an etcd and
	// a NATS cluster started by test/chaos): Start then runs no `botctl
	// infra`, only the simulator.
	External *External
}

// External names etcd and NATS servers the cluster does not start.
type External struct {
	EtcdURLs []string // http://HOST:PORT of every etcd member
	NATSURL  string   // the default --nats of every node
}

// Cluster is one `botctl infra`, one `botctl sim` and any number of
// `botctl serve` nodes pointed at them.
type Cluster struct {
	Opts    Options
	EtcdURL string // http://127.0.0.1:P
	NATSURL string
	SimWS   string // ws://ADDR/
	SimHTTP string // http://ADDR
	Infra   *Proc
	Sim     *Proc
	// TokenFile is the node API's token every node is given
	// (--api-token-file) and botctl status sends: one token for the
	// cluster, as a real one has (a node's generated token is its own).
	TokenFile string

	mu      sync.Mutex
	nodes   map[string]*Node
	procs   []*Proc
	subs    []Subscribe
	subsCh  chan struct{}
	closed  bool
	restart map[string]int
}

// Node is one `botctl serve` process.
type Node struct {
	ID       string
	API      string // http://ADDR
	Token    string // the node API's token (the cluster's TokenFile)
	EtcdURL  string // as given to StartNodeWith ("" = the cluster's)
	WeComURL string
	NATSURL  string   // as given to StartNodeWith ("" = the cluster's)
	Bots     []string // as given to StartNodeWith (nil = every bot)
	Bin      string   // as given to StartNodeWith ("" = Options.Bin)
	Args     []string // as given to StartNodeWith
	Proc     *Proc
}

// Subscribe is one successful subscribe at the simulator, timestamped when
// the simulator's log line about it was read (sub-millisecond after the
// simulator accepted it).
type Subscribe struct {
	At   time.Time
	Bot  string
	Conn int64
}

var (
	infraReady = regexp.MustCompile(`infra ready: etcd (\S+) nats (\S+)`)
	simReady   = regexp.MustCompile(`wecomsim listening on ws://(\S+)/`)
	nodeReady  = regexp.MustCompile(`API (https?://\S+)/status`)
)

// Start starts infra and the simulator. Close the cluster even on error.
func Start(o Options) (*Cluster, error) {
	if len(o.Bots) == 0 {
		o.Bots = []string{"b1"}
	}
	if o.TTL == 0 {
		o.TTL = 3 * time.Second
	}
	if o.Margin == 0 {
		o.Margin = time.Second
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 30 * time.Second
	}
	c := &Cluster{Opts: o, nodes: map[string]*Node{}, subsCh: make(chan struct{}), restart: map[string]int{}}
	if err := c.writeToken(); err != nil {
		return c, err
	}
	if o.External != nil {
		c.EtcdURL, c.NATSURL = strings.Join(o.External.EtcdURLs, ","), o.External.NATSURL
		return c, c.startSim()
	}

	// etcd needs a fixed port: pick a free one, retry if someone took it.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		etcdAddr, err := FreePort()
		if err != nil {
			return c, err
		}
		p, err := c.start("infra", []string{"infra", "--data-dir", filepath.Join(o.Dir, fmt.Sprintf("infra%d", attempt)),
			"--etcd-listen", etcdAddr, "--nats-listen", "127.0.0.1:0"}, StartOptions{})
		if err != nil {
			return c, err
		}
		l, err := p.WaitStdout("infra ready", o.StartTimeout)
		if err != nil {
			lastErr = err
			p.Kill()
			continue
		}
		m := infraReady.FindStringSubmatch(l.Text)
		if m == nil {
			return c, fmt.Errorf("infra ready line not understood: %q", l.Text)
		}
		c.Infra, c.EtcdURL, c.NATSURL, lastErr = p, m[1], m[2], nil
		break
	}
	if lastErr != nil {
		return c, lastErr
	}
	return c, c.startSim()
}

func (c *Cluster) startSim() error {
	o := c.Opts
	args := []string{"sim", "--listen", "127.0.0.1:0", "--log-format", "json"}
	for _, b := range o.Bots {
		args = append(args, "--bot", b+":s-"+b)
	}
	args = append(args, o.SimArgs...)
	p, err := c.start("sim", args, StartOptions{OnStderr: c.simLine})
	if err != nil {
		return err
	}
	l, err := p.WaitStdout("wecomsim listening", o.StartTimeout)
	if err != nil {
		return err
	}
	m := simReady.FindStringSubmatch(l.Text)
	if m == nil {
		return fmt.Errorf("sim ready line not understood: %q", l.Text)
	}
	c.Sim, c.SimWS, c.SimHTTP = p, "ws://"+m[1]+"/", "http://"+m[1]
	return nil
}

func (c *Cluster) start(name string, args []string, o StartOptions) (*Proc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("cluster closed")
	}
	if c.Opts.LogDir != "" && o.LogFile == "" {
		o.LogFile = filepath.Join(c.Opts.LogDir, LogFileName(name))
	}
	bin := c.Opts.Bin
	if o.Bin != "" {
		bin = o.Bin
	}
	p, err := StartProc(name, bin, args, o)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// simLine records the simulator's "subscribed" log lines.
func (c *Cluster) simLine(l Line) {
	if !strings.Contains(l.Text, `"subscribed"`) {
		return
	}
	var e struct {
		Message string `json:"message"`
		Bot     string `json:"bot"`
		Conn    int64  `json:"conn"`
	}
	if json.Unmarshal([]byte(l.Text), &e) != nil || e.Message != "subscribed" {
		return
	}
	c.mu.Lock()
	c.subs = append(c.subs, Subscribe{At: l.At, Bot: e.Bot, Conn: e.Conn})
	close(c.subsCh)
	c.subsCh = make(chan struct{})
	c.mu.Unlock()
}

// WaitSubscribed waits for the first subscribe of bot read after `after`.
func (c *Cluster) WaitSubscribed(bot string, after time.Time, timeout time.Duration) (Subscribe, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		for _, s := range c.subs {
			if s.Bot == bot && s.At.After(after) {
				c.mu.Unlock()
				return s, nil
			}
		}
		ch := c.subsCh
		c.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return Subscribe{}, fmt.Errorf("no subscribe of bot %s at the simulator within %v", bot, timeout)
		}
	}
}

// Subscribes lists every subscribe seen so far.
func (c *Cluster) Subscribes() []Subscribe {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Subscribe(nil), c.subs...)
}

// StartNode starts `botctl serve` as id, serving every bot, and waits for
// its ready line. etcdURL "" means the cluster's etcd.
func (c *Cluster) StartNode(id, etcdURL string) (*Node, error) {
	return c.StartNodeWith(id, NodeOptions{EtcdURL: etcdURL})
}

// NodeOptions route one node's traffic (e.g. through a fault proxy).
type NodeOptions struct {
	EtcdURL  string   // "" means the cluster's etcd
	WeComURL string   // "" means the simulator
	NATSURL  string   // "" means the cluster's NATS
	Env      []string // added to the node's environment
	Bots     []string // the bots it serves, of Options.Bots; nil means every one
	Bin      string   // the botctl binary it runs; "" means Options.Bin
	// Args are added after Options.NodeArgs (a later flag wins: e.g.
	// "--backfill-history-url=" for a node that reads WeCom's own history).
	Args []string
}

// StartNodeWith is StartNode with per-node endpoints.
func (c *Cluster) StartNodeWith(id string, o NodeOptions) (*Node, error) {
	etcdURL, wecomURL, natsURL := o.EtcdURL, o.WeComURL, o.NATSURL
	if natsURL == "" {
		natsURL = c.NATSURL
	}
	if etcdURL == "" {
		etcdURL = c.EtcdURL
	}
	if wecomURL == "" {
		wecomURL = c.SimWS
	}
	c.mu.Lock()
	c.restart[id]++
	gen := c.restart[id]
	c.mu.Unlock()
	args := []string{"serve", "--node-id", id, "--data-dir", filepath.Join(c.Opts.Dir, "node-"+id),
		"--etcd", etcdURL, "--nats", natsURL, "--wecom-url", wecomURL, "--listen", "127.0.0.1:0",
		"--election-ttl", c.Opts.TTL.String(), "--election-safety-margin", c.Opts.Margin.String(), "--api-token-file", c.TokenFile}
	bots := c.Opts.Bots
	if o.Bots != nil {
		bots = o.Bots
	}
	for _, b := range bots {
		args = append(args, "--bot", b+":s-"+b)
	}
	if wecomURL == c.SimWS {
		// The simulator's history API: what no connection received is
		// found by the gap backfill, as in the demo.
		args = append(args, "--backfill-history-url", "http"+strings.TrimPrefix(strings.TrimSuffix(c.SimWS, "/"), "ws"))
	}
	args = append(args, c.Opts.NodeArgs...)
	args = append(args, o.Args...)
	env := append(append([]string(nil), c.Opts.NodeEnv...), o.Env...)
	p, err := c.start(fmt.Sprintf("node %s (start %d)", id, gen), args, StartOptions{Env: env, Bin: o.Bin})
	if err != nil {
		return nil, err
	}
	l, err := p.WaitStdout("serving bots", c.Opts.StartTimeout)
	if err != nil {
		// A node that never became ready must not linger: it may hold its
		// data dir (the spool's lock) against the next start.
		p.Kill()
		return nil, err
	}
	m := nodeReady.FindStringSubmatch(l.Text)
	if m == nil {
		return nil, fmt.Errorf("node ready line not understood: %q", l.Text)
	}
	token, err := os.ReadFile(c.TokenFile)
	if err != nil {
		p.Kill()
		return nil, fmt.Errorf("node %s: its API token: %w", id, err)
	}
	n := &Node{ID: id, API: m[1], Token: strings.TrimSpace(string(token)), EtcdURL: o.EtcdURL, WeComURL: o.WeComURL, NATSURL: o.NATSURL, Bots: o.Bots, Bin: o.Bin, Args: o.Args, Proc: p}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	return n, nil
}

// writeToken makes the cluster's node API token file (mode 0600).
func (c *Cluster) writeToken() error {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	if err := os.MkdirAll(c.Opts.Dir, 0o700); err != nil {
		return err
	}
	c.TokenFile = filepath.Join(c.Opts.Dir, "api.token")
	return os.WriteFile(c.TokenFile, []byte(hex.EncodeToString(raw)+"\n"), 0o600)
}

// RestartNode starts id again with the same endpoints and bots as before.
func (c *Cluster) RestartNode(id string) (*Node, error) {
	n := c.Node(id)
	if n == nil {
		return nil, fmt.Errorf("no node %s", id)
	}
	n.Proc.Kill()
	return c.StartNodeWith(id, NodeOptions{EtcdURL: n.EtcdURL, WeComURL: n.WeComURL, NATSURL: n.NATSURL, Bots: n.Bots, Bin: n.Bin, Args: n.Args})
}

// Node is the latest process of node id (nil if never started).
func (c *Cluster) Node(id string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// Nodes are the latest process of every node, sorted by id.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Node
	for _, n := range c.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Alive are the nodes whose latest process is running.
func (c *Cluster) Alive() []*Node {
	var out []*Node
	for _, n := range c.Nodes() {
		select {
		case <-n.Proc.Done():
		default:
			out = append(out, n)
		}
	}
	return out
}

// Close kills every process the cluster started (whole process groups).
func (c *Cluster) Close() {
	c.mu.Lock()
	c.closed = true
	procs := c.procs
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.Kill() }()
	}
	wg.Wait()
}

// Dump is every process's command line, exit state and stderr tail, for
// failure messages.
func (c *Cluster) Dump(lines int) string {
	c.mu.Lock()
	procs := append([]*Proc(nil), c.procs...)
	c.mu.Unlock()
	var b strings.Builder
	for _, p := range procs {
		fmt.Fprintf(&b, "=== %s (pid %d, %s): botctl %s\n%s", p.Name, p.Pid(), p.exitDesc(), strings.Join(redactArgs(p.Args), " "), p.StderrTail(lines))
	}
	return b.String()
}

func redactArgs(args []string) []string {
	out := append([]string(nil), args...)
	for i := 1; i < len(out); i++ {
		if out[i-1] == "--bot" {
			if id, _, ok := strings.Cut(out[i], ":"); ok {
				out[i] = id + ":…"
			}
		}
	}
	return out
}

// ---- HTTP helpers ----

var httpc = &http.Client{Timeout: 5 * time.Second}

// GetJSON GETs url and decodes its JSON answer into v.
func GetJSON(url string, v any) error { return getJSON(url, v) }

func getJSON(url string, v any) error { return getJSONAuth(url, "", v) }

// getJSONAuth is getJSON with the node API's token (none if "").
func getJSONAuth(url, token string, v any) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return json.Unmarshal(body, v)
}

// SimStats is the part of GET /control/stats the tests use.
type SimStats struct {
	BotID        string `json:"bot_id"`
	Connections  int64  `json:"connections"`
	Kicks        int64  `json:"kicks"`
	Connected    bool   `json:"connected"`
	Undelivered  int64  `json:"undelivered"`
	NotSubscribe int64  `json:"not_subscribed"`
	InvalidReqID int64  `json:"invalid_req_ids"`
	AuthFailures int64  `json:"auth_failures"`
	// Rules a bot must keep (test/chaos checks them per round).
	QuotaRejections      int64 `json:"quota_rejections"`
	ExpiredUpdates       int64 `json:"expired_updates"`
	FinishedStreamFrames int64 `json:"finished_stream_frames"`
	Drops                int64 `json:"drops"`
	// Group silence and the message history (test/chaos's WeCom rows).
	GroupsSilenced bool             `json:"groups_silenced"`
	Frames         map[string]int64 `json:"frames"` // frames received, by cmd
}

// Stats reads the simulator's counters of bot.
func (c *Cluster) Stats(bot string) (SimStats, error) {
	var s SimStats
	err := getJSON(c.SimHTTP+"/control/stats?bot_id="+bot, &s)
	return s, err
}

// PostGroupMessage posts a message of user in group chat to bot.
func (c *Cluster) PostGroupMessage(bot, user, chat, text string) (PostResult, error) {
	var r PostResult
	body, _ := json.Marshal(map[string]string{"bot_id": bot, "user_id": user, "chat_type": "group", "chat_id": chat, "text": text})
	resp, err := httpc.Post(c.SimHTTP+"/control/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("POST /control/messages (group %s): %s: %s", chat, resp.Status, data)
	}
	return r, json.Unmarshal(data, &r)
}

// SetMCPAccess authorizes (or not) bot's message history at the
// simulator (POST /control/mcp_access, the bot's own conversations).
func (c *Cluster) SetMCPAccess(bot string, authorized bool) error {
	body, _ := json.Marshal(map[string]any{"bot_id": bot, "authorized": authorized})
	resp, err := httpc.Post(c.SimHTTP+"/control/mcp_access", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST /control/mcp_access: %s: %s", resp.Status, data)
	}
	return nil
}

// PostResult is POST /control/messages's answer.
type PostResult struct {
	MsgID     string `json:"msgid"`
	Seq       int64  `json:"seq"`
	Delivered bool   `json:"delivered"`
	ReqID     string `json:"req_id"`
}

// PostMessage acts as user sending text to bot.
func (c *Cluster) PostMessage(bot, user, text string) (PostResult, error) {
	var r PostResult
	body, _ := json.Marshal(map[string]string{"bot_id": bot, "user_id": user, "text": text})
	resp, err := httpc.Post(c.SimHTTP+"/control/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("POST /control/messages: %s: %s", resp.Status, data)
	}
	return r, json.Unmarshal(data, &r)
}

// TranscriptEntry is one message of GET /control/transcript.
type TranscriptEntry struct {
	Seq      int64  `json:"seq"`
	From     string `json:"from"`
	MsgID    string `json:"msgid"`
	ReplyTo  string `json:"reply_to"`
	Kind     string `json:"kind"`
	Content  string `json:"content"`
	Finished bool   `json:"finished"`
	Expired  bool   `json:"expired"` // a frame came after the stream window
	Card     string `json:"card"`    // a finishing frame's template card (compact JSON)
}

// Transcript reads what chat shows of bot.
func (c *Cluster) Transcript(bot, chat string) ([]TranscriptEntry, error) {
	var t struct {
		Messages []TranscriptEntry `json:"messages"`
	}
	err := getJSON(c.SimHTTP+"/control/transcript?bot_id="+bot+"&chat="+chat, &t)
	return t.Messages, err
}

// NodeInfo is the part of a node's GET /status the tests use.
type NodeInfo struct {
	ID      string `json:"id"`
	Version string `json:"version"`
	Bots    map[string]struct {
		State string `json:"state"`
		Term  int64  `json:"term"`
	} `json:"bots"`
}

// Info reads the node's own /status.
func (n *Node) Info() (NodeInfo, error) {
	var i NodeInfo
	err := getJSONAuth(n.API+"/status", n.Token, &i)
	return i, err
}

// Healthy is true when the node's /readyz says it reaches etcd (its
// /healthz is liveness only: the process answers).
func (n *Node) Healthy() bool {
	r, _ := n.Readiness()
	return r.Etcd == "ok"
}

// Readiness is the node's GET /readyz (503 while not ready, same body).
type Readiness struct {
	Ready     bool              `json:"ready"`
	Etcd      string            `json:"etcd"`
	NATS      string            `json:"nats"`
	JetStream bool              `json:"jetstream"`
	Bots      map[string]string `json:"bots"`
	Reasons   []string          `json:"reasons"`
}

// Readiness asks the node's /readyz.
func (n *Node) Readiness() (Readiness, error) {
	var r Readiness
	resp, err := httpc.Get(n.API + "/readyz")
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&r)
	return r, err
}

// Leaders asks every live node which bots it leads: bot → node ids.
func (c *Cluster) Leaders() (map[string][]string, error) {
	out := map[string][]string{}
	for _, n := range c.Alive() {
		info, err := n.Info()
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.ID, err)
		}
		for bot, st := range info.Bots {
			if st.State == "leader" {
				out[bot] = append(out[bot], n.ID)
			}
		}
	}
	return out, nil
}

// WaitStable polls until every bot has exactly one leader among the live
// nodes, that leader's connection is up at the simulator, and every other
// live node is a standby for it. It returns bot → leader.
func (c *Cluster) WaitStable(timeout time.Duration) (map[string]string, error) {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		leaders, err := c.stableOnce()
		if err == nil {
			return leaders, nil
		}
		last = err.Error()
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("cluster not stable within %v: %s", timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) stableOnce() (map[string]string, error) {
	out := map[string]string{}
	alive := c.Alive()
	infos := map[string]NodeInfo{}
	serves := map[string][]string{} // node → its bots (nil: every one)
	for _, n := range alive {
		info, err := n.Info()
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.ID, err)
		}
		infos[n.ID], serves[n.ID] = info, n.Bots
	}
	for _, bot := range c.Opts.Bots {
		for id, info := range infos {
			if serves[id] != nil && !slices.Contains(serves[id], bot) {
				continue
			}
			switch st := info.Bots[bot].State; st {
			case "leader":
				if out[bot] != "" {
					return nil, fmt.Errorf("bot %s led by %s and %s", bot, out[bot], id)
				}
				out[bot] = id
			case "standby":
			default:
				return nil, fmt.Errorf("bot %s on node %s is %q", bot, id, st)
			}
		}
		if out[bot] == "" {
			return nil, fmt.Errorf("bot %s has no leader", bot)
		}
		s, err := c.Stats(bot)
		if err != nil {
			return nil, err
		}
		if !s.Connected {
			return nil, fmt.Errorf("bot %s not connected at the simulator", bot)
		}
	}
	return out, nil
}

// Status runs `botctl status --etcd … --json` and returns its raw output.
func (c *Cluster) Status(ctx context.Context) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.Opts.Bin, "status", "--etcd", c.EtcdURL, "--nats", c.NATSURL, "--json")
	cmd.Env = append(os.Environ(), "BOTCTL_API_TOKEN_FILE="+c.TokenFile) // the nodes' token, for their live fields
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("botctl status: %w: %s", err, stderr.String())
	}
	return out, nil
}

// Run runs botctl with args to completion (at most timeout) and returns its
// exit code, stdout and stderr.
func Run(bin string, timeout time.Duration, args ...string) (int, string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return -1, stdout.String(), stderr.String(), fmt.Errorf("botctl %s: still running after %v", strings.Join(args, " "), timeout)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), stdout.String(), stderr.String(), nil
	}
	if err != nil {
		return -1, stdout.String(), stderr.String(), err
	}
	return 0, stdout.String(), stderr.String(), nil
}

// MkdirTemp is os.MkdirTemp with a botctl prefix.
func MkdirTemp() (string, error) { return os.MkdirTemp("", "botctl-e2e-") }

// Fault injects a simulator fault (POST /control/faults): action is drop,
// revoke, restore, stall_acks, silence…; seconds for the timed ones.
func (c *Cluster) Fault(bot, action string, seconds float64) error {
	body, _ := json.Marshal(map[string]any{"bot_id": bot, "action": action, "seconds": seconds})
	resp, err := httpc.Post(c.SimHTTP+"/control/faults", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST /control/faults: %s: %s", resp.Status, data)
	}
	return nil
}

// LogFileName is the log file of a process named name: what a file name
// cannot hold replaced.
func LogFileName(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, name) + ".log"
}
