// Package natsroles proves the shipped NATS authorization
// (deploy/nats/cluster/auth.conf, docs/security.md) against a real
// nats-server started from the shipped file: a real admitter, worker,
// handler service and operator each work under their role's user, and a
// producer's user is refused everything but the NATS door.
package natsroles
