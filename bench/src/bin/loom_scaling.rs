//! How loom's compile time grows with the source: generated kernels of
//! three shapes at sizes from about 10 KB to 10 MB, timed through parse +
//! verify and through the whole pipeline (specialize, lower, naga
//! validation, SPIR-V) for lavapipe's target. Linear growth shows as a
//! time per megabyte that stays flat down each column.
//!
//! Shapes: a straight line of dependent index ops; a loop whose carried
//! values pass divergence along a chain one step per iteration (the
//! uniformity analysis's worst case); and a launch with many arguments.
//! Sources over the compiler's 16 MiB default limit are refused (E0107),
//! which the table shows.
//!
//! `cargo run --release -p hrx-bench --bin loom_scaling`

use hrx_core::Target;
use hrx_loom::{Compiler, Specialization};
use std::fmt::Write as _;
use std::time::Instant;

/// The launch region every shape shares.
const LAUNCH: &str = "kernel.def @k(%n: index) {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
}";

/// `ops` dependent index additions.
fn straight(ops: usize) -> String {
    let mut s =
        format!("{LAUNCH} launch(%n: index, %o: buffer) {{\n  %v0 = index.constant 1 : index\n");
    for i in 1..ops {
        let _ = writeln!(s, "  %v{i} = index.add %v{}, %v0 : index", i - 1);
    }
    s.push_str("  kernel.return\n}\n");
    s
}

/// A loop of `links` carried values, each yielding the next one's value
/// and the last the work-item id.
fn carried(links: usize) -> String {
    let mut s = format!(
        "{LAUNCH} launch(%n: index, %o: buffer) {{\n  %z = index.constant 0 : index\n  \
         %one = index.constant 1 : index\n  %lane = kernel.workitem.dispatch.id<x> : index\n"
    );
    let names =
        |prefix: &str| -> Vec<String> { (0..links).map(|i| format!("%{prefix}{i}")).collect() };
    let inits: Vec<String> = (0..links).map(|i| format!("%a{i} = %z : index")).collect();
    let types = vec!["index"; links].join(", ");
    let _ = writeln!(
        s,
        "  {} = scf.for %i = [%z to %n step %one]({}) -> ({types}) {{",
        names("r").join(", "),
        inits.join(", ")
    );
    for i in 0..links {
        let from = if i + 1 < links {
            format!("%a{}", i + 1)
        } else {
            "%lane".into()
        };
        let _ = writeln!(s, "    %b{i} = index.add {from}, %z : index");
    }
    let _ = writeln!(s, "    scf.yield {} : {types}\n  }}", names("b").join(", "));
    s.push_str("  kernel.return\n}\n");
    s
}

/// A launch with `count` index arguments (the lowering refuses more than
/// the target's push-constant bytes; verification still runs).
fn arguments(count: usize) -> String {
    let args: Vec<String> = (0..count).map(|i| format!("%a{i}: index")).collect();
    format!(
        "{LAUNCH} launch({}, %o: buffer) {{\n  %zero = index.constant 0 : offset\n  \
         %v = buffer.view %o[%zero] : buffer -> view<[%a0]xf32>\n  \
         %x = scalar.constant 1.0 : f32\n  view.store %x, %v[%a1] : f32, view<[%a0]xf32>\n  \
         kernel.return\n}}\n",
        args.join(", ")
    )
}

/// A kernel shape: its name, its generator and the sizes to try.
type Shape = (&'static str, fn(usize) -> String, [usize; 4]);

fn millis(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

fn main() {
    let compiler = match Compiler::for_target(None, &Target::lavapipe()) {
        Ok(compiler) => compiler,
        Err(e) => {
            eprintln!("loom_scaling: {e}");
            std::process::exit(1);
        }
    };
    let shapes: [Shape; 3] = [
        ("straight line", straight, [250, 2_500, 25_000, 250_000]),
        ("carried chain", carried, [120, 1_200, 12_000, 120_000]),
        ("arguments", arguments, [500, 5_000, 50_000, 500_000]),
    ];
    println!("| shape | size | MB | parse + verify ms | ms per MB | whole pipeline ms | result |");
    println!("|---|---:|---:|---:|---:|---:|---|");
    for (name, make, sizes) in shapes {
        for size in sizes {
            let source = make(size);
            let mb = source.len() as f64 / 1e6;
            let start = Instant::now();
            let verified = hrx_loom::front::parse(&source)
                .and_then(|ast| hrx_loom::verify::verify(&ast, &source));
            let verify_ms = millis(start);
            let start = Instant::now();
            let compiled = compiler
                .module(&source)
                .and_then(|module| module.compile_uncached(&Specialization::new("k")));
            let whole_ms = millis(start);
            let result = match (verified, compiled) {
                (Err(e), _) => format!("verify: {}", first_line(&e.to_string())),
                (Ok(_), Ok(_)) => "compiled".into(),
                (Ok(_), Err(e)) => format!("refused: {}", first_line(&e.to_string())),
            };
            println!(
                "| {name} | {size} | {mb:.2} | {verify_ms:.1} | {:.1} | {whole_ms:.1} | {result} |",
                verify_ms / mb
            );
        }
    }
}

/// The first line of an error, without its source excerpt.
fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").chars().take(90).collect()
}
