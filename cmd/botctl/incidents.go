package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/botctl/botctl/internal/oneline"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/spf13/cobra"
)

func newIncidentsCmd() *cobra.Command {
	var cf clusterFlags
	cmd := &cobra.Command{
		Use:   "incidents",
		Short: "Incidents per bot with T1/T2/T3, downtime and how each recovered (list|show|ack|report)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErrorf("missing subcommand: list, show, ack or report (see 'botctl incidents --help')")
		},
	}
	cf.registerNATS(cmd)
	cmd.AddCommand(newIncidentsListCmd(&cf), newIncidentsShowCmd(&cf), newIncidentsAckCmd(&cf), newIncidentsReportCmd(&cf))
	return cmd
}

// incidentFilter is --bot and --since.
type incidentFilter struct {
	bot, since string
}

func (f *incidentFilter) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.bot, "bot", "", "only this bot's incidents")
	cmd.Flags().StringVar(&f.since, "since", "", "only incidents detected since: a duration back (90m, 24h, 7d) or a time (2026-12-01T08:00:00Z)")
}

func (f *incidentFilter) filter(now time.Time) (incident.Filter, error) {
	out := incident.Filter{Bot: f.bot}
	if f.since == "" {
		return out, nil
	}
	t, err := parseSince(f.since, now)
	if err != nil {
		return out, usageErrorf("--since %q: %v", f.since, err)
	}
	out.Since = t
	return out, nil
}

// parseSince reads a duration back from now (Go syntax, plus a "d" suffix
// for days) or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if strings.HasSuffix(s, "d") {
		if n, err := strconv.ParseFloat(strings.TrimSuffix(s, "d"), 64); err == nil && n >= 0 {
			return now.Add(-time.Duration(n * 24 * float64(time.Hour))), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, errors.New("want a duration back (90m, 24h, 7d) or an RFC 3339 time")
}

func (cf *clusterFlags) incidents(cmd *cobra.Command, fn func(ctx context.Context, s *incident.Store) error) error {
	st, closeFn, err := cf.store()
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
	defer cancel()
	return fn(ctx, incident.NewStore(st.Incidents()))
}

func newIncidentsListCmd(cf *clusterFlags) *cobra.Command {
	var (
		f      incidentFilter
		open   bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list [--bot ID] [--since 24h] [--open] [--json]",
		Short: "List incidents, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			flt, err := f.filter(time.Now())
			if err != nil {
				return err
			}
			flt.Open = open
			return cf.incidents(cmd, func(ctx context.Context, s *incident.Store) error {
				all, err := s.List(ctx, flt)
				if err != nil {
					return err
				}
				now := time.Now()
				if asJSON {
					views := make([]incidentView, 0, len(all))
					for i := range all {
						views = append(views, viewOf(&all[i], now))
					}
					return printJSON(cmd.OutOrStdout(), map[string]any{"incidents": views})
				}
				return printIncidents(cmd.OutOrStdout(), all, now)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&open, "open", false, "only incidents not closed")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: {\"incidents\":[…]}, each incident as stored with t1_s, t2_s, t3_s and downtime_s")
	return cmd
}

// incidentView is an incident as the CLI prints it in JSON: as stored,
// plus its times in seconds, each left out while it is not known (T2
// before the first action, T3 before the data is complete, every one
// without its start). A known time may be 0: a drop is detected at once.
type incidentView struct {
	incident.Incident
	T1       *float64 `json:"t1_s,omitempty"`
	T2       *float64 `json:"t2_s,omitempty"`
	T3       *float64 `json:"t3_s,omitempty"`
	Downtime *float64 `json:"downtime_s,omitempty"` // drop → recovered, or → now while down; 0 for a data incident
}

func viewOf(i *incident.Incident, now time.Time) incidentView {
	v := incidentView{Incident: *i}
	s := func(known bool, d time.Duration) *float64 {
		if !known {
			return nil
		}
		f := math.Round(d.Seconds()*1000) / 1000
		return &f
	}
	v.T1 = s(!i.Dropped.IsZero() && !i.Detected.IsZero(), i.T1())
	v.T2 = s(!i.Detected.IsZero() && !i.FirstAction.IsZero(), i.T2())
	v.T3 = s(!i.Recovered.IsZero() && !i.DataComplete.IsZero(), i.T3())
	v.Downtime = s(!i.Dropped.IsZero() || i.Kind == incident.Data, i.Downtime(now))
	return v
}

func secs(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

func printIncidents(w io.Writer, all []incident.Incident, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tBOT\tKIND\tLEVEL\tSTATE\tSIGNAL\tT1\tT2\tT3\tDOWN\tHOW\tREASON")
	for _, i := range all {
		how := string(i.Method)
		if how == "" {
			how = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i.ID, i.Bot, i.Kind, i.Level, i.State, i.Signal,
			secs(i.T1()), secs(i.T2()), secs(i.T3()), secs(i.Downtime(now)), how, oneline.Clip(i.Reason, 60))
	}
	if len(all) == 0 {
		fmt.Fprintln(tw, "(no incidents)")
	}
	return tw.Flush()
}

func newIncidentsShowCmd(cf *clusterFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID [--json]",
		Short: "Show one incident: its times, compensation, alerts sent and timeline",
		Args:  exactArgs(1, "an incident id (see 'botctl incidents list')"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.incidents(cmd, func(ctx context.Context, s *incident.Store) error {
				i, err := s.Find(ctx, args[0])
				if errors.Is(err, incident.ErrNotFound) {
					return usageErrorf("%v", err)
				}
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), viewOf(i, time.Now()))
				}
				printIncident(cmd.OutOrStdout(), i, time.Now())
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the incident as JSON (as list --json prints each: stored fields plus t1_s, t2_s, t3_s, downtime_s)")
	return cmd
}

func printIncident(w io.Writer, i *incident.Incident, now time.Time) {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	}
	fmt.Fprintf(w, "incident %s  bot %s (owner %s)\n", i.ID, i.Bot, orDash(i.Owner))
	signal := i.Signal
	if i.Route != "" {
		signal += " (" + i.Route + ")"
	}
	fmt.Fprintf(w, "  kind %s, level %s, state %s, signal %s, detected by node %s\n", i.Kind, i.Level, i.State, signal, orDash(i.Node))
	fmt.Fprintf(w, "  reason: %s\n  next:   %s\n", i.Reason, i.Next)
	fmt.Fprintf(w, "  dropped        %s\n  detected       %s   T1 %s\n  first action   %s   T2 %s  (%s)\n",
		at(i.Dropped), at(i.Detected), secs(i.T1()), at(i.FirstAction), secs(i.T2()), orDash(i.ActedBy))
	fmt.Fprintf(w, "  recovered      %s   down %s%s\n  online         %s\n  data complete  %s   T3 %s\n  closed         %s   %s\n",
		at(i.Recovered), secs(i.Downtime(now)), map[bool]string{true: "  (half-open)", false: ""}[i.HalfOpen],
		at(i.Online), at(i.DataComplete), secs(i.T3()), at(i.Closed), orDash(string(i.Method)))
	if i.AckedBy != "" {
		fmt.Fprintf(w, "  acknowledged by %s at %s\n", i.AckedBy, at(i.AckedAt))
	}
	fmt.Fprintf(w, "  replay: %d owed, %d replayed, %d failed, %d stale progress dropped (%d status lines due while away), %d expired\n",
		i.Replay.Held, i.Replay.Replayed, i.Replay.Failed, i.Replay.DroppedStale, i.Replay.DroppedStatusLines, i.Replay.Expired)
	fmt.Fprintf(w, "  backfill: ran %v, %d read, %d answered late, %d not filled %s\n",
		i.Backfill.Ran, i.Backfill.Scanned, i.Backfill.Filled, i.Backfill.NotFilled, i.Backfill.Note)
	if i.Backfill.Events != "" {
		fmt.Fprintf(w, "  events: %s\n", i.Backfill.Events)
	}
	if len(i.Incomplete) > 0 {
		fmt.Fprintf(w, "  may be incomplete: %s\n", strings.Join(i.Incomplete, ", "))
	}
	for _, a := range i.Alerts {
		fmt.Fprintf(w, "  alert %s (%s) at %s %s\n", a.Kind, a.Level, at(a.At), a.ID)
	}
	fmt.Fprintln(w, "  timeline:")
	for _, e := range i.Events {
		fmt.Fprintf(w, "    %s  %-8s %s\n", at(e.At), e.Node, e.What)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newIncidentsAckCmd(cf *clusterFlags) *cobra.Command {
	var (
		who, note string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "ack ID [--by NAME] [--note TEXT] [--json]",
		Short: "Acknowledge an incident: a person acts on it (a bot held after rejected credentials is retried; a data incident is closed)",
		Args:  exactArgs(1, "an incident id (see 'botctl incidents list')"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if who == "" {
				if u, err := user.Current(); err == nil {
					who = u.Username
				} else {
					who = os.Getenv("USER")
				}
			}
			if who == "" {
				return usageErrorf("who acknowledges? give --by NAME")
			}
			return cf.incidents(cmd, func(ctx context.Context, s *incident.Store) error {
				i, err := s.Ack(ctx, args[0], who, note)
				if errors.Is(err, incident.ErrNotFound) {
					return usageErrorf("%v", err)
				}
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), viewOf(i, time.Now()))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "incident %s acknowledged by %s (state %s)\n", i.ID, who, i.State)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&who, "by", "", "who acknowledges (default: the current user)")
	cmd.Flags().StringVar(&note, "note", "", "what was done")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the incident after the ack as JSON (as list --json prints each)")
	return cmd
}

func newIncidentsReportCmd(cf *clusterFlags) *cobra.Command {
	var (
		f      incidentFilter
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "report [--bot ID] [--since 7d] [--json]",
		Short: "Per bot: median and p90 of T1, T2 (automatic step and a person's ack apart), T3, the self-heal rate (and over 30 days) and the downtime",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			now := time.Now()
			flt, err := f.filter(now)
			if err != nil {
				return err
			}
			since := flt.Since
			if monthFrom := now.Add(-incident.Month); !flt.Since.IsZero() && monthFrom.Before(flt.Since) {
				flt.Since = monthFrom // the month's self-heal rate reads a month back
			}
			return cf.incidents(cmd, func(ctx context.Context, s *incident.Store) error {
				all, err := s.List(ctx, flt)
				if err != nil {
					return err
				}
				rep := incident.Summarize(all, since, now)
				if asJSON {
					if rep == nil {
						rep = []incident.Report{}
					}
					return printJSON(cmd.OutOrStdout(), map[string]any{"bots": rep})
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "BOT\tINCIDENTS\tOPEN\tT1 p50/p90\tT2 AUTO p50/p90\tT2 ACK p50/p90\tT3 p50/p90\tSELF-HEAL\tSELF-HEAL 30d\tDOWNTIME")
				for _, r := range rep {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%.0f%% (%d/%d)\t%.0f%% (%d/%d)\t%s\n", r.Bot, r.Incidents, r.Open,
						pair(r.T1), pair(r.T2Auto), pair(r.T2Human), pair(r.T3), 100*r.SelfHealRate, r.SelfHealed, r.Incidents,
						100*r.SelfHealMonth, r.MonthSelfHealed, r.MonthIncidents,
						(time.Duration(r.DowntimeSeconds * float64(time.Second))).Round(time.Millisecond))
				}
				if len(rep) == 0 {
					fmt.Fprintln(tw, "(no incidents)")
				}
				return tw.Flush()
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: {\"bots\":[…]}")
	return cmd
}

func pair(s incident.Spread) string {
	if s.N == 0 {
		return "-"
	}
	d := func(v float64) string {
		return time.Duration(v * float64(time.Second)).Round(time.Millisecond).String()
	}
	return d(s.Median) + "/" + d(s.P90)
}
