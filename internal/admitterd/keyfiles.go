package admitterd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/door"
)

// DefaultKeyFileInterval is how often the admitter reads its key files to
// see whether they changed: a key removed from a file is refused within
// this interval and the time one request takes.
const DefaultKeyFileInterval = 250 * time.Millisecond

// keyFiles keeps the doors' API keys (http.api_keys_file) and admin keys
// (http.admin_keys_file) in step with their files: read again every
// interval, on a reload of the configuration (which may name other files)
// and on request (SIGHUP). A file that changed is parsed and swapped into
// the *door.APIKeys the doors hold; one that cannot be read or parsed
// keeps the running keys, is logged once per state and counted in
// spillway_api_keys_reloads_total{setting,result}. Logs name keys by
// count and fingerprint only.
type keyFiles struct {
	log     *slog.Logger
	reloads *prometheus.CounterVec

	mu    sync.Mutex // serialises reads and swaps; guards the files' fields
	files [2]*keyFile
}

// keyFile is one setting's file and the keys the doors hold from it.
type keyFile struct {
	setting string
	keys    *door.APIKeys // the doors', for the process's life
	path    string        // the configured file; "" none
	// seen is the state last acted upon, a hash of the contents or the
	// error of reading them, so that a state is reported once.
	seen string
}

// newKeyFiles loads cfg's key files; a file that cannot be loaded is an
// error, and the admitter does not start.
func newKeyFiles(cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) (*keyFiles, error) {
	k := &keyFiles{
		log: log,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_api_keys_reloads_total",
			Help: "Reloads of a key file (setting http.api_keys_file or http.admin_keys_file) that changed, by result (success, failure: the running keys stay).",
		}, []string{"setting", "result"}),
		files: [2]*keyFile{
			{setting: "http.api_keys_file", keys: &door.APIKeys{}},
			{setting: "http.admin_keys_file", keys: &door.APIKeys{}},
		},
	}
	if err := reg.Register(k.reloads); err != nil {
		return nil, err
	}
	for _, f := range k.files {
		for _, result := range []string{"success", "failure"} {
			k.reloads.WithLabelValues(f.setting, result)
		}
	}
	for i, path := range k.paths(cfg) {
		f := k.files[i]
		if path == "" {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("admitterd: %s: %w", f.setting, err)
		}
		keys, err := door.ParseAPIKeys(path, data)
		if err != nil {
			return nil, fmt.Errorf("admitterd: %s: %w", f.setting, err)
		}
		f.keys.Set(keys)
		f.path, f.seen = path, contentID(data)
	}
	return k, nil
}

// apiKeys and adminKeys are the sets the doors hold.
func (k *keyFiles) apiKeys() *door.APIKeys   { return k.files[0].keys }
func (k *keyFiles) adminKeys() *door.APIKeys { return k.files[1].keys }

func (k *keyFiles) paths(cfg *config.Config) [2]string {
	return [2]string{cfg.HTTP.APIKeysFile, cfg.HTTP.AdminKeysFile}
}

// run reads the files every interval until ctx ends.
func (k *keyFiles) run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			k.check(false)
		}
	}
}

// check reads the configured files and applies those that changed; with
// report, also those that did not (a reload asked for by the operator
// says what it found).
func (k *keyFiles) check(report bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, f := range k.files {
		k.read(f, f.path, report)
	}
}

// configure follows a reloaded configuration, which may name other files
// or none.
func (k *keyFiles) configure(cfg *config.Config) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, path := range k.paths(cfg) {
		k.read(k.files[i], path, false)
	}
}

// read makes f follow path.
func (k *keyFiles) read(f *keyFile, path string, report bool) {
	if path == "" {
		if f.path != "" {
			f.keys.Set(nil)
			f.path, f.seen = "", ""
			k.log.Warn("key file no longer configured: its keys are dropped; without http.api_keys_file anyone who reaches the admitter may submit, without http.admin_keys_file nobody may use the admin endpoints",
				"setting", f.setting)
		}
		return
	}
	data, err := os.ReadFile(path)
	id := contentID(data)
	if err != nil {
		id = "error:" + err.Error()
	}
	if path == f.path && id == f.seen && !report {
		return
	}
	changed := path != f.path || id != f.seen
	f.path, f.seen = path, id
	var keys *door.APIKeys
	if err == nil {
		keys, err = door.ParseAPIKeys(path, data)
	}
	if err != nil {
		k.log.Error("key file reload failed; the running keys stay", "setting", f.setting, "file", path,
			"keys", f.keys.Len(), "error", err)
		k.reloads.WithLabelValues(f.setting, "failure").Inc()
		return
	}
	if !changed {
		k.log.Info("key file unchanged", "setting", f.setting, "file", path, "keys", keys.Len())
		return
	}
	added, removed := diff(f.keys.Fingerprints(), keys.Fingerprints())
	f.keys.Set(keys)
	k.log.Info("key file reloaded", "setting", f.setting, "file", path, "keys", keys.Len(),
		"added", added, "removed", removed)
	k.reloads.WithLabelValues(f.setting, "success").Inc()
}

// diff is what next has that prev has not, and the other way round; both
// sorted.
func diff(prev, next []string) (added, removed []string) {
	for _, fp := range next {
		if _, found := slices.BinarySearch(prev, fp); !found {
			added = append(added, fp)
		}
	}
	for _, fp := range prev {
		if _, found := slices.BinarySearch(next, fp); !found {
			removed = append(removed, fp)
		}
	}
	return added, removed
}

func contentID(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
