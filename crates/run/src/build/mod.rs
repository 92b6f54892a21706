//! Spec builders: a test command's plain options (what the CLI, a suite or a fleet item
//! asked for) into a validated `TestSpec` or plan. They choose the defaults that depend on
//! this host (sending threads, testpmd's lcores, the watched interface) and check the
//! options against each other, naming the flag at fault; the CLI only maps its flags here.

pub mod check;
pub mod cpus;
pub mod load;
pub mod poll;
pub mod watch;
