package queue

import (
	"fmt"
	"strings"
)

// Priority is a job's class in the backlog's drain: among due jobs, a
// higher class starts first (docs/design.md#fair-drain). The zero value is
// Normal.
type Priority int8

// The priority classes, from the first to start to the last.
const (
	High   Priority = -1
	Normal Priority = 0
	Low    Priority = 1
)

// Priorities lists the classes from the highest.
var Priorities = [...]Priority{High, Normal, Low}

// String is the class's name in headers and configuration: high, normal or low.
func (p Priority) String() string {
	switch p {
	case High:
		return "high"
	case Normal:
		return "normal"
	case Low:
		return "low"
	}
	return fmt.Sprintf("Priority(%d)", int8(p))
}

// Index is the class's place in Priorities, from 0.
func (p Priority) Index() int { return int(p) + 1 }

// ParsePriority reads a class name, in any case; "" is Normal.
func ParsePriority(s string) (Priority, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "normal":
		return Normal, nil
	case "high":
		return High, nil
	case "low":
		return Low, nil
	}
	return Normal, fmt.Errorf("priority %.40q: want high, normal or low", s)
}
