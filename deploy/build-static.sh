#!/usr/bin/env bash
# Builds sonde as one static executable, for an empty container base or any Linux host:
#   bash deploy/build-static.sh [OUT]      (default OUT: target/static/sonde)
# musl when its Rust target is installed (`rustup target add x86_64-unknown-linux-musl`);
# otherwise glibc linked statically (crt-static), whose resolver (files and DNS, built
# into glibc since 2.34) works without any shared library, so names resolve in an empty
# root too. Either way the result has no dynamic section; the tests check it runs alone.
set -euo pipefail
cd "$(dirname "$0")/.."
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
