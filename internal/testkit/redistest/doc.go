// Package redistest gives a test its own real Redis server.
//
// [Start] launches a redis-server child process on a random free TCP port on
// 127.0.0.1, with persistence off (--save "" --appendonly no), its working
// directory and log file in the test's t.TempDir(), and waits until the server
// answers PING. The process is killed and reaped in tb.Cleanup, so a test never
// leaks a server and never touches a shared instance (such as one on 6379).
//
//	func TestStore(t *testing.T) {
//		t.Parallel()
//		srv := redistest.Start(t)
//		client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
//		prefix := redistest.KeyPrefix(t)
//		...
//	}
//
// The package talks to its servers with go-redis (PING, INFO, the cluster's
// and the sentinels' setup), one new connection per command; the test brings
// its own client.
//
// # Finding the server binary
//
// In order: the REDIS_SERVER_BIN environment variable, redis-server on PATH,
// /usr/bin/redis-server. If none exists the test fails (it is never skipped)
// with a message saying what to do: apt-get install -y redis-server, or set
// REDIS_URL. The CI script (.ci/run) installs the package when it is missing.
//
// # Using a running server: REDIS_URL
//
// If REDIS_URL is set (redis://[[user]:password@]host[:port][/db], or rediss://
// for TLS), Start starts nothing: it checks that the server answers PING and
// returns a [Server] describing it. Many tests, and many test binaries, then
// share one server and one keyspace, so every test must put its keys under its
// own [KeyPrefix] and must not run FLUSHDB, FLUSHALL, SCRIPT FLUSH or anything
// else that affects keys it did not create. Tests that need to own the process
// (fault tests calling [Server.Kill] or [Server.Restart]) pass [WithOwnProcess],
// which ignores REDIS_URL.
//
// # Fault injection
//
// [Server.Kill] sends SIGKILL and waits for the process to exit, so the port
// refuses connections when it returns. [Server.Restart] starts a new, empty
// server on the same port, so clients configured with [Server.Addr] reconnect
// to it without being rebuilt.
//
// # Port races
//
// The free port is found by binding :0 and closing the listener, so another
// process may take it before redis-server binds it. Start notices (the server
// exits with "Address already in use", or a PING is answered by a process that
// is not ours) and retries on a new port a few times.
//
// # Cluster and Sentinel
//
// [StartCluster] starts a Redis Cluster of child servers (3 masters, each
// owning a third of the slots, joined with CLUSTER ADDSLOTSRANGE and
// CLUSTER MEET; it returns once every node reports cluster_state:ok).
// [SharedCluster] starts one per test binary, for the tests that only read
// and write their own keys; TestMain stops it with [StopShared]. A test that
// kills or flushes nodes starts its own ([Cluster.KillNode],
// [Cluster.RestartNode], [Cluster.Do]).
//
// [StartSentinel] starts a master, one replica and 1 or 3 sentinels
// (quorum n/2+1, down-after [SentinelDownAfter]) monitoring the master as
// [SentinelMaster]. [Sentinel.KillMaster] and [Sentinel.Failover] make a
// failover happen; [Sentinel.WaitFailover] waits for it. Both topologies
// ignore REDIS_URL: their processes are always the test's own.
//
// # Orphans
//
// On Linux the child is started with a parent-death signal (SIGKILL), so a test
// binary that dies without running its cleanups (a -timeout panic, a crash)
// does not leave redis-server processes behind.
package redistest
