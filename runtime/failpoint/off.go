//go:build !failpoints

package failpoint

// Enabled reports whether this build has failpoints compiled in.
const Enabled = false

// Inject does nothing in a build without the failpoints tag.
func Inject(name string) error { return nil }
