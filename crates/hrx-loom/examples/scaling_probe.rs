use std::time::Instant;
fn straight(n: usize) -> String {
    let mut s = String::from(
        "kernel.def @k(%n: index) {\n  %one = index.constant 1 : index\n  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index\n} launch(%n: index, %o: buffer) {\n  %v0 = index.constant 1 : index\n",
    );
    for i in 1..n {
        s.push_str(&format!("  %v{i} = index.add %v{}, %v0 : index\n", i - 1));
    }
    s.push_str("  kernel.return\n}\n");
    s
}
fn carried(n: usize) -> String {
    let mut s = String::from(
        "kernel.def @k(%n: index) {\n  %one = index.constant 1 : index\n  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index\n} launch(%n: index, %o: buffer) {\n  %z = index.constant 0 : index\n  %lane = kernel.workitem.dispatch.id<x> : index\n",
    );
    let inits: Vec<String> = (0..n).map(|i| format!("%a{i} = %z : index")).collect();
    let tys: Vec<&str> = (0..n).map(|_| "index").collect();
    let rs: Vec<String> = (0..n).map(|i| format!("%r{i}")).collect();
    s.push_str(&format!("  %one = index.constant 1 : index\n  {} = scf.for %i = [%z to %n step %one]({}) -> ({}) {{\n", rs.join(", "), inits.join(", "), tys.join(", ")));
    // a_i' = a_{i+1}, last = lane: divergence moves one step per round
    let mut ys = Vec::new();
    for i in 0..n {
        let src = if i + 1 < n {
            format!("%a{}", i + 1)
        } else {
            "%lane".into()
        };
        s.push_str(&format!("    %b{i} = index.add {src}, %z : index\n"));
        ys.push(format!("%b{i}"));
    }
    s.push_str(&format!(
        "    scf.yield {} : {}\n  }}\n  kernel.return\n}}\n",
        ys.join(", "),
        tys.join(", ")
    ));
    s
}
fn args(n: usize) -> String {
    let a: Vec<String> = (0..n).map(|i| format!("%a{i}: index")).collect();
    let mut s = format!(
        "kernel.def @k(%n: index) {{\n  %one = index.constant 1 : index\n  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index\n}} launch({}, %o: buffer) {{\n",
        a.join(", ")
    );
    s.push_str("  %zero = index.constant 0 : offset\n  %v = buffer.view %o[%zero] : buffer -> view<[%a0]xf32>\n  %x = scalar.constant 1.0 : f32\n  view.store %x, %v[%a1] : f32, view<[%a0]xf32>\n");
    s.push_str("  kernel.return\n}\n");
    s
}
fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    for n in [250usize, 2500, 25000, 250000] {
        let src = match which.as_str() {
            "carried" => carried(n),
            "args" => args(n),
            _ => straight(n),
        };
        let t = Instant::now();
        let r =
            hrx_loom::front::parser::parse(&src).and_then(|m| hrx_loom::verify::verify(&m, &src));
        println!(
            "{which} n={n} bytes={} {:?} ok={}",
            src.len(),
            t.elapsed(),
            r.is_ok()
        );
        if r.is_ok() && std::env::var("FULL").is_ok() {
            let c = hrx_loom::Compiler::for_target(None, &hrx_core::Target::lavapipe()).unwrap();
            let t = Instant::now();
            let m = c
                .module(&src)
                .and_then(|m| m.compile(&hrx_loom::Specialization::new("k")));
            println!(
                "  full {:?} ok={} {}",
                t.elapsed(),
                m.is_ok(),
                m.err()
                    .map(|e| e.to_string().chars().take(200).collect::<String>())
                    .unwrap_or_default()
            );
        }
        if let Err(e) = r {
            println!("{}", e.to_string().chars().take(300).collect::<String>());
        }
    }
}
