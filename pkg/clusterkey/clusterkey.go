// Package clusterkey is the cluster key: the one secret every node reads
// from its config key secrets.key_file, under which the secrets kept in
// etcd (the bots' secrets of the bot registry, pkg/fleet) are encrypted.
//
// The key file holds 64 hexadecimal characters, 32 random bytes, and
// nothing else but surrounding white space:
//
//	openssl rand -hex 32 > /etc/botctl/cluster.key && chmod 600 /etc/botctl/cluster.key
//
// A file every user may read is refused, as is any other content (raw
// bytes, a shorter key): the error names secrets.key_file and the file.
//
// A secret is sealed with AES-256-GCM under a fresh random nonce, the
// caller's associated data (the bot id: a sealed secret moved to another
// bot's record does not open) authenticated with it. A sealed value
// carries the id of the key that sealed it, the first 8 hexadecimal
// characters of the key's SHA-256 (which says nothing usable about the
// key), so that a node holding another key says which key it has and
// which one it needs, rather than that the data is corrupt.
//
// What is guaranteed: Open returns a secret only if it was sealed under
// this key with the same associated data and not altered since. No error,
// String or JSON of this package holds a key or a secret. What is not:
// rotation of the cluster key itself; a node holds one key, and the
// secrets sealed under another are refused until they are sealed again
// under its key.
package clusterkey

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ConfigKey is the configuration key that names the key file.
const ConfigKey = "secrets.key_file"

// Errors a caller acts on.
var (
	// ErrNoKey: secrets.key_file is not set, so nothing sealed can be
	// opened or sealed on this node.
	ErrNoKey = errors.New("no cluster key")
	// ErrBadKeyFile: the key file is missing, unreadable, readable by
	// every user or not 64 hexadecimal characters.
	ErrBadKeyFile = errors.New("bad cluster key file")
	// ErrWrongKey: the value was sealed under another key than this
	// node's (the error names both ids and the key file).
	ErrWrongKey = errors.New("sealed under another cluster key")
	// ErrTampered: the value names this node's key but does not open
	// under it: altered, corrupt, or moved to another record.
	ErrTampered = errors.New("sealed value altered or corrupt")
)

// Size is a key's length in bytes.
const Size = 32

// Key is a loaded cluster key. The zero Key, and a nil *Key, hold none:
// every operation fails with ErrNoKey.
type Key struct {
	id   string
	file string
	aead cipher.AEAD
}

// Load reads the key file at path (secrets.key_file). An empty path is
// ErrNoKey.
func Load(path string) (*Key, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: config key %s is not set (env BOTCTL_SECRETS_KEY_FILE): give it the cluster's key file, the same on every node", ErrNoKey, ConfigKey)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: config key %s: %w", ErrBadKeyFile, ConfigKey, err)
	}
	if fi.Mode().Perm()&0o004 != 0 {
		return nil, fmt.Errorf("%w: config key %s: %s is readable by every user (mode %s): chmod 600 it", ErrBadKeyFile, ConfigKey, path, fi.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: config key %s: %w", ErrBadKeyFile, ConfigKey, err)
	}
	return parse(raw, path)
}

// parse reads a key file's content; file names it in errors. The errors
// never quote the content.
func parse(raw []byte, file string) (*Key, error) {
	s := strings.TrimSpace(string(raw))
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != Size {
		return nil, fmt.Errorf("%w: config key %s: %s holds %d bytes that are not 64 hexadecimal characters (32 random bytes): write one with `openssl rand -hex 32 > %s`",
			ErrBadKeyFile, ConfigKey, file, len(raw), file)
	}
	block, err := aes.NewCipher(b)
	if err != nil {
		return nil, fmt.Errorf("%w: config key %s: %s: %w", ErrBadKeyFile, ConfigKey, file, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("%w: config key %s: %s: %w", ErrBadKeyFile, ConfigKey, file, err)
	}
	sum := sha256.Sum256(b)
	return &Key{id: hex.EncodeToString(sum[:4]), file: file, aead: aead}, nil
}

// ID is the key's id: the first 8 hexadecimal characters of its SHA-256.
func (k *Key) ID() string {
	if k == nil {
		return ""
	}
	return k.id
}

// File is the key file the key was read from.
func (k *Key) File() string {
	if k == nil {
		return ""
	}
	return k.file
}

// String names the key by its id and file, never its bytes.
func (k *Key) String() string {
	if k == nil || k.aead == nil {
		return "no cluster key"
	}
	return fmt.Sprintf("cluster key %s (%s %s)", k.id, ConfigKey, k.file)
}

func (k *Key) check() error {
	if k == nil || k.aead == nil {
		return fmt.Errorf("%w: config key %s is not set (env BOTCTL_SECRETS_KEY_FILE): give it the cluster's key file, the same on every node", ErrNoKey, ConfigKey)
	}
	return nil
}

// Sealed is a secret encrypted under a cluster key: what is stored. It
// holds no plain text.
type Sealed struct {
	// KeyID is the id of the key that sealed it.
	KeyID string `json:"key_id"`
	// Nonce is GCM's nonce, random per seal.
	Nonce []byte `json:"nonce"`
	// Data is the cipher text with GCM's tag.
	Data []byte `json:"data"`
}

// String says which key sealed it, nothing of the secret.
func (s Sealed) String() string { return "sealed under cluster key " + s.KeyID }

// Seal encrypts secret under k, ad authenticated with it (Open needs the
// same ad).
func (k *Key) Seal(secret, ad []byte) (Sealed, error) {
	if err := k.check(); err != nil {
		return Sealed{}, err
	}
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return Sealed{}, fmt.Errorf("seal under cluster key %s: %w", k.id, err)
	}
	return Sealed{KeyID: k.id, Nonce: nonce, Data: k.aead.Seal(nil, nonce, secret, ad)}, nil
}

// Open decrypts s: ErrWrongKey when another key sealed it, ErrTampered
// when it does not open under k with ad.
func (k *Key) Open(s Sealed, ad []byte) ([]byte, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	if s.KeyID != k.id {
		return nil, fmt.Errorf("%w: encrypted under key %s, this node has key %s (%s %s): give this node the key file the secret was sealed with, or seal it again under this key",
			ErrWrongKey, s.KeyID, k.id, ConfigKey, k.file)
	}
	if len(s.Nonce) != k.aead.NonceSize() {
		return nil, fmt.Errorf("%w: nonce of %d bytes, want %d (key %s, %s %s)", ErrTampered, len(s.Nonce), k.aead.NonceSize(), k.id, ConfigKey, k.file)
	}
	plain, err := k.aead.Open(nil, s.Nonce, s.Data, ad)
	if err != nil {
		return nil, fmt.Errorf("%w: it names key %s, this node's (%s %s), but does not decrypt under it: the stored value was changed, or belongs to another record; store the secret again",
			ErrTampered, k.id, ConfigKey, k.file)
	}
	return plain, nil
}
