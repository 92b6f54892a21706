use std::os::unix::fs::PermissionsExt;
use std::time::SystemTime;

use super::super::apply::restore;
use super::*;
use sonde_probe::tune::plan;

/// A scratch root (0755, ours) holding a sysctl, an interface and a victim file.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("sonde-state-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for sub in [
            "proc/sys/net/core",
            "sys/class/net/eth0",
            "etc",
            "tmp",
            "state",
        ] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        std::fs::set_permissions(d.join("state"), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(d.join("proc/sys/net/core/busy_poll"), "50").unwrap();
        std::fs::write(d.join("etc/passwd"), "root:x:0:0\n").unwrap();
        std::fs::write(d.join("tmp/x"), "victim\n").unwrap();
        Scratch(d)
    }

    /// Content and mtime: what a refused restore must leave alone.
    fn look(&self, rel: &str) -> (String, SystemTime) {
        let p = self.0.join(rel);
        let m = std::fs::metadata(&p).unwrap().modified().unwrap();
        (std::fs::read_to_string(&p).unwrap(), m)
    }

    fn state_with(&self, paths: &[&str]) -> PathBuf {
        let changes = paths
            .iter()
            .map(|p| Change {
                target: Target::File {
                    path: p.to_string(),
                },
                from: "0".into(),
                to: "1".into(),
                why: "test".into(),
            })
            .collect();
        let f = self.0.join("state/s.json");
        let _ = std::fs::remove_file(&f);
        let state = State {
            goal: Goal::Latency,
            changes,
        };
        save(&f, &state).unwrap();
        f
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn refused(root: &Path, f: &Path) -> String {
    format!("{:#}", restore(root, f).unwrap_err())
}

#[test]
fn paths_no_plan_makes_are_refused_and_nothing_is_written() {
    let s = Scratch::new("paths");
    let victims = ["etc/passwd", "tmp/x", "proc/sys/net/core/busy_poll"];
    let before: Vec<_> = victims.iter().map(|v| s.look(v)).collect();
    for bad in [
        "etc/passwd",
        "tmp/x",
        "../tmp/x",
        "proc/sys/net/core/../../../etc/passwd",
        "sys/class/net/../../../etc/passwd",
        "sys/class/net/eth0/../../../../etc/passwd",
        "sys/class/net/wlan9/napi_defer_hard_irqs",
        "proc/irq/../../etc/smp_affinity_list",
        "/etc/passwd",
    ] {
        // A valid entry first: it must not be restored either.
        let f = s.state_with(&["proc/sys/net/core/busy_poll", bad]);
        let e = refused(&s.0, &f);
        assert!(
            e.contains("never changes") && e.contains("nothing was restored"),
            "{bad}: {e}"
        );
        assert!(f.exists(), "{bad}: the refused state must be kept");
    }
    let after: Vec<_> = victims.iter().map(|v| s.look(v)).collect();
    assert_eq!(before, after);
}

#[test]
fn values_that_are_not_numbers_are_refused() {
    let s = Scratch::new("values");
    let f = s.0.join("state/s.json");
    let mut c = Change {
        target: Target::File {
            path: "proc/sys/net/core/busy_poll".into(),
        },
        from: "0\n1".into(),
        to: "1".into(),
        why: String::new(),
    };
    for bad in ["0\n1", "", "\x1b[2J", "a"] {
        c.from = bad.into();
        let _ = std::fs::remove_file(&f);
        save(
            &f,
            &State {
                goal: Goal::Latency,
                changes: vec![c.clone()],
            },
        )
        .unwrap();
        assert!(refused(&s.0, &f).contains("not a number"), "{bad:?}");
    }
    assert_eq!(s.look("proc/sys/net/core/busy_poll").0, "50");
}

#[test]
fn a_linked_open_or_foreign_state_file_is_refused() {
    let s = Scratch::new("file");
    let before = s.look("proc/sys/net/core/busy_poll");
    let f = s.state_with(&["proc/sys/net/core/busy_poll"]);
    // A symbolic link to a good state file.
    let link = s.0.join("state/link.json");
    std::os::unix::fs::symlink(&f, &link).unwrap();
    assert!(refused(&s.0, &link).contains("symbolic link"));
    // Mode 0666.
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    let e = refused(&s.0, &f);
    assert!(e.contains("mode 0666") && e.contains("chmod 600"), "{e}");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Another owner (needs root to give it away).
    if euid() == 0 {
        std::os::unix::fs::chown(&f, Some(65534), None).unwrap();
        assert!(refused(&s.0, &f).contains("owned by uid 65534"));
        std::os::unix::fs::chown(&f, Some(0), None).unwrap();
    }
    // A directory others can write (as /tmp is).
    std::fs::set_permissions(s.0.join("state"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let e = refused(&s.0, &f);
    assert!(e.contains("can be written by others"), "{e}");
    assert_eq!(s.look("proc/sys/net/core/busy_poll"), before);
    assert!(save(
        &s.0.join("state/new.json"),
        &State {
            goal: Goal::Latency,
            changes: vec![]
        }
    )
    .is_err());
    assert!(!s.0.join("state/new.json").exists());
}

#[test]
fn save_makes_a_private_file_and_never_writes_through_a_link() {
    let s = Scratch::new("save");
    let f = s.0.join("state/s.json");
    std::os::unix::fs::symlink(s.0.join("tmp/x"), &f).unwrap();
    save(
        &f,
        &State {
            goal: Goal::Latency,
            changes: vec![],
        },
    )
    .unwrap();
    assert_eq!(s.look("tmp/x").0, "victim\n");
    let m = std::fs::symlink_metadata(&f).unwrap();
    assert!(m.is_file());
    assert_eq!(m.mode() & 0o777, 0o600);
}

#[test]
fn the_private_directory_is_made_0700_and_checked() {
    let s = Scratch::new("dir");
    let d = s.0.join("run-sonde");
    ensure_private_dir(&d).unwrap();
    assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = format!("{:#}", ensure_private_dir(&d).unwrap_err());
    assert!(e.contains("mode 0755") && e.contains("chmod 700"), "{e}");
    let link = s.0.join("link");
    std::os::unix::fs::symlink(s.0.join("tmp"), &link).unwrap();
    let e = format!("{:#}", ensure_private_dir(&link).unwrap_err());
    assert!(e.contains("not a directory"), "{e}");
}

#[test]
fn every_path_a_plan_makes_is_allowed() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../probe/tests/fixtures");
    let mut seen = 0;
    for host in ["azure-e192-mana", "vm-2cpu-virtio"] {
        let root = fixtures.join(host);
        let inv = sonde_probe::inventory::collect(&root);
        for goal in [Goal::Latency, Goal::Throughput] {
            for c in plan(&root, &inv, goal, None) {
                allowed(&root, &c.target).unwrap();
                value_ok(&c.from).unwrap();
                seen += 1;
            }
        }
    }
    assert!(seen > 3, "{seen}");
}
