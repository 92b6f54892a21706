//! `sonde serve`'s opt-ins and its own DPDK configuration, turned into the agent's types.

use clap::ValueEnum;
use sonde_run::agent::{Allow, Allowed};
use sonde_run::kind::dpdk_source::AgentDpdk;

use super::ServeArgs;

/// `--allow`'s words.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowArg {
    Dpdk,
    Xdp,
    ThirdParty,
}

impl From<AllowArg> for Allow {
    fn from(a: AllowArg) -> Allow {
        match a {
            AllowArg::Dpdk => Allow::Dpdk,
            AllowArg::Xdp => Allow::Xdp,
            AllowArg::ThirdParty => Allow::ThirdParty,
        }
    }
}

impl ServeArgs {
    pub fn allowed(&self) -> Allowed {
        self.allow.iter().map(|&a| Allow::from(a)).collect()
    }

    /// `--dpdk-args` and `--dpdk-dev`, read as a controller's are; refused without
    /// `--allow dpdk`, where they would do nothing.
    pub fn dpdk(&self) -> anyhow::Result<AgentDpdk> {
        let given = self.dpdk_args.is_some() || self.dpdk_dev.is_some();
        if given && !self.allow.contains(&AllowArg::Dpdk) {
            anyhow::bail!("--dpdk-args and --dpdk-dev are for --allow dpdk, which is not given");
        }
        let words = match &self.dpdk_args {
            Some(a) => {
                shell_words::split(a).map_err(|e| anyhow::anyhow!("--dpdk-args {a:?}: {e}"))?
            }
            None => Vec::new(),
        };
        AgentDpdk::new(&words, self.dpdk_dev.as_deref()).map_err(anyhow::Error::msg)
    }
}
