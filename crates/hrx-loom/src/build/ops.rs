//! Arithmetic ops: `index.*`, `scalar.*` and `vector.*` register ops.
//!
//! Each method writes the op with the types of its operands; the result
//! has the operand's type (or the stated conversion target).

use super::Builder;
use super::value::{Bool, Index, IndexLike, Num, Ty, Value, ident};
use super::words;
use crate::front::ast::{Form, LiteralTok};
use crate::front::span::Span;
use crate::ir::{FloatPredicate, IntPredicate, Literal, Scalar};

/// The loom text of a float literal (shortest round-trip decimal).
fn float_text(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{v:?}")
    }
}

impl Builder {
    fn constant<K>(
        &mut self,
        name: &str,
        text: String,
        value: Literal,
        ty: Ty,
        default: &str,
    ) -> Value<K> {
        let t = self.texpr(&ty);
        let r: Value<K> = self.define(default, ty);
        let results = vec![self.id(r)];
        let value = LiteralTok {
            text,
            value,
            span: Span::default(),
        };
        self.push(results, name, None, Form::Constant { value, ty: t });
        r
    }

    /// `index.constant n : index`.
    pub fn index(&mut self, n: u64) -> Value<Index> {
        let value = Literal::Int(i64::try_from(n).unwrap_or(i64::MAX));
        self.constant("index.constant", n.to_string(), value, Ty::Index, "c")
    }

    /// `index.constant n : offset` (a byte count).
    pub fn offset(&mut self, n: u64) -> Value<super::Offset> {
        let value = Literal::Int(i64::try_from(n).unwrap_or(i64::MAX));
        self.constant("index.constant", n.to_string(), value, Ty::Offset, "off")
    }

    /// `scalar.constant v : ty` for a float type.
    pub fn float(&mut self, v: f64, ty: Scalar) -> Value<Num> {
        self.constant(
            "scalar.constant",
            float_text(v),
            Literal::Float(v),
            Ty::Scalar(ty),
            "f",
        )
    }

    /// `scalar.constant v : ty` for an integer type.
    pub fn int(&mut self, v: i64, ty: Scalar) -> Value<Num> {
        self.constant(
            "scalar.constant",
            v.to_string(),
            Literal::Int(v),
            Ty::Scalar(ty),
            "n",
        )
    }

    /// An op over operands of one type whose result has that type.
    pub(super) fn same_type<K>(
        &mut self,
        name: &str,
        tag: Option<&str>,
        operands: &[Value<K>],
        default: &str,
    ) -> Value<K> {
        let ty = operands
            .first()
            .map(|v| self.ty(*v).clone())
            .unwrap_or(Ty::Index);
        let t = self.texpr(&ty);
        self.hint_if_none(default);
        self.operands_op(name, tag, operands, vec![t], None, ty)
    }

    fn index_default<K>(&self, a: Value<K>) -> &'static str {
        if *self.ty(a) == Ty::Offset {
            "off"
        } else {
            "i"
        }
    }

    /// `index.add a, b`.
    pub fn add<K: IndexLike>(&mut self, a: Value<K>, b: Value<K>) -> Value<K> {
        let d = self.index_default(a);
        self.same_type("index.add", None, &[a, b], d)
    }

    /// `index.sub a, b` (wraps below zero, as in the IR).
    pub fn sub<K: IndexLike>(&mut self, a: Value<K>, b: Value<K>) -> Value<K> {
        let d = self.index_default(a);
        self.same_type("index.sub", None, &[a, b], d)
    }

    /// `index.mul a, b`.
    pub fn mul<K: IndexLike>(&mut self, a: Value<K>, b: Value<K>) -> Value<K> {
        let d = self.index_default(a);
        self.same_type("index.mul", None, &[a, b], d)
    }

    /// `index.div a, b` (rounding down).
    pub fn div<K: IndexLike>(&mut self, a: Value<K>, b: Value<K>) -> Value<K> {
        let d = self.index_default(a);
        self.same_type("index.div", None, &[a, b], d)
    }

    /// `index.rem a, b`.
    pub fn rem<K: IndexLike>(&mut self, a: Value<K>, b: Value<K>) -> Value<K> {
        let d = self.index_default(a);
        self.same_type("index.rem", None, &[a, b], d)
    }

    /// `index.min a, b`.
    pub fn min<K: IndexLike>(&mut self, a: Value<K>, b: Value<K>) -> Value<K> {
        let d = self.index_default(a);
        self.same_type("index.min", None, &[a, b], d)
    }

    /// `index.max a, b`.
    pub fn max<K: IndexLike>(&mut self, a: Value<K>, b: Value<K>) -> Value<K> {
        let d = self.index_default(a);
        self.same_type("index.max", None, &[a, b], d)
    }

    /// `index.madd a, b, c` = `a * b + c`.
    pub fn madd<K: IndexLike>(&mut self, a: Value<K>, b: Value<K>, c: Value<K>) -> Value<K> {
        let d = self.index_default(a);
        self.same_type("index.madd", None, &[a, b, c], d)
    }

    /// `ceil(a / b)`, as `index.sub b, 1`, `index.add a, that`, `index.div`.
    pub fn div_ceil(&mut self, a: Value<Index>, b: Value<Index>) -> Value<Index> {
        let one = self.index(1);
        let b1 = self.sub(b, one);
        let padded = self.add(a, b1);
        self.div(padded, b)
    }

    /// `index.cmp pred, a, b`.
    pub fn cmp<K: IndexLike>(
        &mut self,
        pred: IntPredicate,
        a: Value<K>,
        b: Value<K>,
    ) -> Value<Bool> {
        self.compare("index.cmp", words::int_predicate(pred), a, b)
    }

    /// `scalar.cmpf pred, a, b`.
    pub fn cmpf(&mut self, pred: FloatPredicate, a: Value<Num>, b: Value<Num>) -> Value<Bool> {
        self.compare("scalar.cmpf", words::float_predicate(pred), a, b)
    }

    /// `scalar.cmpi pred, a, b`.
    pub fn cmpi(&mut self, pred: IntPredicate, a: Value<Num>, b: Value<Num>) -> Value<Bool> {
        self.compare("scalar.cmpi", words::int_predicate(pred), a, b)
    }

    fn compare<K>(&mut self, name: &str, predicate: &str, a: Value<K>, b: Value<K>) -> Value<Bool> {
        let ty = self.type_of(a);
        let operands = self.ids(&[a, b]);
        let r: Value<Bool> = self.define("p", Ty::I1);
        let results = vec![self.id(r)];
        let form = Form::Compare {
            predicate: ident(predicate),
            operands,
            ty,
        };
        self.push(results, name, None, form);
        r
    }

    /// `index.cast a : index -> to` (to `i32` or `u32`).
    pub fn index_cast(&mut self, a: Value<Index>, to: Scalar) -> Value<Num> {
        let t = self.type_of(a);
        self.operands_op(
            "index.cast",
            None,
            &[a],
            vec![t],
            Some(Ty::Scalar(to)),
            Ty::Scalar(to),
        )
    }

    /// `index.cast x : from -> index` (from `i32` or `u32`).
    pub fn to_index(&mut self, x: Value<Num>) -> Value<Index> {
        let t = self.type_of(x);
        self.operands_op(
            "index.cast",
            None,
            &[x],
            vec![t],
            Some(Ty::Index),
            Ty::Index,
        )
    }

    /// `scalar.andi a, b : i1`.
    pub fn and(&mut self, a: Value<Bool>, b: Value<Bool>) -> Value<Bool> {
        self.same_type("scalar.andi", None, &[a, b], "p")
    }

    /// `scalar.ori a, b : i1`.
    pub fn or(&mut self, a: Value<Bool>, b: Value<Bool>) -> Value<Bool> {
        self.same_type("scalar.ori", None, &[a, b], "p")
    }

    /// `scalar.select cond, a, b`: `a` where `cond` holds, else `b`.
    pub fn select<K: super::Data>(
        &mut self,
        cond: Value<Bool>,
        a: Value<K>,
        b: Value<K>,
    ) -> Value<K> {
        let ty = self.ty(a).clone();
        let t = self.texpr(&ty);
        let operands = vec![self.id(cond), self.id(a), self.id(b)];
        let r: Value<K> = self.define("s", ty);
        let results = vec![self.id(r)];
        let form = Form::Operands {
            operands,
            types: vec![t],
            to: None,
        };
        self.push(results, "scalar.select", None, form);
        r
    }

    /// `scalar.fmaf a, b, c` = `a * b + c`, rounded once.
    pub fn fmaf(&mut self, a: Value<Num>, b: Value<Num>, c: Value<Num>) -> Value<Num> {
        self.same_type("scalar.fmaf", None, &[a, b, c], "x")
    }

    /// A conversion `name x : from -> to`, lanes kept for vectors.
    fn convert(&mut self, name: &str, x: Value<Num>, to: Scalar) -> Value<Num> {
        let from = self.ty(x).clone();
        let result = match from {
            Ty::Vector { len, .. } => Ty::Vector { len, elem: to },
            _ => Ty::Scalar(to),
        };
        let t = self.texpr(&from);
        self.operands_op(name, None, &[x], vec![t], Some(result.clone()), result)
    }

    /// `scalar.extf x -> to` (widen a float).
    pub fn extf(&mut self, x: Value<Num>, to: Scalar) -> Value<Num> {
        self.convert("scalar.extf", x, to)
    }

    /// `scalar.truncf x -> to` (narrow a float, rounding to nearest).
    pub fn truncf(&mut self, x: Value<Num>, to: Scalar) -> Value<Num> {
        self.convert("scalar.truncf", x, to)
    }

    /// `scalar.sitofp x -> to`.
    pub fn sitofp(&mut self, x: Value<Num>, to: Scalar) -> Value<Num> {
        self.convert("scalar.sitofp", x, to)
    }

    /// `scalar.uitofp x -> to`.
    pub fn uitofp(&mut self, x: Value<Num>, to: Scalar) -> Value<Num> {
        self.convert("scalar.uitofp", x, to)
    }

    /// `scalar.fptosi x -> to`.
    pub fn fptosi(&mut self, x: Value<Num>, to: Scalar) -> Value<Num> {
        self.convert("scalar.fptosi", x, to)
    }

    /// `scalar.fptoui x -> to`.
    pub fn fptoui(&mut self, x: Value<Num>, to: Scalar) -> Value<Num> {
        self.convert("scalar.fptoui", x, to)
    }

    /// `scalar.bitcast x -> to` (same width).
    pub fn bitcast(&mut self, x: Value<Num>, to: Scalar) -> Value<Num> {
        self.convert("scalar.bitcast", x, to)
    }

    /// `vector.splat x -> vector<len x ty(x)>`.
    pub fn splat(&mut self, x: Value<Num>, len: u8) -> Value<Num> {
        let from = self.ty(x).clone();
        let elem = from.element().unwrap_or(Scalar::F32);
        let t = self.texpr(&from);
        let to = Ty::Vector { len, elem };
        self.operands_op("vector.splat", None, &[x], vec![t], Some(to.clone()), to)
    }

    /// `vector.extract v, lane` (lane an index value).
    pub fn extract(&mut self, v: Value<Num>, lane: Value<Index>) -> Value<Num> {
        let from = self.ty(v).clone();
        let to = Ty::Scalar(from.element().unwrap_or(Scalar::F32));
        let t = self.texpr(&from);
        let operands = vec![self.id(v), self.id(lane)];
        let to_t = self.texpr(&to);
        let r: Value<Num> = self.define("x", to);
        let results = vec![self.id(r)];
        let form = Form::Operands {
            operands,
            types: vec![t],
            to: Some(to_t),
        };
        self.push(results, "vector.extract", None, form);
        r
    }

    /// Lane `i` of the vector `v`: [`Builder::extract`] at a constant lane.
    pub fn extract_lane(&mut self, v: Value<Num>, i: usize) -> Value<Num> {
        let lane = self.index(i as u64);
        self.extract(v, lane)
    }

    /// `vector.unpackf16 w : u32 -> vector<2xf32>`: the two halves of a
    /// word as floats, low half first.
    pub fn unpackf16(&mut self, w: Value<Num>) -> Value<Num> {
        let t = self.type_of(w);
        let to = Ty::vector(2, Scalar::F32);
        self.operands_op(
            "vector.unpackf16",
            None,
            &[w],
            vec![t],
            Some(to.clone()),
            to,
        )
    }
}

macro_rules! binary_ops {
    ($($(#[$doc:meta])* $method:ident => $op:literal;)*) => {
        impl Builder {
            $(
                $(#[$doc])*
                pub fn $method(&mut self, a: Value<Num>, b: Value<Num>) -> Value<Num> {
                    self.same_type($op, None, &[a, b], "x")
                }
            )*
        }
    };
}

macro_rules! unary_ops {
    ($($(#[$doc:meta])* $method:ident => $op:literal;)*) => {
        impl Builder {
            $(
                $(#[$doc])*
                pub fn $method(&mut self, x: Value<Num>) -> Value<Num> {
                    self.same_type($op, None, &[x], "x")
                }
            )*
        }
    };
}

binary_ops! {
    /// `scalar.addf a, b`.
    addf => "scalar.addf";
    /// `scalar.subf a, b`.
    subf => "scalar.subf";
    /// `scalar.mulf a, b`.
    mulf => "scalar.mulf";
    /// `scalar.divf a, b`.
    divf => "scalar.divf";
    /// `scalar.maxnumf a, b` (the number when one is NaN).
    maxnumf => "scalar.maxnumf";
    /// `scalar.minnumf a, b` (the number when one is NaN).
    minnumf => "scalar.minnumf";
    /// `scalar.addi a, b`.
    addi => "scalar.addi";
    /// `scalar.subi a, b`.
    subi => "scalar.subi";
    /// `scalar.muli a, b`.
    muli => "scalar.muli";
    /// `scalar.divsi a, b`.
    divsi => "scalar.divsi";
    /// `scalar.divui a, b`.
    divui => "scalar.divui";
    /// `scalar.remsi a, b`.
    remsi => "scalar.remsi";
    /// `scalar.remui a, b`.
    remui => "scalar.remui";
    /// `scalar.andi a, b` on integers.
    andi => "scalar.andi";
    /// `scalar.ori a, b` on integers.
    ori => "scalar.ori";
    /// `scalar.xori a, b`.
    xori => "scalar.xori";
    /// `scalar.shli a, b`.
    shli => "scalar.shli";
    /// `scalar.shrsi a, b`.
    shrsi => "scalar.shrsi";
    /// `scalar.shrui a, b`.
    shrui => "scalar.shrui";
}

unary_ops! {
    /// `scalar.negf x`.
    negf => "scalar.negf";
    /// `scalar.absf x`.
    absf => "scalar.absf";
    /// `scalar.expf x`.
    expf => "scalar.expf";
    /// `scalar.logf x`.
    logf => "scalar.logf";
    /// `scalar.sqrtf x`.
    sqrtf => "scalar.sqrtf";
    /// `scalar.rsqrtf x`.
    rsqrtf => "scalar.rsqrtf";
    /// `scalar.tanhf x`.
    tanhf => "scalar.tanhf";
}
