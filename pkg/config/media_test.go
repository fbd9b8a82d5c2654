package config

import (
	"strings"
	"testing"
)

// media.max_store_bytes has a bounded default, is read from the file and
// the environment, and a value that would leave the store unbounded or
// too small for the largest file is refused naming the key.
func TestMediaMaxStoreBytes(t *testing.T) {
	if d := Defaults(); d.Media.MaxStoreBytes != 4<<30 {
		t.Fatalf("default media.max_store_bytes = %d, want 4 GiB", d.Media.MaxStoreBytes)
	}
	p := writeFile(t, `
media:
  max_store_bytes: 1073741824
`)
	cfg, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Media.MaxStoreBytes != 1<<30 {
		t.Fatalf("read %d from the file", cfg.Media.MaxStoreBytes)
	}
	cfg, err = Load(p, []string{"BOTCTL_MEDIA_MAX_STORE_BYTES=2147483648"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Media.MaxStoreBytes != 2<<30 {
		t.Fatalf("read %d from the environment", cfg.Media.MaxStoreBytes)
	}
	if _, err := Load(writeFile(t, "media:\n  max_store_bytes: lots\n"), nil); err == nil || !strings.Contains(err.Error(), "media.max_store_bytes") {
		t.Fatalf("a word as media.max_store_bytes: %v, want an error naming the key", err)
	}
	for _, n := range []int64{0, -1, DefaultMediaMaxBytes - 1} {
		cfg := Defaults()
		cfg.Bots = []Bot{{ID: "b1", Secret: "s"}}
		cfg.Media.MaxStoreBytes = n
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "config key media.max_store_bytes") {
			t.Errorf("media.max_store_bytes %d: %v, want an error naming the key", n, err)
		}
	}
}
