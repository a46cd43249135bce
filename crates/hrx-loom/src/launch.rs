//! The host launch program: a kernel's launch region, compiled to a tiny
//! register machine that turns workload values into a workgroup grid.
//!
//! Every instruction writes the next register, so register `r` holds the
//! value of instruction `r`. Values are `u64` and arithmetic is checked:
//! overflow and division by zero are errors, never wrapped results, because
//! a wrong grid silently skips or repeats work.

use hrx_core::{Error, Result};

/// A register: the index of the instruction that computes it.
pub type Reg = u32;

/// Binary operations of the launch region (`index.*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LaunchBinary {
    /// `index.add`
    Add,
    /// `index.sub` (underflow is an error: index values are unsigned)
    Sub,
    /// `index.mul`
    Mul,
    /// `index.div` (unsigned, truncating)
    Div,
    /// `index.rem`
    Rem,
    /// `index.min`
    Min,
    /// `index.max`
    Max,
}

/// Comparisons, producing 0 or 1 (unsigned: the launch region sees only
/// non-negative index values, so signed and unsigned predicates agree).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LaunchCmp {
    /// equal
    Eq,
    /// not equal
    Ne,
    /// less than
    Lt,
    /// less or equal
    Le,
    /// greater than
    Gt,
    /// greater or equal
    Ge,
}

/// One instruction of a [`LaunchProgram`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LaunchInst {
    /// A constant (including specialised config values).
    Const(u64),
    /// The n-th workload argument.
    Arg(u32),
    /// `a op b`.
    Binary(LaunchBinary, Reg, Reg),
    /// `a * b + c`.
    Madd(Reg, Reg, Reg),
    /// `a pred b` as 0 or 1.
    Cmp(LaunchCmp, Reg, Reg),
    /// `c != 0 ? a : b`.
    Select(Reg, Reg, Reg),
    /// A cast to a 32-bit type: the value must fit, else an error.
    Narrow32(Reg),
}

/// The launch region of one kernel, evaluable on the host.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LaunchProgram {
    /// Number of workload arguments `evaluate` expects.
    pub arg_count: u32,
    /// Instructions; instruction `i` defines register `i`.
    pub insts: Vec<LaunchInst>,
    /// Registers holding the workgroup counts (x, y, z).
    pub workgroups: [Reg; 3],
}

impl LaunchProgram {
    /// Check that every register reference points backwards and every
    /// argument exists, so evaluation cannot index out of range (programs
    /// may come from a disk cache).
    pub fn check(&self) -> Result<()> {
        let bad = || Error::msg("malformed launch program");
        for (i, inst) in self.insts.iter().enumerate() {
            let ok = |r: &Reg| (*r as usize) < i;
            let fine = match inst {
                LaunchInst::Const(_) => true,
                LaunchInst::Arg(a) => *a < self.arg_count,
                LaunchInst::Binary(_, a, b) | LaunchInst::Cmp(_, a, b) => ok(a) && ok(b),
                LaunchInst::Madd(a, b, c) | LaunchInst::Select(a, b, c) => ok(a) && ok(b) && ok(c),
                LaunchInst::Narrow32(a) => ok(a),
            };
            if !fine {
                return Err(bad());
            }
        }
        let n = self.insts.len();
        if self.workgroups.iter().any(|&r| r as usize >= n) {
            return Err(bad());
        }
        Ok(())
    }

    /// Evaluate on workload values, giving the workgroup grid.
    ///
    /// Errors: wrong number of values, overflow, division by zero, or a
    /// count past `u32::MAX`.
    pub fn evaluate(&self, workload: &[u64]) -> Result<[u32; 3]> {
        if workload.len() != self.arg_count as usize {
            return Err(Error::msg(format!(
                "launch expects {} workload values, got {}",
                self.arg_count,
                workload.len()
            )));
        }
        let regs = self.run(|a| Ok(Some(workload[a as usize])))?;
        let mut grid = [0u32; 3];
        for (axis, out) in grid.iter_mut().enumerate() {
            let value = regs[self.workgroups[axis] as usize].unwrap_or(0);
            *out = u32::try_from(value).map_err(|_| {
                Error::msg(format!(
                    "workgroup count {value} on axis {} exceeds u32",
                    ["x", "y", "z"][axis]
                ))
            })?;
        }
        Ok(grid)
    }

    /// Fold the program with unknown arguments: registers that depend on no
    /// workload value become `Some`. Used to prove the workgroup size is a
    /// compile-time constant.
    pub fn fold(&self) -> Result<Vec<Option<u64>>> {
        self.run(|_| Ok(None))
    }

    fn run(&self, arg: impl Fn(u32) -> Result<Option<u64>>) -> Result<Vec<Option<u64>>> {
        self.check()?;
        let mut regs: Vec<Option<u64>> = Vec::with_capacity(self.insts.len());
        for inst in &self.insts {
            let get = |r: &Reg| regs[*r as usize];
            let value = match inst {
                LaunchInst::Const(c) => Some(*c),
                LaunchInst::Arg(a) => arg(*a)?,
                LaunchInst::Binary(op, a, b) => match (get(a), get(b)) {
                    (Some(a), Some(b)) => Some(binary(*op, a, b)?),
                    _ => None,
                },
                LaunchInst::Madd(a, b, c) => match (get(a), get(b), get(c)) {
                    (Some(a), Some(b), Some(c)) => Some(
                        a.checked_mul(b)
                            .and_then(|p| p.checked_add(c))
                            .ok_or_else(|| overflow("madd"))?,
                    ),
                    _ => None,
                },
                LaunchInst::Cmp(pred, a, b) => match (get(a), get(b)) {
                    (Some(a), Some(b)) => Some(u64::from(compare(*pred, a, b))),
                    _ => None,
                },
                LaunchInst::Select(c, a, b) => match get(c) {
                    Some(c) if c != 0 => get(a),
                    Some(_) => get(b),
                    None => None,
                },
                LaunchInst::Narrow32(a) => match get(a) {
                    Some(v) if v > u64::from(u32::MAX) => {
                        return Err(Error::msg(format!(
                            "launch value {v} does not fit a 32-bit cast"
                        )));
                    }
                    other => other,
                },
            };
            regs.push(value);
        }
        Ok(regs)
    }
}

fn overflow(what: &str) -> Error {
    Error::msg(format!("launch arithmetic overflow in {what}"))
}

fn binary(op: LaunchBinary, a: u64, b: u64) -> Result<u64> {
    let value = match op {
        LaunchBinary::Add => a.checked_add(b).ok_or_else(|| overflow("add"))?,
        LaunchBinary::Sub => a.checked_sub(b).ok_or_else(|| overflow("sub"))?,
        LaunchBinary::Mul => a.checked_mul(b).ok_or_else(|| overflow("mul"))?,
        LaunchBinary::Div | LaunchBinary::Rem if b == 0 => {
            return Err(Error::msg("launch division by zero"));
        }
        LaunchBinary::Div => a / b,
        LaunchBinary::Rem => a % b,
        LaunchBinary::Min => a.min(b),
        LaunchBinary::Max => a.max(b),
    };
    Ok(value)
}

fn compare(pred: LaunchCmp, a: u64, b: u64) -> bool {
    match pred {
        LaunchCmp::Eq => a == b,
        LaunchCmp::Ne => a != b,
        LaunchCmp::Lt => a < b,
        LaunchCmp::Le => a <= b,
        LaunchCmp::Gt => a > b,
        LaunchCmp::Ge => a >= b,
    }
}
