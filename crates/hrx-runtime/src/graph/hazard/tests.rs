//! Hazard derivation against a brute-force model.

use super::*;
use proptest::prelude::*;

fn use_(allocation: u64, range: Range<u64>, reads: bool, writes: bool) -> Use {
    Use {
        allocation,
        range,
        reads,
        writes,
    }
}

fn r(allocation: u64, range: Range<u64>) -> Use {
    use_(allocation, range, true, false)
}

fn w(allocation: u64, range: Range<u64>) -> Use {
    use_(allocation, range, false, true)
}

fn edge(from: usize, to: usize, hazard: Hazard) -> Edge {
    Edge { from, to, hazard }
}

/// Every hazard between `i < j`, by brute force over all pairs of uses.
fn conflicts(ops: &[Vec<Use>]) -> Vec<Edge> {
    let mut out = Vec::new();
    for (j, later) in ops.iter().enumerate() {
        for (i, earlier) in ops[..j].iter().enumerate() {
            for a in earlier {
                for b in later {
                    if a.allocation != b.allocation
                        || a.range.start.max(b.range.start) >= a.range.end.min(b.range.end)
                    {
                        continue;
                    }
                    for (hit, hazard) in [
                        (a.writes && b.reads, Hazard::ReadAfterWrite),
                        (a.reads && b.writes, Hazard::WriteAfterRead),
                        (a.writes && b.writes, Hazard::WriteAfterWrite),
                    ] {
                        if hit && !out.contains(&edge(i, j, hazard)) {
                            out.push(edge(i, j, hazard));
                        }
                    }
                }
            }
        }
    }
    out
}

fn separated(positions: &[usize], e: &Edge) -> bool {
    positions.iter().any(|&p| e.from < p && p <= e.to)
}

/// The fewest barrier positions separating every conflict, by trying every
/// subset of positions.
fn brute_minimum(n: usize, all: &[Edge]) -> usize {
    let slots: Vec<usize> = (1..n).collect();
    (0u32..1 << slots.len())
        .filter_map(|mask| {
            let chosen: Vec<usize> = slots
                .iter()
                .enumerate()
                .filter(|(bit, _)| mask & (1 << bit) != 0)
                .map(|(_, &p)| p)
                .collect();
            all.iter()
                .all(|e| separated(&chosen, e))
                .then_some(chosen.len())
        })
        .min()
        .unwrap_or(0)
}

/// Whether `to` is reachable from `from` along listed edges; when `write`
/// is set the first hop must carry `from`'s write (RAW or WAW).
fn reachable(listed: &[Edge], from: usize, to: usize, write: bool) -> bool {
    let mut seen = vec![false; to + 1];
    let mut stack: Vec<usize> = listed
        .iter()
        .filter(|e| e.from == from && (!write || e.hazard != Hazard::WriteAfterRead))
        .map(|e| e.to)
        .collect();
    while let Some(at) = stack.pop() {
        if at == to {
            return true;
        }
        if at > to || seen[at] {
            continue;
        }
        seen[at] = true;
        stack.extend(listed.iter().filter(|e| e.from == at).map(|e| e.to));
    }
    false
}

#[test]
fn read_after_write_gets_one_barrier() {
    let ops = vec![vec![w(1, 0..16)], vec![r(1, 8..12), w(2, 0..4)]];
    let barriers = plan(&ops);
    assert_eq!(barriers.len(), 1);
    assert_eq!(barriers[0].before(), 1);
    assert_eq!(barriers[0].edges(), &[edge(0, 1, Hazard::ReadAfterWrite)]);
}

#[test]
fn independent_ranges_need_no_barrier() {
    let ops = vec![
        vec![w(1, 0..16)],
        vec![w(1, 16..32)],
        vec![r(1, 32..48), w(2, 0..64)],
        vec![r(3, 0..4)],
        vec![r(3, 0..4)],
    ];
    assert!(plan(&ops).is_empty());
}

#[test]
fn write_after_read_and_write_after_write() {
    let ops = vec![
        vec![r(1, 0..8), w(2, 0..8)],
        vec![w(1, 4..8)],
        vec![w(2, 0..4)],
    ];
    let barriers = plan(&ops);
    assert_eq!(barriers.len(), 1);
    assert_eq!(barriers[0].before(), 1);
    assert_eq!(
        barriers[0].edges(),
        &[
            edge(0, 1, Hazard::WriteAfterRead),
            edge(0, 2, Hazard::WriteAfterWrite)
        ]
    );
}

#[test]
fn a_late_barrier_covers_several_edges() {
    // 0 and 1 are independent writers; 2 reads both: one barrier before 2.
    let ops = vec![
        vec![w(1, 0..4)],
        vec![w(2, 0..4)],
        vec![r(1, 0..4), r(2, 0..4)],
    ];
    let barriers = plan(&ops);
    assert_eq!(barriers.len(), 1);
    assert_eq!(barriers[0].before(), 2);
    assert_eq!(barriers[0].edges().len(), 2);
}

#[test]
fn empty_ranges_and_self_overlap_never_conflict() {
    let ops = vec![
        vec![w(1, 4..4)],
        vec![r(1, 0..8), w(1, 0..8)],
        vec![r(1, 4..4)],
    ];
    assert!(plan(&ops).is_empty());
}

#[test]
fn covered_accesses_are_forgotten_but_still_ordered() {
    // A chain of full overwrites reports only neighbouring edges.
    let ops: Vec<Vec<Use>> = (0..6).map(|_| vec![w(1, 0..64)]).collect();
    let barriers = plan(&ops);
    assert_eq!(barriers.len(), 5);
    for (k, b) in barriers.iter().enumerate() {
        assert_eq!(b.edges(), &[edge(k, k + 1, Hazard::WriteAfterWrite)]);
    }
}

fn arb_use() -> impl Strategy<Value = Use> {
    (0u64..3, 0u64..12, 0u64..8, 1u8..4).prop_map(|(allocation, start, len, access)| Use {
        allocation,
        range: start * 4..(start + len) * 4,
        reads: access & 1 != 0,
        writes: access & 2 != 0,
    })
}

fn arb_ops() -> impl Strategy<Value = Vec<Vec<Use>>> {
    prop::collection::vec(prop::collection::vec(arb_use(), 0..4), 0..9)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn barriers_match_the_brute_force_model(ops in arb_ops()) {
        let all = conflicts(&ops);
        let listed = edges(&ops);
        let barriers = place(&listed);
        let positions: Vec<usize> = barriers.iter().map(Barrier::before).collect();

        // Positions strictly increase and lie inside the graph.
        prop_assert!(positions.windows(2).all(|p| p[0] < p[1]));
        prop_assert!(positions.iter().all(|&p| p >= 1 && p < ops.len().max(1)));

        // Every listed edge is a real hazard, served by a barrier between its ends.
        for b in &barriers {
            for e in b.edges() {
                prop_assert!(all.contains(e), "{e:?} is not a hazard");
                prop_assert!(e.from < b.before() && b.before() <= e.to);
            }
        }
        let served: usize = barriers.iter().map(|b| b.edges().len()).sum();
        prop_assert_eq!(served, listed.len());

        // Every hazard is separated, and ordered through listed edges.
        for e in &all {
            prop_assert!(separated(&positions, e), "{e:?} not separated by {positions:?}");
            let write = e.hazard != Hazard::WriteAfterRead;
            prop_assert!(reachable(&listed, e.from, e.to, write), "{e:?} not chained");
        }

        // No barrier is superfluous, and the count is the true minimum.
        for skip in 0..positions.len() {
            let mut fewer = positions.clone();
            fewer.remove(skip);
            prop_assert!(all.iter().any(|e| !separated(&fewer, e)));
        }
        prop_assert_eq!(positions.len(), brute_minimum(ops.len(), &all));
    }
}
