#!/usr/bin/env bash
# Builds sonde as one static executable, for an empty container base or any Linux host:
#   bash deploy/build-static.sh [OUT]      (default OUT: target/static/sonde)
#   bash deploy/build-static.sh --tests-build [OUT]
# musl when its Rust target is installed (`rustup target add x86_64-unknown-linux-musl`);
# otherwise glibc linked statically (crt-static), whose resolver (files and DNS, built
# into glibc since 2.34) works without any shared library, so names resolve in an empty
# root too. Either way the result has no dynamic section; the tests check it runs alone.
set -euo pipefail
cd "$(dirname "$0")/.."
# --tests-build: the tests' own unoptimised build of sonde (target/debug), its final crate
# compiled again and linked statically (glibc's crt-static) against that build's
# dependencies: 23-43 s in CI, against 236 CPU-s to build every crate again for a target
# directory of its own. The workspace's own crates are compiled again: a binary's build
# leaves out the features the tests' dev-dependencies add to memchr, flate2, socket2 and
# others. For the deploy test, which needs a static executable, not a fast one
# (scripts/test.sh). The next build of the tests links target/debug/sonde back as it was.
# Compiled as the tests' build is, also by CI's clippy-driver, so that it reuses it.
if [ "${1:-}" = --tests-build ]; then
    out=${2:-target/static/sonde}
    cargo rustc --locked -q -p sonde --bin sonde -- -C target-feature=+crt-static -C strip=debuginfo
    mkdir -p "$(dirname "$out")"
    cp target/debug/sonde "$out"
    echo "$out (the tests' build, linked statically, $(du -h "$out" | cut -f1))"
    exit 0
fi
out=${1:-target/static/sonde}
arch=$(uname -m)
if rustup target list --installed 2>/dev/null | grep -qx "$arch-unknown-linux-musl"; then
    target=$arch-unknown-linux-musl
    flags=""
else
    target=$arch-unknown-linux-gnu
    flags="-C target-feature=+crt-static"
fi
# A profile of its own (release without debug info) in a target directory of its own, so
# that the normal build's artefacts are not rebuilt with other flags.
# Compiled by rustc alone, also where CI lints the tests' build with clippy-driver (.ci/run).
unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
RUSTFLAGS="$flags" cargo build --locked --profile static --target "$target" \
    --target-dir target/static-build -p sonde
bin=target/static-build/$target/static/sonde
mkdir -p "$(dirname "$out")"
cp "$bin" "$out"
echo "$out ($target, $(du -h "$out" | cut -f1))"
