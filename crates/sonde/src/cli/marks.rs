//! `--dscp`, `--ecn`, `--control-dscp`: the marks every test kind sets on its packets,
//! one flag group flattened into every kind's execution flags (and `sonde stamp`'s), so
//! they are read in one place. Clap's error names the flag; the reason is the parser's.

use clap::Args;
use sonde_results::marks::{Dscp, Ecn, Marks};

#[derive(Args, Debug, Clone, Default)]
pub struct MarksArgs {
    /// DSCP on every data packet, both sides: a class (CS0-CS7, AF11-AF43, EF, VA, LE) or
    /// a number 0-63. What arrived is counted per direction where the kind can read it.
    #[arg(long, value_parser = Dscp::parse, value_name = "CLASS|NUMBER")]
    pub dscp: Option<Dscp>,
    /// ECN codepoint on every data packet, both sides: not-ect, ect0 or ect1 (L4S). CE
    /// marks the path sets are counted per direction.
    #[arg(long, value_parser = Ecn::parse, value_name = "CODEPOINT")]
    pub ecn: Option<Ecn>,
    /// DSCP of the control connection (both ends), as --dscp.
    #[arg(long, value_parser = Dscp::parse, value_name = "CLASS|NUMBER")]
    pub control_dscp: Option<Dscp>,
}

impl MarksArgs {
    pub fn marks(&self) -> Marks {
        Marks {
            dscp: self.dscp,
            ecn: self.ecn,
            control_dscp: self.control_dscp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests_specs::parsed;
    use super::super::{Cli, Command, TestCommand};
    use clap::Parser;
    use sonde_results::marks::Dscp;
    use sonde_results::TestSpec;
    use sonde_run::measure::Plan;

    #[test]
    fn every_kind_takes_the_marks_and_a_bad_one_names_its_flag() {
        for kind in ["stream", "ping", "rpc", "pps", "load", "stamp"] {
            let line = format!("{kind} 198.18.0.2 --dscp EF --ecn ect1 -t 1");
            let command = parsed(&line);
            let plan = match &command {
                Command::Stamp(a) => a.plan().unwrap(),
                c => c.test().unwrap().0,
            };
            let specs = match plan.unwrap_or_else(|e| panic!("{kind}: {e}")) {
                Plan::Tests(specs) => specs,
                Plan::Search(spec, _) => vec![TestSpec::Pps(spec)],
                Plan::Load(l) => vec![TestSpec::Ping(l.ping(sonde_results::Transport::Udp))],
                Plan::Stamp { spec, .. } => vec![TestSpec::Stamp(spec)],
                Plan::Iperf3(spec, _) => vec![spec],
                Plan::Own(runner) => vec![runner.spec()],
                Plan::Watch { .. } => unreachable!(),
            };
            for spec in specs {
                let tos = spec.execution().marks.data_tos();
                assert_eq!(tos, Some(46 << 2 | 1), "{kind}: {}", spec.name());
            }
        }
        for (flag, value, says) in [
            ("--dscp", "64", "0-63"),
            ("--dscp", "af44", "AF11-AF43"),
            ("--ecn", "ce", "set by the path"),
            ("--ecn", "ect2", "not-ect, ect0 or ect1"),
            ("--control-dscp", "x", "0-63"),
        ] {
            let e = Cli::try_parse_from(["sonde", "ping", "h", flag, value])
                .unwrap_err()
                .to_string();
            assert!(e.contains(flag) && e.contains(says), "{e}");
        }
        let Command::Test(TestCommand::Stream(a)) = parsed("stream h --control-dscp cs6") else {
            panic!()
        };
        assert_eq!(a.execution.execution().marks.control_dscp, Dscp::new(48));
    }
}
