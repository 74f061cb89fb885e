#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs and starts the local services
# (DynamoDB Local, SeaweedFS, s3rver), runs formatting, lint, docs and every test, and
# stops what it started, whether the tests pass or not.
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

echo "== cargo fmt --check"
cargo fmt --check
echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets --quiet -- -D warnings
echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet
echo "== tests"
if cargo nextest --version >/dev/null 2>&1; then
	cargo nextest run --lib --bins --tests --no-fail-fast
else
	cargo test --lib --bins --tests --no-fail-fast
fi
echo "== examples"
for example in examples/*.rs; do
	name="$(basename "$example" .rs)"
	echo "-- $name"
	cargo run --quiet --example "$name" >/dev/null
done
echo "== README command 1"
cargo run --quiet -- race
echo "== doc tests"
cargo test --doc --quiet
