//! How the cooperative-matrix kernel copies tiles of A and B from storage
//! into its f16 workgroup tiles: 16 bytes per load as u32 words where the
//! layout allows ("wide"), each word unpacked into two halves; element by
//! element otherwise. Generates the template's VIEWS, SETUP, PROLOGUE,
//! PREFETCH and STAGE lines.
//!
//! A wide copy gives every work item a fixed column group (8 halves) and a
//! fixed set of tile rows, so all address arithmetic that involves a
//! division happens once before the k loop; per k step a work item adds one
//! word offset per operand. Each work item stores its four words in an
//! order rotated by its position (see `Rotation`) so that a subgroup's
//! halfword stores into the tile meet no bank conflicts. Only the
//! fragments' loads read the tiles, and they always do through f16 views
//! (NVIDIA's compiler rejects f16 fragments loaded through u32 views).

mod layout;
mod operands;
mod rotation;
mod scalar;
#[cfg(test)]
mod tests;
mod wide;

pub(crate) use layout::CoopLayout;

use super::CoopTiles;

/// The generated copy lines.
pub(super) struct Copies {
    pub(super) views: String,
    pub(super) setup: String,
    pub(super) prologue: String,
    pub(super) prefetch: String,
    pub(super) stage: String,
}

impl CoopTiles {
    /// `layout` with the wide copies this tiling cannot map to fixed
    /// column groups turned off.
    pub(super) fn usable(&self, layout: CoopLayout) -> CoopLayout {
        let wide_b = layout.wide_b && self.wide_b().fits();
        CoopLayout {
            wide_a: layout.wide_a && self.wide_a().fits(),
            wide_b,
            wide_bt: layout.wide_bt && !wide_b && self.wide_bt().fits(),
            ..layout
        }
    }

    /// The copy lines for `layout` (already passed through `usable`).
    pub(super) fn copies(&self, layout: CoopLayout) -> Copies {
        let mut c = Copies {
            views: "  %c8 = index.constant 8 : index
  %c4 = index.constant 4 : index
  %c2 = index.constant 2 : index
  %cq0 = index.constant 0 : index
  %cq1 = index.constant 1 : index
  %cq2 = index.constant 2 : index
  %cq3 = index.constant 3 : index
  %zu = scalar.constant 0 : u32
  %zq = vector.splat %zu : u32 -> vector<4xu32>
"
            .into(),
            setup: String::new(),
            prologue: String::new(),
            prefetch: String::new(),
            stage: String::new(),
        };
        if layout.wide_a {
            self.wide_a_copies(&mut c);
        } else {
            c.views += "  %av = buffer.view %a[%zero] : buffer -> view<[%la]xf16>\n";
            c.prologue += &self.scalar_a(layout.a_k_fast, "%k0");
            c.stage += &self.scalar_a(layout.a_k_fast, "%kn");
        }
        if layout.wide_b {
            self.wide_b_copies(&mut c);
        } else if layout.wide_bt {
            self.wide_bt_copies(&mut c);
        } else {
            c.views += "  %bv = buffer.view %b[%zero] : buffer -> view<[%lb]xf16>\n";
            c.prologue += &self.scalar_b(layout.b_n_fast, "%k0");
            c.stage += &self.scalar_b(layout.b_n_fast, "%kn");
        }
        c
    }
}
