use std::io;
use std::sync::Mutex;

use super::*;

fn can(dev: &str) -> HwCapability {
    HwCapability {
        device: dev.into(),
        phc: Some(2),
        lacking: None,
    }
}

fn cannot(dev: &str) -> HwCapability {
    HwCapability {
        device: dev.into(),
        phc: None,
        lacking: Some("no PTP hardware clock".into()),
    }
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sonde-hwst-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Every answer of the decision: software asks nothing of anyone; hardware is refused
/// naming what stops it; auto falls back saying the same.
#[test]
fn each_end_decides_by_its_allow_and_its_device() {
    use StampSource::*;
    let sw = decide(Software, false, None, |_| unreachable!()).unwrap();
    assert_eq!(sw, Plan::Software { fallback: None });
    let hw = decide(Hardware, true, Some("eth0"), can).unwrap();
    assert_eq!(
        hw,
        Plan::Hardware {
            device: "eth0".into(),
            phc: Some(2)
        }
    );
    assert_eq!(decide(Auto, true, Some("eth0"), can).unwrap(), hw);
    for (allowed, dev) in [(false, Some("eth0")), (true, None), (true, Some("veth3"))] {
        let refused = decide(Hardware, allowed, dev, cannot).unwrap_err();
        let Plan::Software {
            fallback: Some(why),
        } = decide(Auto, allowed, dev, cannot).unwrap()
        else {
            panic!("auto must fall back")
        };
        assert_eq!(refused, why);
        let names = match (allowed, dev) {
            (false, _) => "--allow hwstamps",
            (_, None) => "not found",
            (_, Some(d)) => d,
        };
        assert!(why.contains(names), "{why}");
    }
}

/// The setting is read, the record written before the change, the change made; dropping
/// the hold puts the previous setting back and removes the record.
#[test]
fn a_hold_restores_the_previous_setting_and_its_record_goes() {
    let dir = scratch("hold");
    let stamping = Stamping {
        allowed: true,
        state_dir: Some(dir.join("state")),
        fake: Some(dir.clone()),
    };
    let before = HwConfig {
        flags: 0,
        tx_type: 0,
        rx_filter: 12,
    };
    let nic = FakeNic::new(&dir);
    nic.set("eth0", before).unwrap();
    let (said, held) = arrange_with(
        StampSource::Hardware,
        &stamping,
        (Some("eth0"), "this"),
        can,
    )
    .unwrap();
    assert!(said.nic_hardware_on && said.fallback.is_none());
    assert_eq!((said.phc, said.stages_from), (Some(2), StampKind::Software));
    let rec = record::path(&dir.join("state"), "eth0");
    assert!(rec.exists());
    assert_eq!(nic.get("eth0").unwrap(), HwConfig::stamping(before));
    // A second test on the same device does not take it over.
    let e = arrange_with(
        StampSource::Hardware,
        &stamping,
        (Some("eth0"), "this"),
        can,
    )
    .err()
    .unwrap();
    assert!(e.contains("already switched"), "{e}");
    let (again, none) =
        arrange_with(StampSource::Auto, &stamping, (Some("eth0"), "this"), can).unwrap();
    assert!(none.is_none() && !again.nic_hardware_on && again.fallback.is_some());
    drop(held);
    assert!(!rec.exists());
    assert_eq!(nic.get("eth0").unwrap(), before);
    let log = std::fs::read_to_string(dir.join("nic/calls.log")).unwrap();
    assert_eq!(log.lines().count(), 3, "{log}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A driver that refuses the change (a veth's EOPNOTSUPP) is named with the call; the
/// record is gone and nothing was set.
struct Refusing(Mutex<Vec<HwConfig>>);

impl Nic for Refusing {
    fn get(&self, _: &str) -> io::Result<HwConfig> {
        Ok(HwConfig::default())
    }
    fn set(&self, _: &str, cfg: HwConfig) -> io::Result<HwConfig> {
        self.0.lock().unwrap().push(cfg);
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }
}

#[test]
fn a_refused_change_leaves_nothing_behind() {
    let dir = scratch("refused");
    let nic = Arc::new(Refusing(Mutex::new(Vec::new())));
    let e = Held::take(nic.clone(), &dir, "veth7").err().unwrap();
    assert!(e.contains("veth7") && e.contains("SIOCSHWTSTAMP"), "{e}");
    assert!(e.contains("nothing was changed"), "{e}");
    assert!(!record::path(&dir, "veth7").exists());
    assert_eq!(
        nic.0.lock().unwrap().len(),
        1,
        "one attempt, no restore of nothing"
    );
    // The real ioctl on a device without hardware stamping fails at the read, first.
    let e = Held::take(Arc::new(Ioctl), &dir, "lo").err().unwrap();
    assert!(e.contains("SIOCGHWTSTAMP") && e.contains("lo"), "{e}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}
