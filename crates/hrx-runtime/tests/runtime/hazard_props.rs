//! Random graphs of fills and copies over slices of two allocations, run on
//! the device: the prepared graph's barriers match a brute-force model of
//! the conflicts (every conflict separated, no barrier superfluous), and the
//! results match a CPU simulation. With `HRX_VALIDATION=1`, synchronization
//! validation also checks every transfer hazard on the device.

use crate::common::{read, runtime, upload};
use hrx_runtime::{Buffer, Hazard};
use proptest::prelude::*;

const WORDS: usize = 64;

#[derive(Clone, Debug)]
enum Step {
    Fill {
        buf: usize,
        at: usize,
        len: usize,
        value: u32,
    },
    Copy {
        dst: (usize, usize),
        src: (usize, usize),
        len: usize,
    },
}

/// (buffer, byte range, writes) for each access of a step.
fn accesses(step: &Step) -> Vec<(usize, std::ops::Range<usize>, bool)> {
    match *step {
        Step::Fill { buf, at, len, .. } => vec![(buf, at..at + len, true)],
        Step::Copy { dst, src, len } => {
            vec![
                (dst.0, dst.1..dst.1 + len, true),
                (src.0, src.1..src.1 + len, false),
            ]
        }
    }
}

fn conflict(a: &Step, b: &Step) -> bool {
    accesses(a).iter().any(|(ab, ar, aw)| {
        accesses(b).iter().any(|(bb, br, bw)| {
            ab == bb && ar.start.max(br.start) < ar.end.min(br.end) && (*aw || *bw)
        })
    })
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..2usize, 0..WORDS, 1..16usize, any::<u32>()).prop_map(|(buf, at, len, value)| {
            let len = len.min(WORDS - at) * 4;
            Step::Fill {
                buf,
                at: at * 4,
                len,
                value,
            }
        }),
        (0..2usize, 0..255usize, 0..2usize, 0..255usize, 1..48usize).prop_map(
            |(db, d, sb, s, len)| Step::Copy {
                dst: (db, d),
                src: (sb, s),
                len: len.min(256 - d).min(256 - s),
            }
        ),
    ]
}

fn valid(step: &Step) -> bool {
    match *step {
        Step::Fill { len, .. } => len > 0,
        Step::Copy { dst, src, len } => {
            len > 0 && (dst.0 != src.0 || dst.1 + len <= src.1 || src.1 + len <= dst.1)
        }
    }
}

fn simulate(steps: &[Step], memory: &mut [Vec<u8>; 2]) {
    for step in steps {
        match *step {
            Step::Fill {
                buf,
                at,
                len,
                value,
            } => {
                for chunk in memory[buf][at..at + len].chunks_mut(4) {
                    chunk.copy_from_slice(&value.to_le_bytes());
                }
            }
            Step::Copy { dst, src, len } => {
                let bytes = memory[src.0][src.1..src.1 + len].to_vec();
                memory[dst.0][dst.1..dst.1 + len].copy_from_slice(&bytes);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn device_graphs_match_the_brute_force_model(
        steps in prop::collection::vec(arb_step(), 1..10),
        seed in any::<u32>(),
    ) {
        let steps: Vec<Step> = steps.into_iter().filter(valid).collect();
        let rt = runtime();
        let init: Vec<Vec<u32>> = (0..2u32)
            .map(|b| (0..WORDS as u32).map(|i| (i ^ seed).wrapping_mul(40503 + b)).collect())
            .collect();
        let buffers: Vec<Buffer> = init.iter().map(|w| upload(&rt, w)).collect();
        let mut graph = rt.graph();
        for step in &steps {
            match *step {
                Step::Fill { buf, at, len, value } => {
                    graph.fill(buffers[buf].view().slice(at..at + len).unwrap(), value).unwrap();
                }
                Step::Copy { dst, src, len } => {
                    let d = buffers[dst.0].view().slice(dst.1..dst.1 + len).unwrap();
                    let s = buffers[src.0].view().slice(src.1..src.1 + len).unwrap();
                    graph.copy(d, s).unwrap();
                }
            }
        }
        let graph = graph.prepare().unwrap();
        let positions: Vec<usize> = graph.barriers().iter().map(|b| b.before()).collect();
        let separated = |ps: &[usize], i: usize, j: usize| ps.iter().any(|&p| i < p && p <= j);
        let pairs: Vec<(usize, usize)> = (0..steps.len())
            .flat_map(|j| (0..j).map(move |i| (i, j)))
            .filter(|&(i, j)| conflict(&steps[i], &steps[j]))
            .collect();
        for &(i, j) in &pairs {
            prop_assert!(separated(&positions, i, j), "{i}->{j} unseparated in {positions:?}");
        }
        for skip in 0..positions.len() {
            let mut fewer = positions.clone();
            fewer.remove(skip);
            prop_assert!(pairs.iter().any(|&(i, j)| !separated(&fewer, i, j)), "barrier {skip} is superfluous");
        }
        for barrier in graph.barriers() {
            for e in barrier.edges() {
                prop_assert!(pairs.contains(&(e.from, e.to)));
                prop_assert!(e.from < barrier.before() && barrier.before() <= e.to);
                let reads_later = matches!(steps[e.to], Step::Copy { .. });
                prop_assert!(e.hazard != Hazard::ReadAfterWrite || reads_later);
            }
        }
        graph.submit().unwrap().wait().unwrap();
        let mut memory = [0, 1].map(|b| init[b].iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
        simulate(&steps, &mut memory);
        for b in 0..2 {
            let got: Vec<u8> = read(&buffers[b].view()).iter().flat_map(|w| w.to_le_bytes()).collect();
            prop_assert_eq!(&got, &memory[b]);
        }
    }
}
