#!/usr/bin/env bash
# The benchmarks of docs/benchmarks.md, in one command: starts the local services that are
# not running, runs benches/protocols.rs (dynacommit, object_store 0.12.5's DynamoCommit,
# the bare stores and SeaweedFS's native conditional PUT, side by side) and benches/kv.rs
# (the key-value store's operations) and benches/gateway.rs (dynacommit gateway against the
# store it fronts), and stops what it started. DYNACOMMIT_BENCH_SCENARIOS=1,3 runs a subset; DYNACOMMIT_BENCH_SMOKE=1 runs tiny
# sizes (every scenario and its checks, timings meaningless: scripts/test.sh does).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# One feature set for every bench and the binary (the gateway's memory scenario runs the
# release binary as a process of its own), so the release build is made once.
exec scripts/services.sh run -- sh -c 'cargo build --release --quiet --features cli --bin dynacommit &&
	cargo bench --quiet --features cli --bench protocols &&
	cargo bench --quiet --features cli --bench kv &&
	DYNACOMMIT_GATEWAY_BIN=target/release/dynacommit cargo bench --quiet --features cli --bench gateway'
