//! `sonde lab`: the standard measurements between the two hosts of `sonde_run::lab` (two
//! namespaces over veth, or loopback), each run in this process by the one measure
//! pipeline from the client's side, its document kept in a file; then the lab's table.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use sonde_results::Document;
use sonde_run::lab::Lab;
use sonde_run::netns::{Pair, CLIENT_ADDR, SERVER_ADDR};
use sonde_run::signals::Interrupt;

use crate::cli::{Cli, LabArgs};

fn is_root() -> bool {
    // SAFETY: no arguments.
    unsafe { libc::geteuid() == 0 }
}

/// The standard measurements: what `sonde TEST HOST` each runs, as words after the host.
/// Over veth the packet rate is measured with AF_XDP too (loopback has no XDP).
fn measurements(duration_ms: u64, veth: bool) -> Vec<Vec<String>> {
    let t = format!("{duration_ms}ms");
    let lines: [&[&str]; 8] = [
        &["stream", "-P", "1"],
        &["stream", "-P", "8"],
        &["ping"],
        &["ping", "--udp"],
        &["rpc", "-C", "8", "-W", "8"],
        &["pps", "--flows", "4", "--rx-threads", "2"],
        &["pps", "--engine", "xdp", "--flows", "4"],
        &["load", "-P", "4"],
    ];
    lines
        .iter()
        .filter(|l| veth || !l.contains(&"xdp"))
        .map(|l| {
            let mut v: Vec<String> = l.iter().map(|w| w.to_string()).collect();
            v.extend(["-t".to_string(), t.clone()]);
            v
        })
        .collect()
}

/// The lab's namespaces, or `None` (loopback) saying why.
fn namespaces(args: &LabArgs, tag: &str) -> Option<Pair> {
    let loopback = "running over loopback (127.0.0.1) instead";
    if args.loopback {
        outln!("lab: over loopback (127.0.0.1), as asked");
        return None;
    }
    if !is_root() {
        outln!("lab: not root, so no network namespaces: {loopback}");
        return None;
    }
    match Pair::create("sonde", tag, "sv") {
        Ok(n) => {
            let (c, s) = (n.client.name(), n.server.name());
            let veth = format!("{}/{}", n.client_if, n.server_if);
            outln!(
                "lab: namespaces {c} ({CLIENT_ADDR}) and {s} ({SERVER_ADDR}) joined by veth {veth}"
            );
            Some(n)
        }
        Err(e) => {
            outln!("lab: cannot build namespaces ({e}): {loopback}");
            None
        }
    }
}

pub fn run(args: &LabArgs, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot find the sonde executable")?;
    let tag = format!("lab{}", std::process::id());
    let out_dir = match &args.output_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("sonde-{tag}")),
    };
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let lab = Lab::start(&exe, &tag, namespaces(args, &tag))?;
    let veth = lab.netns.is_some();
    let mut results: Vec<(String, Document)> = Vec::new();
    let mut failed = false;
    for (i, words) in measurements(args.duration, veth).into_iter().enumerate() {
        let name = words[..words.len() - 2].join(" ");
        if interrupt.is_set() {
            break;
        }
        outln!("\n== {name} ==");
        let file = out_dir.join(format!("{i:02}-{}.json", name.replace([' ', '-'], "")));
        let code = lab.in_client(|| measure(&lab, &words, &file, interrupt))?;
        match std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<Document>(&b).ok())
        {
            Some(doc) => {
                failed |= doc.end.partial;
                results.push((name, doc));
            }
            None => {
                let why = code.err().unwrap_or_else(|| "no document".into());
                errln!("lab: {name} produced no result: {why}");
                failed = true;
            }
        }
    }
    drop(lab);
    let over = if veth {
        "two namespaces over veth"
    } else {
        "loopback"
    };
    outln!("\n== lab summary ({over}) ==");
    out!("{}", sonde_report::summary::lab(&results));
    if args.output_dir.is_some() {
        outln!("result documents in {}", out_dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&out_dir);
    }
    if interrupt.is_set() {
        outln!("lab: interrupted; namespaces removed");
    }
    Ok(ExitCode::from(if failed || interrupt.is_set() {
        3
    } else {
        0
    }))
}

/// One measurement, `sonde WORDS` against the lab's agent with its document in `file`, as
/// the test command would run it (heading, live lines, summary, stored).
fn measure(
    lab: &Lab,
    words: &[String],
    file: &std::path::Path,
    interrupt: &Interrupt,
) -> Result<ExitCode, String> {
    let port = lab.port().to_string();
    let (head, rest) = words.split_at(1);
    let argv = ["sonde", &head[0], &lab.host, "--port", &port];
    let key = lab.key.file.display().to_string();
    let tail = ["--key-file", &key, "--output", &file.display().to_string()].map(String::from);
    let shown: Vec<String> = argv
        .iter()
        .map(|s| s.to_string())
        .chain(rest.iter().cloned())
        .collect();
    let command = shown.join(" ");
    let cli = Cli::try_parse_from(shown.into_iter().chain(tail)).map_err(|e| e.to_string())?;
    let plan = cli.command.plan().expect("a lab measurement is a test");
    let (target, out) = cli.command.target_output().expect("a test has a target");
    crate::measure::test_command(plan, target, out, command, interrupt)
        .map_err(|e| crate::errors::one_line(&e))
}
