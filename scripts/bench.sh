#!/usr/bin/env bash
# The benchmarks of docs/benchmarks.md, in one command: starts the local services (if not
# running), runs benches/protocols.rs (dynacommit, object_store 0.12.5's DynamoCommit, the
# bare stores and SeaweedFS's native conditional PUT, side by side), and stops what it
# started. DYNACOMMIT_BENCH_SCENARIOS=1,3 runs a subset.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

started=()
cleanup() {
	local status=$?
	if ((${#started[@]})); then
		scripts/services.sh stop "${started[@]}" || true
	fi
	exit "$status"
}
trap cleanup EXIT INT TERM

for service in dynamodb seaweedfs s3rver; do
	if ! scripts/services.sh status "$service" | grep -q running; then
		scripts/services.sh start "$service"
		started+=("$service")
	fi
done
eval "$(scripts/services.sh env)"
cargo bench --quiet --bench protocols
