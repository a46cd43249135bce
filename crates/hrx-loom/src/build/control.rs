//! Structured control flow: `scf.for` and `scf.if`, their bodies built by
//! closures that return the values they yield.

use super::Builder;
use super::value::{Bool, Data, Index, Value};
use crate::front::ast::{Form, IterArg};

impl Builder {
    /// `scf.yield values` closing a region (nothing when `values` is empty,
    /// as text omits it).
    fn yield_values<K>(&mut self, values: &[Value<K>]) {
        if values.is_empty() {
            return;
        }
        let operands = self.ids(values);
        let types = values.iter().map(|v| self.type_of(*v)).collect();
        self.push(
            Vec::new(),
            "scf.yield",
            None,
            Form::Operands {
                operands,
                types,
                to: None,
            },
        );
    }

    /// `scf.for iv = [lower to upper step step] { body }`.
    pub fn for_each(
        &mut self,
        lower: Value<Index>,
        upper: Value<Index>,
        step: Value<Index>,
        body: impl FnOnce(&mut Builder, Value<Index>),
    ) {
        self.for_carry::<Index>(lower, upper, step, &[], |b, iv, _| {
            body(b, iv);
            Vec::new()
        });
    }

    /// `scf.for` carrying `init` from trip to trip: `body` gets the
    /// induction variable and the carried values and returns their next
    /// values; the loop's results are the values after the last trip.
    pub fn for_carry<K: Data>(
        &mut self,
        lower: Value<Index>,
        upper: Value<Index>,
        step: Value<Index>,
        init: &[Value<K>],
        body: impl FnOnce(&mut Builder, Value<Index>, &[Value<K>]) -> Vec<Value<K>>,
    ) -> Vec<Value<K>> {
        let (lower, upper, step) = (self.id(lower), self.id(upper), self.id(step));
        let iv: Value<Index> = self.define("iv", super::Ty::Index);
        let types: Vec<_> = init.iter().map(|v| self.ty(*v).clone()).collect();
        let carried: Vec<Value<K>> = types
            .iter()
            .map(|t| self.define("acc", t.clone()))
            .collect();
        let iter_args = init
            .iter()
            .zip(&carried)
            .map(|(i, c)| IterArg {
                name: self.id(*c),
                init: self.id(*i),
                ty: self.type_of(*c),
            })
            .collect();
        self.open();
        let next = body(self, iv, &carried);
        self.yield_values(&next);
        let region = self.close();
        let results: Vec<Value<K>> = types.iter().map(|t| self.define("r", t.clone())).collect();
        let form = Form::For {
            iv: self.id(iv),
            lower,
            upper,
            step,
            iter_args,
            results: types.iter().map(|t| self.texpr(t)).collect(),
            body: region,
        };
        let names = self.ids(&results);
        self.push(names, "scf.for", None, form);
        results
    }

    /// `scf.if cond { then }`.
    pub fn if_(&mut self, cond: Value<Bool>, then: impl FnOnce(&mut Builder)) {
        let cond = self.id(cond);
        self.open();
        then(self);
        let then = self.close();
        let form = Form::If {
            cond,
            results: Vec::new(),
            then,
            otherwise: None,
        };
        self.push(Vec::new(), "scf.if", None, form);
    }

    /// `scf.if cond -> (..) { then } else { otherwise }`: the values the
    /// taken branch yields (both must yield values of the same types).
    pub fn if_else<K: Data>(
        &mut self,
        cond: Value<Bool>,
        then: impl FnOnce(&mut Builder) -> Vec<Value<K>>,
        otherwise: impl FnOnce(&mut Builder) -> Vec<Value<K>>,
    ) -> Vec<Value<K>> {
        let cond = self.id(cond);
        self.open();
        let yielded = then(self);
        self.yield_values(&yielded);
        let then = self.close();
        self.open();
        let other = otherwise(self);
        self.yield_values(&other);
        let otherwise = self.close();
        let types: Vec<_> = yielded.iter().map(|v| self.ty(*v).clone()).collect();
        let results: Vec<Value<K>> = types.iter().map(|t| self.define("r", t.clone())).collect();
        let form = Form::If {
            cond,
            results: types.iter().map(|t| self.texpr(t)).collect(),
            then,
            otherwise: Some(otherwise),
        };
        let names = self.ids(&results);
        self.push(names, "scf.if", None, form);
        results
    }
}
