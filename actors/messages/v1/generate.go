// Package messages holds the protobuf messages actors send one another (and
// the node's gateway carries): requests, replies, progress. What the node
// stores is in persistence/records/v1; the runtime's own messages (Ping,
// NodeInfo, SpawnRequest, Failure, ...) are in runtime/messages/v1. Regenerate with
// `go generate ./actors/messages/...` or `make proto` (needs protoc from
// Debian's protobuf-compiler and protoc-gen-go from the Go module proxy).
// Imports are named from the repository root, which is the proto path.
package messages

//go:generate protoc --proto_path=../../.. --go_out=../../.. --go_opt=paths=source_relative actors/messages/v1/actors.proto actors/messages/v1/learner.proto actors/messages/v1/sampler.proto actors/messages/v1/rollout.proto actors/messages/v1/frontier.proto actors/messages/v1/trainer.proto
