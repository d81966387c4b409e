//! Expression evaluation: D's integer arithmetic in the checker's types, strings and
//! subroutines, variables. Faults (division by zero, bad address) abort the clause,
//! as in DTrace, and surface as `Fault`.

use std::collections::HashMap;

use udtrace_lang::ast::{BinaryOp, VarScope};
use udtrace_lang::ir::{Builtin, Expr, ExprKind, Place, Subr, VarInfo, VarRef};
use udtrace_lang::types::{BitField, Type, TypeTable};

use crate::context::Context;
use crate::dmem::{self, Area};
use crate::scratch::Scratch;
use crate::value::{Int, Value};

/// A run-time fault: what DTrace reports as "error in dt_clause_N for probe ID …".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    DivideByZero,
    /// An unreadable address in the traced process (or none at all).
    BadAddress(u64),
    /// An index out of range (`args[12]`, `uregs[99]`).
    IllegalOperation,
    /// A size out of range for scratch space (or crossing its allocated end).
    BadSize(u64),
    /// alloca() beyond the scratchsize.
    NoScratch,
    /// An index outside a D array's bounds, found at run time.
    BadIndex(i64),
}

impl Fault {
    /// DTrace's fault type number (the ERROR probe's `arg4`).
    pub fn code(self) -> i64 {
        match self {
            Fault::BadAddress(_) => 1,
            Fault::IllegalOperation => 3,
            Fault::DivideByZero => 4,
            Fault::NoScratch => 5,
            Fault::BadSize(_) => 10,
            Fault::BadIndex(_) => 11,
        }
    }
    pub fn address(self) -> u64 {
        match self {
            Fault::BadAddress(a) | Fault::BadSize(a) => a,
            Fault::BadIndex(i) => i as u64,
            _ => 0,
        }
    }
    /// DTrace's description of the fault.
    pub fn describe(self) -> String {
        match self {
            Fault::DivideByZero => "divide-by-zero".into(),
            Fault::BadAddress(a) => format!("invalid address (0x{a:x})"),
            Fault::IllegalOperation => "illegal operation".into(),
            Fault::BadSize(n) => format!("invalid size (0x{n:x})"),
            Fault::NoScratch => "out of scratch space".into(),
            Fault::BadIndex(i) => format!("index out of bounds ({i})"),
        }
    }
}

pub type EvalResult<T> = Result<T, Fault>;

/// The variables of a running program. Global and clause-local variables live in
/// storage areas (D memory, which pointers can address); thread-locals and
/// associative array elements are dynamic, created when assigned.
#[derive(Debug)]
pub struct Variables {
    globals: Area,
    global_arrays: Vec<HashMap<Vec<Value>, Value>>,
    thread: HashMap<(i64, usize), Value>,
    thread_arrays: HashMap<(i64, usize, Vec<Value>), Value>,
    this: Area,
    /// What `curcpu` points to for each CPU.
    pub cpus: Vec<dmem::CpuInfo>,
    temporaries: dmem::Temporaries,
}

/// The zero value of a type: what an unassigned variable reads as.
pub fn zero_of(ty: &Type, types: &TypeTable) -> Value {
    match ty {
        Type::String => Value::Str(Vec::new()),
        Type::Struct(_) | Type::Union(_) | Type::Array(..) => {
            Value::Bytes(vec![0; types.size_of(ty).unwrap_or(0) as usize])
        }
        Type::Stack { .. } => Value::Stack(Vec::new()),
        other => {
            let (size, signed) = other.int_bits().unwrap_or((8, true));
            Value::Int(Int { bits: 0, size, signed })
        }
    }
}

/// What an absent dynamic variable (thread-local, associative array element) reads
/// as: its storage does not exist, so a string is the NULL string.
fn dynamic_zero_of(ty: &Type, types: &TypeTable) -> Value {
    match ty {
        Type::String => null_string(),
        _ => zero_of(ty, types),
    }
}

/// An integer narrowed to the size and sign of its type, as a record of that size
/// holds it (expression results carry all 64 bits of DTrace's registers).
pub fn narrow(v: Value) -> Value {
    match v {
        Value::Int(i) => Value::Int(Int { bits: udtrace_lang::types::IntType::wrap_as(i.size, i.signed, i.bits), ..i }),
        other => other,
    }
}

/// The NULL string: a string whose address is 0. It is not "", and compares below
/// every string.
pub fn null_string() -> Value {
    Value::Int(Int { bits: 0, size: 8, signed: false })
}

/// Whether a string value is a pointer that is not a string's bytes (NULL, or NULL
/// plus an offset): reading it faults at that address.
#[inline]
pub fn string_address(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => Some(i.bits),
        _ => None,
    }
}

/// strcmp() order, with the NULL string below every other string and equal to itself.
fn compare_strings(a: Value, b: Value) -> std::cmp::Ordering {
    match (string_address(&a), string_address(&b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => bytes(a).cmp(&bytes(b)),
    }
}

/// `s + n`: the string `n` chars further on; NULL + n stays an address.
fn string_offset(s: Value, n: u64) -> Value {
    match string_address(&s) {
        Some(a) => Value::Int(Int { bits: a.wrapping_add(n), size: 8, signed: false }),
        None => {
            let b = bytes(s);
            let start = (n as usize).min(b.len());
            Value::Str(b[start..].to_vec())
        }
    }
}

/// Whether storing `v` into a dynamic variable frees it. A string never does: ""
/// is a string, and an absent element reads as the NULL string instead.
fn frees(v: &Value) -> bool {
    !matches!(v, Value::Str(_)) && is_zero(v)
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Int(i) => i.bits == 0,
        Value::Str(s) => s.is_empty(),
        Value::Bytes(b) => b.iter().all(|&x| x == 0),
        Value::Stack(s) => s.is_empty(),
    }
}

impl Variables {
    /// `strsize` sizes the storage of string variables.
    pub fn new(globals: &[VarInfo], clause_vars: &[VarInfo], types: &TypeTable, strsize: usize) -> Variables {
        Variables {
            globals: Area::new(dmem::GLOBALS, globals, types, strsize),
            global_arrays: globals.iter().map(|_| HashMap::new()).collect(),
            thread: HashMap::new(),
            thread_arrays: HashMap::new(),
            this: Area::new(dmem::LOCALS, clause_vars, types, strsize),
            cpus: Vec::new(),
            temporaries: dmem::Temporaries::default(),
        }
    }

    /// Clause-local (`this->`) variables live for one probe firing.
    pub fn reset_clause_locals(&mut self) {
        self.this.clear();
    }

    /// Temporary strings live for one clause.
    pub fn reset_temporaries(&mut self) {
        self.temporaries.clear();
    }
}

/// Everything evaluation needs besides the variables: types, the probe context.
pub struct Evaluator<'a> {
    pub types: &'a TypeTable,
    pub globals: &'a [VarInfo],
    pub thread_vars: &'a [VarInfo],
    pub clause_vars: &'a [VarInfo],
    pub vars: &'a mut Variables,
    pub ctx: &'a dyn Context,
    pub strsize: usize,
    pub rand: &'a mut u64,
    pub strtok: &'a mut Option<(Vec<u8>, usize)>,
    pub speculation: &'a mut dyn FnMut() -> i64,
    /// The clause's scratch space, which alloca-tainted pointers address.
    pub scratch: &'a mut Scratch,
}

/// A builtin variable (other than `curcpu`) read as type `ty`: needs no evaluator's
/// state, so the consumer reads printf's and trace()'s builtins without one.
#[inline]
pub(crate) fn builtin_value(ctx: &dyn Context, b: Builtin, ty: &Type, types: &TypeTable) -> Value {
    match ctx.builtin(b) {
        Some(Value::Int(i)) => int_of(ty, i.bits),
        Some(v) => v,
        None => zero_of(ty, types),
    }
}

#[inline]
pub(crate) fn int_of(ty: &Type, bits: u64) -> Value {
    let (size, signed) = ty.int_bits().unwrap_or((8, true));
    Value::Int(int_sized(size, signed, bits))
}

/// `bits` as an integer of `size` bytes, `signed` or not ([`int_of`] of its type).
#[inline]
pub(crate) fn int_sized(size: u8, signed: bool, bits: u64) -> Int {
    Int { bits: udtrace_lang::types::IntType::wrap_as(size, signed, bits), size, signed }
}

pub(crate) fn as_u64(v: &Value) -> u64 {
    match v {
        Value::Int(i) => i.bits,
        _ => 0,
    }
}

fn truthy(v: &Value) -> bool {
    !is_zero(v)
}

fn bytes(v: Value) -> Vec<u8> {
    match v {
        Value::Str(s) => s,
        Value::Bytes(b) => {
            let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
            b[..end].to_vec()
        }
        Value::Int(i) => i.bits.to_string().into_bytes(),
        Value::Stack(s) => s.join("\n").into_bytes(),
    }
}

impl Evaluator<'_> {
    fn info(&self, r: VarRef) -> &VarInfo {
        match r.scope {
            VarScope::Global => &self.globals[r.id],
            VarScope::Thread => &self.thread_vars[r.id],
            VarScope::Clause => &self.clause_vars[r.id],
        }
    }

    fn tid(&self) -> i64 {
        match self.ctx.builtin(Builtin::Tid) {
            Some(Value::Int(i)) => i.as_i64(),
            _ => 0,
        }
    }

    /// A string value: at most strsize characters, as D string storage holds.
    pub(crate) fn clamp(&self, mut s: Vec<u8>) -> Value {
        s.truncate(self.strsize);
        Value::Str(s)
    }

    fn read_var(&mut self, r: VarRef) -> Value {
        match r.scope {
            VarScope::Global => self.vars.globals.get(r.id).unwrap_or_else(|| zero_of(&self.info(r).ty, self.types)),
            VarScope::Thread => {
                let key = (self.tid(), r.id);
                match self.vars.thread.get(&key) {
                    Some(v) => v.clone(),
                    None => dynamic_zero_of(&self.info(r).ty, self.types),
                }
            }
            VarScope::Clause => self.vars.this.get(r.id).unwrap_or_else(|| zero_of(&self.info(r).ty, self.types)),
        }
    }

    fn read_array(&mut self, r: VarRef, keys: Vec<Value>) -> Value {
        let found = match r.scope {
            VarScope::Global => self.vars.global_arrays[r.id].get(&keys).cloned(),
            _ => self.vars.thread_arrays.get(&(self.tid(), r.id, keys)).cloned(),
        };
        found.unwrap_or_else(|| dynamic_zero_of(&self.info(r).ty, self.types))
    }

    /// Stores into a variable. Dynamic variables (thread-locals and array elements)
    /// assigned zero are deleted, which is how D programs free them.
    fn store(&mut self, place: &ResolvedPlace, v: Value) {
        match place {
            ResolvedPlace::Field { base, record, offset, ty, bits } => {
                self.store_field(base, record, *offset, ty, *bits, v)
            }
            ResolvedPlace::Scratch(at, ty) => self.store_scratch(*at, ty, v),
            ResolvedPlace::Mem(addr, ty) => {
                let size = self.types.size_of(ty).unwrap_or(0) as usize;
                let data = dmem::encode(&v, ty, size);
                self.write_d(*addr, &data);
            }
            ResolvedPlace::Var(r) => match r.scope {
                VarScope::Global => self.vars.globals.set(r.id, v),
                VarScope::Thread => {
                    let key = (self.tid(), r.id);
                    if frees(&v) {
                        self.vars.thread.remove(&key);
                    } else {
                        self.vars.thread.insert(key, v);
                    }
                }
                VarScope::Clause => self.vars.this.set(r.id, v),
            },
            ResolvedPlace::Array(r, keys) => {
                let zero = frees(&v);
                match r.scope {
                    VarScope::Global => {
                        let map = &mut self.vars.global_arrays[r.id];
                        if zero {
                            map.remove(keys);
                        } else {
                            map.insert(keys.clone(), v);
                        }
                    }
                    _ => {
                        let key = (self.tid(), r.id, keys.clone());
                        if zero {
                            self.vars.thread_arrays.remove(&key);
                        } else {
                            self.vars.thread_arrays.insert(key, v);
                        }
                    }
                }
            }
        }
    }

    fn resolve(&mut self, place: &Place) -> EvalResult<ResolvedPlace> {
        Ok(match place {
            Place::Var(r) => ResolvedPlace::Var(*r),
            Place::Array { var, keys } => {
                let keys = keys.iter().map(|k| self.eval(k).map(narrow)).collect::<EvalResult<Vec<_>>>()?;
                ResolvedPlace::Array(*var, keys)
            }
            Place::Field { base, record, offset, ty, bits } => ResolvedPlace::Field {
                base: Box::new(self.resolve(base)?),
                record: record.clone(),
                offset: *offset,
                ty: ty.clone(),
                bits: *bits,
            },
            Place::Mem { addr, ty } => {
                let at = as_u64(&self.eval(addr)?);
                if addr.taint.alloca {
                    self.scratch.check(at, self.scratch_size_of(ty))?;
                    return Ok(ResolvedPlace::Scratch(at, ty.clone()));
                }
                // Besides scratch space, only D's own memory can be written; the
                // traced process's is read-only.
                let size = self.types.size_of(ty).unwrap_or(0) as usize;
                if self.read_d(at, size).is_none() {
                    return Err(Fault::BadAddress(at));
                }
                ResolvedPlace::Mem(at, ty.clone())
            }
        })
    }

    fn load(&mut self, place: &ResolvedPlace) -> Value {
        match place {
            ResolvedPlace::Scratch(at, ty) => self.load_scratch(*at, ty).unwrap_or_else(|_| zero_of(ty, self.types)),
            ResolvedPlace::Var(r) => self.read_var(*r),
            ResolvedPlace::Array(r, keys) => self.read_array(*r, keys.clone()),
            ResolvedPlace::Mem(addr, ty) => {
                let size = self.types.size_of(ty).unwrap_or(0) as usize;
                let data = self.read_d(*addr, size).unwrap_or_else(|| vec![0; size]);
                dmem::decode(&data, ty)
            }
            ResolvedPlace::Field { base, record, offset, ty, bits } => {
                let bytes = self.record_bytes(base, record);
                let size = self.types.size_of(ty).unwrap_or(0) as usize;
                let start = (*offset as usize).min(bytes.len());
                let end = (start + size).min(bytes.len());
                let v = value_from_bytes(&bytes[start..end], ty);
                match bits {
                    Some(b) => bit_field_of(ty, as_u64(&v), *b),
                    None => v,
                }
            }
        }
    }

    /// The bytes of the struct or union held at `place`, zero-filled to its size.
    fn record_bytes(&mut self, place: &ResolvedPlace, record: &Type) -> Vec<u8> {
        let size = self.types.size_of(record).unwrap_or(0) as usize;
        let mut b = match self.load(place) {
            Value::Bytes(b) | Value::Str(b) => b,
            _ => Vec::new(),
        };
        b.resize(size, 0);
        b
    }

    /// Writes a member into its record and stores the record back.
    fn store_field(
        &mut self,
        base: &ResolvedPlace,
        record: &Type,
        offset: u64,
        ty: &Type,
        bits: Option<BitField>,
        v: Value,
    ) {
        let mut bytes = self.record_bytes(base, record);
        let size = self.types.size_of(ty).unwrap_or(0) as usize;
        let start = (offset as usize).min(bytes.len());
        let end = (start + size).min(bytes.len());
        let mut data = match v {
            // A bit-field changes only its own bits of the storage unit.
            Value::Int(i) if bits.is_some() => {
                let unit = as_u64(&value_from_bytes(&bytes[start..end], ty));
                bits.map_or(i.bits, |b| b.insert(unit, i.bits)).to_le_bytes().to_vec()
            }
            Value::Int(i) => i.bits.to_le_bytes().to_vec(),
            Value::Str(b) | Value::Bytes(b) => b,
            Value::Stack(_) => Vec::new(),
        };
        data.resize(size, 0);
        bytes[start..end].copy_from_slice(&data[..end - start]);
        self.store(base, Value::Bytes(bytes));
    }

    pub fn eval(&mut self, e: &Expr) -> EvalResult<Value> {
        Ok(match &e.kind {
            ExprKind::Int(v) => int_of(&e.ty, *v),
            ExprKind::Str(s) => Value::Str(s.to_vec()),
            ExprKind::Var(r) => self.read_var(*r),
            ExprKind::ArrayGet { var, keys } => {
                let keys = keys.iter().map(|k| self.eval(k).map(narrow)).collect::<EvalResult<Vec<_>>>()?;
                self.read_array(*var, keys)
            }
            ExprKind::Builtin(Builtin::Curcpu) => {
                let cpu = self.ctx.builtin(Builtin::Cpu).map_or(0, |v| as_u64(&v));
                int_of(&e.ty, dmem::cpuinfo_address(cpu))
            }
            ExprKind::Builtin(b) => builtin_value(self.ctx, *b, &e.ty, self.types),
            ExprKind::Args(i) => {
                let n = as_u64(&self.eval(i)?);
                if n > 9 {
                    return Err(Fault::IllegalOperation);
                }
                match self.ctx.builtin(Builtin::Arg(n as u8)) {
                    // A string argument (exec's path) is the address of its bytes.
                    Some(Value::Int(i)) if e.ty.is_string() => {
                        Value::Str(self.ctx.read_string(i.bits, self.strsize + 1).ok_or(Fault::BadAddress(i.bits))?)
                    }
                    Some(Value::Int(i)) => int_of(&e.ty, i.bits),
                    _ => zero_of(&e.ty, self.types),
                }
            }
            ExprKind::Uregs(i) => {
                let n = as_u64(&self.eval(i)?);
                match self.ctx.register(n) {
                    Some(v) => int_of(&e.ty, v),
                    None => return Err(Fault::IllegalOperation),
                }
            }
            ExprKind::Neg(x) => int_of(&e.ty, as_u64(&self.eval(x)?).wrapping_neg()),
            ExprKind::BitNot(x) => int_of(&e.ty, !as_u64(&self.eval(x)?)),
            ExprKind::NonNull(x) => match as_u64(&self.eval(x)?) {
                0 => return Err(Fault::BadAddress(0)),
                p => int_of(&e.ty, p),
            },
            ExprKind::Not(x) => int_of(&e.ty, u64::from(!truthy(&self.eval(x)?))),
            ExprKind::Binary { op, lhs, rhs, signed } => {
                let a = as_u64(&self.eval(lhs)?);
                let b = as_u64(&self.eval(rhs)?);
                self.binary(*op, a, b, *signed, &e.ty)?
            }
            ExprKind::StrCmp { op, lhs, rhs } => {
                let a = self.eval(lhs)?;
                let b = self.eval(rhs)?;
                let ord = compare_strings(a, b);
                int_of(&e.ty, u64::from(op.holds(ord)))
            }
            ExprKind::Logical { op, lhs, rhs } => {
                let a = truthy(&self.eval(lhs)?);
                let r = match op {
                    BinaryOp::LogAnd => a && truthy(&self.eval(rhs)?),
                    BinaryOp::LogOr => a || truthy(&self.eval(rhs)?),
                    _ => a != truthy(&self.eval(rhs)?),
                };
                int_of(&e.ty, u64::from(r))
            }
            ExprKind::Ternary { cond, then, otherwise } => {
                if truthy(&self.eval(cond)?) {
                    self.eval(then)?
                } else {
                    self.eval(otherwise)?
                }
            }
            ExprKind::Assign { target, op, value } => {
                let place = self.resolve(target)?;
                // `x op= v` reads x before evaluating v, as DTrace's code does.
                let cur = op.map(|_| as_u64(&self.load(&place)));
                let v = self.eval(value)?;
                let v = match op {
                    None => self.coerce(v, &e.ty)?,
                    Some(op) => {
                        let cur = cur.unwrap_or(0);
                        let signed = e.ty.int_bits().map(|s| s.1).unwrap_or(false)
                            || matches!(v, Value::Int(Int { signed: true, .. }));
                        let r = self.binary(*op, cur, as_u64(&v), signed, &e.ty)?;
                        int_of(&e.ty, as_u64(&r))
                    }
                };
                self.store(&place, v.clone());
                v
            }
            ExprKind::IncDec { target, increment, prefix } => {
                let place = self.resolve(target)?;
                let old = self.load(&place);
                let step = match e.ty.pointee() {
                    Some(t) => self.types.size_of(t).unwrap_or(1),
                    None => 1,
                };
                let cur = as_u64(&old);
                let new = int_of(&e.ty, if *increment { cur.wrapping_add(step) } else { cur.wrapping_sub(step) });
                self.store(&place, new.clone());
                if *prefix {
                    new
                } else {
                    old
                }
            }
            ExprKind::Cast(x) => {
                let v = self.eval(x)?;
                match v {
                    // A char pointer into scratch space read as a string.
                    Value::Int(i) if e.ty.is_string() && x.taint.alloca => self.scratch_string(i.bits)?,
                    v => self.coerce(v, &e.ty)?,
                }
            }
            ExprKind::Call(subr, args) => self.call(*subr, args, &e.ty)?,
            ExprKind::Load(addr) => {
                let a = as_u64(&self.eval(addr)?);
                if addr.taint.alloca {
                    self.load_scratch(a, &e.ty)?
                } else {
                    self.load_memory(a, &e.ty)?
                }
            }
            ExprKind::Field { base, offset } => {
                let Value::Bytes(b) = self.eval(base)? else {
                    return Err(Fault::IllegalOperation);
                };
                let size = self.types.size_of(&e.ty).unwrap_or(0) as usize;
                // A bit-field's storage unit may reach past the end of its struct,
                // which ends with its last member's bits; the bytes past it read as 0.
                let start = (*offset as usize).min(b.len());
                let end = (start + size).min(b.len());
                value_from_bytes(&b[start..end], &e.ty)
            }
            ExprKind::BitField { unit, bits } => {
                let unit = as_u64(&self.eval(unit)?);
                bit_field_of(&e.ty, unit, *bits)
            }
            ExprKind::Comma(a, b) => {
                self.eval(a)?;
                self.eval(b)?
            }
            ExprKind::VarAddr(r) => int_of(&e.ty, self.var_address(*r)),
            ExprKind::IndexCheck { index, len } => {
                let v = self.eval(index)?;
                if as_u64(&v) >= *len {
                    return Err(Fault::BadIndex(as_u64(&v) as i64));
                }
                v
            }
            ExprKind::StrChar { base, index } => {
                let s = self.eval(base)?;
                let i = as_u64(&self.eval(index)?);
                self.string_char(s, i)?
            }
            ExprKind::StrOffset { base, offset } => {
                let s = self.eval(base)?;
                let n = as_u64(&self.eval(offset)?);
                string_offset(s, n)
            }
        })
    }

    /// `s[i]`: the char at offset `i` of the string's buffer (zero past its end, up
    /// to strsize); a NULL string faults at address `i`.
    fn string_char(&self, s: Value, i: u64) -> EvalResult<Value> {
        if let Some(a) = string_address(&s) {
            return Err(Fault::BadAddress(a.wrapping_add(i)));
        }
        let b = bytes(s);
        let c = match usize::try_from(i) {
            Ok(i) if i < b.len() => b[i],
            Ok(i) if i <= self.strsize => 0,
            _ => return Err(Fault::IllegalOperation),
        };
        Ok(int_of(&Type::int(1, true), u64::from(c)))
    }

    /// Converts a value to `ty`: integer wrap, or a pointer/char array read as a string.
    fn coerce(&mut self, v: Value, ty: &Type) -> EvalResult<Value> {
        Ok(match (ty, v) {
            // A null pointer is the NULL string.
            (Type::String, Value::Int(i)) if i.bits == 0 => null_string(),
            (Type::String, Value::Int(i)) if dmem::is_d_address(i.bits) => {
                let s = self.read_d_string(i.bits).ok_or(Fault::BadAddress(i.bits))?;
                self.clamp(s)
            }
            (Type::String, Value::Int(i)) => {
                let s = self.ctx.read_string(i.bits, self.strsize + 1).ok_or(Fault::BadAddress(i.bits))?;
                self.clamp(s)
            }
            (Type::String, v) => self.clamp(bytes(v)),
            // A string used as a pointer (`char *p = execname`) is a temporary copy.
            (Type::Pointer(_), v @ (Value::Str(_) | Value::Bytes(_))) => {
                let addr = self.vars.temporaries.add(&bytes(v));
                int_of(ty, addr)
            }
            (t, Value::Int(i)) if t.int_bits().is_some() => int_of(t, i.bits),
            (_, v) => v,
        })
    }

    /// Where a variable's storage is in D memory.
    fn var_address(&self, r: VarRef) -> u64 {
        match r.scope {
            VarScope::Global => self.vars.globals.address(r.id),
            VarScope::Clause => self.vars.this.address(r.id),
            VarScope::Thread => dmem::thread_local_address(r.id),
        }
    }

    /// `len` bytes of D memory at `addr`; `None` outside every D object.
    fn read_d(&mut self, addr: u64, len: usize) -> Option<Vec<u8>> {
        if self.vars.globals.contains(addr) {
            return self.vars.globals.read(addr, len);
        }
        if self.vars.this.contains(addr) {
            return self.vars.this.read(addr, len);
        }
        if self.vars.temporaries.contains(addr) {
            return self.vars.temporaries.read(addr, len);
        }
        if addr >= dmem::CPUS {
            return dmem::read_cpuinfo(&self.vars.cpus, addr, len);
        }
        let (id, off) = dmem::thread_local_at(addr)?;
        let bytes = self.thread_local_bytes(id)?;
        let off = off as usize;
        bytes.get(off..off.checked_add(len)?).map(<[u8]>::to_vec)
    }

    /// The NUL-terminated string at a D address, at most strsize bytes.
    fn read_d_string(&mut self, addr: u64) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        for i in 0..self.strsize as u64 {
            match self.read_d(addr + i, 1)?.first() {
                Some(0) | None => break,
                Some(&c) => out.push(c),
            }
        }
        Some(out)
    }

    /// Writes D memory at `addr` (the caller has checked that it is D memory).
    fn write_d(&mut self, addr: u64, data: &[u8]) {
        if self.vars.globals.contains(addr) {
            self.vars.globals.write(addr, data);
        } else if self.vars.this.contains(addr) {
            self.vars.this.write(addr, data);
        } else if let Some((id, off)) = dmem::thread_local_at(addr) {
            let Some(mut bytes) = self.thread_local_bytes(id) else { return };
            let off = off as usize;
            if let Some(dst) = bytes.get_mut(off..off + data.len()) {
                dst.copy_from_slice(data);
                let r = VarRef { scope: VarScope::Thread, id };
                let v = dmem::decode(&bytes, &self.info(r).ty);
                self.store(&ResolvedPlace::Var(r), v);
            }
        }
    }

    /// The current thread's thread-local variable `id` as the bytes of its storage.
    fn thread_local_bytes(&mut self, id: usize) -> Option<Vec<u8>> {
        let r = VarRef { scope: VarScope::Thread, id };
        let ty = self.thread_vars.get(id)?.ty.clone();
        let size = udtrace_lang::storage::storage_size(&ty, self.types, self.strsize as u64) as usize;
        let v = self.read_var(r);
        Some(dmem::encode(&v, &ty, size))
    }

    /// `len` bytes at `addr`, in D memory or the traced process's; all of them or a
    /// fault, as a failed probe_read is.
    pub(crate) fn read_bytes(&mut self, addr: u64, len: usize) -> EvalResult<Vec<u8>> {
        let data = if dmem::is_d_address(addr) { self.read_d(addr, len) } else { self.ctx.read_memory(addr, len) };
        data.filter(|d| d.len() == len).ok_or(Fault::BadAddress(addr))
    }

    fn load_memory(&mut self, addr: u64, ty: &Type) -> EvalResult<Value> {
        if dmem::is_d_address(addr) {
            let size = udtrace_lang::storage::storage_size(ty, self.types, self.strsize as u64) as usize;
            let data = self.read_d(addr, size).ok_or(Fault::BadAddress(addr))?;
            return Ok(dmem::decode(&data, ty));
        }
        if ty.is_string() {
            let s = self.ctx.read_string(addr, self.strsize + 1).ok_or(Fault::BadAddress(addr))?;
            return Ok(self.clamp(s));
        }
        let size = self.types.size_of(ty).ok_or(Fault::IllegalOperation)? as usize;
        let data = self.ctx.read_memory(addr, size).ok_or(Fault::BadAddress(addr))?;
        Ok(value_from_bytes(&data, ty))
    }

    fn binary(&self, op: BinaryOp, a: u64, b: u64, signed: bool, ty: &Type) -> EvalResult<Value> {
        use BinaryOp::*;
        if matches!(op, Lt | Le | Gt | Ge | Eq | Ne) {
            let ord = if signed { (a as i64).cmp(&(b as i64)) } else { a.cmp(&b) };
            return Ok(int_of(ty, u64::from(op.holds(ord))));
        }
        // DTrace computes in 64-bit registers; only storing, casting and recording
        // narrow a value to its type. The result keeps its type's size and sign for
        // that, with all 64 bits.
        let (size, signed_as) = ty.int_bits().unwrap_or((8, signed));
        match arith64(op, a, b, signed) {
            Some(v) => Ok(Value::Int(Int { bits: v, size, signed: signed_as })),
            None => Err(Fault::DivideByZero),
        }
    }

    fn call(&mut self, subr: Subr, args: &[Expr], ty: &Type) -> EvalResult<Value> {
        if let Subr::Stack { user } = subr {
            let frames = args.first().and_then(|a| match a.kind {
                ExprKind::Int(n) => Some(n as u32),
                _ => None,
            });
            return Ok(Value::Stack(self.ctx.stack(user, frames)));
        }
        if let Some(v) = self.memory_subr(subr, args, ty)? {
            return Ok(v);
        }
        let vals = args.iter().map(|a| self.eval(a)).collect::<EvalResult<Vec<_>>>()?;
        // String arguments are read as DTrace reads them: a NULL one faults, and at
        // most strsize characters of the others count.
        for (a, v) in args.iter().zip(&vals) {
            if let Some(addr) = string_address(v).filter(|_| a.ty.is_string()) {
                return Err(Fault::BadAddress(addr));
            }
        }
        let strsize = self.strsize;
        let s = |i: usize| -> Vec<u8> {
            let mut b = vals.get(i).cloned().map(bytes).unwrap_or_default();
            b.truncate(strsize);
            b
        };
        let n = |i: usize| -> i64 { vals.get(i).map(as_u64).unwrap_or(0) as i64 };
        Ok(match subr {
            Subr::Strlen => int_of(ty, s(0).len() as u64),
            Subr::Strjoin => {
                let mut a = s(0);
                a.extend(s(1));
                self.clamp(a)
            }
            Subr::StrSetChar => {
                // The string's strsize-byte buffer with byte i set: a NUL cuts the
                // string there, a byte just past its end lengthens it, one further out
                // lies behind the terminating NUL and changes nothing visible.
                let (mut a, i, c) = (s(0), n(1), n(2) as u8);
                match usize::try_from(i) {
                    Ok(i) if i < a.len() && c == 0 => a.truncate(i),
                    Ok(i) if i < a.len() => a[i] = c,
                    Ok(i) if i == a.len() && c != 0 && i < strsize => a.push(c),
                    _ => {}
                }
                self.clamp(a)
            }
            Subr::Substr => {
                let count = if vals.len() > 2 { Some(n(2)) } else { None };
                let out = substr(&s(0), n(1), count, self.strsize as i64);
                self.clamp(out)
            }
            Subr::Index | Subr::Rindex => {
                let pos = if vals.len() > 2 { Some(n(2)) } else { None };
                let r = if subr == Subr::Index { index(&s(0), &s(1), pos) } else { rindex(&s(0), &s(1), pos) };
                int_of(ty, r as u64)
            }
            Subr::Strstr => {
                let (hay, needle) = (s(0), s(1));
                // Not found is the NULL string, as strstr(3) returns NULL.
                match find(&hay, &needle, 0) {
                    -1 => null_string(),
                    i => Value::Str(hay[i as usize..].to_vec()),
                }
            }
            Subr::Strchr | Subr::Strrchr => {
                let hay = s(0);
                let c = n(1) as u8;
                let pos = if subr == Subr::Strchr {
                    hay.iter().position(|&x| x == c)
                } else {
                    hay.iter().rposition(|&x| x == c)
                };
                pos.map_or_else(null_string, |p| Value::Str(hay[p..].to_vec()))
            }
            Subr::Strtok => self.strtok(&vals)?,
            Subr::Basename => Value::Str(basename(&s(0))),
            Subr::Dirname => Value::Str(dirname(&s(0))),
            Subr::Lltostr => {
                let base = if vals.len() > 1 { n(1) } else { 10 };
                self.clamp(lltostr(n(0), base).ok_or(Fault::IllegalOperation)?)
            }
            Subr::Strtoll => {
                let base = if vals.len() > 1 { n(1) } else { 10 };
                // DTrace takes bases 2 to 36 only; anything else is an illegal operation.
                if !(2..=36).contains(&base) {
                    return Err(Fault::IllegalOperation);
                }
                int_of(ty, strtoll(&s(0), base as u32) as u64)
            }
            Subr::Toupper => Value::Str(s(0).to_ascii_uppercase()),
            Subr::Tolower => Value::Str(s(0).to_ascii_lowercase()),
            Subr::Rand => {
                // xorshift64*: DTrace's rand() is a weak generator too; any spread will do.
                let mut x = *self.rand;
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                *self.rand = x;
                int_of(ty, x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33)
            }
            Subr::Speculation => int_of(ty, (self.speculation)() as u64),
            Subr::Copyinstr => {
                // DTrace reads at most min(size, strsize) bytes, the NUL included.
                let size = if vals.len() > 1 { (n(1) as u64).min(self.strsize as u64) as usize } else { self.strsize };
                let addr = n(0) as u64;
                let v = self.ctx.read_string(addr, size).filter(|_| size > 0).ok_or(Fault::BadAddress(addr))?;
                self.clamp(v)
            }
            Subr::Progenyof => int_of(ty, u64::from(self.ctx.progenyof(n(0)))),
            Subr::Htons | Subr::Ntohs => int_of(ty, u64::from((n(0) as u16).swap_bytes())),
            Subr::Htonl | Subr::Ntohl => int_of(ty, u64::from((n(0) as u32).swap_bytes())),
            Subr::Htonll | Subr::Ntohll => int_of(ty, (n(0) as u64).swap_bytes()),
            // usym()/ufunc()/umod()/uaddr() print symbolically; an address nothing is
            // known about prints in hex, as DTrace prints it (`0x0` for arg1 in the
            // kernel).
            Subr::Symbol => match ty {
                Type::Symbol { kind, .. } => match self.ctx.symbol(n(0) as u64, *kind) {
                    Some(s) => Value::Str(s.into_bytes()),
                    None => Value::Str(format!("0x{:x}", n(0) as u64).into_bytes()),
                },
                _ => int_of(ty, n(0) as u64),
            },
            Subr::Cleanpath => self.clamp(cleanpath(&s(0))),
            // Linux's dev_t: 12 bits of major, 20 of minor.
            Subr::Getmajor => int_of(ty, u64::from((n(0) as u32) >> 20)),
            Subr::Getminor => int_of(ty, u64::from((n(0) as u32) & 0xfffff)),
            Subr::Stack { .. }
            | Subr::Alloca
            | Subr::Copyin
            | Subr::Copyinto
            | Subr::Bcopy
            | Subr::InetNtoa
            | Subr::InetNtoa6
            | Subr::InetNtop
            | Subr::LinkNtop
            | Subr::Pcap => unreachable!("handled above"),
            // The checker refuses these: they act on kernel objects or write to the
            // traced process.
            Subr::Kernel | Subr::Copyout | Subr::Copyoutstr => return Err(Fault::IllegalOperation),
        })
    }

    /// `strtok(s, delim)` remembers where it stopped; `strtok(NULL, delim)` goes on
    /// (and faults when there is nothing to go on with). Past the last token the
    /// result is NULL.
    fn strtok(&mut self, vals: &[Value]) -> EvalResult<Value> {
        let mut delim = vals.get(1).cloned().map(bytes).unwrap_or_default();
        delim.truncate(self.strsize);
        match &vals[0] {
            // The literal NULL: the checker left it an integer.
            Value::Int(_) => {}
            v => {
                let mut src = bytes(v.clone());
                src.truncate(self.strsize);
                *self.strtok = Some((src, 0));
            }
        }
        let Some((src, pos)) = self.strtok.as_mut() else {
            return Err(Fault::BadAddress(0));
        };
        let start = (*pos..src.len()).find(|&i| !delim.contains(&src[i])).unwrap_or(src.len());
        let end = (start..src.len()).find(|&i| delim.contains(&src[i])).unwrap_or(src.len());
        *pos = end;
        if start == end {
            return Ok(null_string());
        }
        Ok(Value::Str(src[start..end].to_vec()))
    }
}

enum ResolvedPlace {
    Var(VarRef),
    Array(VarRef, Vec<Value>),
    /// Memory in scratch space, at an offset.
    Scratch(u64, Type),
    /// D memory at an address, holding a value of the type.
    Mem(u64, Type),
    /// A member: the variable holding the record, the record's type, the member's
    /// offset and type, and where its bits are if it is a bit-field.
    Field {
        base: Box<ResolvedPlace>,
        record: Type,
        offset: u64,
        ty: Type,
        bits: Option<BitField>,
    },
}

/// A bit-field's value from its storage unit, sign-extended from the field's width
/// when its type is signed.
fn bit_field_of(ty: &Type, unit: u64, bits: BitField) -> Value {
    let signed = ty.int_bits().is_some_and(|s| s.1);
    int_of(ty, bits.extract(unit, signed))
}

/// One 64-bit ALU operation as DTrace's code generator emits it. Signed division
/// and remainder work on magnitudes and negate the result when the operands' signs
/// differ (dt_cg_arithmetic_op), so `19 % -5` is -4. `None` on division by zero.
pub fn arith64(op: BinaryOp, a: u64, b: u64, signed: bool) -> Option<u64> {
    use BinaryOp::*;
    Some(match op {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        Div | Mod if b == 0 => return None,
        Div | Mod if signed => {
            let (l, r) = (a as i64, b as i64);
            let (ul, ur) = (l.unsigned_abs(), r.unsigned_abs());
            let m = if op == Div { ul / ur } else { ul % ur };
            if (l < 0) != (r < 0) {
                m.wrapping_neg()
            } else {
                m
            }
        }
        Div => a / b,
        Mod => a % b,
        BitAnd => a & b,
        BitOr => a | b,
        BitXor => a ^ b,
        Shl => a.wrapping_shl(b as u32),
        Shr if signed => (a as i64).wrapping_shr(b as u32) as u64,
        Shr => a.wrapping_shr(b as u32),
        _ => return None,
    })
}

/// Decodes little-endian memory as a value of `ty`.
pub fn value_from_bytes(data: &[u8], ty: &Type) -> Value {
    match ty.int_bits() {
        Some((size, _)) if !matches!(ty, Type::Array(..)) => {
            let mut buf = [0u8; 8];
            let n = data.len().min(8).min(size as usize);
            buf[..n].copy_from_slice(&data[..n]);
            int_of(ty, u64::from_le_bytes(buf))
        }
        _ if ty.is_string() => Value::Str(bytes(Value::Bytes(data.to_vec()))),
        _ => Value::Bytes(data.to_vec()),
    }
}

/// DTrace's substr(): a negative `index` counts from the end (and a count reaching
/// back into the string keeps its part), a negative `count` leaves that many
/// characters off the end, and without a count the rest up to strsize is taken.
fn substr(src: &[u8], index: i64, count: Option<i64>, strsize: i64) -> Vec<u8> {
    let len = src.len() as i64;
    let mut index = index;
    let mut remaining = count.unwrap_or(strsize);
    if index < 0 {
        index += len;
        if index < 0 && index.saturating_add(remaining) > 0 {
            remaining += index;
            index = 0;
        }
    }
    if index >= len || index < 0 {
        remaining = 0;
    } else if remaining < 0 {
        remaining += len - index;
    } else if index.saturating_add(remaining) > strsize {
        remaining = strsize - index;
    }
    if remaining <= 0 {
        return Vec::new();
    }
    let end = index.saturating_add(remaining).min(len);
    src[index as usize..end as usize].to_vec()
}

/// Whether `needle` occurs at `at`, comparing as strncmp does against the
/// NUL-terminated haystack (so a match must fit before the end).
fn matches_at(hay: &[u8], needle: &[u8], at: usize) -> bool {
    hay.get(at..at + needle.len()) == Some(needle)
}

/// DTrace's index(): a position below 0 starts at 0; at or past the end, only ""
/// is found (at the length). Both strings empty give 0.
fn index(hay: &[u8], needle: &[u8], pos: Option<i64>) -> i64 {
    let len = hay.len() as i64;
    if hay.is_empty() && needle.is_empty() {
        return 0;
    }
    let start = match pos {
        Some(p) => {
            let p = p.max(0);
            if p >= len {
                return if needle.is_empty() { len } else { -1 };
            }
            p
        }
        None => 0,
    };
    (start..len).find(|&i| matches_at(hay, needle, i as usize)).unwrap_or(-1)
}

/// DTrace's rindex(): searches backwards from `pos` (default: the end, clamped to
/// it); a negative position finds only "" (at 0). Both strings empty give 0.
fn rindex(hay: &[u8], needle: &[u8], pos: Option<i64>) -> i64 {
    let len = hay.len() as i64;
    if hay.is_empty() && needle.is_empty() {
        return 0;
    }
    let start = match pos {
        Some(p) if p < 0 => return if needle.is_empty() { 0 } else { -1 },
        Some(p) => p.min(len),
        None => len,
    };
    (0..=start).rev().find(|&i| matches_at(hay, needle, i as usize)).unwrap_or(-1)
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> i64 {
    if from > hay.len() {
        return -1;
    }
    if needle.is_empty() {
        return from as i64;
    }
    hay[from..].windows(needle.len()).position(|w| w == needle).map(|p| (p + from) as i64).unwrap_or(-1)
}

/// DTrace's cleanpath(): `.` components and repeated or trailing slashes removed,
/// `..` taking out the component before it (never past the root); a relative path
/// that cleans to nothing is `.`.
pub fn cleanpath(p: &[u8]) -> Vec<u8> {
    let absolute = p.first() == Some(&b'/');
    let mut parts: Vec<&[u8]> = Vec::new();
    for comp in p.split(|&c| c == b'/') {
        match comp {
            b"" | b"." => {}
            b".." if parts.last().is_some_and(|l| *l != b"..") => {
                parts.pop();
            }
            b".." if absolute => {}
            c => parts.push(c),
        }
    }
    let mut out = if absolute { b"/".to_vec() } else { Vec::new() };
    out.extend(parts.join(&b'/'));
    if out.is_empty() && !p.is_empty() {
        out.push(b'.');
    }
    out
}

/// basename(3) semantics: trailing slashes ignored; "" → "."; "/" → "/".
pub fn basename(p: &[u8]) -> Vec<u8> {
    if p.is_empty() {
        return b".".to_vec();
    }
    let trimmed = {
        let end = p.iter().rposition(|&c| c != b'/').map(|i| i + 1).unwrap_or(0);
        &p[..end]
    };
    if trimmed.is_empty() {
        return b"/".to_vec();
    }
    let start = trimmed.iter().rposition(|&c| c == b'/').map(|i| i + 1).unwrap_or(0);
    trimmed[start..].to_vec()
}

/// dirname(3) semantics: "a" → "."; "/a" → "/"; "a/b/" → "a".
pub fn dirname(p: &[u8]) -> Vec<u8> {
    let end = p.iter().rposition(|&c| c != b'/').map(|i| i + 1).unwrap_or(0);
    if end == 0 {
        return if p.is_empty() { b".".to_vec() } else { b"/".to_vec() };
    }
    match p[..end].iter().rposition(|&c| c == b'/') {
        None => b".".to_vec(),
        Some(slash) => {
            let d = p[..slash].iter().rposition(|&c| c != b'/').map(|i| i + 1).unwrap_or(0);
            if d == 0 {
                b"/".to_vec()
            } else {
                p[..d].to_vec()
            }
        }
    }
}

/// DTrace's lltostr(): bases 2 to 36 (else `None`, an illegal operation); only base
/// 10 shows a sign, base 16 gets a "0x" prefix and base 8 a leading "0".
fn lltostr(v: i64, base: i64) -> Option<Vec<u8>> {
    if !(2..=36).contains(&base) {
        return None;
    }
    let b = base as u64;
    let neg = base == 10 && v < 0;
    let mut n = if neg { v.unsigned_abs() } else { v as u64 };
    let mut out = Vec::new();
    while n != 0 {
        let d = (n % b) as u8;
        out.push(if d < 10 { b'0' + d } else { b'a' + d - 10 });
        n /= b;
    }
    if v == 0 && base == 16 {
        out.push(b'0');
    }
    if base == 16 {
        out.push(b'x');
    }
    if v == 0 || base == 8 || base == 16 {
        out.push(b'0');
    }
    if neg {
        out.push(b'-');
    }
    out.reverse();
    Some(out)
}

fn strtoll(s: &[u8], base: u32) -> i64 {
    let text = String::from_utf8_lossy(s);
    let t = text.trim_start();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (base, t) = match base {
        16 | 0 if t.starts_with("0x") || t.starts_with("0X") => (16, &t[2..]),
        0 if t.starts_with('0') && t.len() > 1 => (8, &t[1..]),
        0 => (10, t),
        b => (b.clamp(2, 36), t),
    };
    let mut v: i64 = 0;
    for c in t.chars() {
        match c.to_digit(base) {
            Some(d) => v = v.wrapping_mul(i64::from(base)).wrapping_add(i64::from(d)),
            None => break,
        }
    }
    if neg {
        v.wrapping_neg()
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_functions_follow_libc() {
        for (p, b, d) in [
            ("/usr/lib/libc.so", "libc.so", "/usr/lib"),
            ("libc.so", "libc.so", "."),
            ("/", "/", "/"),
            ("", ".", "."),
            ("a/b/", "b", "a"),
            ("/a", "a", "/"),
            ("//a//b//", "b", "//a"),
        ] {
            assert_eq!(basename(p.as_bytes()), b.as_bytes(), "basename {p}");
            assert_eq!(dirname(p.as_bytes()), d.as_bytes(), "dirname {p}");
        }
    }

    #[test]
    fn cleanpath_as_dtrace() {
        for (p, c) in [
            ("/foo/bar///baz/", "/foo/bar/baz"),
            ("/foo/bar/../../baz/.//", "/baz"),
            ("/../../", "/"),
            ("./", "."),
            ("", ""),
            ("../..", "../.."),
            ("a/..", "."),
            ("a/../..", ".."),
            ("/a/../..", "/"),
            ("z/a/b/../../././c///d/e", "z/c/d/e"),
        ] {
            assert_eq!(cleanpath(p.as_bytes()), c.as_bytes(), "cleanpath {p}");
        }
    }

    #[test]
    fn lltostr_and_strtoll() {
        assert_eq!(lltostr(-42, 10).unwrap(), b"-42");
        assert_eq!(lltostr(255, 16).unwrap(), b"0xff");
        assert_eq!(lltostr(0, 16).unwrap(), b"0x0");
        assert_eq!(lltostr(8, 8).unwrap(), b"010");
        assert_eq!(lltostr(0, 10).unwrap(), b"0");
        assert_eq!(lltostr(5, 1), None);
        assert_eq!(strtoll(b"  -17xyz", 10), -17);
        assert_eq!(strtoll(b"0x1f", 0), 31);
        assert_eq!(strtoll(b"017", 0), 15);
    }

    #[test]
    fn index_and_rindex_as_dtrace() {
        assert_eq!(index(b"hello world", b"o", None), 4);
        assert_eq!(index(b"hello world", b"o", Some(5)), 7);
        assert_eq!(rindex(b"hello world", b"o", None), 7);
        assert_eq!(rindex(b"hello world", b"o", Some(6)), 4);
        assert_eq!(index(b"abc", b"z", None), -1);
        assert_eq!(index(b"hello", b"", Some(9)), 5);
        assert_eq!(rindex(b"hello", b"", Some(-1)), 0);
        assert_eq!(rindex(b"hello", b"", None), 5);
        assert_eq!(index(b"", b"", Some(3)), 0);
    }

    #[test]
    fn substr_as_dtrace() {
        let t = |i, c| String::from_utf8(substr(b"hello", i, c, 256)).unwrap();
        assert_eq!(t(1, None), "ello");
        assert_eq!(t(-3, None), "llo");
        assert_eq!(t(-10, Some(3)), "");
        assert_eq!(t(-7, Some(4)), "he");
        assert_eq!(t(0, Some(-1)), "hell");
        assert_eq!(t(1, Some(-10)), "");
        assert_eq!(t(10, None), "");
    }
}
