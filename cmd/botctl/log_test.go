package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// rfc3339Millis is a timestamp with milliseconds and a zone.
var rfc3339Millis = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)`)

// Both formats stamp each line in RFC 3339 with milliseconds.
func TestLogTimestampsRFC3339Millis(t *testing.T) {
	var b bytes.Buffer
	l := newLogger("info", "json", &b, false)
	l.Info().Msg("hello")
	var line struct{ Time string }
	if err := json.Unmarshal(b.Bytes(), &line); err != nil {
		t.Fatalf("json line %q: %v", b.String(), err)
	}
	if !rfc3339Millis.MatchString(line.Time) {
		t.Fatalf("time %q: want RFC 3339 with milliseconds", line.Time)
	}
	if _, err := time.Parse(time.RFC3339Nano, line.Time); err != nil {
		t.Fatalf("time %q is not RFC 3339: %v", line.Time, err)
	}
	b.Reset()
	l = newLogger("info", "console", &b, false)
	l.Info().Msg("hello")
	if !rfc3339Millis.MatchString(b.String()) {
		t.Fatalf("console line %q: want an RFC 3339 timestamp with milliseconds", b.String())
	}
}

// The console format colours only when asked to (a terminal, no
// NO_COLOR): piped output carries no escape codes.
func TestConsoleLogColourOnlyOnTerminal(t *testing.T) {
	for _, tc := range []struct {
		terminal bool
		noColor  string
		want     bool
	}{
		{true, "", true},
		{false, "", false},
		{true, "1", false},
		{false, "1", false},
	} {
		if got := useColour(tc.terminal, tc.noColor); got != tc.want {
			t.Errorf("useColour(terminal %v, NO_COLOR %q) = %v, want %v", tc.terminal, tc.noColor, got, tc.want)
		}
	}
	for _, colour := range []bool{false, true} {
		var b bytes.Buffer
		l := newLogger("info", "console", &b, colour)
		l.Info().Str("bot", "b1").Msg("hello")
		if got := strings.Contains(b.String(), "\x1b["); got != colour {
			t.Errorf("colour %v: escape codes in %q: %v", colour, b.String(), got)
		}
	}
}

// The level and format before a file is read: the flag, else
// BOTCTL_LOG_LEVEL / BOTCTL_LOG_FORMAT, else the default; a bad value
// names where it came from.
func TestLogSettingsFlagEnvDefault(t *testing.T) {
	run := func(args, environ []string) (string, string, error) {
		t.Helper()
		root := newRootCmd()
		var sub *cobra.Command
		for _, c := range root.Commands() {
			if c.Name() == "version" {
				sub = c
			}
		}
		if err := root.PersistentFlags().Parse(args); err != nil {
			t.Fatal(err)
		}
		return logSettings(sub, environ)
	}
	for _, tc := range []struct {
		args, env          []string
		level, format, err string
	}{
		{nil, nil, "info", "console", ""},
		{nil, []string{"BOTCTL_LOG_LEVEL=debug", "BOTCTL_LOG_FORMAT=json"}, "debug", "json", ""},
		{[]string{"--log-level", "warn"}, []string{"BOTCTL_LOG_LEVEL=debug"}, "warn", "console", ""},
		{nil, []string{"BOTCTL_LOG_LEVEL=loud"}, "", "", `$BOTCTL_LOG_LEVEL "loud": want trace, debug, info, warn, error`},
		{nil, []string{"BOTCTL_LOG_FORMAT=text"}, "", "", `$BOTCTL_LOG_FORMAT "text": want json or console`},
		{[]string{"--log-format", "xml"}, nil, "", "", `--log-format "xml": want json or console`},
	} {
		level, format, err := run(tc.args, tc.env)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%v %v: error %v, want %q", tc.args, tc.env, err, tc.err)
			}
			continue
		}
		if err != nil || level != tc.level || format != tc.format {
			t.Errorf("%v %v: %q %q %v, want %q %q", tc.args, tc.env, level, format, err, tc.level, tc.format)
		}
	}
}

// misspeltVar is election.ttl's variable misspelt (named so that
// pkg/config's scan of the tree for variables botctl reads skips it).
const misspeltVar = "BOTCTL_ELECTION_TLL"

// serve takes log.format from its file and the environment, its piped
// console log has no colour, and it warns about an unknown BOTCTL_*
// variable at start.
func TestServeLogKeysFromFileAndEnv(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        []string
		check      func(line string) bool
	}{
		{"json from the file", "log:\n  format: json\n", nil, func(l string) bool {
			var m map[string]any
			return json.Unmarshal([]byte(l), &m) == nil && rfc3339Millis.MatchString(m["time"].(string))
		}},
		{"console from the env, piped", "log:\n  format: json\n", []string{"BOTCTL_LOG_FORMAT=console"}, func(l string) bool {
			return !strings.HasPrefix(l, "{") && !strings.Contains(l, "\x1b[") && rfc3339Millis.MatchString(l)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append(tc.env, "NO_COLOR=", misspeltVar+"=20s")
			p := startBotctl(t, env, "serve", "--demo", "--config", write(t, tc.file), "--listen", "127.0.0.1:0",
				"--demo-listen", "127.0.0.1:0", "--data-dir", t.TempDir())
			deadline := time.Now().Add(60 * time.Second)
			for {
				for _, l := range strings.Split(p.output(), "\n") {
					if strings.Contains(l, "embedded etcd running") {
						if !tc.check(l) {
							t.Fatalf("log line %q", l)
						}
						// A misspelt variable was warned about before, naming the nearest.
						if !strings.Contains(p.output(), "$"+misspeltVar+" is set but botctl reads no such variable: it is ignored; did you mean $BOTCTL_ELECTION_TTL?") {
							t.Fatalf("no warning about $%s:\n%s", misspeltVar, p.output())
						}
						return
					}
				}
				select {
				case <-p.exited:
					t.Fatalf("serve exited: %v\n%s", p.err, p.output())
				case <-time.After(100 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatalf("no 'embedded etcd running' line in 60 s:\n%s", p.output())
				}
			}
		})
	}
}
