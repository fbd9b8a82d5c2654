package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/spf13/cobra"
)

type simFlags struct {
	listen        string
	bots          []string
	streamWindow  time.Duration
	rateLimit     int
	rateWindow    time.Duration
	hourlyLimit   int
	hourlyWindow  time.Duration
	quotaMode     string
	welcomeWindow time.Duration
	updateWindow  time.Duration
	mediaLifetime time.Duration
	relaxReqID    bool
	record        bool
}

// newSimCmd runs the WeCom simulator (pkg/wecomsim) until SIGINT/SIGTERM.
func newSimCmd() *cobra.Command {
	var f simFlags
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the WeCom simulator: a strict AI-bot long-connection server with a control API",
		Long: `Run a WeCom AI-bot long-connection server as strict as the real one.

Bots connect with a WebSocket to ws://ADDR/; the control API (JSON over HTTP
under http://ADDR/control/) plays the users, injects faults and reads
transcripts and stats. The control API is unauthenticated: keep --listen on
a loopback address. See docs/simulator.md.`,
		Example: `  BOTCTL_BOT_DEMO_SECRET=demo-secret botctl sim --listen 127.0.0.1:8390 --bot demo
  botctl sim --listen 127.0.0.1:0 --bot a --bot b --stream-window 30s --rate-limit 10   # with $BOTCTL_BOT_A_SECRET, $BOTCTL_BOT_B_SECRET`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSim(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8390", "address to listen on (host:port; port 0 picks a free one)")
	fl.StringArrayVar(&f.bots, "bot", nil, "bot as ID with $BOTCTL_BOT_<ID>_SECRET set (repeatable; ID:SECRET puts the secret in argv: tests only); more can be added with POST /control/bots")
	fl.DurationVar(&f.streamWindow, "stream-window", wecomsim.DefaultStreamWindow, "a stream must finish within this from its first frame")
	fl.IntVar(&f.rateLimit, "rate-limit", wecomsim.DefaultRateLimit, "frames accepted per conversation per --rate-window")
	fl.DurationVar(&f.rateWindow, "rate-window", wecomsim.DefaultRateWindow, "sliding window of --rate-limit")
	fl.IntVar(&f.hourlyLimit, "hourly-limit", wecomsim.DefaultHourlyLimit, "frames accepted per conversation per --hourly-window, beside --rate-limit")
	fl.DurationVar(&f.hourlyWindow, "hourly-window", wecomsim.DefaultHourlyWindow, "sliding window of --hourly-limit")
	fl.StringVar(&f.quotaMode, "quota-mode", wecomsim.QuotaRefuse, "what a frame over the quota gets: refuse (errcode 45009) or drop (acked 0, never shown, counted quota_drops)")
	fl.DurationVar(&f.welcomeWindow, "welcome-window", wecomsim.DefaultWelcomeWindow, "how long after enter_chat a welcome reply is accepted")
	fl.DurationVar(&f.updateWindow, "update-window", wecomsim.DefaultUpdateWindow, "how long after template_card_event a card update is accepted")
	fl.DurationVar(&f.mediaLifetime, "media-lifetime", wecomsim.DefaultMediaLifetime, "how long the URL of a media item a user sends works")
	fl.BoolVar(&f.relaxReqID, "relax-req-id", false, "accept a reply's req_id on any connection of the bot (WeCom binds it to one connection)")
	fl.BoolVar(&f.record, "record", false, "record callbacks written and frames accepted, with their times, for GET /control/recording (benchmarks; grows with traffic until drained)")
	return cmd
}

type simBot struct{ id, secret string }

func (f simFlags) validate() ([]simBot, error) {
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return nil, usageErrorf("--listen %q: want host:port, e.g. 127.0.0.1:8390", f.listen)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"--stream-window", f.streamWindow},
		{"--rate-window", f.rateWindow},
		{"--hourly-window", f.hourlyWindow},
		{"--welcome-window", f.welcomeWindow},
		{"--update-window", f.updateWindow},
		{"--media-lifetime", f.mediaLifetime},
	} {
		if d.v <= 0 {
			return nil, usageErrorf("%s %v: must be a positive duration such as 30s or 6m", d.name, d.v)
		}
	}
	if f.rateLimit <= 0 {
		return nil, usageErrorf("--rate-limit %d: must be a positive number of frames", f.rateLimit)
	}
	if f.hourlyLimit <= 0 {
		return nil, usageErrorf("--hourly-limit %d: must be a positive number of frames", f.hourlyLimit)
	}
	if f.quotaMode != wecomsim.QuotaRefuse && f.quotaMode != wecomsim.QuotaDrop {
		return nil, usageErrorf("--quota-mode %q: want refuse or drop", f.quotaMode)
	}
	var bots []simBot
	seen := make(map[string]bool)
	for _, spec := range f.bots {
		id, secret, found := strings.Cut(spec, ":")
		if !found && id != "" {
			// The secret from the environment: never in argv.
			secret = os.Getenv(config.BotSecretEnv(id))
			if secret == "" {
				return nil, usageErrorf("--bot %s: no secret: set $%s to it (--bot %s:SECRET works too, but puts the secret in argv, which every user of the machine can read: tests only)", id, config.BotSecretEnv(id), id)
			}
		}
		if id == "" || secret == "" {
			// Never echo the value: it may hold a secret.
			return nil, usageErrorf("--bot: want ID with $BOTCTL_BOT_<ID>_SECRET set, or ID:SECRET with both parts non-empty (got a value of %d characters)", len(spec))
		}
		if seen[id] {
			return nil, usageErrorf("--bot %s: given twice; each bot id once", id)
		}
		seen[id] = true
		bots = append(bots, simBot{id, secret})
	}
	return bots, nil
}

func runSim(cmd *cobra.Command, f simFlags) error {
	bots, err := f.validate()
	if err != nil {
		return err
	}
	log := logger.With().Str("cmd", "sim").Logger()
	srv := wecomsim.New(wecomsim.Config{
		StreamWindow:      f.streamWindow,
		RateLimit:         f.rateLimit,
		RateWindow:        f.rateWindow,
		HourlyLimit:       f.hourlyLimit,
		HourlyWindow:      f.hourlyWindow,
		QuotaMode:         f.quotaMode,
		WelcomeWindow:     f.welcomeWindow,
		UpdateWindow:      f.updateWindow,
		MediaLifetime:     f.mediaLifetime,
		RelaxReqIDBinding: f.relaxReqID,
		Record:            f.record,
		Logger:            logger,
	})
	for _, b := range bots {
		if err := srv.AddBot(b.id, b.secret); err != nil {
			return fmt.Errorf("--bot %s: %w", b.id, err)
		}
	}
	if len(bots) == 0 {
		log.Info().Msg("no --bot given: add bots with POST /control/bots")
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", f.listen, err)
	}
	addr := ln.Addr().String()
	if !isLoopback(ln.Addr()) {
		log.Warn().Str("addr", addr).Msg("listening on a non-loopback address: the control API is unauthenticated, anyone who can reach it can read transcripts and add bots")
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(cmd.OutOrStdout(), "wecomsim listening on ws://%s/ (control API http://%s/control/)\n", addr, addr)
	log.Info().Str("addr", addr).Int("bots", len(bots)).
		Str("stream_window", f.streamWindow.String()).Int("rate_limit", f.rateLimit).Str("rate_window", f.rateWindow.String()).
		Bool("relax_req_id", f.relaxReqID).Msg("simulator ready")

	select {
	case <-cmd.Context().Done():
		log.Info().Msg("signal received: shutting down")
	case err := <-served:
		srv.Close()
		if err != nil {
			return fmt.Errorf("serve %s: %w", addr, err)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Warn().Err(err).Msg("shutdown")
	}
	if err := <-served; err != nil {
		return fmt.Errorf("serve %s: %w", addr, err)
	}
	log.Info().Msg("simulator stopped")
	return nil
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
