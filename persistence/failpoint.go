package persistence

import "github.com/frognano/frognano/runtime/failpoint"

// fault is the fault-injection suite's hook at a store write (package
// runtime/failpoint): nil unless the binary was built with -tags failpoints
// and FROGNANO_FAILPOINTS arms the point. It is a variable so that this
// package's tests can inject a fault in a build without the tag.
var fault = failpoint.Inject
