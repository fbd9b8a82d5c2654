package config

import (
	"fmt"
	"slices"
	"strings"
)

// Log is the process log: every subcommand's, not only serve's. The flags
// --log-level and --log-format are botctl's global flags; serve reads the
// keys from the file and the environment as it reads every other key, and
// the other subcommands read the environment.
type Log struct {
	// Level is the least severe level written: trace, debug, info, warn
	// or error. Default info.
	Level string `yaml:"level"`
	// Format is json (one JSON object a line, for a log collector) or
	// console (aligned text, coloured only on a terminal and never with
	// NO_COLOR set). Default console.
	Format string `yaml:"format"`
}

// LogLevels and LogFormats are the values log.level and log.format take.
var (
	LogLevels  = []string{"trace", "debug", "info", "warn", "error"}
	LogFormats = []string{"json", "console"}
)

// Log keys' environment variables, read by every subcommand.
const (
	LogLevelEnv  = "BOTCTL_LOG_LEVEL"
	LogFormatEnv = "BOTCTL_LOG_FORMAT"
)

func logDefaults() Log { return Log{Level: "info", Format: "console"} }

var logKeys = []Key{
	{Name: "log.level", Flag: "log-level", Usage: "least severe level logged: trace, debug, info, warn or error", set: str(func(c *Config) *string { return &c.Log.Level })},
	{Name: "log.format", Flag: "log-format", Usage: "log format: json (one object a line) or console (coloured only on a terminal, never with NO_COLOR)", set: str(func(c *Config) *string { return &c.Log.Format })},
}

func init() { Keys = append(Keys, logKeys...) }

// CheckLogLevel says what is wrong with level, a value of log.level (nil:
// nothing). Case does not matter.
func CheckLogLevel(level string) error {
	if !slices.Contains(LogLevels, strings.ToLower(level)) {
		return fmt.Errorf("%q: want %s", level, strings.Join(LogLevels, ", "))
	}
	return nil
}

// CheckLogFormat says what is wrong with format, a value of log.format.
func CheckLogFormat(format string) error {
	if !slices.Contains(LogFormats, format) {
		return fmt.Errorf("%q: want json or console", format)
	}
	return nil
}

func (c *Config) validateLog(bad func(key, format string, args ...any)) {
	if err := CheckLogLevel(c.Log.Level); err != nil {
		bad("log.level", "%v (flag --log-level, env %s)", err, LogLevelEnv)
	}
	if err := CheckLogFormat(c.Log.Format); err != nil {
		bad("log.format", "%v (flag --log-format, env %s)", err, LogFormatEnv)
	}
}
