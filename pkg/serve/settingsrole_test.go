package serve

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/botsettings"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcd's RBAC as docs/security.md sets it up: a node's role reads the
// settings overrides and cannot write them; the operator's role (botctl
// bots set) writes them. A node leads no bot until it has read the
// overrides: while its role cannot read them it connects no bot, and once
// it can, its first message is handled under the override (here an
// allowlist narrower than the file's, which allows everyone).
func TestSettingsReadOnlyNodeRoleAndInboundHeldUntilRead(t *testing.T) {
	t.Parallel()
	sim, wecomURL := startSimBots(t, "b1")
	e, ns := startEtcd(t), startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	admin, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	root, dir := etcdkeys.Root, etcdkeys.Root+etcdkeys.SettingsDir
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(admin.UserAdd(ctx, "root", "root-pw-0123456789"))
	must(admin.UserGrantRole(ctx, "root", "root"))
	// The node's role: read-write on /botctl/ around settings/, nothing
	// on settings/ yet (read is granted below).
	must(admin.RoleAdd(ctx, "botctl-node"))
	must(admin.RoleGrantPermission(ctx, "botctl-node", root, dir, clientv3.PermissionType(clientv3.PermReadWrite)))
	must(admin.RoleGrantPermission(ctx, "botctl-node", clientv3.GetPrefixRangeEnd(dir), clientv3.GetPrefixRangeEnd(root), clientv3.PermissionType(clientv3.PermReadWrite)))
	// The operator's role: reads /botctl/, writes settings/.
	must(admin.RoleAdd(ctx, "botctl-operator"))
	must(admin.RoleGrantPermission(ctx, "botctl-operator", root, clientv3.GetPrefixRangeEnd(root), clientv3.PermissionType(clientv3.PermRead)))
	must(admin.RoleGrantPermission(ctx, "botctl-operator", dir, clientv3.GetPrefixRangeEnd(dir), clientv3.PermissionType(clientv3.PermReadWrite)))
	for user, role := range map[string]string{"node": "botctl-node", "operator": "botctl-operator"} {
		must(admin.UserAdd(ctx, user, user+"-pw-0123456789"))
		must(admin.UserGrantRole(ctx, user, role))
	}
	must(admin.AuthEnable(ctx))
	rootCli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), Username: "root", Password: "root-pw-0123456789", DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rootCli.Close()
	operator, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), Username: "operator", Password: "operator-pw-0123456789", DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer operator.Close()

	cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg.Bots = []config.Bot{{ID: "b1", Secret: "s-b1"}}
	cfg.AI.Demo.AnswerTime = 50 * time.Millisecond
	base, err := cfg.BotSettings("b1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := botsettings.Put(ctx, operator, botsettings.DefaultPrefix, "b1", settings(t, "access: {allow_users: [ann]}"), base, 0); err != nil {
		t.Fatalf("the operator's bots set: %v", err)
	}
	pw := filepath.Join(t.TempDir(), "etcd.pw")
	if err := os.WriteFile(pw, []byte("node-pw-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Etcd.Username, cfg.Etcd.PasswordFile = "node", pw

	var logs testenv.LogBuffer
	rn, err := startNodeLogged(t, cfg, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	// Held: the settings watch has failed to read twice (so the node has
	// been up for seconds, each of them enough to win an election nobody
	// else runs), and b1 was never connected.
	testwait.Eventually(t, 2*time.Minute, "the settings watch's second refused read", func() bool {
		return strings.Count(logs.String(), "bot settings not read from etcd; retrying") >= 2
	})
	if !strings.Contains(logs.String(), "leading no bot until the bots' settings are read from etcd") {
		t.Error("the node did not say why it leads no bot")
	}
	if st, _ := sim.Stats("b1"); st.Connections != 0 {
		t.Fatalf("b1 connected %d times before its settings were read", st.Connections)
	}

	must(rootCli.RoleGrantPermission(ctx, "botctl-node", dir, clientv3.GetPrefixRangeEnd(dir), clientv3.PermissionType(clientv3.PermRead)))
	testwait.Eventually(t, 2*time.Minute, "b1 connected once its settings are readable", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	for _, user := range []string{"bob", "ann"} {
		if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: user, Text: "how do tides work"}); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, time.Minute, "bob refused by the override's allowlist", func() bool {
		return strings.Contains(lastFinished(sim, "b1", "bob"), "没有使用这个机器人的权限")
	})
	testwait.Eventually(t, time.Minute, "ann answered", func() bool { return lastFinished(sim, "b1", "ann") != "" })

	// The node's own client cannot write an override.
	if _, err := botsettings.Put(ctx, rn.etcd, botsettings.DefaultPrefix, "b1", settings(t, "access: {allow_users: [eve]}"), base, 0); err == nil || !strings.Contains(err.Error(), rpctypes.ErrPermissionDenied.Error()) {
		t.Fatalf("a node's write of an override: %v, want etcd's permission denied", err)
	}
}
