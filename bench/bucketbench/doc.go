// Package bucketbench holds the benchmarks that compare Spillway's bucket
// stores with their peers in the same run: the memory store against
// golang.org/x/time/rate, the Redis store against
// github.com/go-redis/redis_rate on one redis-server. It has no code of its
// own; run
//
//	go test -run '^$' -bench . -count 3 ./bench/bucketbench/
package bucketbench
