package mcpgw

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

// client speaks MCP's Streamable HTTP to WeCom's servers: one JSON-RPC
// request a POST, the session begun (initialize, then
// notifications/initialized) on the first request to a URL and begun
// again once when the server forgets it (404). The answer is a JSON body
// or an event stream, whose last event is the answer. Errors never hold
// the URL: WeCom's carries a credential in its path.
type client struct {
	http     *http.Client
	maxBytes int64

	mu       sync.Mutex
	sessions map[string]string // URL → Mcp-Session-Id ("" for a stateless server)
}

// protocolVersion is the MCP version the client asks WeCom for (the
// official plugin's).
const protocolVersion = "2025-03-26"

// maxAnswerBytes bounds one answer of WeCom's servers.
const maxAnswerBytes = 4 << 20

func newClient(c *http.Client) *client {
	if c == nil {
		c = &http.Client{Timeout: 30 * time.Second}
	}
	return &client{http: c, maxBytes: maxAnswerBytes, sessions: map[string]string{}}
}

// statusError is a server's answer other than 2xx.
type statusError struct{ code int }

func (e *statusError) Error() string {
	return fmt.Sprintf("WeCom's MCP server answered HTTP %d %s", e.code, http.StatusText(e.code))
}

// rpcFailure is a JSON-RPC error the server answered.
type rpcFailure struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *rpcFailure) Error() string {
	return fmt.Sprintf("WeCom's MCP server: JSON-RPC error %d: %s", e.Code, e.Message)
}

// do sends method with params to url and returns its result; requester,
// if set, is the WeCom userid the call is made for (member-scoped
// authorization).
func (c *client) do(ctx context.Context, url, requester, method string, params any) (json.RawMessage, error) {
	for try := 0; ; try++ {
		sid, err := c.session(ctx, url, requester)
		if err != nil {
			return nil, err
		}
		msg := map[string]any{"jsonrpc": "2.0", "id": wecom.NewReqID("mcp_rpc"), "method": method, "params": params}
		res, _, err := c.post(ctx, url, sid, requester, msg, true)
		var se *statusError
		if errors.As(err, &se) && se.code == http.StatusNotFound && try == 0 {
			c.forget(url)
			continue
		}
		return res, err
	}
}

// session is url's session id, begun now if there is none.
func (c *client) session(ctx context.Context, url, requester string) (string, error) {
	c.mu.Lock()
	sid, ok := c.sessions[url]
	c.mu.Unlock()
	if ok {
		return sid, nil
	}
	init := map[string]any{"jsonrpc": "2.0", "id": wecom.NewReqID("mcp_init"), "method": "initialize", "params": map[string]any{
		"protocolVersion": protocolVersion, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "botctl", "version": "1"}}}
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

func (c *client) forget(url string) {
	c.mu.Lock()
	delete(c.sessions, url)
	c.mu.Unlock()
}

// post sends one JSON-RPC message and, when want, reads its result; it
// returns the session id the server gave.
func (c *client) post(ctx context.Context, url, sid, requester string, msg map[string]any, want bool) (json.RawMessage, string, error) {
	raw, _ := json.Marshal(msg)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return nil, "", errors.New("WeCom's MCP server URL is not one a request can be made to")
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
		if errors.As(err, &ue) {
			err = fmt.Errorf("%s WeCom's MCP server: %w", ue.Op, ue.Err)
		}
		return nil, "", redact.Error(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, "", &statusError{resp.StatusCode}
	}
	newSID := resp.Header.Get("Mcp-Session-Id")
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBytes+1))
	switch {
	case err != nil:
		return nil, newSID, redact.Error(err)
	case int64(len(body)) > c.maxBytes:
		return nil, newSID, fmt.Errorf("WeCom's MCP server answered more than %d bytes", c.maxBytes)
	case !want:
		return nil, newSID, nil
	}
	if strings.Contains(resp.Header.Get("Content-Type"), "text/event-stream") {
		body = lastEventData(body)
	}
	var rpc struct {
		Result json.RawMessage `json:"result"`
		Error  *rpcFailure     `json:"error"`
	}
	if err := json.Unmarshal(body, &rpc); err != nil {
		return nil, newSID, fmt.Errorf("WeCom's MCP server's answer is not JSON-RPC: %w", err)
	}
	if rpc.Error != nil {
		return nil, newSID, rpc.Error
	}
	return rpc.Result, newSID, nil
}

// lastEventData is the data of an event stream's last event.
func lastEventData(stream []byte) []byte {
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
