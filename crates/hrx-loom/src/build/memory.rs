//! Memory ops: views onto buffers, workgroup allocations, loads, stores
//! and atomics.

use super::Builder;
use super::value::{Buffer, Extent, Index, Num, Offset, Ty, Value};
use super::words::{self, AtomicRmw};
use crate::front::ast::{Form, LiteralTok};
use crate::front::span::Span;
use crate::ir::{Literal, Scalar};

impl Builder {
    /// `buffer.view buf[offset] : buffer -> view<dims x elem>`: a view of
    /// `elem`s starting `offset` bytes into `buf`.
    pub fn buffer_view(
        &mut self,
        buf: Value<Buffer>,
        offset: Value<Offset>,
        dims: impl IntoIterator<Item = Extent>,
        elem: Scalar,
    ) -> Value<super::View> {
        let view = Ty::View {
            dims: dims.into_iter().collect(),
            elem,
        };
        let to = self.texpr(&view);
        let form = Form::Access {
            value: None,
            base: self.id(buf),
            indices: vec![self.id(offset)],
            types: vec![self.texpr(&Ty::Buffer)],
            to: Some(to),
        };
        let r = self.define("v", view);
        let results = vec![self.id(r)];
        self.push(results, "buffer.view", None, form);
        r
    }

    /// `buffer.alloca<workgroup> align(align) bytes : buffer`: workgroup
    /// memory of `bytes` bytes (which must depend only on constants and
    /// config values).
    pub fn alloca_workgroup(&mut self, bytes: Value<Offset>, align: u64) -> Value<Buffer> {
        let form = Form::Alloca {
            align: LiteralTok {
                text: align.to_string(),
                value: Literal::Int(i64::try_from(align).unwrap_or(i64::MAX)),
                span: Span::default(),
            },
            bytes: self.id(bytes),
            ty: self.texpr(&Ty::Buffer),
        };
        let r = self.define("wg", Ty::Buffer);
        let results = vec![self.id(r)];
        self.push(results, "buffer.alloca", Some("workgroup"), form);
        r
    }

    /// A load-like access `name view[indices] : view -> to`.
    fn read(
        &mut self,
        name: &str,
        tag: Option<&str>,
        view: Value<super::View>,
        indices: &[Value<Index>],
        to: Ty,
    ) -> Value<Num> {
        let form = Form::Access {
            value: None,
            base: self.id(view),
            indices: self.ids(indices),
            types: vec![self.type_of(view)],
            to: Some(self.texpr(&to)),
        };
        let r = self.define("x", to);
        let results = vec![self.id(r)];
        self.push(results, name, tag, form);
        r
    }

    /// A store-like access `name value, view[indices] : ty(value), view`.
    fn write<K>(
        &mut self,
        name: &str,
        tag: Option<&str>,
        value: Value<K>,
        view: Value<super::View>,
        indices: &[Value<Index>],
    ) {
        let form = Form::Access {
            value: Some(self.id(value)),
            base: self.id(view),
            indices: self.ids(indices),
            types: vec![self.type_of(value), self.type_of(view)],
            to: None,
        };
        self.push(Vec::new(), name, tag, form);
    }

    fn view_elem(&self, view: Value<super::View>) -> Scalar {
        match self.ty(view) {
            Ty::View { elem, .. } => *elem,
            _ => Scalar::F32,
        }
    }

    /// `view.load view[indices]`: one element.
    pub fn load(&mut self, view: Value<super::View>, indices: &[Value<Index>]) -> Value<Num> {
        let to = Ty::Scalar(self.view_elem(view));
        self.read("view.load", None, view, indices, to)
    }

    /// `view.store value, view[indices]`.
    pub fn store(&mut self, value: Value<Num>, view: Value<super::View>, indices: &[Value<Index>]) {
        self.write("view.store", None, value, view, indices);
    }

    /// `vector.load view[indices] -> vector<len x elem>`: `len`
    /// consecutive elements.
    pub fn vector_load(
        &mut self,
        view: Value<super::View>,
        indices: &[Value<Index>],
        len: u8,
    ) -> Value<Num> {
        let to = Ty::vector(len, self.view_elem(view));
        self.read("vector.load", None, view, indices, to)
    }

    /// `vector.store value, view[indices]`.
    pub fn vector_store(
        &mut self,
        value: Value<Num>,
        view: Value<super::View>,
        indices: &[Value<Index>],
    ) {
        self.write("vector.store", None, value, view, indices);
    }

    /// `view.atomic.rmw<op> value, view[indices]`: the old element.
    pub fn atomic(
        &mut self,
        op: AtomicRmw,
        value: Value<Num>,
        view: Value<super::View>,
        indices: &[Value<Index>],
    ) -> Value<Num> {
        let to = self.ty(value).clone();
        let form = Form::Access {
            value: Some(self.id(value)),
            base: self.id(view),
            indices: self.ids(indices),
            types: vec![self.type_of(value), self.type_of(view)],
            to: Some(self.texpr(&to)),
        };
        let r = self.define("x", to);
        let results = vec![self.id(r)];
        self.push(results, "view.atomic.rmw", Some(words::atomic(op)), form);
        r
    }
}
