#!/usr/bin/env bash
# Installs what the integration tests run, on a Debian machine as root (scripts/test.sh calls
# it; .ci/run starts it first, beside its build): iproute2's ip and tc for the namespaces and
# shapers, nftables for the count and loss checks, util-linux's setpriv for the not-root
# test, iputils' ping for the kernel's own traffic during an XDP test, chromium for the
# report's screenshot, dpdk-dev's dpdk-testpmd for --engine dpdk and procps' pgrep to find
# its processes, prometheus' promtool, Debian's iperf3 and nginx (with openssl) for the
# interop tests, kubernetes-validate from PyPI for the manifests in deploy/, HdrHistogram's
# Python package (hdrhistogram) to read back the exported histogram log, and stamp-suite from
# crates.io for the STAMP interop tests. What is installed already is left alone; what
# cannot be installed is named, and the tests that need it print SKIPPED (fail, with CI=true).
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
# one here wrote, as sender and reflector. Its unoptimised build (`--debug`): 80 CPU-s
# against 200 for its release build, on the path to the first test on a fresh machine; its
# floor through the interop test's 4 ms path was 2.4 % over ours, within that test's 8 %.
if ! command -v stamp-suite >/dev/null && [ ! -x "$HOME/.cargo/bin/stamp-suite" ]; then
    cargo install --debug --locked -q stamp-suite@1.0.0 >&2 \
        || echo "missing for the tests: stamp-suite (cargo install stamp-suite)" >&2
fi
