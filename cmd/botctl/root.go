package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/redact"
	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

// globalFlags are the flags every subcommand shares.
type globalFlags struct {
	logLevel  string
	logFormat string
}

var globals globalFlags

// globalKeyFlags are the config keys whose flag is a global one, defined
// by the root command: serve reads them from there, not from flags of
// its own.
var globalKeyFlags = map[string]bool{"log-level": true, "log-format": true}

// logTimeFormat is RFC 3339 with milliseconds: two lines of one second
// stay in order, and the offset says the zone.
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

func init() { zerolog.TimeFieldFormat = logTimeFormat }

// logger is the process logger, configured by the root command's flags
// and the environment before any subcommand runs, and again by serve from
// its configuration. Every line goes through redact.Writer: a URL
// credential never reaches the log, whoever logged it.
var logger = zerolog.New(redact.Writer(os.Stderr)).With().Timestamp().Logger()

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "botctl",
		Short:         "Keep WeCom AI bots answering through crashes, deploys and faults",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			level, format, err := logSettings(cmd, os.Environ())
			if err != nil {
				return err
			}
			logger = newLogger(level, format, os.Stderr, stderrColour())
			return nil
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath())}
	})
	root.PersistentFlags().StringVar(&globals.logLevel, "log-level", "info", fmt.Sprintf("least severe level logged: trace, debug, info, warn or error (config key log.level, env %s)", config.LogLevelEnv))
	root.PersistentFlags().StringVar(&globals.logFormat, "log-format", "console", fmt.Sprintf("log format: json (one object a line) or console (coloured only on a terminal, never with NO_COLOR) (config key log.format, env %s)", config.LogFormatEnv))
	root.AddCommand(newVersionCmd(), newSimCmd(), newInfraCmd(), newServeCmd(), newStatusCmd(), newBotsCmd(), newTasksCmd(), newIncidentsCmd(), newDrillCmd(), newConfigCmd(), newExecSandboxCmd(), newFeedbackCmd(), newSendCmd())
	return root
}

// logSettings is the log level and format before any configuration file
// is read: the flag when given, else the environment, else the default.
// serve applies its file's log keys later (the flag still wins).
func logSettings(cmd *cobra.Command, environ []string) (level, format string, err error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	pick := func(flag, envName string, check func(string) error) (string, error) {
		f := cmd.Flags().Lookup(flag)
		if f == nil { // not under the root command (a test's bare command)
			f = cmd.Root().PersistentFlags().Lookup(flag)
		}
		if v, ok := env[envName]; ok && !f.Changed {
			if err := check(v); err != nil {
				return "", usageErrorf("$%s %v", envName, err)
			}
			return v, nil
		}
		if err := check(f.Value.String()); err != nil {
			return "", usageErrorf("--%s %v", flag, err)
		}
		return f.Value.String(), nil
	}
	if level, err = pick("log-level", config.LogLevelEnv, config.CheckLogLevel); err != nil {
		return "", "", err
	}
	if format, err = pick("log-format", config.LogFormatEnv, config.CheckLogFormat); err != nil {
		return "", "", err
	}
	return level, format, nil
}

// stderrColour says whether the console log may be coloured: only on a
// terminal, and never with NO_COLOR set to anything (no-color.org).
func stderrColour() bool {
	return useColour(isatty.IsTerminal(os.Stderr.Fd()) || isatty.IsCygwinTerminal(os.Stderr.Fd()), os.Getenv("NO_COLOR"))
}

func useColour(terminal bool, noColor string) bool { return terminal && noColor == "" }

// newLogger is a logger of level and format (checked by the caller:
// config.CheckLogLevel, CheckLogFormat) writing to w through
// redact.Writer, with RFC 3339 millisecond timestamps.
func newLogger(level, format string, w io.Writer, colour bool) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	var l zerolog.Logger
	if format == "json" {
		l = zerolog.New(redact.Writer(w))
	} else {
		l = zerolog.New(zerolog.ConsoleWriter{Out: redact.Writer(w), TimeFormat: logTimeFormat, NoColor: !colour})
	}
	return l.Level(lvl).With().Timestamp().Logger()
}
