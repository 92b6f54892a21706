//! Which ordered pairs a topology measures, and the rounds they run in: pairs in one round
//! share no host (or each host at most `overlap` times), so a round's tests run at once
//! and none measures another.

/// How the fleet's agents are paired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topology {
    /// Listed (source, destination) pairs, by agent index.
    Pairs(Vec<(usize, usize)>),
    /// Every ordered pair.
    Mesh,
    /// The centre to every other agent, and every other agent to the centre.
    Star(usize),
}

/// The ordered pairs of `topology` over `n` agents. A mesh comes in round-robin
/// ("circle method") order, so that first-fit packs it into 2(n-1) rounds (2n for odd n).
pub fn pairs(topology: &Topology, n: usize) -> Vec<(usize, usize)> {
    match topology {
        Topology::Pairs(p) => p.clone(),
        Topology::Star(c) => {
            let others = (0..n).filter(|i| i != c);
            let out: Vec<_> = others.clone().map(|i| (*c, i)).collect();
            out.into_iter().chain(others.map(|i| (i, *c))).collect()
        }
        Topology::Mesh => {
            let matchings = circle(n);
            let forward = matchings.iter().flatten().copied();
            let back = matchings.iter().flatten().map(|&(a, b)| (b, a));
            forward.chain(back).collect()
        }
    }
}

/// A round-robin tournament: n-1 matchings (n rounded up to even; the odd one out
/// rests) that together hold every unordered pair once.
fn circle(n: usize) -> Vec<Vec<(usize, usize)>> {
    let m = n + n % 2;
    if m < 2 {
        return Vec::new();
    }
    // Host 0 stays put; the others turn one place a round.
    let ring: Vec<usize> = (1..m).collect();
    (0..m - 1)
        .map(|r| {
            let at = |k: usize| {
                if k == 0 {
                    0
                } else {
                    ring[(k - 1 + r) % (m - 1)]
                }
            };
            (0..m / 2)
                .map(|k| (at(k), at(m - 1 - k)))
                .filter(|&(a, b)| a < n && b < n)
                .collect()
        })
        .collect()
}

/// Packs `pairs`, in order, into rounds: each pair goes to the first round where both its
/// hosts are in fewer than `overlap` tests.
pub fn rounds(pairs: &[(usize, usize)], overlap: usize) -> Vec<Vec<(usize, usize)>> {
    let overlap = overlap.max(1);
    let mut rounds: Vec<Vec<(usize, usize)>> = Vec::new();
    for &(a, b) in pairs {
        let load = |r: &Vec<(usize, usize)>, h: usize| {
            r.iter().filter(|&&(x, y)| x == h || y == h).count()
        };
        match rounds
            .iter_mut()
            .find(|r| load(r, a) < overlap && load(r, b) < overlap)
        {
            Some(r) => r.push((a, b)),
            None => rounds.push(vec![(a, b)]),
        }
    }
    rounds
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn disjoint(round: &[(usize, usize)]) -> bool {
        let hosts: Vec<usize> = round.iter().flat_map(|&(a, b)| [a, b]).collect();
        hosts.iter().collect::<HashSet<_>>().len() == hosts.len()
    }

    #[test]
    fn a_mesh_is_every_ordered_pair_in_two_n_minus_one_rounds() {
        for n in 2..=9 {
            let p = pairs(&Topology::Mesh, n);
            let set: HashSet<_> = p.iter().copied().collect();
            assert_eq!(set.len(), n * (n - 1), "n={n}");
            assert_eq!(p.len(), n * (n - 1), "n={n}: no pair twice");
            assert!(p.iter().all(|&(a, b)| a != b && a < n && b < n));
            let r = rounds(&p, 1);
            let expected = if n % 2 == 0 { 2 * (n - 1) } else { 2 * n };
            assert_eq!(r.len(), expected, "n={n}");
            assert!(r.iter().all(|r| disjoint(r)), "n={n}");
        }
        // The case: 4 hosts, 12 directed pairs, 6 rounds of 2 tests.
        let r = rounds(&pairs(&Topology::Mesh, 4), 1);
        assert!(r.len() <= 7 && r.iter().all(|r| r.len() == 2));
    }

    #[test]
    fn a_star_is_sequential_unless_hosts_may_overlap() {
        let p = pairs(&Topology::Star(2), 4);
        assert_eq!(p.len(), 6);
        assert!(p.iter().all(|&(a, b)| a == 2 || b == 2));
        assert_eq!(rounds(&p, 1).len(), 6);
        assert_eq!(rounds(&p, 3).len(), 2);
    }

    #[test]
    fn listed_pairs_keep_their_order_and_share_rounds_when_disjoint() {
        let p = vec![(0, 1), (1, 2), (2, 3), (3, 0)];
        assert_eq!(pairs(&Topology::Pairs(p.clone()), 4), p);
        let r = rounds(&p, 1);
        assert_eq!(r, vec![vec![(0, 1), (2, 3)], vec![(1, 2), (3, 0)]]);
        assert!(rounds(&[], 1).is_empty());
    }
}
