package loop

import "github.com/platformkit/grpcbackoff/internal/gate"

// SetExtraGates gives every target of the Retriers made from now on the
// gates f returns for it, after its built-in ones, and returns a function
// that puts back what was set before: the loop package's tests plug a gate
// of their own in through it, as a new built-in gate would be.
func SetExtraGates(f func(target string) []gate.Gate) (restore func()) {
	old := extraGates
	extraGates = f
	return func() { extraGates = old }
}
