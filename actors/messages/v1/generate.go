// Package messages holds every protobuf message that crosses an actor, node or
// storage boundary. Regenerate with `go generate ./actors/messages/...` or
// `make proto` (needs protoc from Debian's protobuf-compiler and
// protoc-gen-go from the Go module proxy).
package messages

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative records.proto runtime.proto actors.proto learner.proto sampler.proto rollout.proto frontier.proto trainer.proto
