package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/redact"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

// globalFlags are the flags every subcommand shares.
type globalFlags struct {
	logLevel  string
	logFormat string
}

var globals globalFlags

// logger is the process logger, configured by the root command's flags
// before any subcommand runs. Every line goes through redact.Writer: a URL
// credential never reaches the log, whoever logged it.
var logger = zerolog.New(redact.Writer(os.Stderr)).With().Timestamp().Logger()

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "botctl",
		Short:         "Keep WeCom AI bots answering through crashes, deploys and faults",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			l, err := newLogger(globals.logLevel, globals.logFormat)
			if err != nil {
				return err
			}
			logger = l
			return nil
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath())}
	})
	root.PersistentFlags().StringVar(&globals.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	root.PersistentFlags().StringVar(&globals.logFormat, "log-format", "console", "log format: json or console")
	root.AddCommand(newVersionCmd(), newSimCmd(), newInfraCmd(), newServeCmd(), newStatusCmd(), newBotsCmd(), newTasksCmd(), newIncidentsCmd(), newDrillCmd(), newConfigCmd(), newExecSandboxCmd(), newFeedbackCmd(), newSendCmd())
	return root
}

func newLogger(level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || level == "" {
		return zerolog.Logger{}, usageErrorf("--log-level %q: want trace, debug, info, warn or error", level)
	}
	var l zerolog.Logger
	switch format {
	case "json":
		l = zerolog.New(redact.Writer(os.Stderr))
	case "console":
		l = zerolog.New(zerolog.ConsoleWriter{Out: redact.Writer(os.Stderr), TimeFormat: time.RFC3339})
	default:
		return zerolog.Logger{}, usageErrorf("--log-format %q: want json or console", format)
	}
	return l.Level(lvl).With().Timestamp().Logger(), nil
}
