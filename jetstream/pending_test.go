package jetstream

import (
	"slices"
	"testing"
)

func TestPendingIndex(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{})
	if ids, err := st.UndeliveredTasks(ctx, "b1"); err != nil || len(ids) != 0 {
		t.Fatalf("empty index: %v %v", ids, err)
	}
	for _, m := range []struct{ bot, id string }{{"b1", "t_1"}, {"b1", "t_2"}, {"b2", "t_3"}, {"b.with.dots", "t_4"}} {
		if err := st.MarkUndelivered(ctx, m.bot, m.id); err != nil {
			t.Fatal(err)
		}
	}
	st.MarkUndelivered(ctx, "b1", "t_1") // idempotent
	ids, err := st.UndeliveredTasks(ctx, "b1")
	slices.Sort(ids)
	if err != nil || !slices.Equal(ids, []string{"t_1", "t_2"}) {
		t.Fatalf("b1 pending = %v %v", ids, err)
	}
	if ids, _ := st.UndeliveredTasks(ctx, "b.with.dots"); !slices.Equal(ids, []string{"t_4"}) {
		t.Fatalf("encoded bot id: %v", ids)
	}
	if err := st.ClearUndelivered(ctx, "b1", "t_1"); err != nil {
		t.Fatal(err)
	}
	if err := st.ClearUndelivered(ctx, "b1", "t_1"); err != nil {
		t.Fatalf("clear twice: %v", err)
	}
	if ids, _ := st.UndeliveredTasks(ctx, "b1"); !slices.Equal(ids, []string{"t_2"}) {
		t.Fatalf("after clear: %v", ids)
	}
}
