//! The split-k reduction: sums the partial sums of every split with the
//! bias and the activation (plain loom, any device).

use super::index;
use crate::ops::{Ops, operand::Operand, registry::KernelKey};
use hrx_core::Result;
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

const REDUCE: &str = include_str!("../../../kernels/matmul_splitk_reduce.loom");

/// Splits up to which the reduction's loop is unrolled (all loads in
/// flight at once).
const REDUCE_UNROLL: usize = 32;

/// The reduction for `splits` partial sums: unrolled up to
/// [`REDUCE_UNROLL`] (every load issued at once), a loop beyond.
pub(super) fn reduce_key(act: String, result: &str, splits: usize) -> KernelKey {
    let sum = if splits <= REDUCE_UNROLL {
        let mut l = String::from(
            "    %p_0 = index.add %p0, %c0 : index
    %v_0 = view.load %wv[%p_0] : view<[%lw]xf32> -> f32
    %s_0 = scalar.addf %rd_zf, %v_0 : f32
",
        );
        for q in 1..splits {
            l += &format!(
                "    %p_{q} = index.add %p_{}, %plane : index
    %v_{q} = view.load %wv[%p_{q}] : view<[%lw]xf32> -> f32
    %s_{q} = scalar.addf %s_{}, %v_{q} : f32
",
                q - 1,
                q - 1
            );
        }
        l + &format!("    %sum = scalar.addf %s_{}, %rd_zf : f32", splits - 1)
    } else {
        "    %sum = scf.for %q = [%c0 to %splits step %c1](%acc = %rd_zf : f32) -> (f32) {
      %p = index.madd %q, %plane, %p0 : index
      %v = view.load %wv[%p] : view<[%lw]xf32> -> f32
      %acc2 = scalar.addf %acc, %v : f32
      scf.yield %acc2 : f32
    }"
        .to_string()
    };
    KernelKey {
        template: REDUCE,
        substitutions: vec![("ACT", act), ("R", result.to_string()), ("SUM", sum)],
        symbol: "matmul_splitk_reduce",
        config: Vec::new(),
    }
}

impl Ops {
    /// Record `out[b, i, j] = act(sum_s w[b, s, i, j] + bias[j])` for a
    /// scratch `w` of `[batch, splits, mp, npad]` f32 (plain loom, runs on
    /// any device).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_splitk_reduce(
        &self,
        graph: &mut Graph,
        operation: &str,
        (m, n, batch, splits, mp, npad): (usize, usize, usize, usize, usize, usize),
        w: Operand,
        (kbias, bias_stride): (Operand, usize),
        (kc, out_batch_stride): (Operand, usize),
        (act, result): (String, &str),
    ) -> Result<()> {
        let kernel = self.registry.kernel(reduce_key(act, result, splits))?;
        let scalars: Vec<ScalarValue> = [m, n, splits, mp, npad]
            .map(index)
            .into_iter()
            .chain([ScalarValue::Index(w.len)])
            .chain([index(bias_stride)])
            .chain(kbias.scalars())
            .chain([index(out_batch_stride)])
            .chain(kc.scalars())
            .collect();
        let workload = [m as u64, n as u64, batch as u64];
        kernel.record(
            graph,
            operation,
            &[w.view, kbias.view, kc.view],
            &scalars,
            &workload,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::operand::operand;
    use crate::{DType, DeviceTensor, TensorDesc};
    use hrx_runtime::Runtime;

    /// The reduction on the local device (lavapipe in CI): partial sums of
    /// 3 splits (unrolled) and of 40 (looped), 2 batches, m = 5 of 16
    /// padded rows, n = 70 of 128 padded columns, with bias and relu.
    #[test]
    fn reduce_sums_splits_adds_bias_and_activation() {
        for splits in [3, 40] {
            reduce_case(splits);
        }
    }

    fn reduce_case(splits: usize) {
        let runtime = Runtime::new().unwrap();
        let ops = Ops::new(&runtime);
        let (m, n, batch, mp, npad) = (5, 70, 2, 16, 128);
        let len = batch * splits * mp * npad;
        let w: Vec<f64> = (0..len)
            .map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0)
            .collect();
        let bias: Vec<f64> = (0..n).map(|j| j as f64 / 70.0 - 0.5).collect();
        let tw = DeviceTensor::from_values(&runtime, DType::F32, vec![len], &w).unwrap();
        let tb = DeviceTensor::from_values(&runtime, DType::F32, vec![n], &bias).unwrap();
        let out = ops
            .output(TensorDesc::new(DType::F32, vec![batch, m, n]).unwrap())
            .unwrap();
        let target = ops.registry.target().unwrap();
        let bind = |t: &DeviceTensor| operand(t, &target, "test").unwrap();
        let mut graph = runtime.graph();
        ops.record_splitk_reduce(
            &mut graph,
            "test",
            (m, n, batch, splits, mp, npad),
            bind(&tw),
            (bind(&tb), 1),
            (bind(&out), m * n),
            (crate::ops::UnaryOp::Relu.body("f32"), "%r"),
        )
        .unwrap();
        graph.prepare().unwrap().submit().unwrap().wait().unwrap();
        let got = out.to_values().unwrap();
        for b in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    let s: f64 = (0..splits)
                        .map(|s| w[((b * splits + s) * mp + i) * npad + j])
                        .sum();
                    let want = (s + bias[j]).max(0.0);
                    let g = got[(b * m + i) * n + j];
                    assert!(
                        (g - want).abs() < 1e-4,
                        "splits={splits} ({b}, {i}, {j}): {g} vs {want}"
                    );
                }
            }
        }
    }
}
