package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/redact"
	"github.com/botctl/botctl/pkg/task"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

// natsURLFile records, in a data dir, the URL of the embedded NATS a
// `botctl serve` started there.
const natsURLFile = "nats.url"

// natsFlags are the flags of the commands that read or change tasks. TLS,
// credentials and the prefix (nats.*) come from --config and BOTCTL_NATS_*
// as for serve.
type natsFlags struct {
	config  string
	url     string
	prefix  string
	dataDir string
	timeout time.Duration
}

func (f *natsFlags) register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.config, "config", "", "botctl's YAML config file: NATS URL, prefix, TLS and credentials (env BOTCTL_NATS_* also applies)")
	cmd.PersistentFlags().StringVar(&f.url, "nats", "", "NATS URL (default nats.url of --config or $BOTCTL_NATS_URL, else the embedded NATS of --data-dir)")
	cmd.PersistentFlags().StringVar(&f.prefix, "nats-prefix", "", "stream and bucket prefix of the environment to act on (default nats.prefix of --config or $BOTCTL_NATS_PREFIX, else BOTCTL)")
	cmd.PersistentFlags().StringVar(&f.dataDir, "data-dir", "data", "data dir of a 'botctl serve' running embedded NATS")
	cmd.PersistentFlags().DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait for NATS")
}

// resolve returns the nats section to connect with: --nats, else nats.url
// of --config or $BOTCTL_NATS_URL, else the embedded NATS recorded in
// --data-dir; --nats-prefix over nats.prefix.
func (f *natsFlags) resolve() (config.NATS, error) {
	cfg, err := config.Load(f.config, os.Environ())
	if err != nil {
		return config.NATS{}, usageError{err}
	}
	n := cfg.NATS
	if f.prefix != "" {
		n.Prefix = f.prefix
	}
	if f.url != "" {
		n.URL = f.url
	}
	if n.URL == "" {
		raw, err := os.ReadFile(filepath.Join(f.dataDir, natsURLFile))
		if err != nil {
			return n, usageErrorf("no NATS to ask: give --nats nats://HOST:PORT (or --config), or --data-dir of a running 'botctl serve' with embedded NATS")
		}
		n.URL = strings.TrimSpace(string(raw))
	}
	return n, nil
}

// store connects and opens the declared streams and buckets of the prefix.
func (f *natsFlags) store() (*jetstream.Store, func(), error) {
	n, err := f.resolve()
	if err != nil {
		return nil, nil, err
	}
	opts, err := n.Options()
	if err != nil {
		return nil, nil, usageError{err}
	}
	u := redact.URL(n.URL)
	nc, err := nats.Connect(n.URL, append(opts, nats.Timeout(f.timeout), nats.Name("botctl tasks"))...)
	if refused := n.RefusedError(err); refused != nil {
		return nil, nil, fmt.Errorf("NATS at %s: %w", u, redact.Error(refused))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach NATS at %s: %w (is it running? check --nats, and nats.ca_file/cert_file/key_file or the nats credentials if it asks for TLS or a user)", u, redact.Error(err))
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	// Declare is idempotent and changes nothing on a running deployment,
	// given the deployment's options. The replica count is the nodes'
	// (nats.replicas of their config), which this command's config may
	// not repeat: a deployment that exists keeps its own. (With the
	// default, 1, every CLI command scaled an R3 deployment down to R1,
	// and each node restart scaled it back up.)
	replicas := n.Replicas
	if st, err := js.Stream(ctx, jetstream.NamesFor(n.Prefix).TaskStream); err == nil {
		replicas = st.CachedInfo().Config.Replicas
	}
	s, err := jetstream.Declare(ctx, js, jetstream.Options{Prefix: n.Prefix, Replicas: replicas})
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("open task streams and buckets (prefix %s): %w", n.Prefix, err)
	}
	return s, nc.Close, nil
}

func newTasksCmd() *cobra.Command {
	var nf natsFlags
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List, inspect and correct tasks (list|show|retry|cancel|redeliver)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErrorf("missing subcommand: list, show, retry, cancel or redeliver (see 'botctl tasks --help')")
		},
	}
	nf.register(cmd)
	cmd.AddCommand(newTasksListCmd(&nf), newTasksShowCmd(&nf), newTasksRetryCmd(&nf), newTasksCancelCmd(&nf), newTasksRedeliverCmd(&nf))
	return cmd
}

func newTasksListCmd(nf *natsFlags) *cobra.Command {
	var (
		bot, state string
		limit      int
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "list [--bot ID] [--state STATE] [--json]",
		Short: "List tasks, newest first; --state matches either dimension (running, truncated, failed…)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if state != "" && !knownState(state) {
				return usageErrorf("--state %q: want one of queued, running, succeeded, failed, canceled, pending, streaming, truncated, delivered", state)
			}
			s, closeFn, err := nf.store()
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(cmd.Context(), nf.timeout)
			defer cancel()
			recs, err := listTasks(ctx, s, bot, state)
			if err != nil {
				return err
			}
			if limit > 0 && len(recs) > limit {
				recs = recs[:limit]
			}
			if asJSON {
				if recs == nil {
					recs = []*task.Record{}
				}
				return printJSON(cmd.OutOrStdout(), map[string]any{"tasks": recs})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TASK\tBOT\tCHAT\tEXEC\tDELIVERY\tATTEMPT\tAGE\tQUESTION")
			for _, r := range recs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Bot, r.Chat, r.Exec, r.Delivery, r.Attempt,
					time.Since(r.Received).Round(time.Second), clip(r.Question, 40))
			}
			if len(recs) == 0 {
				fmt.Fprintln(tw, "(no tasks)")
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&bot, "bot", "", "only this bot's tasks")
	cmd.Flags().StringVar(&state, "state", "", "only tasks in this state (either dimension)")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: {\"tasks\":[…]}")
	return cmd
}

func knownState(s string) bool {
	switch s {
	case "queued", "running", "succeeded", "failed", "canceled", "pending", "streaming", "truncated", "delivered":
		return true
	}
	return false
}

func listTasks(ctx context.Context, s *jetstream.Store, bot, state string) ([]*task.Record, error) {
	lister, err := s.Tasks().ListKeys(ctx)
	if err != nil {
		if errors.Is(err, natsjs.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	var out []*task.Record
	for key := range lister.Keys() {
		r, _, err := task.Get(ctx, s.Tasks(), key)
		if err != nil {
			continue
		}
		if bot != "" && r.Bot != bot {
			continue
		}
		if state != "" && string(r.Exec) != state && string(r.Delivery) != state {
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Received.After(out[j].Received) })
	return out, nil
}

func newTasksShowCmd(nf *natsFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show TASK_ID [--json]",
		Short: "Show a task: its raw context, both states, every transition, and its output",
		Args:  exactArgs(1, "TASK_ID"),
		RunE: onTask(nf, func(ctx context.Context, cmd *cobra.Command, s *jetstream.Store, r *task.Record) error {
			out, _ := task.GetOutput(ctx, s.Output(), r.ID)
			if asJSON {
				// "output" keeps its shape: done is the record's word (the
				// execution is over and this output is its attempt's).
				var view *outputView
				if out != nil {
					view = &outputView{Output: *out, Done: r.Exec.Finished() && out.Attempt == r.Attempt}
				}
				return printJSON(cmd.OutOrStdout(), map[string]any{"task": r, "output": view})
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "task      %s\nbot       %s\nchat      %s (%s), user %s\nmsgid     %s\nreq_id    %s (term %d)\nquestion  %s\nreceived  %s\n",
				r.ID, r.Bot, r.Chat, r.ChatType, r.User, r.MsgID, r.ReqID, r.Term, r.Question, r.Received.Format(time.RFC3339))
			fmt.Fprintf(w, "exec      %s (attempt %d on %s, tier %s)\ndelivery  %s %s\n", r.Exec, r.Attempt, r.Node, r.Tier, r.Delivery, r.DeliveryReason)
			if r.Error != "" {
				fmt.Fprintf(w, "error     %s\n", r.Error)
			}
			if out != nil {
				fmt.Fprintf(w, "output    %d bytes, attempt %d\n", len(out.Text), out.Attempt)
			}
			fmt.Fprintln(w, "transitions:")
			for _, t := range r.Transitions {
				fmt.Fprintf(w, "  %s  %-8s %s → %s  %s (%s)\n", t.At.Format("15:04:05.000"), t.Dim, t.From, t.To, t.Reason, t.Node)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: {\"task\":…,\"output\":…}")
	return cmd
}

// outputView is a task's output as `tasks show --json` prints it.
type outputView struct {
	task.Output
	Done bool `json:"done"`
}

// onTask opens the store, reads the task named by the command's argument,
// and runs fn on it: the frame of every single-task subcommand.
func onTask(nf *natsFlags, fn func(ctx context.Context, cmd *cobra.Command, s *jetstream.Store, r *task.Record) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		s, closeFn, err := nf.store()
		if err != nil {
			return err
		}
		defer closeFn()
		ctx, cancel := context.WithTimeout(cmd.Context(), nf.timeout)
		defer cancel()
		r, _, err := getTask(ctx, s, args[0])
		if err != nil {
			return err
		}
		return fn(ctx, cmd, s, r)
	}
}

func getTask(ctx context.Context, s *jetstream.Store, id string) (*task.Record, uint64, error) {
	r, rev, err := task.Get(ctx, s.Tasks(), id)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return nil, 0, usageErrorf("no task %s (see 'botctl tasks list')", id)
	}
	return r, rev, err
}

// lifecycleError turns the lifecycle's refusals into usage errors that
// say what to do instead.
func lifecycleError(r *task.Record, err error) error {
	switch {
	case errors.Is(err, task.ErrNotFinished):
		return usageErrorf("task %s is %s: it is not finished (cancel it first)", r.ID, r.Exec)
	case errors.Is(err, task.ErrFinished):
		return usageErrorf("task %s is already %s", r.ID, r.Exec)
	case errors.Is(err, task.ErrConversationBusy):
		return fmt.Errorf("conversation %s already has a task queued or running: wait for it or cancel it, then retry", r.Chat)
	}
	return err
}

func newTasksRetryCmd(nf *natsFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "retry TASK_ID",
		Short: "Run a finished task again and deliver the new answer",
		Args:  exactArgs(1, "TASK_ID"),
		RunE: onTask(nf, func(ctx context.Context, cmd *cobra.Command, s *jetstream.Store, r *task.Record) error {
			if _, err := lifecycle(s).Retry(ctx, r.ID, "operator retry"); err != nil {
				return lifecycleError(r, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s queued again; its answer will be pushed to %s\n", r.ID, r.Chat)
			return nil
		}),
	}
}

func newTasksCancelCmd(nf *natsFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel TASK_ID",
		Short: "Stop a queued, running or stuck task (its worker stops within a second), free its conversation and tell the user",
		Args:  exactArgs(1, "TASK_ID"),
		RunE: onTask(nf, func(ctx context.Context, cmd *cobra.Command, s *jetstream.Store, r *task.Record) error {
			if _, err := lifecycle(s).Cancel(ctx, r.ID, "operator cancel"); err != nil {
				return lifecycleError(r, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s canceled\n", r.ID)
			return nil
		}),
	}
}

func newTasksRedeliverCmd(nf *natsFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "redeliver TASK_ID",
		Short: "Deliver a finished task's answer again, by push (after a failed or doubtful delivery)",
		Args:  exactArgs(1, "TASK_ID"),
		RunE: onTask(nf, func(ctx context.Context, cmd *cobra.Command, s *jetstream.Store, r *task.Record) error {
			if _, err := lifecycle(s).Redeliver(ctx, r.ID, "operator redeliver"); err != nil {
				if errors.Is(err, task.ErrNotFinished) {
					return usageErrorf("task %s has no complete answer to deliver (exec %s): wait for it, or cancel and retry it", r.ID, r.Exec)
				}
				return lifecycleError(r, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s: answer will be pushed to %s again\n", r.ID, r.Chat)
			return nil
		}),
	}
}

// lifecycle is the operator's hand on task records ("botctl" in every
// transition it writes).
func lifecycle(s *jetstream.Store) *task.Lifecycle {
	return task.NewLifecycle(s, "botctl", zerolog.Nop())
}

func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("want %s (see '%s --help')", names, cmd.CommandPath())
		}
		return nil
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
