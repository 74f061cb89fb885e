#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs and starts the local services
# (DynamoDB Local, SeaweedFS, s3rver), runs formatting, lint, docs, every test, the
# examples and the README's first command, and stops what it started, whether the tests
# pass or not.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ "${1:-}" != --inside ]]; then
	exec scripts/services.sh run -- "$0" --inside
fi

echo "== cargo fmt --check"
cargo fmt --check
# The planted-bugs feature adds the switches the simulator's tests flip (off by default,
# absent from production builds); lint both builds.
echo "== cargo clippy --all-targets -- -D warnings (with and without planted-bugs)"
cargo clippy --all-targets --quiet -- -D warnings
cargo clippy --all-targets --quiet --features planted-bugs -- -D warnings
echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet
echo "== tests"
if cargo nextest --version >/dev/null 2>&1; then
	cargo nextest run --features planted-bugs --lib --bins --tests --no-fail-fast
else
	cargo test --features planted-bugs --lib --bins --tests --no-fail-fast
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
