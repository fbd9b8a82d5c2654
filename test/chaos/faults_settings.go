package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/botctl/botctl/test/e2e/cluster"
)

// unbuildableOverride is a `botctl bots set` of the bot's backend to
// openai, whose API key variable (OPENAI_API_KEY) the writer has and no
// node has: stored (the writer's dry run builds it), refused by every
// node.
var unbuildableOverride = []string{"--set", "ai.kind=openai", "--set", "ai.openai.model=gpt-4o-mini"}

// botsSetUnbuildable stores an override whose backend cannot be built on
// the nodes (`botctl bots set` run with OPENAI_API_KEY in its own
// environment, the nodes without it), waits until a node says it refused
// it (/readyz's warnings), then restarts every node, one after another
// (SIGTERM, start, a stable cluster). Every node must come up (a refused
// override falls back to the file's settings at start) and the bot keeps
// the file's settings: the demo backend's answers, judged as always. The
// override is cleared after.
func (h *Harness) botsSetUnbuildable(r *RoundResult) error {
	if _, err := h.Leader(); err != nil {
		return err
	}
	etcd := strings.Join(h.Infra.EtcdURLs(), ",")
	out, err := h.botctlEnv([]string{"OPENAI_API_KEY=sk-chaos-not-on-the-nodes"},
		append([]string{"bots", "set", "--bot", bot, "--etcd", etcd}, unbuildableOverride...)...)
	if err != nil {
		return fmt.Errorf("bots set: %w", err)
	}
	r.note("bots set %s (with OPENAI_API_KEY in the writer's environment only): %s", strings.Join(unbuildableOverride, " "), strings.TrimSpace(out))
	defer func() {
		if _, err := h.botctlEnv(nil, "bots", "set", "--bot", bot, "--clear", "--etcd", etcd); err != nil {
			r.note("bots set --clear: %v", err)
		}
	}()
	if w, err := h.waitWarning("refused", time.Minute); err != nil {
		r.note("no running node said it refused the override within a minute: %v", err)
	} else {
		r.note("a running node refused it: %s", w)
	}
	for _, id := range h.nodeIDs {
		if err := h.stopNode(r, id); err != nil {
			return err
		}
		if _, err := h.C.RestartNode(id); err != nil {
			return fmt.Errorf("restart %s with the unbuildable override stored: %w", id, err)
		}
		if _, err := h.C.WaitStable(h.Cfg.Takeover); err != nil {
			return fmt.Errorf("after restarting %s: %w", id, err)
		}
	}
	r.note("every node restarted with the override stored")
	warned := 0
	for _, n := range h.C.Alive() {
		if w, ok := readyzWarning(n, "refused"); ok {
			warned++
			if warned == 1 {
				r.note("after the restarts, %s's /readyz: %s", n.ID, w)
			}
		}
	}
	if warned != len(h.nodeIDs) {
		return fmt.Errorf("%d of %d restarted nodes say in /readyz that they refused the override", warned, len(h.nodeIDs))
	}
	return nil
}

// botctlEnv runs botctl with args and env added to the harness's own
// environment; it returns stdout, and an error naming stderr on a
// non-zero exit.
func (h *Harness) botctlEnv(env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.C.Opts.Bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("botctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// waitWarning waits up to timeout for a live node's /readyz warning
// containing s.
func (h *Harness) waitWarning(s string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, n := range h.C.Alive() {
			if w, ok := readyzWarning(n, s); ok {
				return n.ID + ": " + w, nil
			}
		}
		time.Sleep(time.Second)
	}
	return "", fmt.Errorf("no /readyz warning containing %q", s)
}

// readyzWarning is n's first /readyz warning containing s.
func readyzWarning(n *cluster.Node, s string) (string, bool) {
	resp, err := http.Get(n.API + "/readyz")
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	var v struct {
		Warnings []string `json:"warnings"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return "", false
	}
	for _, w := range v.Warnings {
		if strings.Contains(w, s) {
			return w, true
		}
	}
	return "", false
}
