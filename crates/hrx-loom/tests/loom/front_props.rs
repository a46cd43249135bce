//! Property tests of the front end: no input panics the parser or the
//! verifier, and printing then re-parsing is stable.

use proptest::prelude::*;
use std::path::Path;

/// Every valid program we have: the spelling sample and the kernel corpus.
fn programs() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut out = Vec::new();
    for dir in ["front", "corpus"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for p in paths {
            if p.extension().is_some_and(|e| e == "loom") {
                out.push(std::fs::read_to_string(p).expect("readable corpus file"));
            }
        }
    }
    assert!(!out.is_empty());
    out
}

/// Parse, verify, and when parsing succeeds check the printer round trip.
fn check(src: &str) {
    let Ok(ast) = hrx_loom::front::parse(src) else {
        return;
    };
    let verified = hrx_loom::verify::verify(&ast, src).is_ok();
    let printed = hrx_loom::front::print(&ast);
    let reparsed = hrx_loom::front::parse(&printed)
        .unwrap_or_else(|e| panic!("printed text does not parse: {e}\n{printed}"));
    assert_eq!(
        hrx_loom::front::print(&reparsed),
        printed,
        "printing is not stable"
    );
    assert_eq!(
        hrx_loom::verify::verify(&reparsed, &printed).is_ok(),
        verified,
        "printing changed validity:\n{printed}"
    );
}

#[test]
fn every_program_verifies_and_round_trips() {
    for src in programs() {
        let ast = hrx_loom::front::parse(&src).unwrap();
        hrx_loom::verify::verify(&ast, &src).unwrap();
        check(&src);
    }
}

/// Tokens worth splicing into programs: they make mutations reach deep
/// into the parser and verifier rather than failing at the first byte.
const SPLICES: &[&str] = &[
    "%",
    "@",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    "<",
    ">",
    ",",
    ":",
    "=",
    "->",
    "-",
    "\n",
    " ",
    "0",
    "1.5e3",
    "-inf",
    "99999999999999999999",
    "0x",
    "%i",
    "%n",
    "%zero",
    "index",
    "f32",
    "view<[%n]xf32>",
    "vector<4xf32>",
    "scf.if %c {",
    "scf.yield",
    "kernel.return",
    "kernel.barrier<workgroup>",
    "index.add",
    "// c",
    "é",
    "\u{0}",
];

#[derive(Debug, Clone)]
enum Mutation {
    Delete { at: usize, len: usize },
    Insert { at: usize, what: usize },
    Duplicate { at: usize, len: usize },
    Swap { a: usize, b: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (any::<usize>(), 0..SPLICES.len()).prop_map(|(at, what)| Mutation::Insert { at, what }),
        (any::<usize>(), 1usize..80).prop_map(|(at, len)| Mutation::Duplicate { at, len }),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Swap { a, b }),
    ]
}

/// Apply a mutation on char boundaries.
fn apply(src: &str, m: &Mutation) -> String {
    let chars: Vec<char> = src.chars().collect();
    let n = chars.len().max(1);
    let mut out = chars.clone();
    match *m {
        Mutation::Delete { at, len } => {
            let at = at % n;
            let end = (at + len).min(out.len());
            out.drain(at.min(end)..end);
        }
        Mutation::Insert { at, what } => {
            let at = at % (out.len() + 1);
            for (k, c) in SPLICES[what].chars().enumerate() {
                out.insert(at + k, c);
            }
        }
        Mutation::Duplicate { at, len } => {
            let at = at % n;
            let end = (at + len).min(chars.len());
            let piece: Vec<char> = chars.get(at..end).map(<[char]>::to_vec).unwrap_or_default();
            let to = (at + len * 7) % (out.len() + 1);
            for (k, c) in piece.into_iter().enumerate() {
                out.insert(to + k, c);
            }
        }
        Mutation::Swap { a, b } => {
            if !out.is_empty() {
                let (a, b) = (a % out.len(), b % out.len());
                out.swap(a, b);
            }
        }
    }
    out.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        check(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn random_token_soup_never_panics(picks in proptest::collection::vec(0..SPLICES.len(), 0..200)) {
        let src: String = picks.iter().map(|&i| SPLICES[i]).collect::<Vec<_>>().join(" ");
        check(&src);
    }

    #[test]
    fn mutated_programs_never_panic(which in any::<usize>(), muts in proptest::collection::vec(mutation(), 1..6)) {
        let all = programs();
        let mut src = all[which % all.len()].clone();
        for m in &muts {
            src = apply(&src, m);
        }
        check(&src);
    }
}
