#!/usr/bin/env bash
# Interop with Cloudflare's mach (crates.io cf-mach 0.4), an implementation no one here wrote:
# mach measures `sonde serve --rpm` through a shaped bottleneck in namespaces
# (crates/sonde/tests/suite/rpm_mach.rs, ignored in the ordinary suite). mach builds BoringSSL,
# so cmake, clang and Go come from Debian first; its install took 29 min of CPU on this
# 2-core machine (BENCHMARKS.md), far past CI's minute, hence a bench script.
#   bash scripts/bench-rpm-mach.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=${SONDE_MACH_ROOT:-$HOME/.cache/sonde-mach}
if [ ! -x "$root/bin/mach" ]; then
    need=()
    for t in cmake clang go; do command -v "$t" >/dev/null || need+=("$t"); done
    if [ ${#need[@]} -gt 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq cmake clang golang-go >/dev/null
    fi
    start=$SECONDS
    cargo install --locked cf-mach --version '^0.4' --root "$root"
    echo "bench-rpm-mach: cf-mach installed in $((SECONDS - start)) s" >&2
fi
SONDE_MACH="$root/bin/mach" cargo test -p sonde --test suite rpm_mach:: -- --ignored --nocapture
