//! Specs a hostile controller could send, into validation and the agent's limit checks
//! (`sonde_run::agent::hostile_spec`, which says how the bytes are read). Built with
//! `--features run` (bench/fuzz.sh): CI's fuzz build leaves sonde-run out, and the run
//! crate's own test feeds the same body random bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sonde_run::agent::hostile_spec::admit_or_refuse(data));
