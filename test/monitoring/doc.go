// Package monitoring holds only tests: they check the files of
// deploy/prometheus and deploy/grafana against the code.
//
//   - promtool checks the scrape configuration and the alert rules, and
//     runs the rules' unit tests (deploy/prometheus/alerts_test.yml);
//   - the Grafana dashboard parses, its panels have unique ids and queries,
//     and it agrees with the provisioning files;
//   - no dead panels: every metric named by a dashboard query or an alert
//     is one that a running admitter, its workers or the NATS exporter
//     exports, and the exported spillway_* metrics pass promlint;
//   - Debian's Prometheus, given deploy/prometheus/prometheus.yml with its
//     targets pointed at admitters and a worker under load in this process,
//     answers the dashboard's queries with data.
//
// The tests need promtool and prometheus (Debian: apt-get install
// prometheus) and fail without them.
package monitoring
