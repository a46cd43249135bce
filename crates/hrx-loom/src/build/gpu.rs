//! Kernel ops: work-item coordinates, subgroup queries and collectives,
//! barriers, config values and cooperative matrices.

use super::Builder;
use super::kernel::ConfigKey;
use super::value::{Index, Mat, Num, Ty, Value, ident};
use super::words::{self, Barrier, CoopLayout};
use crate::front::ast::Form;
use crate::ir::{Axis, CoopMatType, ReduceOp, ShuffleMode};

impl Builder {
    /// A coordinate query `name<axis> : index`.
    fn query(&mut self, name: &str, tag: Option<&str>) -> Value<Index> {
        let t = self.texpr(&Ty::Index);
        self.operands_op::<Index, Index>(name, tag, &[], vec![t], None, Ty::Index)
    }

    /// `kernel.workitem.id<axis>`: the work item within its workgroup.
    pub fn workitem_id(&mut self, axis: Axis) -> Value<Index> {
        self.query("kernel.workitem.id", Some(words::axis(axis)))
    }

    /// `kernel.workgroup.id<axis>`.
    pub fn workgroup_id(&mut self, axis: Axis) -> Value<Index> {
        self.query("kernel.workgroup.id", Some(words::axis(axis)))
    }

    /// `kernel.workitem.dispatch.id<axis>`: the work item in the grid.
    pub fn dispatch_id(&mut self, axis: Axis) -> Value<Index> {
        self.query("kernel.workitem.dispatch.id", Some(words::axis(axis)))
    }

    /// `kernel.workgroup.size<axis>`.
    pub fn workgroup_size(&mut self, axis: Axis) -> Value<Index> {
        self.query("kernel.workgroup.size", Some(words::axis(axis)))
    }

    /// `kernel.workgroup.count<axis>`.
    pub fn workgroup_count(&mut self, axis: Axis) -> Value<Index> {
        self.query("kernel.workgroup.count", Some(words::axis(axis)))
    }

    /// A grid-stride loop over `0..n` along x: each work item takes the
    /// elements from its dispatch id in steps of the whole grid (workgroup
    /// size times count), so a grid of any size covers any `n`.
    pub fn for_each_in_grid(
        &mut self,
        n: Value<Index>,
        body: impl FnOnce(&mut Builder, Value<Index>),
    ) {
        let start = self.dispatch_id(Axis::X);
        let size = self.workgroup_size(Axis::X);
        let count = self.workgroup_count(Axis::X);
        let step = self.mul(size, count);
        self.for_each(start, n, step, body);
    }

    /// `kernel.subgroup.size`.
    pub fn subgroup_size(&mut self) -> Value<Index> {
        self.query("kernel.subgroup.size", None)
    }

    /// `kernel.subgroup.id`: the subgroup within the workgroup.
    pub fn subgroup_id(&mut self) -> Value<Index> {
        self.query("kernel.subgroup.id", None)
    }

    /// `kernel.subgroup.lane.id`.
    pub fn subgroup_lane_id(&mut self) -> Value<Index> {
        self.query("kernel.subgroup.lane.id", None)
    }

    /// `kernel.subgroup.count`.
    pub fn subgroup_count(&mut self) -> Value<Index> {
        self.query("kernel.subgroup.count", None)
    }

    /// `kernel.subgroup.reduce<op> x`.
    pub fn subgroup_reduce(&mut self, op: ReduceOp, x: Value<Num>) -> Value<Num> {
        self.same_type("kernel.subgroup.reduce", Some(words::reduce(op)), &[x], "x")
    }

    /// `kernel.subgroup.shuffle<mode> x, lane`.
    pub fn subgroup_shuffle(
        &mut self,
        mode: ShuffleMode,
        x: Value<Num>,
        lane: Value<Index>,
    ) -> Value<Num> {
        self.lane_op(
            "kernel.subgroup.shuffle",
            Some(words::shuffle(mode)),
            x,
            lane,
        )
    }

    /// `kernel.subgroup.broadcast x, lane`.
    pub fn subgroup_broadcast(&mut self, x: Value<Num>, lane: Value<Index>) -> Value<Num> {
        self.lane_op("kernel.subgroup.broadcast", None, x, lane)
    }

    fn lane_op(
        &mut self,
        name: &str,
        tag: Option<&str>,
        x: Value<Num>,
        lane: Value<Index>,
    ) -> Value<Num> {
        let ty = self.ty(x).clone();
        let form = Form::Operands {
            operands: vec![self.id(x), self.id(lane)],
            types: vec![self.texpr(&ty)],
            to: None,
        };
        let r = self.define("x", ty);
        let results = vec![self.id(r)];
        self.push(results, name, tag, form);
        r
    }

    /// `kernel.barrier<..>` (see [`Barrier`]).
    pub fn barrier(&mut self, kind: Barrier) {
        let (tag, scope) = match kind {
            Barrier::Workgroup => ("workgroup", "workgroup"),
            Barrier::Subgroup => ("subgroup", "subgroup"),
            Barrier::Storage => ("storage", "device"),
        };
        let attrs = vec![
            (ident("scope"), ident(scope)),
            (ident("ordering"), ident("acq_rel")),
        ];
        self.push(
            Vec::new(),
            "kernel.barrier",
            Some(tag),
            Form::Barrier { attrs },
        );
    }

    /// `config.value @key : index`.
    pub fn config_value(&mut self, key: &ConfigKey) -> Value<Index> {
        let form = Form::ConfigValue {
            key: ident(key.0.clone()),
            ty: self.texpr(&Ty::Index),
        };
        let r = self.define("cfg", Ty::Index);
        let results = vec![self.id(r)];
        self.push(results, "config.value", None, form);
        r
    }

    /// `coop.zero : ty`.
    pub fn coop_zero(&mut self, ty: CoopMatType) -> Value<Mat> {
        let t = self.texpr(&Ty::CoopMat(ty));
        self.operands_op::<Mat, Mat>("coop.zero", None, &[], vec![t], None, Ty::CoopMat(ty))
    }

    /// `coop.load<layout> view[row, col] -> ty`.
    pub fn coop_load(
        &mut self,
        layout: CoopLayout,
        view: Value<super::View>,
        at: [Value<Index>; 2],
        ty: CoopMatType,
    ) -> Value<Mat> {
        let to = Ty::CoopMat(ty);
        let form = Form::Access {
            value: None,
            base: self.id(view),
            indices: self.ids(&at),
            types: vec![self.type_of(view)],
            to: Some(self.texpr(&to)),
        };
        let r = self.define("mat", to);
        let results = vec![self.id(r)];
        self.push(results, "coop.load", Some(words::coop_layout(layout)), form);
        r
    }

    /// `coop.store<layout> m, view[row, col]`.
    pub fn coop_store(
        &mut self,
        layout: CoopLayout,
        m: Value<Mat>,
        view: Value<super::View>,
        at: [Value<Index>; 2],
    ) {
        let form = Form::Access {
            value: Some(self.id(m)),
            base: self.id(view),
            indices: self.ids(&at),
            types: vec![self.type_of(m), self.type_of(view)],
            to: None,
        };
        self.push(
            Vec::new(),
            "coop.store",
            Some(words::coop_layout(layout)),
            form,
        );
    }

    /// `coop.mma a, b, c` = `a * b + c`.
    pub fn coop_mma(&mut self, a: Value<Mat>, b: Value<Mat>, c: Value<Mat>) -> Value<Mat> {
        let types = vec![self.type_of(a), self.type_of(b), self.type_of(c)];
        let ty = self.ty(c).clone();
        self.operands_op("coop.mma", None, &[a, b, c], types, None, ty)
    }
}
