#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs and starts the local services
# (DynamoDB Local, SeaweedFS, s3rver), runs formatting, lint, docs, every test, the
# examples (each checks what it shows), a smoke run of the benchmarks (every scenario and
# its checks, tiny sizes) and the README's first command, and stops what it started,
# whether the tests pass or not.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ "${1:-}" != --inside ]]; then
	exec scripts/services.sh run -- "$0" --inside
fi

# Every build below uses one feature set, so nothing is compiled twice: the planted bugs
# (switches the simulator's tests flip; absent from production builds), the wrapper for
# object_store 0.13 with that version's own integration helpers, and the deltalake
# integration (tests/deltalake_race.rs), and the command line (which brings the harness:
# the races and benchmark scenarios).
FEATURES="planted-bugs,object-store-013-conformance,deltalake,cli"

echo "== cargo fmt --check"
cargo fmt --check
# The planted-bugs feature adds the switches the simulator's tests flip (off by default,
# absent from production builds); lint both builds.
echo "== cargo clippy --all-targets -- -D warnings (with and without planted-bugs)"
cargo clippy --all-targets --quiet -- -D warnings
cargo clippy --all-targets --quiet --features "$FEATURES" -- -D warnings
# The tests turn the harness on (the package is its own dev-dependency with it), so lint
# the library once more as a user's crate builds it: default features, no harness.
cargo clippy --lib --quiet -- -D warnings
# The library is a library: a user's crate that depends on dynacommit with default
# features pulls in no command-line or harness crate. Asked of such a crate (made under
# target/, with this lock file so nothing new is fetched), not of this package, whose
# dev-dependencies turn the harness on.
echo "== cargo tree: a user's crate depending on dynacommit has no command-line or gateway dependency"
user="target/downstream-user"
mkdir -p "$user/src"
printf '%s\n' '[package]' 'name = "downstream-user"' 'version = "0.0.0"' 'edition = "2024"' \
	'publish = false' '' '[dependencies]' 'dynacommit = { path = "../.." }' '' '[workspace]' \
	>"$user/Cargo.toml"
echo 'pub use dynacommit::CommitStore;' >"$user/src/lib.rs"
cp Cargo.lock "$user/Cargo.lock"
tree="$(cargo tree --quiet --manifest-path "$user/Cargo.toml" -e normal --prefix none)"
if ! grep -q '^dynacommit ' <<<"$tree"; then
	echo "cargo tree of $user does not show dynacommit" >&2
	exit 1
fi
if grep -E '^(clap|indicatif|visibility|s3s) ' <<<"$tree"; then
	echo "a user's default build of dynacommit depends on a command-line, gateway or harness crate (above)" >&2
	exit 1
fi
echo "== cargo doc (the tests' features, and docs.rs's: no harness, no command line)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet --features "$FEATURES"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet --features object-store-013,deltalake
if cargo nextest --version >/dev/null 2>&1; then
	# .config/nextest.toml bounds each test (killed after 5 minutes) and runs the
	# zombie-write tests alone.
	echo "== tests (runner: $(cargo nextest --version | head -n 1))"
	cargo nextest run --features "$FEATURES" --lib --bins --tests --no-fail-fast
else
	# Without nextest there is no per-test limit: bound the whole run instead, so a hung
	# test fails it rather than stalling CI. Nor are the zombie-write tests run alone.
	limit="${DYNACOMMIT_TEST_TIMEOUT:-30m}"
	echo "== tests (runner: cargo test, nextest not installed; whole run killed after $limit)"
	timeout --kill-after=30s "$limit" \
		cargo test --features "$FEATURES" --lib --bins --tests --no-fail-fast
fi
echo "== examples (each exits non-zero if what it shows does not hold)"
for example in examples/*.rs; do
	name="$(basename "$example" .rs)"
	echo "-- $name"
	timeout --kill-after=10s 2m cargo run --quiet --features "$FEATURES" --example "$name"
done
echo "== benchmark smoke run (every scenario and its checks, tiny sizes; timings mean nothing)"
DYNACOMMIT_BENCH_SMOKE=1 timeout --kill-after=10s 5m \
	cargo test --quiet --features "$FEATURES" --bench protocols --bench kv --bench kv_hot_folder --bench gateway >/dev/null
echo "== README command 1"
cargo run --quiet --features cli -- race
echo "== doc tests"
cargo test --doc --quiet --features "$FEATURES"
