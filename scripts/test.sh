#!/usr/bin/env bash
# The tests' set-up and the whole suite, on a fresh Debian machine as root:
#   bash scripts/test.sh [cargo test arguments...]
# Installs what the integration tests run (iproute2's ip and tc for the namespaces and
# shapers, nftables for the count and loss checks, util-linux's setpriv for the not-root
# test, iputils' ping for the kernel's own traffic during an XDP test, chromium for the report's
# screenshot, dpdk-dev's dpdk-testpmd for --engine dpdk and procps' pgrep to
# find its processes, Debian's iperf3 for the iperf3 interop tests), kubernetes-validate from PyPI for the manifests in deploy/ and
# HdrHistogram's Python package (hdrhistogram) to read back the exported histogram log, stamp-suite
# from crates.io (cargo install) for the STAMP interop tests, builds the
# static executable the deploy test runs in an empty root (deploy/build-static.sh), then
# runs `cargo test --workspace`.
# .ci/run calls this same script. Without root it still runs, and the tests that need root
# print SKIPPED (or fail, with CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v ip >/dev/null && command -v tc >/dev/null || need+=(iproute2)
command -v nft >/dev/null || need+=(nftables)
command -v setpriv >/dev/null || need+=(util-linux)
command -v ping >/dev/null || need+=(iputils-ping)
command -v chromium >/dev/null || need+=(chromium)
command -v dpdk-testpmd >/dev/null || need+=(dpdk-dev)
command -v pgrep >/dev/null || need+=(procps)
command -v promtool >/dev/null || need+=(prometheus)
command -v iperf3 >/dev/null || need+=(iperf3)
# The responsiveness interop test's third-party endpoint (crates/sonde/tests/suite/rpm_netns.rs).
command -v nginx >/dev/null || need+=(nginx)
command -v openssl >/dev/null || need+=(openssl)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "installing for the tests: ${need[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq "${need[@]}" >/dev/null
    else
        echo "missing for the tests: ${need[*]} (install them as root, or run this script as root)" >&2
    fi
fi

if ! command -v kubernetes-validate >/dev/null; then
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore kubernetes-validate \
        || echo "missing for the tests: kubernetes-validate (pip install kubernetes-validate)" >&2
fi
if ! python3 -c "import hdrh.log" 2>/dev/null; then
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore hdrhistogram \
        || echo "missing for the tests: HdrHistogram's Python package (pip install hdrhistogram)" >&2
fi
# STAMP interop (crates/sonde/tests/suite/stamp_netns.rs) runs stamp-suite, an implementation no
# one here wrote, as sender and reflector.
# Built beside the tests' build below; no test runs until it is installed.
suite=
if ! command -v stamp-suite >/dev/null && [ ! -x "$HOME/.cargo/bin/stamp-suite" ]; then
    (cargo install --locked -q stamp-suite@1.0.0 >&2 \
        || echo "missing for the tests: stamp-suite (cargo install stamp-suite)" >&2) &
    suite=$!
fi
# The deploy test needs a static executable, not a fast one: unoptimised (the shipped one,
# deploy/build-static.sh alone, is), it builds in far less time. It builds beside the tests'
# build, which leaves a core idle in its serial parts; no test runs until both are done.
CARGO_PROFILE_STATIC_OPT_LEVEL=0 bash deploy/build-static.sh >&2 &
static=$!
cargo test --workspace --no-run "$@" || { wait "$static"; exit 1; }
wait "$static"
[ -z "$suite" ] || wait "$suite"

# Integration tests that send traffic serialize themselves on a lock file (tests/common),
# but in the one suite executable any test without traffic could run beside a timed one and
# take its CPU: testpmd's receiver fell 5 % behind its veth beside one (exact alone, 2 of
# 2). One test at a time, at the price of the untimed tests' own time. --no-fail-fast: one
# failing test executable does not hide the others' results (cargo still exits non-zero).
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-1}
exec cargo test --workspace --no-fail-fast "$@"
