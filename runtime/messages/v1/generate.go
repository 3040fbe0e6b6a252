// Package rtmsg holds the runtime's own protobuf messages (proto package
// frognano.runtime.v1): liveness (Ping, Pong), node facts and load
// (NodeInfo, Capabilities, Load), membership, spawning by kind, the
// diagnostic digest jobs, and Failure, the typed error reply every actor
// answers with. The runtime's packages use it; actors/messages/v1 holds the
// actors' messages. Regenerate with `go generate ./runtime/messages/...` or
// `make proto`; imports are named from the repository root, the proto path.
package rtmsg

//go:generate protoc --proto_path=../../.. --go_out=../../.. --go_opt=paths=source_relative runtime/messages/v1/runtime.proto
