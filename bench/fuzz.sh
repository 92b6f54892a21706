#!/usr/bin/env bash
# The longer fuzzing run (CI runs each target for a few seconds only). cargo-fuzz needs
# unstable rustc flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain accept them.
# Usage: bash bench/fuzz.sh [SECONDS_PER_TARGET]   (default 600)
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
for t in frame_decoder agent_session client_session data_header sealed_agent spec_validate stamp_reflect iperf3_control nq_config; do
    # `run`: spec_validate needs the run layer (fuzz/Cargo.toml).
    RUSTC_BOOTSTRAP=1 cargo fuzz run --features run "$t" -- -max_total_time="${1:-600}"
done
