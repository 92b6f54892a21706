//! Files sonde touches as root and what it prints: a tune state file that is a link, open
//! to others, someone else's, or names a path no plan makes is refused with nothing
//! written; a stored document full of escape sequences and markup reaches neither the
//! terminal nor the Markdown or HTML report raw.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use common::*;

/// Content and mtime: what a refused restore must leave as it was.
fn look(p: &Path) -> (Vec<u8>, SystemTime) {
    let m = std::fs::metadata(p).unwrap();
    (std::fs::read(p).unwrap(), m.modified().unwrap())
}

/// A 0600 state file (as `sonde tune apply` writes it) restoring `paths` to "0".
fn state_naming(paths: &[&str]) -> PathBuf {
    let changes: Vec<serde_json::Value> = paths
        .iter()
        .map(|p| {
            serde_json::json!({
                "target": { "kind": "file", "path": p },
                "from": "0", "to": "1", "why": "hostile"
            })
        })
        .collect();
    let f = temp_file("state.json");
    let json = serde_json::json!({ "goal": "latency", "changes": changes });
    std::fs::write(&f, json.to_string()).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    f
}

fn restore(state: &Path) -> std::process::Output {
    let mut c = sonde_cmd();
    c.args(["tune", "restore", "--state"]).arg(state);
    run(c)
}

fn refused(o: &std::process::Output, why: &str) {
    assert_eq!(o.status.code(), Some(1), "{}", stderr(o));
    assert!(
        stderr(o).contains("refused --state") && stderr(o).contains(why),
        "want '{why}': {}",
        stderr(o)
    );
}

#[test]
fn tune_restore_refuses_hostile_state_files_and_writes_nothing() {
    // SAFETY: no arguments.
    if !skip_unless(
        "root",
        (unsafe { libc::geteuid() } != 0).then(|| "not root".into()),
    ) {
        return;
    }
    let victim = temp_file("victim");
    std::fs::write(&victim, "victim\n").unwrap();
    let before = look(&victim);
    let rel = victim.to_str().unwrap().trim_start_matches('/').to_string();
    // Paths no plan makes: the file itself, and through a known directory and "..".
    for path in [rel.clone(), format!("proc/sys/net/core/../../../{rel}")] {
        refused(&restore(&state_naming(&[&path])), "never changes");
    }
    // A link to a state file, a state open to others, a state someone else owns.
    let good = state_naming(&[&rel]);
    let link = temp_file("link.json");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    refused(&restore(&link), "symbolic link");
    let open = state_naming(&[&rel]);
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
    refused(&restore(&open), "mode 0666");
    let foreign = state_naming(&[&rel]);
    std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
    refused(&restore(&foreign), "owned by uid 65534");
    // In a directory anyone can write, as /tmp.
    let shared = temp_file("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let in_shared = shared.join("state.json");
    std::fs::copy(&good, &in_shared).unwrap();
    refused(&restore(&in_shared), "can be written by others");
    assert_eq!(look(&victim), before, "a refused restore wrote the victim");
    assert!(good.exists() && open.exists(), "a refused state is kept");
}

#[test]
fn tune_restore_refuses_a_state_naming_etc_passwd() {
    // SAFETY: no arguments.
    let root = unsafe { libc::geteuid() } == 0;
    if !skip_unless("root", (!root).then(|| "not root".into())) || !need_tools(&["unshare"]) {
        return;
    }
    // /etc/passwd is a scratch file in a mount namespace of its own: a bug cannot harm the host.
    let stand_in = temp_file("passwd");
    std::fs::write(&stand_in, "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    let (host_before, before) = (look(Path::new("/etc/passwd")), look(&stand_in));
    let state = state_naming(&["etc/passwd"]);
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind \"$1\" /etc/passwd && exec \"$2\" tune restore --state \"$3\"")
        .args(["sh", stand_in.to_str().unwrap(), SONDE])
        .arg(&state);
    let o = run(c);
    refused(&o, "\"/etc/passwd\", which `sonde tune plan` never changes");
    assert!(
        stderr(&o).contains("nothing was restored"),
        "{}",
        stderr(&o)
    );
    assert_eq!(look(&stand_in), before);
    assert_eq!(look(Path::new("/etc/passwd")), host_before);
}

const HOSTILE: &str = "\x1b]0;pwned\x07\x1b[2J<script>alert(1)</script>|`x`";

/// No byte a terminal acts on: ESC, BEL, nor a C1 control (UTF-8 C2 80..9F).
fn assert_inert(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let c1 = text.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c));
    assert!(
        !bytes.contains(&0x1b) && !bytes.contains(&0x07) && !c1,
        "{what} prints a control: {text:?}"
    );
}

#[test]
fn a_hostile_stored_document_prints_inert() {
    let db = temp_file("hostile.db");
    let doc = {
        let agent = Agent::on_loopback();
        let mut c = sonde_cmd();
        c.args(agent.short_test("ping", "0.3", &["--json", "--no-save"]));
        doc_of(&run(c))
    };
    let mut doc = doc;
    let h = format!("{HOSTILE}\u{9b}31m");
    doc["start"]["command"] = format!("sonde ping {h}").into();
    doc["start"]["server_command"] = format!("sonde serve {h}").into();
    doc["start"]["client"]["hostname"] = h.clone().into();
    doc["start"]["server"]["hostname"] = h.clone().into();
    doc["start"]["client"]["cpu_model"] = h.clone().into();
    doc["end"]["error"] = format!("peer said: {h}").into();
    let file = temp_file("hostile.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let label = format!("x{HOSTILE}");
    for _ in 0..2 {
        let o = sonde_into(
            &db,
            &[
                "results".as_ref(),
                "import".as_ref(),
                "--label".as_ref(),
                label.as_ref(),
                file.as_os_str(),
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
    }

    let list = sonde_into(&db, &["results", "list"]);
    assert!(list.status.success(), "{}", stderr(&list));
    assert_inert("results list", &list.stdout);
    assert!(stdout(&list).contains("x\\x1b]0;pwn"), "{}", stdout(&list));
    let show = sonde_into(&db, &["results", "show", "1"]);
    assert_inert("results show", &show.stdout);
    let back: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(
        back["start"]["client"]["hostname"],
        h.as_str(),
        "show keeps the data"
    );
    for args in [
        vec!["compare", &label, &label],
        vec!["results", "export", "--format", "json"],
    ] {
        let o = sonde_into(&db, &args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert_inert(args[0], &o.stdout);
        assert_inert(args[0], &o.stderr);
    }

    let (md, html) = (temp_file("hostile.md"), temp_file("hostile.html"));
    for out in [&md, &html] {
        let o = sonde_into(
            &db,
            &[
                "report".as_ref(),
                label.as_ref(),
                "-o".as_ref(),
                out.as_os_str(),
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        assert_inert("report", &o.stdout);
    }
    let mdt = std::fs::read(&md).unwrap();
    assert_inert("the Markdown report", &mdt);
    let mdt = String::from_utf8(mdt).unwrap();
    assert!(!mdt.contains("<script"), "raw <script> in the Markdown");
    assert!(
        mdt.contains("&lt;script&gt;alert(1)&lt;/script&gt;\\|\\`x\\`"),
        "{mdt}"
    );
    let htmlt = std::fs::read(&html).unwrap();
    assert_inert("the HTML report", &htmlt);
    let htmlt = String::from_utf8(htmlt).unwrap();
    assert!(!htmlt.contains("<script>alert"), "raw <script> in the HTML");
    assert!(
        htmlt.contains("&lt;script&gt;alert(1)"),
        "the hostile text is shown, escaped"
    );
}
