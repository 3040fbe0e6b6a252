package rtmsg

import "strings"

// Fail is the Failure an actor answers with when err stops a request.
func Fail(code FailureCode, err error) *Failure {
	return &Failure{Code: code, Message: err.Error()}
}

// IsFailure says whether reply is a Failure with this code.
func IsFailure(reply any, code FailureCode) bool {
	f, ok := reply.(*Failure)
	return ok && f.GetCode() == code
}

// Short is the code's name for logs and error messages: "not_found" for
// FAILURE_CODE_NOT_FOUND (a number for a code this build does not know).
func (c FailureCode) Short() string {
	return strings.ToLower(strings.TrimPrefix(c.String(), "FAILURE_CODE_"))
}
