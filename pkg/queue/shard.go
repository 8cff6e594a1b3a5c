package queue

import (
	"fmt"
	"hash/fnv"
)

// KVShards is how many key-value buckets the per-job records of a
// deployment (job status, idempotency) are spread over. Each bucket is a
// stream with its own leader, so the records' writes are spread over the
// cluster instead of all going through one server. A key's bucket follows
// from the key alone (ShardOf), so a reader needs no index; the number is
// therefore fixed: changing it would strand every record.
const KVShards = 16

// ShardOf is key's shard, 0 to KVShards-1: FNV-1a of the key.
func ShardOf(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % KVShards)
}

// ShardBucket names shard i of the buckets called base: base-00 to base-15.
func ShardBucket(base string, i int) string { return fmt.Sprintf("%s-%02d", base, i) }
