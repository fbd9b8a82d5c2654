package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/botctl/botctl/internal/oneline"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

func newTasksCmd() *cobra.Command {
	var cf clusterFlags
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List, inspect and correct tasks (list|show|retry|cancel|redeliver|release)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErrorf("missing subcommand: list, show, retry, cancel, redeliver or release (see 'botctl tasks --help')")
		},
	}
	cf.registerNATS(cmd)
	cmd.AddCommand(newTasksListCmd(&cf), newTasksShowCmd(&cf), newTasksRetryCmd(&cf), newTasksCancelCmd(&cf), newTasksRedeliverCmd(&cf),
		newTasksReleaseCmd(&cf))
	return cmd
}

func newTasksListCmd(cf *clusterFlags) *cobra.Command {
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
			s, closeFn, err := cf.store()
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
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
					time.Since(r.Received).Round(time.Second), oneline.Clip(r.Question, 40))
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

func newTasksShowCmd(cf *clusterFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show TASK_ID [--json]",
		Short: "Show a task: its raw context, both states, every transition, and its output",
		Args:  exactArgs(1, "TASK_ID"),
		RunE: onTask(cf, func(ctx context.Context, cmd *cobra.Command, s *jetstream.Store, r *task.Record) error {
			out, _ := task.ReadOutput(ctx, s, r.ID, r.Exec.Finished())
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
				r.ID, r.Bot, r.Chat, r.ChatType, r.User, r.MsgID, r.ReqID, r.TermRev, r.Question, r.Received.Format(time.RFC3339))
			for _, a := range r.Attachments {
				fmt.Fprintf(w, "file      %s %q %s, %d bytes%s (%s)\n", a.Kind, a.Name, a.MIME, a.Size, pixels(a), a.Key)
			}
			fmt.Fprintf(w, "exec      %s (attempt %d on %s, tier %s)\ndelivery  %s %s\n", r.Exec, r.Attempt, r.Node, r.Tier, r.Delivery, r.DeliveryReason)
			if r.Error != "" {
				fmt.Fprintf(w, "error     %s\n", r.Error)
			}
			if r.AnsweredBy != "" {
				fmt.Fprintf(w, "answered  by %s\n", r.AnsweredBy)
			}
			for _, b := range r.Backends { // each backend asked or skipped, and why
				fmt.Fprintf(w, "backend   attempt %d: %s %s", b.Attempt, b.Backend, b.Outcome)
				if b.Reason != "" {
					fmt.Fprintf(w, ": %s", oneline.Clip(b.Reason, 300))
				}
				fmt.Fprintln(w)
			}
			if out != nil {
				fmt.Fprintf(w, "output    %d bytes, attempt %d\n", len(out.Text), out.Attempt)
				if out.Thinking != "" { // stored whatever ai.show_thinking says; --json has it whole
					fmt.Fprintf(w, "thinking  %d bytes, %d tool steps: %s\n", len(out.Thinking), strings.Count(out.Tools, "\n"), oneline.Clip(strings.TrimSpace(out.Thinking), 200))
				}
			}
			if fb := r.Feedback; fb != nil {
				fmt.Fprintf(w, "feedback  %s by %s at %s", fb.Kind, fb.User, fb.At.Format(time.RFC3339))
				if len(fb.Reasons) > 0 {
					fmt.Fprintf(w, ", reasons %v", fb.Reasons)
				}
				if fb.Content != "" {
					fmt.Fprintf(w, ": %s", oneline.Clip(fb.Content, 200))
				}
				if fb.Count > 1 {
					fmt.Fprintf(w, " (latest of %d)", fb.Count)
				}
				fmt.Fprintln(w)
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
func onTask(cf *clusterFlags, fn func(ctx context.Context, cmd *cobra.Command, s *jetstream.Store, r *task.Record) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		s, closeFn, err := cf.store()
		if err != nil {
			return err
		}
		defer closeFn()
		ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
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

func newTasksRetryCmd(cf *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "retry TASK_ID",
		Short: "Run a finished task again and deliver the new answer",
		Args:  exactArgs(1, "TASK_ID"),
		RunE: onTask(cf, func(ctx context.Context, cmd *cobra.Command, s *jetstream.Store, r *task.Record) error {
			if _, err := lifecycle(s).Retry(ctx, r.ID, "operator retry"); err != nil {
				return lifecycleError(r, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s queued again; its answer will be pushed to %s\n", r.ID, r.Chat)
			return nil
		}),
	}
}

func newTasksCancelCmd(cf *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel TASK_ID",
		Short: "Stop a queued, running or stuck task (its worker stops within a second), free its conversation and tell the user",
		Args:  exactArgs(1, "TASK_ID"),
		RunE: onTask(cf, func(ctx context.Context, cmd *cobra.Command, s *jetstream.Store, r *task.Record) error {
			if _, err := lifecycle(s).Cancel(ctx, r.ID, "operator cancel"); err != nil {
				return lifecycleError(r, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s canceled\n", r.ID)
			return nil
		}),
	}
}

func newTasksRedeliverCmd(cf *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "redeliver TASK_ID",
		Short: "Deliver a finished task's answer again, by push (after a failed or doubtful delivery)",
		Args:  exactArgs(1, "TASK_ID"),
		RunE: onTask(cf, func(ctx context.Context, cmd *cobra.Command, s *jetstream.Store, r *task.Record) error {
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

func newTasksReleaseCmd(cf *clusterFlags) *cobra.Command {
	var (
		bot, chat string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "release --bot ID --chat ID [--json]",
		Short: "Free a conversation that stays busy: remove its queue message and give up its task, with or without a record, even while the tasks bucket fails",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if bot == "" || chat == "" {
				return usageErrorf("want --bot ID and --chat ID (the user's id for a single chat, the group's chat id; see 'botctl tasks list')")
			}
			rel, err := releaseConversation(cmd.Context(), cf, bot, chat)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), rel)
			}
			w := cmd.OutOrStdout()
			switch {
			case !rel.Removed:
				fmt.Fprintf(w, "conversation %s of bot %s holds no task: nothing to release\n", chat, bot)
			case rel.Task == "":
				fmt.Fprintf(w, "conversation %s of bot %s released: removed queue message %d, which named no task\n", chat, bot, rel.Seq)
			case rel.Error != "":
				fmt.Fprintf(w, "conversation %s of bot %s released: removed queue message %d (task %s); its record was not written (%s), so its user is not told\n",
					chat, bot, rel.Seq, rel.Task, rel.Error)
			default:
				fmt.Fprintf(w, "conversation %s of bot %s released: removed queue message %d (task %s, record %s)\n", chat, bot, rel.Seq, rel.Task, rel.Record)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&bot, "bot", "", "the bot's id (required)")
	cmd.Flags().StringVar(&chat, "chat", "", "the conversation: a user's id for a single chat, the chat id for a group (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: {\"bot\",\"chat\",\"removed\",\"seq\",\"task\",\"record\",\"error\"}")
	return cmd
}

// releaseConversation releases bot's conversation chat through the
// lifecycle (the task given up, opened from the queue message if it has
// no record). When the store cannot be opened (the tasks bucket failing:
// opening it times out), the queue message alone is removed: it is what
// holds the conversation.
func releaseConversation(ctx context.Context, cf *clusterFlags, bot, chat string) (task.Released, error) {
	const reason = "released by an operator (botctl tasks release)"
	s, closeFn, err := cf.store()
	if err == nil {
		defer closeFn()
		ctx, cancel := context.WithTimeout(ctx, cf.timeout)
		defer cancel()
		return lifecycle(s).Release(ctx, bot, chat, reason)
	}
	var usage usageError
	if errors.As(err, &usage) {
		return task.Released{}, err
	}
	js, n, jerr := cf.jetStream()
	if jerr != nil {
		return task.Released{}, jerr
	}
	defer js.Conn().Close()
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	rel := task.Released{Bot: bot, Chat: chat, Record: "none"}
	msg, qerr := jetstream.ReleaseQueued(ctx, js, n.Prefix, bot, chat)
	if qerr != nil {
		return rel, fmt.Errorf("%w; and the queue alone: %w", err, qerr)
	}
	if msg == nil {
		return rel, nil
	}
	rel.Removed, rel.Seq = true, msg.Sequence
	var m task.Message
	if json.Unmarshal(msg.Data, &m) == nil {
		rel.Task = m.TaskID
	}
	if rel.Task != "" {
		rel.Record, rel.Error = "not written", err.Error()
	}
	return rel, nil
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

// pixels is an image attachment's size for tasks show ("" for others).
func pixels(a task.Attachment) string {
	if a.Width == 0 {
		return ""
	}
	return fmt.Sprintf(", %d×%d", a.Width, a.Height)
}
