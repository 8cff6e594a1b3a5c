package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// respConn is the smallest RESP2 client that can PING, AUTH and read INFO. It
// exists so that the package needs nothing beyond the standard library; tests
// talk to the server with a real client.
type respConn struct {
	c net.Conn
	r *bufio.Reader
}

// respError is an error reply from the server ("-ERR ...").
type respError string

func (e respError) Error() string { return "redistest: server replied: " + string(e) }

// dialTimeout bounds one dial plus one command when the context has no deadline.
const dialTimeout = 2 * time.Second

// dialRESP connects to addr. With tlsConfig non-nil the connection uses TLS.
func dialRESP(ctx context.Context, addr string, tlsConfig *tls.Config) (*respConn, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dialTimeout)
		defer cancel()
	}
	var (
		c   net.Conn
		err error
	)
	if tlsConfig != nil {
		d := tls.Dialer{Config: tlsConfig}
		c, err = d.DialContext(ctx, "tcp", addr)
	} else {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	if err := c.SetDeadline(deadline); err != nil {
		_ = c.Close()
		return nil, err
	}
	return &respConn{c: c, r: bufio.NewReader(c)}, nil
}

func (rc *respConn) Close() error { return rc.c.Close() }

// do sends one command and reads its reply: string for simple and bulk
// strings, nil for a null, int64 for integers, []any for arrays, respError for
// an error reply (returned as the error).
func (rc *respConn) do(args ...string) (any, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := rc.c.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	return rc.read()
}

func (rc *respConn) read() (any, error) {
	line, err := rc.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("redistest: empty RESP line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, respError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := respLen(body, "bulk")
		if n < 0 || err != nil {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rc.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := respLen(body, "array")
		if n < 0 || err != nil {
			return nil, err
		}
		out := make([]any, 0, n)
		for range n {
			v, err := rc.read()
			if err != nil {
				var re respError
				if !errors.As(err, &re) {
					return nil, err
				}
				v = re
			}
			out = append(out, v)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("redistest: unexpected RESP type in %q", line)
	}
}

// respLen parses the length of a bulk string or an array (what): -1 is
// a nil reply, and so is any negative length.
func respLen(body, what string) (int, error) {
	n, err := strconv.Atoi(body)
	if err != nil {
		return 0, fmt.Errorf("redistest: bad %s length %q: %w", what, body, err)
	}
	return max(n, -1), nil
}

// infoField returns the value of field in the reply to INFO.
func infoField(info, field string) (string, bool) {
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && k == field {
			return v, true
		}
	}
	return "", false
}
