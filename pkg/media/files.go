package media

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/botctl/botctl/pkg/retry"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// ErrGone: an attachment is no longer in the media store (older than
// its TTL, or deleted). Retrying will not bring it back.
var ErrGone = errors.New("media: attachment no longer stored")

// ReadAgainFor is how long an attachment is read again while the store
// answers that it is missing or that its chunks do not match its digest.
// A task's objects are stored before the task is published, so such an
// answer moments later comes from a replica not yet caught up (the object
// store reads through direct gets, which any replica of an R3 stream
// answers), not from an object gone. 0 or less: read once.
var ReadAgainFor = 5 * time.Second

// Materialize copies each attachment from obs into a new directory under
// dir ("" is os.TempDir()), as <n>-<name>, and returns the files' paths in
// order and a cleanup that removes the directory. On error nothing is
// left behind. An attachment still missing from the store after
// ReadAgainFor is ErrGone.
func Materialize(ctx context.Context, obs natsjs.ObjectStore, dir, taskID string, atts []task.Attachment) ([]string, func(), error) {
	tmp, err := os.MkdirTemp(dir, "botctl-"+taskID+"-")
	if err != nil {
		return nil, func() {}, fmt.Errorf("media: temp dir for task %s: %w", taskID, err)
	}
	cleanup := func() { os.RemoveAll(tmp) }
	paths := make([]string, 0, len(atts))
	for i, a := range atts {
		name := safeName(a.Name)
		if name == "" {
			name = a.Kind
		}
		p := filepath.Join(tmp, strconv.Itoa(i+1)+"-"+name)
		err := retry.Until(ctx, nil, retry.New(100*time.Millisecond, time.Second), max(ReadAgainFor, 1),
			func() error { return obs.GetFile(ctx, a.Key, p) },
			func(err error) bool {
				return !errors.Is(err, natsjs.ErrObjectNotFound) && !errors.Is(err, natsjs.ErrDigestMismatch)
			})
		if err != nil {
			cleanup()
			if errors.Is(err, natsjs.ErrObjectNotFound) {
				return nil, func() {}, fmt.Errorf("%w: %s %q (%s)", ErrGone, a.Kind, a.Name, a.Key)
			}
			return nil, func() {}, fmt.Errorf("media: read %s of task %s: %w", a.Key, taskID, err)
		}
		paths = append(paths, p)
	}
	return paths, cleanup, nil
}
