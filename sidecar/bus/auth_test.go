package bus

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// authServer starts a NATS server on a loopback port that requires the
// given user/password or token (this package's tests only).
func authServer(t *testing.T, user, pass, token string) string {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		Username: user, Password: pass, Authorization: token}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not start")
	}
	t.Cleanup(srv.Shutdown)
	return fmt.Sprintf("nats://%s", srv.Addr().String())
}

func TestConnectCredentials(t *testing.T) {
	url := authServer(t, "ctxmem", "s3cret", "")
	if _, err := Connect(Options{URL: url, User: "ctxmem", Password: "wrong"}, false); err == nil {
		t.Fatal("a wrong password connected")
	}
	if _, err := Connect(Options{URL: url}, false); err == nil {
		t.Fatal("no credentials connected to a server that requires them")
	}
	nc, err := Connect(Options{URL: url, User: "ctxmem", Password: "s3cret"}, false)
	if err != nil {
		t.Fatalf("right password: %v", err)
	}
	nc.Close()

	turl := authServer(t, "", "", "tok-123")
	if _, err := Connect(Options{URL: turl, Token: "nope"}, false); err == nil {
		t.Fatal("a wrong token connected")
	}
	nc, err = Connect(Options{URL: turl, Token: "tok-123"}, false)
	if err != nil {
		t.Fatalf("right token: %v", err)
	}
	nc.Close()
}
