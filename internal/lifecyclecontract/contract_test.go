package lifecyclecontract_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/lifecyclecontract"
	"github.com/botctl/botctl/internal/lifecyclefake"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// The fake serves every consumer's seam, as *task.Lifecycle does.
var (
	_ access.Records              = (*lifecyclefake.Fake)(nil)
	_ pusher.Deliveries           = (*lifecyclefake.Fake)(nil)
	_ health.Records              = (*lifecyclefake.Fake)(nil)
	_ lifecyclecontract.Lifecycle = (*lifecyclefake.Fake)(nil)
	_ lifecyclecontract.Lifecycle = (*task.Lifecycle)(nil)
)

func TestContractFake(t *testing.T) {
	lifecyclecontract.Run(t, func(t *testing.T) lifecyclecontract.Subject {
		f := lifecyclefake.New("n1", nil)
		return lifecyclecontract.Subject{
			Lifecycle: f,
			Enqueue:   f.Enqueue,
			Locked:    f.Locked,
			Undelivered: func(bot string) []string {
				ids, _ := f.UndeliveredTasks(context.Background(), bot)
				return ids
			},
			Notices: func(bot string) <-chan lifecyclecontract.Notice {
				in, stop := f.Notices(bot)
				t.Cleanup(stop)
				out := make(chan lifecyclecontract.Notice, 256)
				go func() {
					for n := range in {
						out <- lifecyclecontract.Notice{ID: n.ID, Record: n.Record}
					}
				}()
				return out
			},
		}
	})
}

func TestContractJetStream(t *testing.T) {
	lifecyclecontract.Run(t, func(t *testing.T) lifecyclecontract.Subject {
		env := testenv.StartJetStream(t, jetstream.Options{})
		lc := task.NewLifecycle(env.Store, "n1", zerolog.Nop())
		ctx := context.Background()
		return lifecyclecontract.Subject{
			Lifecycle: lc,
			Enqueue: func(m task.Message) error {
				raw, err := json.Marshal(m)
				if err != nil {
					return err
				}
				_, err = env.Store.PublishTask(ctx, m.Bot, m.Chat, m.MsgID, raw)
				return err
			},
			Locked: func(bot, chat string) bool {
				msg, err := env.Store.ConversationTask(ctx, bot, chat)
				if err != nil {
					t.Fatal(err)
				}
				return msg != nil
			},
			Undelivered: func(bot string) []string {
				ids, err := env.Store.UndeliveredTasks(ctx, bot)
				if err != nil {
					t.Fatal(err)
				}
				return ids
			},
			Notices: func(bot string) <-chan lifecyclecontract.Notice {
				out := make(chan lifecyclecontract.Notice, 256)
				sub, err := env.Conn.Subscribe(env.Store.Names().NoticeSubject(bot), func(m *nats.Msg) {
					id, r, _ := task.NoticeOf(m)
					select {
					case out <- lifecyclecontract.Notice{ID: id, Record: r}:
					default:
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { sub.Unsubscribe() })
				if err := env.Conn.FlushTimeout(10 * time.Second); err != nil {
					t.Fatal(err)
				}
				return out
			},
		}
	})
}
