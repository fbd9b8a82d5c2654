package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/redact"
	"github.com/botctl/botctl/pkg/sendapi"
	"github.com/spf13/cobra"
)

// sendTimeout bounds one node's answer: its wait for the conversation's
// budget (sendapi.MaxWait), WeCom's ack and a forward.
const sendTimeout = sendapi.MaxWait + 30*time.Second

func newSendCmd() *cobra.Command {
	var (
		cf                        clusterFlags
		bot, chat, chatType, text string
		cardFile, nodeURL         string
	)
	cmd := &cobra.Command{
		Use:   "send --bot B --chat C (--markdown TEXT | --card FILE)",
		Short: "Send a proactive message as a bot, through its leader (POST /v1/bots/{bot}/messages, docs/api.md)",
		Long: `Send a markdown message or a template card to a chat as the bot, on the leader's
connection and under the conversation's send budget. The nodes are found in etcd (--etcd,
--config or --data-dir, as for status), the leader first; --node asks one node instead. The
node API's token is api.token_file of --config or $BOTCTL_API_TOKEN_FILE, else the one
generated in --data-dir. Prints the node's answer; exits 0 only when WeCom acked the message.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := sendapi.Request{Chat: chat, ChatType: chatType}
			switch {
			case bot == "" || chat == "":
				return usageErrorf("--bot and --chat are required")
			case (text == "") == (cardFile == ""):
				return usageErrorf("give one of --markdown TEXT and --card FILE (a template card's JSON; - reads stdin)")
			case text != "":
				req.MsgType, req.Markdown = "markdown", &sendapi.Markdown{Content: text}
			default:
				card, err := readCard(cmd, cardFile)
				if err != nil {
					return err
				}
				req.MsgType, req.TemplateCard = "template_card", card
			}
			body, err := json.Marshal(req)
			if err != nil {
				return usageErrorf("--card %s: %v", cardFile, err)
			}
			nodes, err := sendTargets(cmd, &cf, bot, nodeURL)
			if err != nil {
				return err
			}
			hc, err := apiClient(cf.api, cf.tokenDir(cmd))
			if err != nil {
				return usageError{err}
			}
			return sendTo(cmd, hc, nodes, bot, body)
		},
	}
	cf.registerEtcd(cmd)
	f := cmd.Flags()
	f.StringVar(&bot, "bot", "", "the bot to send as")
	f.StringVar(&chat, "chat", "", "the chat: the user's userid for a single chat, the group's chatid for a group")
	f.StringVar(&chatType, "chat-type", "", "single or group (default: WeCom finds the chat by its id)")
	f.StringVar(&text, "markdown", "", "the markdown message (at most 20,480 bytes)")
	f.StringVar(&cardFile, "card", "", "a file holding the template card's JSON object (- for stdin)")
	f.StringVar(&nodeURL, "node", "", "a node API's URL to send through (default: the nodes in etcd, the leader first)")
	return cmd
}

// readCard reads a template card's JSON from path (- stdin).
func readCard(cmd *cobra.Command, path string) (json.RawMessage, error) {
	var raw []byte
	var err error
	if path == "-" {
		raw, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), sendapi.MaxBodyBytes))
	} else {
		raw, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, usageErrorf("--card %s: %v", path, err)
	}
	if !json.Valid(raw) {
		return nil, usageErrorf("--card %s: not JSON: want the template card's object, e.g. {\"card_type\":\"text_notice\",…}", path)
	}
	return json.RawMessage(bytes.TrimSpace(raw)), nil
}

// sendTargets are the node API URLs to try, in order: --node, or every
// registered node with bot's leader first. It also loads --config (the
// API's TLS and token file).
func sendTargets(cmd *cobra.Command, cf *clusterFlags, bot, nodeURL string) ([]string, error) {
	if nodeURL != "" {
		cfg, err := config.Load(cf.config, os.Environ())
		if err != nil {
			return nil, usageError{err}
		}
		cf.api, cf.cfgDataDir = cfg.API, cfg.DataDir
		return []string{nodeURL}, nil
	}
	cli, err := cf.etcdClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
	defer cancel()
	nodes, err := node.Nodes(ctx, cli, node.DefaultPrefix)
	if err != nil {
		return nil, err
	}
	leader, err := election.Leader(ctx, cli, "", bot)
	if err != nil && !errors.Is(err, election.ErrNoLeader) {
		return nil, err
	}
	var out []string
	for _, n := range nodes {
		switch {
		case n.Address == "":
		case n.ID == leader.Node:
			out = append([]string{n.Address}, out...)
		default:
			out = append(out, n.Address)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no node is registered in etcd: is the cluster running? (or give --node URL)")
	}
	return out, nil
}

// sendTo posts body to the first node of nodes that takes the request
// and prints its answer; a node unreachable before the request was sent
// is skipped.
func sendTo(cmd *cobra.Command, hc *http.Client, nodes []string, bot string, body []byte) error {
	var tried []string
	for _, base := range nodes {
		ctx, cancel := context.WithTimeout(cmd.Context(), sendTimeout)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+sendapi.URL(url.PathEscape(bot)), bytes.NewReader(body))
		if err != nil {
			cancel()
			tried = append(tried, base+": "+err.Error())
			continue
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			cancel()
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return fmt.Errorf("%s: no answer within %s: the message may or may not have been sent", redact.URL(base), sendTimeout)
			}
			tried = append(tried, redact.URL(base)+": "+redact.Error(err).Error())
			continue
		}
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		cancel()
		if err != nil {
			return fmt.Errorf("%s: answer cut (%v): the message may or may not have been sent", redact.URL(base), err)
		}
		cmd.OutOrStdout().Write(raw)
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		var res sendapi.Result
		json.Unmarshal(raw, &res)
		why := res.Error
		if why == "" {
			why = strings.TrimSpace(string(raw))
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			why += " (retry after " + ra + " s)"
		}
		return fmt.Errorf("%s answered %s: %s", redact.URL(base), resp.Status, why)
	}
	return fmt.Errorf("no node took the request: %s", strings.Join(tried, "; "))
}
