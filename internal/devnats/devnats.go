// Package devnats runs the embedded NATS server with JetStream of
// `admitter --dev`: one process, no other server. It is the only non-test
// package that imports nats-server.
package devnats

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is a running embedded NATS server.
type Server struct {
	srv     *server.Server
	url     string
	tempDir string
}

// Start runs a NATS server with JetStream listening on listen
// ("host:port"; port 0 picks a free one). storeDir is where JetStream
// keeps its files; empty means a temporary directory removed by Shutdown.
func Start(listen, storeDir string) (*Server, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("devnats: nats.listen %q: want host:port: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("devnats: nats.listen %q: port %q is not a number from 0 to 65535", listen, portStr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	s := &Server{}
	if storeDir == "" {
		if storeDir, err = os.MkdirTemp("", "spillway-dev-jetstream-"); err != nil {
			return nil, fmt.Errorf("devnats: a directory for JetStream: %w", err)
		}
		s.tempDir = storeDir
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "spillway-dev",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		s.cleanup()
		return nil, fmt.Errorf("devnats: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		s.cleanup()
		return nil, fmt.Errorf("devnats: the embedded NATS server did not start on %s within 10s (is the port taken? set nats.listen or SPILLWAY_NATS_LISTEN)", listen)
	}
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		srv.Shutdown()
		s.cleanup()
		return nil, fmt.Errorf("devnats: listening on %v, not TCP", srv.Addr())
	}
	s.srv = srv
	s.url = "nats://" + net.JoinHostPort(clientHost(addr.IP), strconv.Itoa(addr.Port))
	return s, nil
}

// ExposureWarning is the warning `admitter --dev` logs at start when its
// embedded server, listening on listen ("host:port", as nats.listen), can
// be reached from other machines without credentials (authRequired
// false), or "" when it cannot: a loopback address ("127.0.0.1", "::1",
// "localhost") keeps it on this machine; no host, an unspecified address
// ("0.0.0.0", "::"), any other address or a host name may not.
func ExposureWarning(listen string, authRequired bool) string {
	if authRequired {
		return ""
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	if host == "localhost" {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return ""
	}
	return "dev mode: the embedded NATS server listens on " + listen + " with no authentication: anyone who can reach it can " +
		"submit and cancel any job, read every job's payload and status, publish jobs straight into READY for the workers to run, " +
		"pause queues and change limits through their buckets. Listen on loopback (nats.listen or SPILLWAY_NATS_LISTEN 127.0.0.1:4222), " +
		"or run nats-server with the roles of deploy/nats/nats.conf and the admitter without --dev (docs/security.md)"
}

// clientHost is where a client on this machine reaches a listener.
func clientHost(ip net.IP) string {
	if ip.IsUnspecified() {
		return "127.0.0.1"
	}
	return ip.String()
}

// URL is the client URL.
func (s *Server) URL() string { return s.url }

// Shutdown stops the server and removes a temporary store.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	s.cleanup()
}

func (s *Server) cleanup() {
	if s.tempDir != "" {
		_ = os.RemoveAll(s.tempDir)
	}
}
