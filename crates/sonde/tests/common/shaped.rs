//! Runs held to a shaper's rate. A `tc tbf` here is software on the same two vCPUs as the
//! ends it shapes: while the hypervisor runs others on them (steal) neither the ends nor the
//! shaper's timer run, the link idles, and both ends count the same shortfall. The CI of
//! stop 66 read `iperf3 -c -R` at 187.9 Mbit/s by ours and 187.6 by iperf3, 1.75 % under
//! the shaper's 191.3, in three tests one after another. Here, 34 runs of `iperf3_netns`: with
//! 20 ms of steal or less, every figure within 0.23 % of the shaper's rate; with 310 ms or
//! more, 0.27-2.41 % under it (BENCHMARKS.md, "Runs held to a shaper"). Such a run leaves
//! the shaper's claim untested, not broken; the other tool on the same run still holds it.

/// One figure of a run (`of`: which) and its two references: ours, the other tool's on the
/// same run, and the payload rate the shaper lets through, all bits a second.
pub struct Against {
    pub of: String,
    pub ours: f64,
    pub theirs: f64,
    pub shaped: f64,
}

/// Runs in all, at most: a path or a count that misses the shaper misses it in each.
const RUNS: u32 = 3;

/// Steal in a run, all CPUs, from which a shortfall both ends saw is the hypervisor's.
const STOLEN_MS: u64 = 100;

/// `run`, with each of its figures (`figures`) within `within` of its shaper's rate. Run
/// again, at most [`RUNS`] in all, while one was under it by `within` or more though ours
/// and the other tool's agreed within `within`: the link idled, seen alike at both ends. A
/// last run that idled so while the hypervisor took [`STOLEN_MS`] or more of the machine
/// is returned with the shaper's claim untested (said on stderr); any other miss fails.
pub fn held_to_the_shaper<T>(
    what: &str,
    within: f64,
    run: impl FnMut() -> T,
    figures: impl Fn(&T) -> Vec<Against>,
) -> T {
    held_to_the_shaper_with(what, within, run, figures, super::steal::steal_ms)
}

fn held_to_the_shaper_with<T>(
    what: &str,
    within: f64,
    mut run: impl FnMut() -> T,
    figures: impl Fn(&T) -> Vec<Against>,
    mut steal_ms: impl FnMut() -> u64,
) -> T {
    let idled = |a: &Against| {
        a.ours < a.shaped * (1.0 - within) && (a.ours - a.theirs).abs() < a.theirs * within
    };
    for attempt in 1..=RUNS {
        let before = steal_ms();
        let out = run();
        let stolen = steal_ms().saturating_sub(before);
        let all = figures(&out);
        let Some(a) = all.iter().find(|a| idled(a)) else {
            for a in &all {
                let off = (a.ours / a.shaped - 1.0) * 100.0;
                eprintln!(
                    "{what} {}: ours {:.0}, {off:+.2} % from the shaper's {:.0}",
                    a.of, a.ours, a.shaped
                );
                assert!(
                    off.abs() < within * 100.0,
                    "{what} {}: ours {} vs the shaper's {}",
                    a.of,
                    a.ours,
                    a.shaped
                );
            }
            return out;
        };
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        eprintln!(
            "{what} run {attempt}: {} ours {:.0} and the other end's {:.0}, {:+.2} % from the shaper's {:.0}: the link idled (the hypervisor's steal {stolen} ms, load {})",
            a.of,
            a.ours,
            a.theirs,
            (a.ours / a.shaped - 1.0) * 100.0,
            a.shaped,
            load.split(' ').next().unwrap_or("?"),
        );
        if attempt == RUNS {
            assert!(
                stolen >= STOLEN_MS,
                "{what}: under the shaper's rate in {RUNS} runs, the last with {stolen} ms of steal"
            );
            eprintln!(
                "{what}: the shaper's rate untested, the hypervisor took the link in {RUNS} runs"
            );
            return out;
        }
    }
    unreachable!()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `held_to_the_shaper` over `figures` in turn (ours, theirs; the shaper at 100), each
    /// run with `stolen` ms of steal: how many ran and the figure returned, or its panic.
    fn runs(figures: &[(f64, f64)], stolen: u64) -> Result<(usize, f64), String> {
        std::panic::catch_unwind(|| {
            let (mut n, mut clock) = (0, 0);
            let out = held_to_the_shaper_with(
                "test",
                0.01,
                || {
                    n += 1;
                    figures[n - 1]
                },
                |&(ours, theirs)| {
                    vec![Against {
                        of: "rate".into(),
                        ours,
                        theirs,
                        shaped: 100.0,
                    }]
                },
                || {
                    clock += stolen;
                    clock
                },
            );
            (n, out.0)
        })
        .map_err(|e| e.downcast_ref::<String>().cloned().unwrap_or_default())
    }

    #[test]
    fn only_a_shortfall_both_ends_saw_is_run_again_and_only_steal_excuses_the_last() {
        // At the shaper's rate: returned at once.
        assert_eq!(runs(&[(99.5, 99.6)], 0), Ok((1, 99.5)));
        // Over it, or short of it where the other end disagrees: failed at once.
        assert!(runs(&[(103.0, 103.0)], 500)
            .unwrap_err()
            .contains("shaper's 100"));
        assert!(runs(&[(97.0, 99.5)], 500)
            .unwrap_err()
            .contains("shaper's 100"));
        // Short of it by 1 % or more, both ends alike: again, until a run reaches it.
        assert_eq!(runs(&[(98.2, 98.0), (99.9, 99.8)], 0), Ok((2, 99.9)));
        // Three such runs: untested if the hypervisor took the machine, failed if not.
        let idle = [(98.0, 98.0), (97.0, 97.1), (96.0, 96.0)];
        assert_eq!(runs(&idle, 100), Ok((3, 96.0)));
        assert!(runs(&idle, 90)
            .unwrap_err()
            .contains("in 3 runs, the last with 90 ms"));
    }
}
