package admitterd

import (
	"net"
	"net/netip"
	"strings"

	"github.com/spillway-dev/spillway/internal/config"
)

// warnOpenListen warns when the HTTP door is reachable beyond this machine
// and takes requests without a key: whoever reaches it may submit jobs and
// read every job and queue.
func (s *Service) warnOpenListen(cfg *config.Config) {
	if cfg.HTTP.APIKeysFile != "" || loopbackOnly(cfg.HTTP.Listen) {
		return
	}
	s.log.Warn("the HTTP door listens beyond this machine without API keys: anyone who can reach "+cfg.HTTP.Listen+
		" can submit jobs and read every job and queue; set http.api_keys_file (SPILLWAY_HTTP_API_KEYS_FILE) to a file of keys, one a line, or listen on 127.0.0.1",
		"listen", cfg.HTTP.Listen)
}

// loopbackOnly reports whether an address to listen on (host:port) takes
// connections from this machine only: a loopback IP address or
// "localhost". An empty host (every interface), any other name and an
// address that does not parse are not.
func loopbackOnly(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil || host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
