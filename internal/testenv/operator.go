package testenv

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// OperatorNATS is an embedded NATS server in operator mode (decentralised
// auth, what `nsc` sets up): it trusts one operator key, knows accounts
// from a memory resolver, and lets in any user whose JWT one of those
// accounts signed. JetStream is enabled in every account, as botctl needs.
type OperatorNATS struct {
	Server   *server.Server
	operator nkeys.KeyPair
	accounts map[string]nkeys.KeyPair // name → account key
}

// StartOperatorNATS starts the server in a temp dir with the named
// accounts (and a system account) in its resolver. It is shut down when
// the test ends.
func StartOperatorNATS(t testing.TB, accounts ...string) *OperatorNATS {
	t.Helper()
	okp := mustKey(t, nkeys.CreateOperator)
	opub, _ := okp.PublicKey()
	sys := mustKey(t, nkeys.CreateAccount)
	syspub, _ := sys.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.Name, oc.SystemAccount = "test-operator", syspub
	ojwt, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	oc, err = jwt.DecodeOperatorClaims(ojwt)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	o := &OperatorNATS{operator: okp, accounts: map[string]nkeys.KeyPair{}}
	store := func(name string, kp nkeys.KeyPair, jetStream bool) {
		pub, _ := kp.PublicKey()
		ac := jwt.NewAccountClaims(pub)
		ac.Name = name
		if jetStream {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		ajwt, err := ac.Encode(okp)
		if err != nil {
			t.Fatal(err)
		}
		if err := resolver.Store(pub, ajwt); err != nil {
			t.Fatal(err)
		}
	}
	store("SYS", sys, false)
	for _, name := range accounts {
		kp := mustKey(t, nkeys.CreateAccount)
		store(name, kp, true)
		o.accounts[name] = kp
	}
	s, err := server.NewServer(&server.Options{
		ServerName: "botctl-operator", Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: filepath.Join(t.TempDir(), "jetstream"),
		TrustedOperators: []*jwt.OperatorClaims{oc}, AccountResolver: resolver, SystemAccount: syspub,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatal("operator-mode NATS not accepting clients after 30s")
	}
	o.Server = s
	return o
}

// ClientURL is the URL clients connect to.
func (o *OperatorNATS) ClientURL() string { return o.Server.ClientURL() }

// Creds writes a credentials file (user JWT and seed, as `nsc generate
// creds` does) of a new user of account into dir, mode 0600, and returns
// its path. The account must be one StartOperatorNATS was given.
func (o *OperatorNATS) Creds(t testing.TB, dir, account string) string {
	t.Helper()
	akp, ok := o.accounts[account]
	if !ok {
		t.Fatalf("no account %s on the operator-mode NATS", account)
	}
	return writeCreds(t, dir, account, akp)
}

// ForeignCreds writes a credentials file of a user of an account that no
// trusted operator signed: well-formed, and refused by the server.
func ForeignCreds(t testing.TB, dir string) string {
	t.Helper()
	return writeCreds(t, dir, "FOREIGN", mustKey(t, nkeys.CreateAccount))
}

func writeCreds(t testing.TB, dir, account string, akp nkeys.KeyPair) string {
	t.Helper()
	ukp := mustKey(t, nkeys.CreateUser)
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.Name = "botctl"
	ujwt, err := uc.Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := ukp.Seed()
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, account+"-"+upub[:8]+".creds")
	if err := os.WriteFile(p, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustKey(t testing.TB, create func() (nkeys.KeyPair, error)) nkeys.KeyPair {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}
