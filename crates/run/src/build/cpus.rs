//! `--cpus` / `--server-cpus`: where a side's workers run.

use sonde_probe::topology::parse_cpu_list;

/// A CPU list as one value (clap would read a bare `Vec` as a repeated flag), or `auto`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuList {
    /// `none`: left to the scheduler.
    Unpinned,
    List(Vec<usize>),
    /// Chosen on the side's own host when the test starts (sonde_probe::placement).
    Auto,
}

impl CpuList {
    /// As a spec holds it: the list, and whether the side chooses it itself.
    pub fn split(&self) -> (Option<Vec<usize>>, bool) {
        match self {
            CpuList::List(l) => (Some(l.clone()), false),
            CpuList::Auto => (None, true),
            CpuList::Unpinned => (None, false),
        }
    }
}

/// `auto`, `none`, or a CPU list (`0-3,8`).
pub fn parse_cpus(s: &str) -> Result<CpuList, String> {
    match s {
        "auto" => return Ok(CpuList::Auto),
        "none" => return Ok(CpuList::Unpinned),
        _ => {}
    }
    parse_cpu_list(s).map(CpuList::List)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_become_the_spec_fields() {
        assert_eq!(parse_cpus("auto").unwrap().split(), (None, true));
        assert_eq!(parse_cpus("none").unwrap().split(), (None, false));
        assert_eq!(
            parse_cpus("0-2").unwrap().split(),
            (Some(vec![0, 1, 2]), false)
        );
        assert!(parse_cpus("x").is_err());
    }
}
