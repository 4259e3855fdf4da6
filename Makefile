# The README's two commands: `make run` (a local 3-node cluster) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench compare chaos mutants sim schema openapi proto fuzz clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml storage/_codec.c
	$(BIN)/pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

# our modules' bytecode, written once: where PYTHONDONTWRITEBYTECODE is set, every node process would compile
# them again (a tenth of a node's start)
BYTECODE := $(BIN)/python -m compileall -q raftlog storage raft api app pipeline client

run: $(STAMP)
	$(BYTECODE)
	$(BIN)/raftlog cluster --nodes 3

# the browser test drives Debian's Chromium through its chromedriver
CHROMEDRIVER := /usr/bin/chromedriver
$(CHROMEDRIVER):
	apt-get update && apt-get install -y chromium chromium-driver

# on both cores, each test file on one worker: a file's module-scoped cluster or Spark session starts once
test: $(STAMP) $(CHROMEDRIVER)
	$(BIN)/ruff check .
	$(BYTECODE)
	$(BIN)/pytest -n 2 --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check .

# the simulation over many seeds (make test runs 12, 3 and 8 of them): three and five members, membership changes
sim: $(STAMP)
	$(BIN)/python -m tests.sim --seeds 500
	$(BIN)/python -m tests.sim --seeds 200 --voters 5
	$(BIN)/python -m tests.sim --seeds 200 --membership

# Schemathesis against openapi.yaml on live clusters, at length (make test tries 10 cases per operation and mode)
EXAMPLES ?= 100
schema: $(STAMP)
	RAFTLOG_SCHEMA_EXAMPLES=$(EXAMPLES) $(BIN)/pytest tests/e2e/test_schema.py

# the fault suite at length: make chaos SECONDS=1800 [SEED=7] [NODES=5]
SECONDS ?= 600
NODES ?= 3
chaos: $(STAMP)
	$(BIN)/python -m tests.faults --seconds $(SECONDS) --nodes $(NODES) $(if $(SEED),--seed $(SEED),) --verbose

# the fault suite proves itself: each bug of tests/faults/mutants.py planted in every node, a 60 s run per seed
# until one flags it, after a control run per seed with no bug (about 50 minutes): make mutants [ONLY=name,...]
mutants: $(STAMP)
	$(BIN)/python -m tests.faults.mutation $(if $(ONLY),--only $(ONLY),)

openapi: $(STAMP)
	$(BIN)/python -m raftlog.app.openapi > openapi.yaml.tmp && mv openapi.yaml.tmp openapi.yaml

# the peer port's messages and the public gRPC API, generated from proto/ (committed; tests/api/test_proto_drift.py
# checks them); the public service's stubs import its messages from api/
proto: $(STAMP)
	rm -rf .proto-out && mkdir .proto-out
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=.proto-out --pyi_out=.proto-out proto/raftlog/peer/v1/peer.proto
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=.proto-out --pyi_out=.proto-out --grpc_python_out=.proto-out proto/raftlog/v1/log.proto
	sed -i 's/^from raftlog.v1 import log_pb2/from raftlog.api import log_pb2/' .proto-out/raftlog/v1/log_pb2_grpc.py
	mv .proto-out/raftlog/peer/v1/peer_pb2.py .proto-out/raftlog/peer/v1/peer_pb2.pyi api/
	mv .proto-out/raftlog/v1/log_pb2.py .proto-out/raftlog/v1/log_pb2.pyi .proto-out/raftlog/v1/log_pb2_grpc.py api/
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=.proto-out --pyi_out=.proto-out --grpc_python_out=.proto-out proto/raftlog/v1/topics.proto
	sed -i 's/^from raftlog.v1 import \(log_pb2\|topics_pb2\)/from raftlog.api import \1/' .proto-out/raftlog/v1/topics_pb2*.py*
	mv .proto-out/raftlog/v1/topics_pb2.py .proto-out/raftlog/v1/topics_pb2.pyi .proto-out/raftlog/v1/topics_pb2_grpc.py api/
	rm -rf .proto-out

# the compiled codec against the Python reference under atheris (tests/storage/fuzz_codec.py), FUZZ_SECONDS in
# all, a share per target; with clang (installed here if missing) on an AddressSanitizer build:
# make fuzz [FUZZ_SECONDS=300] [FUZZ_TARGETS=check_next,...]; corpora, logs and findings in build/fuzz/
FUZZ_SECONDS ?= 300
fuzz: $(STAMP)
	command -v clang >/dev/null || (apt-get update && apt-get install -y clang) || echo "make fuzz: no clang"
	! command -v clang >/dev/null || test -e "$$(clang -print-file-name=libclang_rt.asan-x86_64.a)" \
		|| apt-get install -y "libclang-rt-$$(clang -dumpversion | cut -d. -f1)-dev"
	$(BIN)/python -m tests.storage.fuzz_run --seconds $(FUZZ_SECONDS) $(if $(FUZZ_TARGETS),--targets $(FUZZ_TARGETS),)

bench: $(STAMP)
	command -v wrk >/dev/null || (apt-get update && apt-get install -y wrk)
	$(BIN)/python bench/storage_bench.py
	$(BIN)/python bench/cluster_bench.py
	$(BIN)/python bench/pipeline_bench.py

# raftlog against etcd and PySyncObj in one run (about 17 minutes): make compare [ARGS=--quick]
BENCH_STAMP := $(VENV)/.installed-bench
$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,spark,bench]'
	touch $(BENCH_STAMP)

compare: $(BENCH_STAMP)
	command -v wrk >/dev/null && command -v etcd >/dev/null || (apt-get update && apt-get install -y wrk etcd-server)
	$(BIN)/python bench/compare.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
