package config

import (
	"strings"
	"testing"
)

// log.level and log.format come from the file and the environment
// (BOTCTL_LOG_LEVEL, BOTCTL_LOG_FORMAT), the environment winning.
func TestLogKeysFileThenEnv(t *testing.T) {
	p := writeFile(t, "log:\n  level: debug\n  format: json\n")
	cfg, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Log != (Log{Level: "debug", Format: "json"}) {
		t.Fatalf("log = %+v, want the file's", cfg.Log)
	}
	cfg, err = Load(p, []string{"BOTCTL_LOG_LEVEL=warn", "BOTCTL_LOG_FORMAT=console"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Log != (Log{Level: "warn", Format: "console"}) {
		t.Fatalf("log = %+v, want the environment's", cfg.Log)
	}
	if d := Defaults().Log; d != (Log{Level: "info", Format: "console"}) {
		t.Fatalf("default log = %+v", d)
	}
}

// A bad level or format is refused at start, naming the key, its flag
// and its variable.
func TestLogKeysValidated(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"log:\n  level: loud\n", `config key log.level: "loud": want trace, debug, info, warn, error (flag --log-level, env BOTCTL_LOG_LEVEL)`},
		{"log:\n  format: text\n", `config key log.format: "text": want json or console (flag --log-format, env BOTCTL_LOG_FORMAT)`},
	} {
		cfg, err := Load(writeFile(t, tc.file), nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Bots = []Bot{{ID: "b1", Secret: "s"}}
		err = cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.file, err, tc.want)
		}
	}
	cfg := Defaults()
	cfg.Log.Level = "DEBUG"
	cfg.Bots = []Bot{{ID: "b1", Secret: "s"}}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("level in capitals: %v", err)
	}
}
