//! What nftables' counters counted, read inside a namespace: the ground truth of the tests
//! that plant loss, marks or drops on a router or a receiver.

use super::Lab;

/// What the counters of nftables table `inet TABLE` in namespace `ns` counted, summed over
/// its rules: `field` is `packets` or `bytes`.
pub fn nft_counted(ns: &str, table: &str, field: &str) -> u64 {
    nft_list(ns, &["table", "inet", table])
        .iter()
        .filter_map(|i| i["rule"]["expr"].as_array())
        .flatten()
        .filter_map(|e| e["counter"][field].as_u64())
        .sum()
}

/// Packets counted by the named counter `name` of nftables table `inet TABLE` in
/// namespace `ns`.
pub fn nft_named_counter(ns: &str, table: &str, name: &str) -> u64 {
    let items = nft_list(ns, &["counter", "inet", table, name]);
    items
        .iter()
        .find_map(|i| i["counter"]["packets"].as_u64())
        .unwrap_or_else(|| panic!("no counter {name}: {items:?}"))
}

/// `nft ARGS` in namespace `ns`, which must succeed.
pub fn nft(ns: &str, args: &[&str]) {
    let o = Lab::in_ns(ns, "nft").args(args).output().unwrap();
    assert!(o.status.success(), "nft {args:?}: {}", super::stderr(&o));
}

/// On `ns`'s input, table `inet TABLE`: the datagrams of iperf3's UDP streams (`dir`:
/// `dport` toward the server's port 5201, `sport` from it) numbered `seqs` (iperf3's
/// 32-bit counter, 8 bytes into the payload, so 128 bits into the UDP header), dropped
/// and counted ([`nft_counted`]).
pub fn plant_iperf3_loss(ns: &str, table: &str, dir: &str, seqs: &str) {
    nft(ns, &["add", "table", "inet", table]);
    let chain = "{ type filter hook input priority 0 ; }";
    nft(ns, &["add", "chain", "inet", table, "in", chain]);
    let rule = ["add", "rule", "inet", table, "in", "udp", dir, "5201"];
    let tail = ["@th,128,32", seqs, "counter", "drop"];
    nft(ns, &[&rule[..], &tail[..]].concat());
}

/// The items `nft -j list WHAT...` lists in namespace `ns`.
fn nft_list(ns: &str, what: &[&str]) -> Vec<serde_json::Value> {
    let out = Lab::in_ns(ns, "nft")
        .args(["-j", "list"])
        .args(what)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["nftables"].as_array().cloned().unwrap_or_default()
}
