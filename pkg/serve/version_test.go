package serve

import (
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/buildinfo"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// access.reported_version end to end, seen from WeCom: enter_check_update
// is answered with ww_ai_robot_enter_event carrying the bot's own
// version, or botctl's for a bot without one; no task runs and nothing is
// shown to the user.
func TestReportedVersionEndToEnd(t *testing.T) {
	t.Parallel()
	sim, wecomURL := startSimBots(t, "b1", "b2")
	e, ns := startEtcd(t), startNATS(t)
	cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg.Bots = []config.Bot{
		{ID: "b1", Secret: "s-b1", Settings: settings(t, "access: {reported_version: 2026.12.1}")},
		{ID: "b2", Secret: "s-b2"},
	}
	n, err := startNode(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ bot, want string }{{"b1", "2026.12.1"}, {"b2", buildinfo.Get().Version}} {
		testwait.Eventually(t, time.Minute, tc.bot+" connected", func() bool { st, _ := sim.Stats(tc.bot); return st.Connected })
		res, err := sim.PostEvent(wecomsim.EventRequest{BotID: tc.bot, UserID: "ann", EventType: wecom.EventEnterCheckUpdate})
		if err != nil || !res.Delivered {
			t.Fatalf("enter_check_update %s: %+v %v", tc.bot, res, err)
		}
		testwait.Eventually(t, time.Minute, tc.bot+"'s version reported", func() bool {
			st, _ := sim.Stats(tc.bot)
			return st.ReportedVersion != ""
		})
		st, _ := sim.Stats(tc.bot)
		if st.ReportedVersion != tc.want || st.InvalidReqIDs != 0 || st.Frames[wecom.CmdEnterEventReply] != 1 {
			t.Errorf("%s reported %q (want %q): %+v", tc.bot, st.ReportedVersion, tc.want, st)
		}
		if tr := sim.Transcript(tc.bot, "ann"); len(tr) != 0 {
			t.Errorf("%s showed ann %+v", tc.bot, tr)
		}
	}
	if s := n.Dispatch.Stats(); s.Queued != 0 {
		t.Fatalf("version reports dispatched %d tasks", s.Queued)
	}
}
