// Package mcpclient is the one client of WeCom's MCP servers: MCP's
// Streamable HTTP, one JSON-RPC request a POST, as the official OpenClaw
// plugin speaks it. The session is begun (initialize, then
// notifications/initialized for a server that gives an Mcp-Session-Id)
// on the first request to a URL, kept per URL, and begun again once when
// the server forgets it (404). An answer is a JSON body or an event
// stream, whose last event is the answer.
//
// Errors never hold the URL: WeCom's carries a credential in its path.
// A client is safe for concurrent use.
package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/redact"
	"github.com/botctl/botctl/pkg/wecom"
)

// RequesterHeader carries the WeCom userid of the person on whose behalf
// a tool is called (the official plugin's header): WeCom's member-scoped
// authorization answers only for members who authorized the bot.
const RequesterHeader = "x-openclaw-wecom-userid"

// ProtocolVersion is the MCP version the client asks for (the official
// plugin's).
const ProtocolVersion = "2025-03-26"

// DefaultMaxBytes is Options.MaxBytes' default.
const DefaultMaxBytes = 4 << 20

// Options configure a Client.
type Options struct {
	HTTP *http.Client // nil: a client with a 30 s timeout
	// MaxBytes bounds one answer's body (ErrTooLarge past it); 0 is
	// DefaultMaxBytes.
	MaxBytes int64
	// Server is how errors name the server ("WeCom's MCP server" when
	// empty): never its URL.
	Server string
}

// ErrTooLarge: the server answered more than Options.MaxBytes.
var ErrTooLarge = errors.New("the MCP server's answer is too large")

// StatusError is a server's answer other than 2xx.
type StatusError struct {
	Server string
	Code   int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s answered HTTP %d %s", e.Server, e.Code, http.StatusText(e.Code))
}

// RPCError is a JSON-RPC error the server answered.
type RPCError struct {
	Server  string `json:"-"`
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("%s: JSON-RPC error %d: %s", e.Server, e.Code, e.Message)
}

// Client is a client of MCP servers, each known by its URL.
type Client struct {
	http     *http.Client
	maxBytes int64
	server   string

	mu       sync.Mutex
	sessions map[string]string // URL → Mcp-Session-Id ("" for a stateless server)
}

// New makes a client.
func New(o Options) *Client {
	c := &Client{http: o.HTTP, maxBytes: o.MaxBytes, server: o.Server, sessions: map[string]string{}}
	if c.http == nil {
		c.http = &http.Client{Timeout: 30 * time.Second}
	}
	if c.maxBytes <= 0 {
		c.maxBytes = DefaultMaxBytes
	}
	if c.server == "" {
		c.server = "WeCom's MCP server"
	}
	return c
}

// Call sends method with params to url and returns its result;
// requester, if set, is the WeCom userid the call is made for
// (RequesterHeader). A session the server forgot is begun again once.
func (c *Client) Call(ctx context.Context, url, requester, method string, params any) (json.RawMessage, error) {
	for try := 0; ; try++ {
		sid, err := c.session(ctx, url, requester)
		if err != nil {
			return nil, err
		}
		msg := map[string]any{"jsonrpc": "2.0", "id": wecom.NewReqID("mcp_rpc"), "method": method, "params": params}
		res, _, err := c.post(ctx, url, sid, requester, msg, true)
		var se *StatusError
		if errors.As(err, &se) && se.Code == http.StatusNotFound && try == 0 {
			c.forget(url)
			continue
		}
		return res, err
	}
}

// session is url's session id, begun now if there is none.
func (c *Client) session(ctx context.Context, url, requester string) (string, error) {
	c.mu.Lock()
	sid, ok := c.sessions[url]
	c.mu.Unlock()
	if ok {
		return sid, nil
	}
	init := map[string]any{"jsonrpc": "2.0", "id": wecom.NewReqID("mcp_init"), "method": "initialize", "params": map[string]any{
		"protocolVersion": ProtocolVersion, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "botctl", "version": "1"}}}
	_, sid, err := c.post(ctx, url, "", requester, init, true)
	if err != nil {
		return "", fmt.Errorf("begin an MCP session: %w", err)
	}
	if sid != "" { // a stateful server: tell it the session began
		if _, _, err := c.post(ctx, url, sid, requester, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}, false); err != nil {
			return "", fmt.Errorf("begin an MCP session: %w", err)
		}
	}
	c.mu.Lock()
	c.sessions[url] = sid
	c.mu.Unlock()
	return sid, nil
}

func (c *Client) forget(url string) {
	c.mu.Lock()
	delete(c.sessions, url)
	c.mu.Unlock()
}

// post sends one JSON-RPC message and, when want, reads its result; it
// returns the session id the server gave.
func (c *Client) post(ctx context.Context, url, sid, requester string, msg map[string]any, want bool) (json.RawMessage, string, error) {
	raw, _ := json.Marshal(msg)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return nil, "", fmt.Errorf("%s: its URL is not one a request can be made to", c.server)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	if requester != "" {
		req.Header.Set(RequesterHeader, requester)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) { // names the server, not the URL
			err = fmt.Errorf("%s %s: %w", ue.Op, c.server, ue.Err)
		}
		return nil, "", redact.Error(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, "", &StatusError{Server: c.server, Code: resp.StatusCode}
	}
	newSID := resp.Header.Get("Mcp-Session-Id")
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBytes+1))
	switch {
	case err != nil:
		return nil, newSID, redact.Error(err)
	case int64(len(body)) > c.maxBytes:
		return nil, newSID, fmt.Errorf("%w: %s answered more than %d bytes", ErrTooLarge, c.server, c.maxBytes)
	case !want:
		return nil, newSID, nil
	}
	if strings.Contains(resp.Header.Get("Content-Type"), "text/event-stream") {
		body = LastEventData(body)
	}
	var rpc struct {
		Result json.RawMessage `json:"result"`
		Error  *RPCError       `json:"error"`
	}
	if err := json.Unmarshal(body, &rpc); err != nil {
		return nil, newSID, fmt.Errorf("%s's answer is not JSON-RPC: %w", c.server, err)
	}
	if rpc.Error != nil {
		rpc.Error.Server = c.server
		return nil, newSID, rpc.Error
	}
	return rpc.Result, newSID, nil
}

// LastEventData is the data of an event stream's last event (its data
// lines joined by "\n").
func LastEventData(stream []byte) []byte {
	var last, cur []string
	for _, line := range strings.Split(string(stream), "\n") {
		line = strings.TrimRight(line, "\r")
		switch {
		case strings.HasPrefix(line, "data:"):
			cur = append(cur, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		case line == "" && len(cur) > 0:
			last, cur = cur, nil
		}
	}
	if len(cur) > 0 {
		last = cur
	}
	return []byte(strings.Join(last, "\n"))
}
