package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

const probeUsage = `Usage: spillctl probe URL [--timeout D]

Checks one HTTP endpoint: GETs URL and exits 0 when it answers 2xx within
the timeout, 1 otherwise, saying why. It is the health check of images
that have no shell, curl or wget: a container's healthcheck runs, say,

  spillctl probe http://127.0.0.1:8080/readyz     (an admitter)
  spillctl probe http://127.0.0.1:9090/readyz     (a worker)

Flags:
`

func runProbe(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("spillctl probe", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 2*time.Second, "fail when no answer came within `D`")
	pos, done, err := parseArgs(fs, args, probeUsage, stdout)
	if done || err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("spillctl probe: want one URL, got %d arguments (see spillctl probe --help)", len(pos))
	}
	if *timeout <= 0 {
		return usageErrorf("spillctl probe: --timeout must be positive, got %s", *timeout)
	}
	u, ok := httpURL(pos[0])
	if !ok {
		return usageErrorf("spillctl probe: %q is not an http:// or https:// URL with a host", pos[0])
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("spillctl probe: %w", err)
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("spillctl probe: %s: no answer within %s", u, *timeout)
		}
		return fmt.Errorf("spillctl probe: %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	text := strings.TrimSpace(string(body))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("spillctl probe: %s answered %s: %s", u, resp.Status, text)
	}
	fmt.Fprintf(stdout, "%s: %s %s\n", u, resp.Status, text)
	return nil
}
