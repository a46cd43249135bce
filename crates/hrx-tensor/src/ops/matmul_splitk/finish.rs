//! The lines of the split-k kernel's last workgroup of a slab: each work
//! item sums the splits' partial sums of its outputs, then adds the bias,
//! applies the activation and stores the rows inside C.

/// Splits up to which a sum is unrolled (all loads in flight at once).
const SUM_UNROLL: usize = 32;

/// The `FINISH` lines for `reps` output rows per work item, `step` rows
/// apart from `%fi0`, `splits` partial sums each, and the activation's
/// lines `act` reading `%x` with result value `result` (see
/// `activation::epilogue`). Every row's loads come before any store, so they are in
/// flight together; each row's lines get their own names.
pub(super) fn finish_lines(
    reps: usize,
    step: usize,
    splits: usize,
    act: &str,
    result: &str,
) -> String {
    let mut l = String::new();
    for q in 0..reps {
        l += &format!(
            "    %fqk_{q} = index.constant {} : index
    %fi_{q} = index.add %fi0, %fqk_{q} : index
    %fr_{q} = index.madd %fs0, %cmp, %fi_{q} : index
    %fp_{q} = index.madd %fr_{q}, %npad, %gj : index
",
            q * step
        );
        l += &split_sum(q, splits);
    }
    let names = defined_names(act);
    for q in 0..reps {
        let rename = |text: &str| suffixed(text, &names, &format!("_f{q}"));
        l += &format!(
            "    %fin_{q} = index.cmp ult, %fi_{q}, %m : index
    %fok_{q} = scalar.andi %fin_{q}, %jin : i1
    scf.if %fok_{q} {{
      %x_f{q} = scalar.addf %sum_{q}, %bj : f32
{}
      %fc_{q} = index.madd %fi_{q}, %n, %crow0 : index
      %fci_{q} = index.add %fc_{q}, %gj : index
      view.store {}, %cv[%fci_{q}] : f32, view<[%lc]xf32>
    }}
",
            rename(act),
            rename(result)
        );
    }
    l
}

/// Lines defining `%sum_{q}`, the f32 sum over `splits` partial sums of
/// one output: the first at `%fp_{q}` of the scratch view `%wl`, the next
/// `%plane` elements on. Always in split order, from zero, so the result
/// does not depend on which workgroup finishes the slab.
fn split_sum(q: usize, splits: usize) -> String {
    if splits > SUM_UNROLL {
        return format!(
            "    %sum_{q} = scf.for %sq_{q} = [%c0 to %splits step %c1](%sacc_{q} = %rd_zf : f32) -> (f32) {{
      %sp_{q} = index.madd %sq_{q}, %plane, %fp_{q} : index
      %sv_{q} = view.load %wl[%sp_{q}] : view<[%lw]xf32> -> f32
      %sacc2_{q} = scalar.addf %sacc_{q}, %sv_{q} : f32
      scf.yield %sacc2_{q} : f32
    }}
"
        );
    }
    let mut l = format!(
        "    %sv_{q}_0 = view.load %wl[%fp_{q}] : view<[%lw]xf32> -> f32
    %ss_{q}_0 = scalar.addf %rd_zf, %sv_{q}_0 : f32
    %sp_{q}_0 = index.add %fp_{q}, %c0 : index
"
    );
    for s in 1..splits {
        let p = s - 1;
        l += &format!(
            "    %sp_{q}_{s} = index.add %sp_{q}_{p}, %plane : index
    %sv_{q}_{s} = view.load %wl[%sp_{q}_{s}] : view<[%lw]xf32> -> f32
    %ss_{q}_{s} = scalar.addf %ss_{q}_{p}, %sv_{q}_{s} : f32
"
        );
    }
    l + &format!(
        "    %sum_{q} = scalar.addf %ss_{q}_{}, %rd_zf : f32\n",
        splits - 1
    )
}

/// The values `lines` defines (`%name = ...`), and `%x`, which it reads.
fn defined_names(lines: &str) -> Vec<String> {
    let mut names: Vec<String> = lines
        .lines()
        .filter_map(|l| {
            let l = l.trim_start().strip_prefix('%')?;
            let (name, _) = l.split_once(" =")?;
            Some(name.to_string())
        })
        .collect();
    names.push("x".to_string());
    names
}

/// `text` with every value in `names` renamed with `suffix`.
fn suffixed(text: &str, names: &[String], suffix: &str) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    let mut rest = text;
    while let Some(at) = rest.find('%') {
        out += &rest[..=at];
        rest = &rest[at + 1..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..end];
        out += name;
        if names.iter().any(|n| n == name) {
            out += suffix;
        }
        rest = &rest[end..];
    }
    out + rest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_row_gets_its_own_activation_names() {
        let act = "    %zf = scalar.constant 0.0 : f32\n    %r = scalar.maxnumf %x, %zf : f32";
        let lines = finish_lines(2, 2, 3, act, "%r");
        for q in 0..2 {
            assert!(lines.contains(&format!("%r_f{q} = scalar.maxnumf %x_f{q}, %zf_f{q}")));
            assert!(lines.contains(&format!("view.store %r_f{q}, %cv[%fci_{q}]")));
        }
        // All loads precede the first store.
        let last_load = lines.rfind("view.load").unwrap();
        assert!(last_load < lines.find("view.store").unwrap());
        // Three splits, summed in order from zero.
        assert!(lines.contains("%ss_1_2 = scalar.addf %ss_1_1, %sv_1_2"));
    }
}
