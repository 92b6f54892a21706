//! The integration tests, one module per former test file, built as ONE executable: each
//! test file used to be its own executable that compiled `tests/common` again and linked the
//! whole binary's crates again (sixty-odd links of ~70 MB), which took most of CI's build
//! of the tests (BENCHMARKS.md, "Where CI's time goes"). Timed tests take the machine-wide
//! lock (`common::Serial`), but a test without traffic in another thread of this process
//! would still take their CPU: `scripts/test.sh` runs one test at a time
//! (`RUST_TEST_THREADS=1`), and so should a run of timed tests by hand (`--test-threads=1`).
//!
//! A new test file goes here as `tests/suite/NAME.rs` with a `mod NAME;` line below, and
//! starts with `use crate::common;` where it uses the helpers. Run one file's tests with
//! `cargo test -p sonde --test suite NAME::`. (A file put at `tests/NAME.rs` with
//! `mod common;` still builds, as an executable of its own: cargo finds it.)
//!
//! Tests here share one process: none may change its working directory, environment,
//! signal dispositions or the main thread's namespace (a test moves only threads it
//! spawned, `common::planted::enter_netns`, `common::rogue`), and each keeps its own store
//! and files under `common::scratch_dir`.

#[path = "../common/mod.rs"]
mod common;

mod agent_labels;
mod auth_limits;
mod bad_input;
mod clock;
mod cpu_latency;
mod deploy;
mod dpdk_netns;
mod engine_default;
mod faults;
mod fleet_netns;
mod hwstamps_netns;
mod iperf3_auth;
mod iperf3_delay_netns;
mod iperf3_netns;
mod iperf3_serve_limits;
mod iperf3_store_netns;
mod iperf3_udp_bidir_netns;
mod iperf3_udp_netns;
mod iperf3_udp_reverse_netns;
mod lab;
mod limit_netns;
mod load_netns;
mod marks_filter_netns;
mod marks_netns;
mod mesh_deploy;
mod mesh_icmp_netns;
mod mesh_marks_netns;
mod mesh_netns;
mod mesh_stamps_netns;
mod monitor_netns;
mod oneclock_netns;
mod oneway_netns;
mod openmetrics;
mod placement;
mod pps_netns;
mod redteam_accept;
mod redteam_iperf3;
mod redteam_iperf3_bidir;
mod redteam_iperf3_reverse;
mod redteam_iperf3_rogue;
mod redteam_iperf3_slot;
mod redteam_mesh;
mod redteam_mesh_replay;
mod redteam_stamp;
mod redteam_stamp_cos;
mod redteam_stamp_replay;
mod report;
mod rpm_mach;
mod rpm_netns;
mod rpm_signals;
mod rpm_store;
mod rpm_upload;
mod rpm_verdict;
mod rr_netns;
mod security_accept;
mod security_broadcast;
mod security_control;
mod security_dataplane;
mod security_dpdk;
mod security_files;
mod security_limits;
mod security_marks;
mod security_mesh;
mod security_mesh_metrics;
mod security_metrics;
mod security_metrics_handshakes;
mod security_rogue_agent;
mod security_rpm;
mod security_rpm_h1;
mod security_rpm_h2;
mod security_stamp;
mod security_stamp_reflection;
mod security_stamp_sender;
mod security_uring;
mod security_uring_echo;
mod serve_services;
mod stages_netns;
mod stages_planted;
mod stamp_auth_netns;
mod stamp_fleet_netns;
mod stamp_netns;
mod stamp_no_answer_netns;
mod store_compare;
mod stream_netns;
mod tune_netns;
mod watch_netns;
mod xdp_netns;
