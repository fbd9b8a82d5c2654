package clusterkey

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeKey writes a key file of content with mode, and returns its path.
func writeKey(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func hexKey(b byte) string {
	k := make([]byte, Size)
	for i := range k {
		k[i] = b + byte(i)
	}
	return hex.EncodeToString(k)
}

func load(t *testing.T, b byte) *Key {
	t.Helper()
	k, err := Load(writeKey(t, hexKey(b)+"\n", 0o600))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const secret = "s3cr3t-wecom-bot-secret"

// A secret sealed under a key opens under it with the same associated
// data, and under nothing else: another key says which key it needs and
// which the node has, an altered value or another record's data is
// ErrTampered. No error or String holds the secret or the key.
func TestSealOpen(t *testing.T) {
	k := load(t, 1)
	other := load(t, 2)
	if k.ID() == other.ID() || len(k.ID()) != 8 {
		t.Fatalf("ids %q, %q: want 8 hex characters, distinct", k.ID(), other.ID())
	}
	s, err := k.Seal([]byte(secret), []byte("b1"))
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyID != k.ID() {
		t.Errorf("sealed under %s, key %s", s.KeyID, k.ID())
	}
	got, err := k.Open(s, []byte("b1"))
	if err != nil || string(got) != secret {
		t.Fatalf("round trip: %q, %v", got, err)
	}
	s2, _ := k.Seal([]byte(secret), []byte("b1"))
	if string(s2.Data) == string(s.Data) {
		t.Errorf("two seals of one secret are equal: the nonce is not fresh")
	}

	var errs []error
	_, err = other.Open(s, []byte("b1"))
	errs = append(errs, err)
	if !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), "encrypted under key "+k.ID()+", this node has key "+other.ID()) ||
		!strings.Contains(err.Error(), "secrets.key_file "+other.File()) {
		t.Errorf("another key: %v", err)
	}
	_, err = k.Open(s, []byte("b2"))
	errs = append(errs, err)
	if !errors.Is(err, ErrTampered) {
		t.Errorf("another bot's data: %v, want ErrTampered", err)
	}
	bad := s
	bad.Data = append([]byte(nil), s.Data...)
	bad.Data[0] ^= 1
	_, err = k.Open(bad, []byte("b1"))
	errs = append(errs, err)
	if !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "secrets.key_file") {
		t.Errorf("altered data: %v, want ErrTampered naming secrets.key_file", err)
	}
	bad = s
	bad.Nonce = bad.Nonce[:3]
	_, err = k.Open(bad, []byte("b1"))
	errs = append(errs, err)
	if !errors.Is(err, ErrTampered) {
		t.Errorf("short nonce: %v, want ErrTampered", err)
	}
	var none *Key
	_, err = none.Open(s, []byte("b1"))
	errs = append(errs, err)
	if !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), "secrets.key_file") {
		t.Errorf("no key: %v", err)
	}
	_, err = none.Seal([]byte(secret), nil)
	errs = append(errs, err)

	raw, _ := json.Marshal(s)
	shown := []string{string(raw), s.String(), k.String(), fmt.Sprintf("%v %+v", k, s)}
	for _, e := range errs {
		if e == nil {
			t.Fatal("an error expected")
		}
		shown = append(shown, e.Error())
	}
	for _, text := range shown {
		if strings.Contains(text, secret) || strings.Contains(text, hexKey(1)) || strings.Contains(text, hexKey(2)) {
			t.Errorf("shows a secret or a key: %s", text)
		}
	}
}

// A key file that is not 64 hex characters, readable by every user,
// missing or unset is refused, naming secrets.key_file and the file.
func TestLoadRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		content string
		mode    os.FileMode
		want    error
		says    string
	}{
		"raw bytes":          {strings.Repeat("x", Size), 0o600, ErrBadKeyFile, "64 hexadecimal characters"},
		"short":              {hexKey(1)[:62], 0o600, ErrBadKeyFile, "64 hexadecimal characters"},
		"long":               {hexKey(1) + "00", 0o600, ErrBadKeyFile, "64 hexadecimal characters"},
		"empty":              {"", 0o600, ErrBadKeyFile, "openssl rand -hex 32"},
		"readable by others": {hexKey(1), 0o644, ErrBadKeyFile, "chmod 600"},
	} {
		t.Run(name, func(t *testing.T) {
			p := writeKey(t, tc.content, tc.mode)
			_, err := Load(p)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "config key secrets.key_file") ||
				!strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %v, want %v naming secrets.key_file, %s and %q", err, tc.want, p, tc.says)
			}
			if tc.content != "" && strings.Contains(err.Error(), tc.content) {
				t.Errorf("the error quotes the file: %v", err)
			}
		})
	}
	missing := filepath.Join(t.TempDir(), "nope.key")
	if _, err := Load(missing); !errors.Is(err, ErrBadKeyFile) || !strings.Contains(err.Error(), "secrets.key_file") || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing: %v", err)
	}
	if _, err := Load(""); !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), "secrets.key_file") {
		t.Errorf("unset: %v", err)
	}
	if k, err := Load(writeKey(t, "  "+strings.ToUpper(hexKey(3))+"\n\n", 0o400)); err != nil || k.ID() == "" {
		t.Errorf("upper case with white space: %v", err)
	}
}
