package googledata

import (
	"slices"
	"strings"
)

// Pinned returns what PinnedMethods says of method, and false for a method
// it does not hold.
func Pinned(method string) (MethodFacts, bool) {
	i, found := slices.BinarySearchFunc(PinnedMethods[:], method, func(m MethodFacts, name string) int { return strings.Compare(m.Method, name) })
	if !found {
		return MethodFacts{}, false
	}
	return PinnedMethods[i], true
}
