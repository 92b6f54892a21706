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
# runs every test of the workspace (three passes, below).
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
cargo test --workspace --no-run "$@" || { [ -z "$suite" ] || wait "$suite"; exit 1; }
[ -z "$suite" ] || wait "$suite"
# The deploy test needs a static executable, not a fast one: unoptimised (the shipped one,
# deploy/build-static.sh alone, is), it builds in far less time. It builds beside the untimed
# pass below, whose tests leave most of both cores idle (waiting on peers and timeouts),
# under a shared hold of the machine-wide timing lock (tests/common's Serial) taken before
# it starts: no timed test runs until it is done, and the deploy test runs once it is.
lock="${TMPDIR:-/tmp}/sonde-timing-tests.lock"
exec {hold}>"$lock"
flock -s "$hold"
CARGO_PROFILE_STATIC_OPT_LEVEL=0 bash deploy/build-static.sh >&2 &
static=$!
exec {hold}>&-

# Three passes; each runs when the one before fails (--no-fail-fast), and the script fails if
# any did. Integration tests that send traffic serialize themselves on a lock file
# (tests/common's Serial).
rc=0
# 1. The suite's untimed tests: attacks, refusals, clean-up after a kill, stored and labelled
#    runs, a fleet's schedule and its metrics. What they assert (bytes, counts, bounds, what is left behind) does not depend on
#    the machine's speed, and most of their time is spent waiting on a peer or a timeout:
#    they share the lock, four at a time, and never run beside a timed test. Names are the
#    test harness's filters (a substring of a test's path).
untimed=(
    security_ redteam_ auth_limits:: bad_input:: deploy:: agent_labels:: serve_services::
    rpm_signals:: rpm_store:: stamp_auth_netns::
    faults::a_controller_beyond_max_tests_is_told_busy faults::ctrl_c_still_reports
    no_program_is_left leaves_no_testpmd_running missing_testpmd_or_hugepages
    leaves_no_limit_behind lab:: fleet_netns:: monitor_netns:: placement:: stamp_no_answer_netns::
    stamp_runs_are_stored_shown_and_compared an_agent_refused_bpf ipv6_and_congestion_control
)
# The deploy test waits for the static executable, so it runs after the others.
SONDE_TEST_LOCK_SHARED=1 cargo test -p sonde --test suite "$@" -- --test-threads=4 \
    "${untimed[@]}" --skip deploy:: || rc=$?
wait "$static" || rc=$?
SONDE_TEST_LOCK_SHARED=1 cargo test -p sonde --test suite "$@" -- --test-threads=4 deploy:: || rc=$?
# 2. The rest of the suite, one test at a time: in the one suite executable a test without
#    traffic could otherwise run beside a timed one and take its CPU (testpmd's receiver
#    fell 5 % behind its veth beside one; exact alone, 2 of 2).
skips=()
for u in "${untimed[@]}"; do skips+=(--skip "$u"); done
cargo test -p sonde --test suite "$@" -- --test-threads=1 "${skips[@]}" || rc=$?
# 3. Every other crate's tests and the binary's own, one at a time too: the engine's unit
#    tests send on loopback at paced rates (beside each other, a paced io_uring sender and
#    the loopback pps accounting failed 3 runs in 5). Named by target, not by `--exclude
#    sonde`: without sonde, cargo unifies the dependencies' features anew and builds the
#    workspace again (52 s in CI).
others=()
for f in crates/*/tests/*.rs; do others+=(--test "$(basename "$f" .rs)"); done
RUST_TEST_THREADS=${RUST_TEST_THREADS:-1} \
    cargo test --workspace --no-fail-fast --lib --bins "${others[@]}" "$@" || rc=$?
exit "$rc"
