package election

import (
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/faultproxy"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/pkg/config"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// One member of a three-member cluster freezes (its traffic blackholed:
// no answer, no reset) while quorum holds. Every node's client has it
// among its endpoints, as production's do. The leader keeps its term and
// the standby deposes nobody: a renewal or pulse the round-robin gives the
// frozen member is hedged to another (hedge.go) instead of waiting out
// the deposition window, until the client's keepalive leaves the member
// (issue 25 item 1; before, the first pulse sent to it stalled 3 s and
// the standby deposed a healthy leader).
func TestFrozenMemberDeposesNobody(t *testing.T) {
	if testing.Short() {
		t.Skip("freezes a member for 30 s")
	}
	urls := testenv.StartEtcdCluster(t, 3)
	proxy, err := faultproxy.New("127.0.0.1:0", strings.TrimPrefix(urls[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	endpoints := []string{"http://" + proxy.Addr(), urls[1], urls[2]}
	client := func() *clientv3.Client {
		cc, err := config.Etcd{DialTimeout: 10 * time.Second}.ClientConfig(endpoints)
		if err != nil {
			t.Fatal(err)
		}
		cli, err := clientv3.New(cc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	ctx := bg(t)
	a := newElector(t, client(), testConfig(t, "bot", "a", 20*time.Second))
	ta := await(t, campaign(t, ctx, a), eventTimeout).term
	b := newElector(t, client(), testConfig(t, "bot", "b", 20*time.Second))
	bch := campaign(t, ctx, b)
	admin := client()
	waitCandidates(t, admin, b.Name(), 2)

	proxy.Blackhole()
	// Long enough for every pulse and renewal path to meet the frozen
	// member (a pulse a second, round-robin over three) and for the
	// clients' keepalive to leave it (about 15 s).
	time.Sleep(30 * time.Second) // a negative check: nothing may happen
	proxy.Heal()

	select {
	case <-ta.Done():
		t.Fatalf("the leader lost its term while one member was frozen: %v", ta.Err())
	case r := <-bch:
		t.Fatalf("the standby won while the leader was healthy: %+v", r)
	default:
	}
	if n := b.Depositions(); n != 0 {
		t.Fatalf("the standby deposed %d healthy leader(s)", n)
	}
}
