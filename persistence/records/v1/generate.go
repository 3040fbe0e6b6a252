// Package records holds the protobuf records the node stores (package
// persistence keeps them in Badger): tasks, trajectories, runs, evaluations,
// checkpoints, environments, coverage maps, the frontier estimator's state.
// Actor messages carry them (actors/messages/v1 imports this package, never
// the reverse). Regenerate with `go generate ./persistence/records/...` or
// `make proto`; imports are named from the repository root, the proto path.
package records

//go:generate protoc --proto_path=../../.. --go_out=../../.. --go_opt=paths=source_relative persistence/records/v1/records.proto persistence/records/v1/frontier.proto persistence/records/v1/coverage.proto
