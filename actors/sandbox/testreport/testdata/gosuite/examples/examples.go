// Package examples has internal tests, an external test package with a
// test, a fuzz target and examples: the grader's canary must still be the
// last verdict (tests run first, then fuzz seeds, then examples).
package examples

// Double returns 2x.
func Double(x int) int { return 2 * x }
