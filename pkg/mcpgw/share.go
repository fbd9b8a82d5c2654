package mcpgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The URLs WeCom gives a bot's connection, shared with every node. Only
// the node that holds a bot's connection can ask for them
// (aibot_get_mcp_config); it asks for each business type the bot's
// ai.tools names, at the start of its term and again before a URL's
// MaxAge, and writes each to etcd (etcdkeys.MCP) under its term's lease:
// a record outlives neither the term nor the lease, and a write is
// fenced on the term's election key, so that a node that lost the bot
// never overwrites its successor's. A gateway that hears WeCom say the
// bot's authorization expired or was reset (850001, 851014) deletes the
// record it used; the holder, watching, asks again at once.

// CmdGetMCPConfig asks for a business type's MCP server over the bot's
// connection (the official plugin's MCP_GET_CONFIG_CMD).
const CmdGetMCPConfig = "aibot_get_mcp_config"

// WeCom's errcodes, in a tool's result, of an authorization that expired
// or was reset (the official plugin's BIZ_CACHE_CLEAR_ERROR_CODES): the
// URL is asked for again.
const (
	errCodeMCPUnauthorized = 850001
	errCodeMCPAuthReset    = 851014
)

// Record is one shared URL as etcd holds it.
type Record struct {
	URL     string    `json:"url"`
	Node    string    `json:"node"`    // the holder that asked for it
	Term    int64     `json:"term"`    // the holder's term (its election key's revision)
	Fetched time.Time `json:"fetched"` // when WeCom gave it
	Expires time.Time `json:"expires"` // Fetched + MaxAge: unused after
}

// Conn is a bot's long connection as the holder asks through it
// (*wecom.Conn).
type Conn interface {
	Do(ctx context.Context, cmd, reqID string, body any) (*wecom.Frame, error)
}

// Term is the holder's leadership of the bot: its election key and
// revision (the fence of every write) and its lease.
type Term struct {
	Bot   string
	Key   string
	Rev   int64
	Lease clientv3.LeaseID
}

// BizTypes are the business types tools names (ai.tools), in order, each
// once.
func BizTypes(tools []string) []string {
	var out []string
	for _, t := range tools {
		biz, _, _ := strings.Cut(t, "/")
		if !slices.Contains(out, biz) {
			out = append(out, biz)
		}
	}
	return out
}

// Hold keeps the URLs of bot's allowed business types shared while ctx
// (the term) lasts, asking conn for each. A business type WeCom refuses
// is asked for again every RefreshEvery; what failed is logged once
// until it changes.
func (g *Gateway) Hold(ctx context.Context, term Term, conn Conn) {
	wch := g.etcd.Watch(clientv3.WithRequireLeader(ctx), g.keys.MCPBot(term.Bot), clientv3.WithPrefix())
	tick := g.clock.NewTicker(g.refreshEvery)
	defer tick.Stop()
	failed := map[string]string{} // biz → the last failure logged
	for {
		tools, _ := g.allow.Tools(term.Bot)
		for _, biz := range BizTypes(tools) {
			err := g.refresh(ctx, term, conn, biz)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil && failed[biz] != err.Error():
				failed[biz] = err.Error()
				g.log.Warn().Err(err).Str("bot", term.Bot).Str("biz_type", biz).Msg("WeCom MCP server's URL not shared; asked again every " + g.refreshEvery.String())
			case err == nil && failed[biz] != "":
				delete(failed, biz)
				g.log.Info().Str("bot", term.Bot).Str("biz_type", biz).Msg("WeCom MCP server's URL shared")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		case _, ok := <-wch:
			if !ok { // the watch ended (etcd away): the ticker carries on
				wch = nil
			}
		}
	}
}

// refresh asks for biz's URL when the record is missing, another term's,
// or past half its MaxAge, and writes it fenced on the term.
func (g *Gateway) refresh(ctx context.Context, term Term, conn Conn, biz string) error {
	key := g.keys.MCP(term.Bot, biz)
	rec, _, err := g.read(ctx, key)
	if err != nil {
		return err
	}
	now := g.clock.Now()
	if !stale(rec, term.Rev, now, g.maxAge) {
		return nil
	}
	url, err := askURL(ctx, conn, biz)
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(Record{URL: url, Node: g.node, Term: term.Rev, Fetched: now, Expires: now.Add(g.maxAge)})
	resp, err := g.etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(term.Key), "=", term.Rev)).
		Then(clientv3.OpPut(key, string(raw), clientv3.WithLease(term.Lease))).Commit()
	switch {
	case err != nil:
		return fmt.Errorf("share the URL in etcd: %w", err)
	case !resp.Succeeded:
		return errors.New("the term ended before the URL was shared")
	}
	return nil
}

// stale reports whether the holder of term asks WeCom again for the URL
// rec shares (nil: none, or unreadable): when there is none, when
// another term (a previous leader) asked for it, or from half its maxAge
// on (30 minutes of DefaultMaxAge), so that a URL in use is replaced
// well before it expires.
func stale(rec *Record, term int64, now time.Time, maxAge time.Duration) bool {
	return rec == nil || rec.Term != term || !now.Before(rec.Fetched.Add(maxAge/2))
}

// askURL asks conn for biz's server.
func askURL(ctx context.Context, conn Conn, biz string) (string, error) {
	f, err := conn.Do(ctx, CmdGetMCPConfig, wecom.NewReqID("mcp_config"), map[string]string{"biz_type": biz})
	if err != nil {
		return "", fmt.Errorf("%s (biz_type %s): %w", CmdGetMCPConfig, biz, err)
	}
	var body struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(f.Body, &body); err != nil || body.URL == "" {
		return "", fmt.Errorf("%s (biz_type %s): the answer has no url", CmdGetMCPConfig, biz)
	}
	return body.URL, nil
}

// read is the record at key (nil when none) and its revision.
func (g *Gateway) read(ctx context.Context, key string) (*Record, int64, error) {
	resp, err := g.etcd.Get(ctx, key)
	if err != nil {
		return nil, 0, fmt.Errorf("read the shared URL from etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	var rec Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil || rec.URL == "" {
		return nil, resp.Kvs[0].ModRevision, nil // unreadable: asked for again
	}
	return &rec, resp.Kvs[0].ModRevision, nil
}

// errNoURL: no holder has shared the business type's URL (yet).
var errNoURL = errors.New("no URL shared")

// url is the shared URL of bot's biz server and the record's revision
// (for forget).
func (g *Gateway) url(ctx context.Context, bot, biz string) (string, int64, error) {
	rec, rev, err := g.read(ctx, g.keys.MCP(bot, biz))
	switch {
	case err != nil:
		return "", 0, err
	case rec == nil:
		return "", 0, fmt.Errorf("%w: the node holding bot %s's connection has not shared its %s MCP server (is the bot connected, and %s in its ai.tools?)", errNoURL, bot, biz, biz)
	case !g.clock.Now().Before(rec.Expires):
		return "", 0, fmt.Errorf("%w: bot %s's %s MCP server URL expired at %s and its holder has not asked again", errNoURL, bot, biz, rec.Expires.UTC().Format(time.RFC3339))
	}
	return rec.URL, rev, nil
}

// forget deletes the record of revision rev (not a newer one): its
// holder asks WeCom again.
func (g *Gateway) forget(ctx context.Context, bot, biz string, rev int64) {
	key := g.keys.MCP(bot, biz)
	_, err := g.etcd.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		g.log.Warn().Err(err).Str("bot", bot).Str("biz_type", biz).Msg("WeCom MCP server's URL not forgotten; its holder asks again before it expires")
	}
}
