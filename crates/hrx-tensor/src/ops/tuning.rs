//! Typed tuning of the matmul and attention kernels: shapes a tuning run
//! (or a test) forces instead of the built-in choices, given to
//! [`Ops::with_tuning`](crate::ops::Ops::with_tuning).
//!
//! The library never reads the environment; a benchmark that takes the
//! shapes from its arguments or variables parses them with
//! [`Tuning::parse`], `FromStr` or the `with_*` methods and reports a
//! malformed or invalid value as an error. A forced shape that is valid
//! but does not apply to a particular kernel (its workgroup or workgroup
//! memory does not fit the device, its row groups do not divide that
//! matmul's rows) leaves that kernel on the built-in choice.

use hrx_core::{Error, Result};
use std::str::FromStr;

/// Shapes forced on the matmul kernels; the default forces none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tuning {
    /// The tiling of the cooperative-matrix kernel (matmuls of more than
    /// 64 rows).
    pub coop_tiles: Option<CoopTiling>,
    /// The shape of the split-k cooperative-matrix kernel.
    pub splitk: Option<SplitKShape>,
    /// The tile and k splits of every tiled quantised matmul (more rows
    /// of x than the matrix-vector kernel takes), on any device.
    pub quant_tiling: Option<QuantTiling>,
    /// The f32 quad kernel (16-byte copies, two tile buffers; see
    /// `matmul::quads`): `Some(true)` wherever its layout applies, on any
    /// device; `Some(false)` never (the plain tiled kernel instead);
    /// `None` the built-in choice (GPUs, products of at least 128 tiles
    /// of 128 x 128).
    pub f32_quads: Option<bool>,
    /// The f32 quad kernel's k step (16 or 8); `None` the deepest that
    /// fits the device's workgroup memory.
    pub f32_quad_depth: Option<usize>,
    /// The f32 quad kernel's columns a workgroup (128 or 64); `None` 64.
    /// A k step or width that is neither, or whose tiles the device's
    /// workgroup memory does not hold, leaves the built-in ones.
    pub f32_quad_columns: Option<usize>,
    /// The encoder attention's tiled kernel (scores in workgroup memory;
    /// see `attention::encoder_tiled`): `Some(true)` wherever it fits, on
    /// any device, tensor-core shapes included; `Some(false)` never (the
    /// online-softmax kernel instead); `None` the built-in choice: off
    /// tensor cores on a GPU, where the tiled kernel takes little
    /// workgroup memory or the online-softmax kernel's grid is small.
    pub encoder_tiles: Option<bool>,
    /// Work items a workgroup of the cached attention (a power of two
    /// from 32 to 1024), on any device; `None` the built-in choice (by
    /// the number of workgroups). A size over the device's workgroup
    /// leaves the built-in one; one whose workgroup memory does not fit
    /// is halved until it does, as the built-in one is.
    pub attention_workgroup: Option<usize>,
    /// The encoder attention's online-softmax kernel's block (keys staged
    /// at once, and queries a work item); `None` the built-in one (by
    /// the head size). A block whose workgroup or workgroup memory does
    /// not fit the device leaves the built-in one.
    pub encoder_block: Option<EncoderBlock>,
    /// The projected cached attention's staging of its projection
    /// weights (loaded before the attention, read from workgroup memory;
    /// see `attention::kernels`): `Some(false)` never; `None` (or
    /// `Some(true)`) wherever they are few enough.
    pub stage_projection: Option<bool>,
    /// Workgroups each group of heads of the projected cached attention
    /// takes (each attends the heads and projects its share of the output
    /// columns; 1 to the projection's width); `None` the built-in choice.
    pub attention_splits: Option<usize>,
}

/// `on` or `off` as a switch named `what` in the error.
fn on_off(what: &str, text: &str) -> Result<bool> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(Error::Message(format!(
            "{what} `{text}`: expected on or off"
        ))),
    }
}

impl Tuning {
    /// The tuning given as text, each part optional: `coop_tiles` as
    /// `bm,bn,bk,sgm,sgn` ([`CoopTiling`]), `splitk` as
    /// `groups,bk,splits,prefetch` ([`SplitKShape`]).
    pub fn parse(coop_tiles: Option<&str>, splitk: Option<&str>) -> Result<Tuning> {
        Ok(Tuning {
            coop_tiles: coop_tiles.map(str::parse).transpose()?,
            splitk: splitk.map(str::parse).transpose()?,
            quant_tiling: None,
            f32_quads: None,
            f32_quad_depth: None,
            f32_quad_columns: None,
            encoder_tiles: None,
            attention_workgroup: None,
            encoder_block: None,
            stage_projection: None,
            attention_splits: None,
        })
    }

    /// This tuning with the cached attention's workgroup given as text:
    /// a power of two from 32 to 1024.
    pub fn with_attention_workgroup(self, text: &str) -> Result<Tuning> {
        let size = text
            .parse::<usize>()
            .ok()
            .filter(|n| n.is_power_of_two() && (32..=1024).contains(n))
            .ok_or_else(|| {
                Error::Message(format!(
                    "attention workgroup `{text}`: expected a power of two from 32 to 1024"
                ))
            })?;
        Ok(Tuning {
            attention_workgroup: Some(size),
            ..self
        })
    }

    /// This tuning with the projected attention's splits given as text:
    /// a count from 1 to 1024.
    pub fn with_attention_splits(self, text: &str) -> Result<Tuning> {
        let splits = text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1024).contains(n))
            .ok_or_else(|| {
                Error::Message(format!(
                    "attention splits `{text}`: expected a count from 1 to 1024"
                ))
            })?;
        Ok(Tuning {
            attention_splits: Some(splits),
            ..self
        })
    }

    /// This tuning with the projected attention's staged weights given as
    /// text: `on` (where they are few enough, as built in) or `off`.
    pub fn with_stage_projection(self, text: &str) -> Result<Tuning> {
        Ok(Tuning {
            stage_projection: Some(on_off("stage projection", text)?),
            ..self
        })
    }

    /// This tuning with the encoder attention's tiled kernel given as
    /// text: `on` or `off`.
    pub fn with_encoder_tiles(self, text: &str) -> Result<Tuning> {
        Ok(Tuning {
            encoder_tiles: Some(on_off("encoder tiles", text)?),
            ..self
        })
    }

    /// This tuning with the f32 quad kernel given as text: `off`, or
    /// `on` optionally with its k step and then its columns a workgroup
    /// after colons (`on:8`, `on:16:64`).
    pub fn with_f32_quads(self, text: &str) -> Result<Tuning> {
        let bad = || {
            Error::Message(format!(
                "f32 quads `{text}`: expected off, or on[:16|:8[:128|:64]]"
            ))
        };
        let mut parts = text.split(':');
        let on = match parts.next() {
            Some("off") if text == "off" => false,
            Some("on") => true,
            _ => return Err(bad()),
        };
        let mut pick = |allowed: [usize; 2]| -> Result<Option<usize>> {
            parts
                .next()
                .map(|p| {
                    p.parse()
                        .ok()
                        .filter(|v| allowed.contains(v))
                        .ok_or_else(bad)
                })
                .transpose()
        };
        let depth = pick([16, 8])?;
        let columns = pick([128, 64])?;
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Tuning {
            f32_quads: Some(on),
            f32_quad_depth: depth,
            f32_quad_columns: columns,
            ..self
        })
    }
}

/// `N` comma-separated unsigned integers.
fn numbers<const N: usize>(what: &str, form: &str, text: &str) -> Result<[usize; N]> {
    let bad = || Error::Message(format!("{what} `{text}`: expected {form}"));
    let values: Vec<usize> = text
        .split(',')
        .map(|d| d.trim().parse().map_err(|_| bad()))
        .collect::<Result<_>>()?;
    values.try_into().map_err(|_| bad())
}

/// A block of the encoder attention's online-softmax kernel: `keys` keys
/// (and queries) a workgroup stages and runs at once, `per_item` queries
/// a work item (each key read from workgroup memory feeds all of them),
/// and `split` neighbouring lanes sharing a work item's queries, each
/// holding a `split`-th of their values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EncoderBlock {
    keys: usize,
    per_item: usize,
    split: usize,
}

impl EncoderBlock {
    /// The block, checked: `split` 1, 2 or 4; `per_item` 1, 2 or 4 and a
    /// multiple of `split`; `keys` from 16 to 1024 and a multiple of `4 *
    /// per_item` (whole groups of four keys a work item).
    pub fn new(keys: usize, per_item: usize, split: usize) -> Result<EncoderBlock> {
        let ok = matches!(split, 1 | 2 | 4)
            && matches!(per_item, 1 | 2 | 4)
            && per_item.is_multiple_of(split)
            && (16..=1024).contains(&keys)
            && keys.is_multiple_of(4 * per_item);
        if !ok {
            return Err(Error::Message(format!(
                "encoder block {keys},{per_item},{split}: needs 1, 2 or 4 lanes to a query, 1, 2 \
                 or 4 queries a work item (a multiple of the lanes) and 16 to 1024 keys, a \
                 multiple of 4 times the queries"
            )));
        }
        Ok(EncoderBlock {
            keys,
            per_item,
            split,
        })
    }

    /// Keys (and queries) a block.
    pub fn keys(&self) -> usize {
        self.keys
    }

    /// Queries a work item.
    pub fn per_item(&self) -> usize {
        self.per_item
    }

    /// Lanes sharing a work item's queries.
    pub fn split(&self) -> usize {
        self.split
    }
}

impl FromStr for EncoderBlock {
    type Err = Error;

    /// `keys,per_item` or `keys,per_item,split`.
    fn from_str(text: &str) -> Result<EncoderBlock> {
        match text.split(',').count() {
            3 => {
                let [keys, per_item, split] =
                    numbers("encoder block", "keys,per_item[,split]", text)?;
                EncoderBlock::new(keys, per_item, split)
            }
            _ => {
                let [keys, per_item] = numbers("encoder block", "keys,per_item[,split]", text)?;
                EncoderBlock::new(keys, per_item, 1)
            }
        }
    }
}

/// A tiling of the cooperative-matrix matmul kernel: `bm x bn` output
/// tiles, k steps of `bk`, `sgm x sgn` subgroups each owning whole 16x16
/// fragments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopTiling {
    dims: [usize; 5],
}

impl CoopTiling {
    /// The tiling, checked: `sgm` and `sgn` in 1..=32, `bk` in 1..=256 and
    /// a multiple of 16, `bm` and `bn` in 1..=1024 and multiples of
    /// `16 * sgm` and `16 * sgn` (so every subgroup gets whole fragments
    /// and no index arithmetic overflows).
    pub fn new(bm: usize, bn: usize, bk: usize, sgm: usize, sgn: usize) -> Result<CoopTiling> {
        let ok = (1..=32).contains(&sgm)
            && (1..=32).contains(&sgn)
            && (1..=256).contains(&bk)
            && (1..=1024).contains(&bm)
            && (1..=1024).contains(&bn)
            && bm.is_multiple_of(16 * sgm)
            && bn.is_multiple_of(16 * sgn)
            && bk.is_multiple_of(16);
        if !ok {
            return Err(Error::Message(format!(
                "cooperative-matrix tiling {bm},{bn},{bk},{sgm},{sgn}: needs sgm, sgn in 1..=32, \
                 bk in 16..=256 a multiple of 16, bm and bn up to 1024 and multiples of 16 * sgm \
                 and 16 * sgn"
            )));
        }
        Ok(CoopTiling {
            dims: [bm, bn, bk, sgm, sgn],
        })
    }

    /// `[bm, bn, bk, sgm, sgn]`.
    pub fn dims(&self) -> [usize; 5] {
        self.dims
    }
}

impl FromStr for CoopTiling {
    type Err = Error;

    /// `bm,bn,bk,sgm,sgn`.
    fn from_str(text: &str) -> Result<CoopTiling> {
        let [bm, bn, bk, sgm, sgn] =
            numbers("cooperative-matrix tiling", "bm,bn,bk,sgm,sgn", text)?;
        CoopTiling::new(bm, bn, bk, sgm, sgn)
    }
}

/// A shape of the split-k matmul kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SplitKShape {
    /// Row groups: the subgroups are `groups x 4`.
    pub(crate) groups: usize,
    /// k rows staged per step.
    pub(crate) bk: usize,
    /// Splits of k; 0 picks them from the workgroups wanted.
    pub(crate) splits: usize,
    /// Whether the next step's global loads are issued before the current
    /// step's products.
    pub(crate) prefetch: bool,
}

impl SplitKShape {
    /// The shape, checked: `groups` in 1..=4 (at most one per 16 of the
    /// kernel's 64 rows), `bk` in 16..=256 a multiple of 16, `splits` up
    /// to 4096.
    pub fn new(groups: usize, bk: usize, splits: usize, prefetch: bool) -> Result<SplitKShape> {
        if !(1..=4).contains(&groups)
            || !(16..=256).contains(&bk)
            || !bk.is_multiple_of(16)
            || splits > 4096
        {
            return Err(Error::Message(format!(
                "split-k shape {groups},{bk},{splits}: needs groups in 1..=4, bk in 16..=256 a \
                 multiple of 16, splits up to 4096 (0 for automatic)"
            )));
        }
        Ok(SplitKShape {
            groups,
            bk,
            splits,
            prefetch,
        })
    }
}

impl FromStr for SplitKShape {
    type Err = Error;

    /// `groups,bk,splits,prefetch` (prefetch 0 or 1, splits 0 for
    /// automatic).
    fn from_str(text: &str) -> Result<SplitKShape> {
        let form = "groups,bk,splits,prefetch (prefetch 0 or 1)";
        let [groups, bk, splits, prefetch] = numbers("split-k shape", form, text)?;
        if prefetch > 1 {
            return Err(Error::Message(format!(
                "split-k shape `{text}`: expected {form}"
            )));
        }
        SplitKShape::new(groups, bk, splits, prefetch == 1)
    }
}

/// A shape of the tiled quantised matmul: `tile x tile` outputs per
/// workgroup (32, or 64 with 8 x 8 outputs per work item) and `splits`
/// workgroups per tile along k (1: none; at most one per k step of 32
/// columns is made).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QuantTiling {
    tile: usize,
    splits: usize,
}

impl QuantTiling {
    /// The shape, checked: `tile` 32 or 64, `splits` in 1..=64.
    pub fn new(tile: usize, splits: usize) -> Result<QuantTiling> {
        if !matches!(tile, 32 | 64) || !(1..=64).contains(&splits) {
            return Err(Error::Message(format!(
                "quantised tiling {tile},{splits}: needs a tile of 32 or 64 and splits in 1..=64"
            )));
        }
        Ok(QuantTiling { tile, splits })
    }

    /// Outputs per side of a workgroup's tile.
    pub fn tile(&self) -> usize {
        self.tile
    }

    /// Workgroups per tile along k.
    pub fn splits(&self) -> usize {
        self.splits
    }
}

impl FromStr for QuantTiling {
    type Err = Error;

    /// `tile,splits`.
    fn from_str(text: &str) -> Result<QuantTiling> {
        let [tile, splits] = numbers("quantised tiling", "tile,splits", text)?;
        QuantTiling::new(tile, splits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_checks() {
        let t = Tuning::parse(Some("128, 256,32,2,8"), Some("1,128,0,1")).unwrap();
        assert_eq!(t.coop_tiles.unwrap().dims(), [128, 256, 32, 2, 8]);
        assert_eq!(t.splitk, Some(SplitKShape::new(1, 128, 0, true).unwrap()));
        assert_eq!(Tuning::parse(None, None).unwrap(), Tuning::default());
        for bad in [
            "128,128,64,2",
            "128,128,64,2,4,1",
            "a,128,64,2,4",
            "100,128,64,2,4",
            "",
        ] {
            let e = Tuning::parse(Some(bad), None).unwrap_err().to_string();
            assert!(e.contains("cooperative-matrix tiling"), "{bad}: {e}");
        }
        assert_eq!(
            "64, 4".parse::<QuantTiling>().unwrap(),
            QuantTiling::new(64, 4).unwrap()
        );
        for bad in ["48,2", "32,0", "32,65", "32", "32,1,1", "a,b"] {
            let e = bad.parse::<QuantTiling>().unwrap_err().to_string();
            assert!(e.contains("quantised tiling"), "{bad}: {e}");
        }
        for bad in ["1,128,0,2", "0,128,0,1", "1,24,0,1", "1,128,0", "x"] {
            let e = Tuning::parse(None, Some(bad)).unwrap_err().to_string();
            assert!(e.contains("split-k shape"), "{bad}: {e}");
        }
        let quads = |text: &str| {
            Tuning::default()
                .with_f32_quads(text)
                .map(|t| (t.f32_quads, t.f32_quad_depth))
        };
        assert_eq!(quads("off").unwrap(), (Some(false), None));
        assert_eq!(quads("on").unwrap(), (Some(true), None));
        assert_eq!(quads("on:8").unwrap(), (Some(true), Some(8)));
        let tiles = |text: &str| Tuning::default().with_encoder_tiles(text);
        assert_eq!(tiles("on").unwrap().encoder_tiles, Some(true));
        assert_eq!(tiles("off").unwrap().encoder_tiles, Some(false));
        for bad in ["", "yes", "on:1"] {
            let e = tiles(bad).unwrap_err().to_string();
            assert!(e.contains("encoder tiles"), "{bad}: {e}");
        }
        let workgroup = |text: &str| Tuning::default().with_attention_workgroup(text);
        assert_eq!(workgroup("256").unwrap().attention_workgroup, Some(256));
        assert_eq!(workgroup("32").unwrap().attention_workgroup, Some(32));
        for bad in ["", "16", "96", "2048", "-64", "x"] {
            let e = workgroup(bad).unwrap_err().to_string();
            assert!(e.contains("attention workgroup"), "{bad}: {e}");
        }
        let splits = |text: &str| Tuning::default().with_attention_splits(text);
        assert_eq!(splits("4").unwrap().attention_splits, Some(4));
        assert_eq!(splits("1").unwrap().attention_splits, Some(1));
        for bad in ["", "0", "1025", "-2", "x"] {
            let e = splits(bad).unwrap_err().to_string();
            assert!(e.contains("attention splits"), "{bad}: {e}");
        }
        let stage = |text: &str| Tuning::default().with_stage_projection(text);
        assert_eq!(stage("on").unwrap().stage_projection, Some(true));
        assert_eq!(stage("off").unwrap().stage_projection, Some(false));
        for bad in ["", "yes", "off:1"] {
            let e = stage(bad).unwrap_err().to_string();
            assert!(e.contains("stage projection"), "{bad}: {e}");
        }
        let block: EncoderBlock = "64,2".parse().unwrap();
        assert_eq!((block.keys(), block.per_item(), block.split()), (64, 2, 1));
        let split: EncoderBlock = "128,4,2".parse().unwrap();
        assert_eq!((split.keys(), split.per_item(), split.split()), (128, 4, 2));
        for bad in [
            "64,3", "8,1", "2048,1", "36,2", "64", "x,1", "64,2,3", "64,1,2", "64,2,8", "1,2,3,4",
        ] {
            let e = bad.parse::<EncoderBlock>().unwrap_err().to_string();
            assert!(e.contains("encoder block"), "{bad}: {e}");
        }
        let columns = Tuning::default().with_f32_quads("on:16:64").unwrap();
        assert_eq!(columns.f32_quad_columns, Some(64));
        for bad in [
            "on:4",
            "off:8",
            "yes",
            "",
            "on:16:32",
            "on:16:64:1",
            "on::64",
        ] {
            let e = quads(bad).unwrap_err().to_string();
            assert!(e.contains("f32 quads"), "{bad}: {e}");
        }
    }
}
