// Package yamlpos reads YAML with positions, for a reader that reports
// every problem of a file at its line: Parse refuses what yaml.v3 cannot
// read with the line where it is (yaml.v3 gives it only in its message),
// the node helpers follow aliases and merge keys (<<) as yaml.v3 decodes
// them, MaxValues bounds what aliases may expand to, and Suggest finds the
// name a typo meant. It knows nothing of what the file configures.
package yamlpos
