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
