package conn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket"
)

// decideOnce builds the store c describes and takes one decision on it.
func decideOnce(t *testing.T, c RedisConfig) {
	t.Helper()
	client, st, err := Redis(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := RedisAuth(ctx, client, c); err != nil {
		t.Fatal(err)
	}
	l, err := bucket.Spec{Rate: "10/s", Burst: 1}.Build()
	if err != nil {
		t.Fatal(err)
	}
	d, err := st.Decide(ctx, "q", []bucket.Tier{{Key: redistest.KeyPrefix(t) + "k", Limit: l}}, 1)
	if err != nil {
		t.Fatalf("decide on %s: %v", RedisTarget(c), err)
	}
	if d.Verdict != bucket.Admitted {
		t.Fatalf("verdict %v", d.Verdict)
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	decideOnce(t, RedisConfig{Cluster: &RedisCluster{Addrs: cl.Addrs()[:1]}, Timeout: time.Second})
}

func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t, 1)
	decideOnce(t, RedisConfig{
		Sentinel: &RedisSentinel{MasterName: redistest.SentinelMaster, Addrs: st.SentinelAddrs()},
		Timeout:  time.Second,
	})
}

// TestRedisACL connects as an ACL user, and reports a wrong password as an
// authentication failure naming the settings to check.
func TestRedisACL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithOwnProcess(), redistest.WithArgs("--user", "app", "on", ">s3cret", "~*", "&*", "+@all"))
	url := "redis://" + srv.Addr() + "/0"
	decideOnce(t, RedisConfig{URL: url, Username: "app", Password: "s3cret", Timeout: time.Second})

	c := RedisConfig{URL: url, Username: "app", Password: "wrong", Timeout: time.Second}
	client, err := RedisClient(c)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	err = RedisAuth(t.Context(), client, c)
	if err == nil || !strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("err = %v", err)
	}
}

// TestRedisTLS connects over TLS with a CA, a client certificate (the
// server requires one) and a server name.
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, caKey := newCert(t, dir, "ca", nil, nil)
	newCert(t, dir, "server", ca, caKey)
	newCert(t, dir, "client", ca, caKey)
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	srv := redistest.Start(t, redistest.WithOwnProcess(), redistest.WithArgs(
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "server.pem"),
		"--tls-key-file", filepath.Join(dir, "server.key"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"),
		"--tls-auth-clients", "yes"))
	_ = srv
	tlsConf := &RedisTLS{
		CAFile:     filepath.Join(dir, "ca.pem"),
		CertFile:   filepath.Join(dir, "client.pem"),
		KeyFile:    filepath.Join(dir, "client.key"),
		ServerName: "redis.test",
	}
	decideOnce(t, RedisConfig{URL: "redis://127.0.0.1:" + strconv.Itoa(port) + "/0", TLS: tlsConf, Timeout: time.Second})

	if _, err := RedisClient(RedisConfig{URL: "redis://x:1/0", TLS: &RedisTLS{CAFile: filepath.Join(dir, "client.key")}}); err == nil ||
		!strings.Contains(err.Error(), "redis.tls.ca_file") {
		t.Errorf("a CA file without certificates: %v", err)
	}
}

// newCert writes name.pem and name.key under dir: a CA when parent is nil,
// else a certificate for redis.test signed by parent.
func newCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"redis.test"},
	}
	signer, signKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	} else {
		signer, signKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(name+".pem", "CERTIFICATE", der)
	write(name+".key", "EC PRIVATE KEY", kb)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
