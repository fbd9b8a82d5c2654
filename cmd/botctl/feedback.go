package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"text/tabwriter"

	"github.com/botctl/botctl/pkg/task"
	"github.com/spf13/cobra"
)

// feedbackSummary is one bot's feedback as `botctl feedback` prints it:
// the latest verdict of each task that got one, by kind.
type feedbackSummary struct {
	Bot        string `json:"bot"`
	Tasks      int    `json:"tasks"` // tasks with a verdict
	Accurate   int    `json:"accurate"`
	Inaccurate int    `json:"inaccurate"`
	Canceled   int    `json:"canceled"`
	Unknown    int    `json:"unknown"`
	// Reasons counts the inaccurate verdicts' reason codes.
	Reasons map[string]int `json:"reasons"`
}

// newFeedbackCmd summarises users' verdicts on answers per bot, from the
// task records (each keeps its latest verdict).
func newFeedbackCmd() *cobra.Command {
	var (
		cf     clusterFlags
		bot    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "feedback [--bot ID] [--json]",
		Short: "Summarise users' thumbs up/down on answers per bot (each task's latest verdict)",
		Long: `Summarise the feedback users gave answers (WeCom's feedback_event), per bot: how
many tasks got a verdict, and the latest verdict of each by kind (accurate,
inaccurate, canceled: withdrawn), with the reason codes of the inaccurate ones.
A task's own verdict: botctl tasks show TASK_ID. Counted as they arrive:
botctl_feedback_total{bot,kind} in /metrics.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, closeFn, err := cf.store()
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
			defer cancel()
			recs, err := listTasks(ctx, s, bot, "")
			if err != nil {
				return err
			}
			sums := summariseFeedback(recs)
			if asJSON {
				return printJSON(cmd.OutOrStdout(), map[string]any{"bots": sums})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "BOT\tTASKS\tACCURATE\tINACCURATE\tCANCELED\tREASONS")
			for _, f := range sums {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", f.Bot, f.Tasks, f.Accurate, f.Inaccurate, f.Canceled, reasonsText(f.Reasons))
			}
			if len(sums) == 0 {
				fmt.Fprintln(tw, "(no feedback)")
			}
			return tw.Flush()
		},
	}
	cf.registerNATS(cmd)
	cmd.Flags().StringVar(&bot, "bot", "", "only this bot's feedback")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: {\"bots\":[{\"bot\",\"tasks\",\"accurate\",\"inaccurate\",\"canceled\",\"unknown\",\"reasons\"}]}")
	return cmd
}

// summariseFeedback counts recs' verdicts per bot, bots in name order;
// bots without feedback are left out.
func summariseFeedback(recs []*task.Record) []feedbackSummary {
	by := map[string]*feedbackSummary{}
	for _, r := range recs {
		fb := r.Feedback
		if fb == nil {
			continue
		}
		f := by[r.Bot]
		if f == nil {
			f = &feedbackSummary{Bot: r.Bot, Reasons: map[string]int{}}
			by[r.Bot] = f
		}
		f.Tasks++
		switch fb.Kind {
		case "accurate":
			f.Accurate++
		case "inaccurate":
			f.Inaccurate++
			for _, code := range fb.Reasons {
				f.Reasons[strconv.Itoa(code)]++
			}
		case "canceled":
			f.Canceled++
		default:
			f.Unknown++
		}
	}
	out := []feedbackSummary{}
	for _, f := range by {
		out = append(out, *f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bot < out[j].Bot })
	return out
}

func reasonsText(reasons map[string]int) string {
	if len(reasons) == 0 {
		return "-"
	}
	codes := make([]string, 0, len(reasons))
	for c := range reasons {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	text := ""
	for i, c := range codes {
		if i > 0 {
			text += " "
		}
		text += fmt.Sprintf("%s×%d", c, reasons[c])
	}
	return text
}
