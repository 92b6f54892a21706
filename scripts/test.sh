#!/usr/bin/env bash
# The tests' set-up and the whole suite, on a fresh Debian machine as root:
#   bash scripts/test.sh [cargo test arguments...]
# Installs what the integration tests run (scripts/test-deps.sh), builds them and the static
# executable the deploy test runs in an empty root, then runs every test of the workspace
# (three passes, below).
# .ci/run calls this same script. Without root it still runs, and the tests that need root
# print SKIPPED (or fail, with CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."
# Where the time goes: each phase's end, in seconds since CI's start (.ci/run) or this one.
t0=${SONDE_CI_T0:-$(date +%s)}
phase() { echo "ci: $1 at $(($(date +%s) - t0)) s" >&2; }

# Installed beside the tests' build; no test runs until both are done.
bash scripts/test-deps.sh &
deps=$!
cargo test --workspace --no-run "$@" || { wait "$deps"; exit 1; }
wait "$deps"
# The deploy test runs a static executable in an empty root: the tests' build of sonde,
# linked statically (deploy/build-static.sh --tests-build); the next pass's build links
# target/debug/sonde back.
bash deploy/build-static.sh --tests-build >&2
phase "the tests' set-up done"

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
    iperf3_auth:: iperf3_store_netns:: a_served_udp_bidir_test_is_held_and_booked_both_ways
    hwstamps_netns:: openmetrics:: xdp_refusals_name_the_flag packet_size_above_the_mtu_is_refused
    self_noise_with_a_bypass_engine_is_refused a_mesh_marked_network_control_is_refused
    a_redirect_a_compressed_answer_and_a_foreign_config_are_named
    iperf3_clients_beyond_each_limit_are_refused_by_name
)
SONDE_TEST_LOCK_SHARED=1 cargo test -p sonde --test suite "$@" -- --test-threads=4 \
    "${untimed[@]}" || rc=$?
phase "the untimed pass done"
# 2. The rest of the suite, one test at a time: in the one suite executable a test without
#    traffic could otherwise run beside a timed one and take its CPU (testpmd's receiver
#    fell 5 % behind its veth beside one; exact alone, 2 of 2).
skips=()
for u in "${untimed[@]}"; do skips+=(--skip "$u"); done
# What the builds and the untimed pass left unwritten is written back now, not by the
# kernel's flusher during a timed test (30 s after it was written).
echo "ci: before the timed pass: $(grep '^Dirty:' /proc/meminfo | tr -s ' ')" >&2
sync
phase "written back"
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
