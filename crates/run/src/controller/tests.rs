use super::*;
use sonde_results::{Engine, PpsSpec, RrSpec};

fn request(spec: TestSpec) -> TestRequest {
    TestRequest {
        host: "127.0.0.1".into(),
        port: 9,
        spec,
        command: "sonde".into(),
        key: None,
        from: None,
        fleet: None,
    }
}

/// The flag of a refusal at the controller, read from the error's type: what the
/// binary's error names.
fn refused_flag(spec: TestSpec) -> &'static str {
    match begin(&request(spec)) {
        Err(ControllerError::Open(OpenError::Spec(e))) => e.flag,
        Err(e) => panic!("not a typed refusal: {e}"),
        Ok(_) => panic!("not refused"),
    }
}

#[test]
fn a_refusal_keeps_its_flag_typed_up_to_the_controllers_error() {
    let sqpoll = RrSpec {
        sqpoll: true,
        ..RrSpec::default()
    };
    assert_eq!(refused_flag(TestSpec::Rpc(sqpoll)), "--sqpoll");
    let mut pps = PpsSpec {
        gso: true,
        dpdk: Some(Box::default()),
        ..PpsSpec::default()
    };
    pps.execution.engine = Engine::Dpdk;
    assert_eq!(refused_flag(TestSpec::Pps(pps)), "--gso");
    // The text a person reads is the spec error's own, as before.
    let e = begin(&request(TestSpec::Rpc(RrSpec {
        sqpoll: true,
        ..RrSpec::default()
    })))
    .err()
    .unwrap();
    assert!(e.to_string().starts_with("invalid --sqpoll: "), "{e}");
}
