package worker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/media"
	"github.com/botctl/botctl/pkg/task"
)

// attachments copies the task's files from the media bucket into a
// temporary directory of this node for the backend, and returns them as
// the backend sees them with a cleanup that removes the directory (call
// it after the run, whatever its end). A task without files has none and
// touches nothing.
func (w *Worker) attachments(ctx context.Context, m task.Message) ([]ai.Attachment, func(), error) {
	if len(m.Attachments) == 0 {
		return nil, func() {}, nil
	}
	gctx, cancel := context.WithTimeout(ctx, storeCallTimeout*time.Duration(len(m.Attachments)))
	defer cancel()
	paths, cleanup, err := media.Materialize(gctx, w.buckets.Media(), w.cfg.MediaDir, m.TaskID, m.Attachments)
	if err != nil {
		return nil, cleanup, err
	}
	out := make([]ai.Attachment, len(m.Attachments))
	for i, a := range m.Attachments {
		out[i] = ai.Attachment{Kind: a.Kind, Name: a.Name, MIME: a.MIME, Size: a.Size, Width: a.Width, Height: a.Height,
			Quoted: a.Quoted, Path: paths[i]}
	}
	return out, cleanup, nil
}

// turn is the user's side of the exchange kept in the conversation's
// context: the question, and a line naming the files it came with (a
// later question may refer to them; their bytes are not kept).
func turn(m task.Message) string {
	if len(m.Attachments) == 0 {
		return m.Question
	}
	names := make([]string, len(m.Attachments))
	for i, a := range m.Attachments {
		names[i] = fmt.Sprintf("%s %s", a.Kind, a.Name)
	}
	line := "[sent: " + strings.Join(names, ", ") + "]"
	if m.Question == "" {
		return line
	}
	return m.Question + "\n" + line
}
