package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

// `botctl tasks show` lists the files a task came with.
func TestTasksShowListsFiles(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	r := task.New("b", "m1", time.Now())
	r.Chat, r.ChatType, r.User = "alice", "single", "alice"
	r.Attachments = []task.Attachment{{Kind: "image", Name: "cat.png", MIME: "image/png", Size: 2345, Width: 64, Height: 48, Key: r.ID + "/0"}}
	if _, err := task.NewLifecycle(env.Store, "leader", zerolog.Nop()).Open(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "tasks", "show", r.ID, "--nats", env.Server.ClientURL())
	if err != nil {
		t.Fatalf("show: %v\n%s", err, out)
	}
	if want := `file      image "cat.png" image/png, 2345 bytes, 64×48 (` + r.ID + "/0)"; !strings.Contains(out, want) {
		t.Fatalf("show:\n%s\nwant a line %q", out, want)
	}
}
