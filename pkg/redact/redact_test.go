package redact

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nats://botctl:s3cret@10.0.0.1:4222", "nats://<redacted>@10.0.0.1:4222"},
		{"nats://a:b@h1:4222,nats://c:d@h2:4222", "nats://<redacted>@h1:4222,nats://<redacted>@h2:4222"},
		{"https://root:pw@etcd-1:2379", "https://<redacted>@etcd-1:2379"},
		{`dial "wss://x:y@openws.example/ws?token=abc&bot=b1": refused`, `dial "wss://<redacted>@openws.example/ws?token=<redacted>&bot=b1": refused`},
		{"https://hooks.example/send?key=693a-91f2&x=1", "https://hooks.example/send?key=<redacted>&x=1"},
		{"http://h/?access_token=t1&api_key=k2&client_secret=s3&password=p4", "http://h/?access_token=<redacted>&api_key=<redacted>&client_secret=<redacted>&password=<redacted>"},
		{"http://127.0.0.1:8390/control/history?bot_id=b&since=1", "http://127.0.0.1:8390/control/history?bot_id=b&since=1"},
		{"mail alice@example.com about nats://h:4222", "mail alice@example.com about nats://h:4222"},
		{`{"url":"nats://u:p@h:1"}`, `{"url":"nats://<redacted>@h:1"}`},
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestErrorKeepsChain(t *testing.T) {
	err := Error(fmt.Errorf("connect NATS nats://u:p@h:4222: %w", fs.ErrNotExist))
	if strings.Contains(err.Error(), "u:p") || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%v (is ErrNotExist: %v)", err, errors.Is(err, fs.ErrNotExist))
	}
	if Error(nil) != nil {
		t.Fatal("Error(nil) != nil")
	}
}

func TestWriterRedactsLogLines(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(Writer(&buf))
	log.Info().Str("url", "nats://u:hunter2@h:4222").Err(errors.New(`Get "http://h/x?token=hunter2": EOF`)).Msg("connect")
	cw := zerolog.New(zerolog.ConsoleWriter{Out: Writer(&buf), NoColor: true})
	cw.Warn().Str("webhook", "https://hooks.example/send?key=hunter2").Msg("alert")
	if strings.Contains(buf.String(), "hunter2") {
		t.Fatalf("secret in log:\n%s", buf.String())
	}
	if strings.Count(buf.String(), Mask) != 3 {
		t.Fatalf("want 3 masks:\n%s", buf.String())
	}
}
