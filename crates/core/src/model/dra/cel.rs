//! CEL device selectors (`DeviceSelector.cel.expression` of classes and requests), compiled
//! and evaluated as Kubernetes 1.37 does (`k8s.io/dynamic-resource-allocation/cel`), on the
//! [`cel`] crate's interpreter.
//!
//! A selector sees one variable, `device`, with `driver`, `attributes[domain][id]`,
//! `capacity[domain][id]` (a `kubernetes.Quantity`) and `allowMultipleAllocations`. An
//! unknown domain is an empty map; an unknown id in a domain is the error `no such key: id`.
//! On top of CEL's standard library, the strings and lists extensions and optional values,
//! it has Kubernetes' Quantity and Semver libraries and `cel.bind`.
//!
//! [`Selector::compile`] does what the API server and kube-scheduler check before a selector
//! runs: its length, its syntax, the identifiers and `device` fields it names, a result that
//! is plainly not a bool, and its worst-case cost. The `cel` crate has no type checker and no
//! runtime cost limit, so the cost is bounded statically instead (see [`MAX_COST`]); an
//! expression whose cost cannot be bounded is refused, never run.
//!
//! Build a device's value once ([`CelDevice::new`]) and compile a selector once: evaluating
//! one against the other ([`Selector::matches`]) then copies nothing.

use std::any::Any;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

use cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue, SelectExpr, SourceInfo,
    operators,
};
use cel::common::traits::{self, Container, Indexer, Iterable, Sizer};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelMap, CelMapKey, CelString, Kind, MAP_TYPE, Type,
};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::context::VariableResolver;
use cel::parser::Macro;
use cel::{Context, DeclarationError, Env, ExecutionError, Value};

use super::slice::Device;
use super::{Amount, AttributeValue};
use crate::model::quantity::Quantity;

/// The longest selector, in bytes (`CELSelectorExpressionMaxLength`).
pub const MAX_EXPRESSION_LENGTH: usize = 10 * 1024;

/// The largest worst-case cost a selector may have (`CELSelectorExpressionMaxCost`).
///
/// Kubernetes stops an evaluation that reaches it; gantry refuses, when compiling, an
/// expression whose cost it cannot bound below it. The bound is conservative and simple:
///
/// - every node of the expression costs 1;
/// - a comprehension (`all`, `exists`, `exists_one`, `map`, `filter`, and `cel.bind`, which
///   runs its body once) costs its condition and step times the most elements its range can
///   have: 32 for `device.attributes`, `device.capacity` and each of their domains
///   (Kubernetes allows 32 attributes and capacities per device), its length for a literal,
///   the size of what built it otherwise (at most 64 for a value of the device);
/// - a function that walks or builds a string or a list costs a tenth of its length besides,
///   as in cel-go (`StringTraversalCostFactor`): 64 characters for an attribute's value, 63
///   for a domain or the driver's name, the sum for `+`, a product for `replace`, `join`,
///   `format`, `flatten`; `lists.range(n)` and `flatten(n)` with `n` computed when
///   evaluating have no bound, and are refused.
pub const MAX_COST: u64 = 1_000_000;

/// Kubernetes' bound on the attributes, and on the capacities, of a device
/// (`ResourceSliceMaxAttributesAndCapacitiesPerDevice`): also the most domains it has.
const MAX_ENTRIES: u64 = 32;
/// The longest value of an attribute (`DeviceAttributeMaxValueLength`); longer than any
/// domain (63), id (32) or driver name (63).
const MAX_VALUE_LENGTH: u64 = 64;
/// The longest driver name (`DriverNameMaxLength`).
const MAX_DRIVER_LENGTH: u64 = 63;
/// The longest domain of an attribute or capacity (`DeviceMaxDomainLength`).
const MAX_DOMAIN_LENGTH: u64 = 63;

/// A function walking or building a string or a list costs one per this many of its
/// characters or elements, as in cel-go (`StringTraversalCostFactor` = 0.1).
const TRAVERSAL_DIVISOR: u64 = 10;

/// The deepest expression, in nested nodes. The interpreter recurses once per level, each
/// level taking about 1.5 KiB of stack in a release build (and up to tens of KiB in a debug
/// build): 250 levels (cel-go's own recursion limit) stay well within a thread's default
/// 2 MiB.
const MAX_DEPTH: usize = 250;

/// The stack an expression is compiled on. The `cel` crate's parser takes hundreds
/// of KiB of stack per nested expression in a debug build (its own limit is 96 levels), and
/// the checks walk expressions as deep as the parser builds them; the stack is only committed
/// as it is used.
const COMPILE_STACK_SIZE: usize = 256 << 20;

/// The prefix of the names standing for constants computed when compiling; the parser
/// names its own variables `@result` and the like, and no expression can write one.
const CONSTANT_PREFIX: &str = "@k";

/// Kubernetes' words for a string that is not a quantity.
const QUANTITY_FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// The type of quantities (`kubernetes.Quantity`).
static QUANTITY_TYPE: Type = Type::simple_type(Kind::Opaque, "kubernetes.Quantity");
/// The type of semantic versions (`kubernetes.Semver`).
static SEMVER_TYPE: Type = Type::simple_type(Kind::Opaque, "kubernetes.Semver");
/// The type of `device` (`kubernetes.DRADevice`).
static DEVICE_TYPE: Type = Type::new_struct_type("kubernetes.DRADevice");

/// The environment every selector is compiled and evaluated in.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    Arc::new(environment().expect("the selector environment declares each function once"))
});

/// The context every selector is evaluated in, its variables resolved by [`Variables`].
static ROOT: LazyLock<Context<'static, 'static>> =
    LazyLock::new(|| Context::with_env(Arc::clone(&ENV)));

/// `-1`, `0` and `1`: what `compareTo` and `sign` return, kept to be lent.
static ORDERINGS: LazyLock<[CelInt; 3]> =
    LazyLock::new(|| [CelInt::from(-1), CelInt::from(0), CelInt::from(1)]);

/// A compiled device selector.
#[derive(Debug)]
pub struct Selector {
    /// The expression, with its constant calls computed.
    expression: IdedExpr,
    /// The values of those calls.
    constants: Constants,
}

impl Selector {
    /// Compiles `expression`; the error is in Kubernetes' words where it has some.
    ///
    /// The parser and the checks recurse as deep as the expression nests, which an
    /// expression of 10 KiB can make deep enough to overflow a thread's stack: they run on a
    /// stack of their own, large enough (256 MiB, committed as used), on the calling thread,
    /// and only an expression shallow enough to evaluate on any thread (250 nested nodes) is
    /// compiled.
    pub fn compile(expression: &str) -> Result<Selector, String> {
        if expression.len() > MAX_EXPRESSION_LENGTH {
            return Err(format!(
                "Too long: may not be more than {MAX_EXPRESSION_LENGTH} bytes"
            ));
        }
        let compile = || Selector::compile_here(expression);
        stacker::grow(COMPILE_STACK_SIZE, || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(compile))
                .unwrap_or_else(|_| Err("compilation failed: the compiler panicked".to_string()))
        })
    }

    /// Compiles `expression` on the current stack.
    fn compile_here(expression: &str) -> Result<Selector, String> {
        let (mut root, source) = ENV
            .parser()
            .parse_with_source_info(expression)
            .map_err(|e| format!("compilation failed: {e}"))?;
        let bound = Estimator::new(&source).expr(&root)?;
        if let Some(ty) = bound.ty.filter(|ty| *ty != "bool") {
            return Err(format!(
                "must evaluate to bool or the unknown type, not {ty}"
            ));
        }
        if bound.cost > MAX_COST {
            return Err("Forbidden: too complex, exceeds cost limit".to_string());
        }
        let mut constants = Constants::default();
        constants.fold(&mut root, false);
        Ok(Selector {
            expression: root,
            constants,
        })
    }

    /// Whether `device` is selected; an error says why the expression could not tell.
    pub fn matches(&self, device: &CelDevice) -> Result<bool, String> {
        if let Some(error) = &device.error {
            return Err(error.clone());
        }
        let variables = Variables {
            device: &device.value,
            constants: &self.constants,
        };
        let root: &Context<'_, '_> = &ROOT;
        let mut scope = root.new_inner_scope();
        scope.set_variable_resolver(&variables);
        outcome(Value::resolve_val(&self.expression, &scope))
    }
}

/// The bool a selector evaluated to.
fn outcome(result: Result<CowVal<'_, '_>, ExecutionError>) -> Result<bool, String> {
    let value = result.map_err(runtime_error)?;
    value
        .downcast_ref::<CelBool>()
        .map(|b| *b.inner())
        .ok_or_else(|| {
            format!(
                "CEL result of type {} could not be converted to bool",
                value.get_type().name()
            )
        })
}

/// An evaluation error, in cel-go's words where they differ.
fn runtime_error(error: ExecutionError) -> String {
    match error {
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        ExecutionError::FunctionError { message, .. } => message,
        ExecutionError::DivisionByZero(_) => "division by zero".to_string(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_string(),
        ExecutionError::Overflow(..) => "integer overflow".to_string(),
        ExecutionError::UndeclaredReference(name) => {
            format!("undeclared reference to '{name}' (in container '')")
        }
        other => other.to_string(),
    }
}

/// A device as selectors see it, built once for all the selectors evaluated against it.
#[derive(Debug, Clone)]
pub struct CelDevice {
    /// `device`.
    value: DeviceVal,
    /// What every selector evaluates to on this device, as in Kubernetes: a `version`
    /// attribute that is not a semantic version.
    error: Option<String>,
}

impl CelDevice {
    /// The device `device` of a slice of `driver`, whose attribute and capacity names are
    /// qualified with their domain (`gpu.nvidia.com/memory`).
    pub fn new(driver: &str, device: &Device) -> CelDevice {
        let mut error = None;
        let mut attributes: BTreeMap<&str, Entries> = BTreeMap::new();
        for (name, value) in &device.attributes {
            let value: Box<dyn Val> = match value {
                AttributeValue::Int(v) => Box::new(CelInt::from(*v)),
                AttributeValue::Bool(v) => Box::new(CelBool::from(*v)),
                AttributeValue::String(v) => Box::new(CelString::from(v.clone())),
                AttributeValue::Version(v) => match Semver::parse(v) {
                    Ok(v) => Box::new(v),
                    Err(e) => {
                        error.get_or_insert(format!(
                            "attribute {name}: parse semantic version: {e}"
                        ));
                        continue;
                    }
                },
            };
            let (domain, id) = split_qualified(name, driver);
            attributes.entry(domain).or_default().insert(key(id), value);
        }
        let mut capacity: BTreeMap<&str, Entries> = BTreeMap::new();
        for (name, c) in &device.capacity {
            let (domain, id) = split_qualified(name, driver);
            let value: Box<dyn Val> = Box::new(CelQuantity(c.value));
            capacity.entry(domain).or_default().insert(key(id), value);
        }
        let value = DeviceVal {
            driver: CelString::from(driver.to_string()),
            allow_multiple_allocations: CelBool::from(device.allow_multiple_allocations),
            attributes: DomainMap::new(attributes),
            capacity: DomainMap::new(capacity),
        };
        CelDevice { value, error }
    }
}

/// The id → value entries of one domain.
type Entries = HashMap<CelMapKey<'static>, Box<dyn Val>>;

/// A string map key.
fn key(s: &str) -> CelMapKey<'static> {
    CelMapKey::String(CelString::from(s.to_string()))
}

/// `domain/id` split, or `driver` and `name` for a name without a domain.
fn split_qualified<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    name.rsplit_once('/').unwrap_or((driver, name))
}

/// The environment: CEL's standard library with optional values, the strings and lists
/// extensions, `cel.bind`, and Kubernetes' Quantity and Semver libraries.
fn environment() -> Result<Env, DeclarationError> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)?;
    env.add_extension(cel::extensions::lists)?;
    env.add_macro(Macro::receiver("bind", 3, bind))?;
    quantity_library(&mut env)?;
    semver_library(&mut env)?;
    Ok(env)
}

/// `cel.bind(name, init, body)`: `body` with `name` standing for `init`, as cel-go's
/// bindings extension expands it: a comprehension over nothing whose accumulator is `name`.
fn bind(
    helper: &mut cel::parser::MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<Option<IdedExpr>, cel::ParseError> {
    if !matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(ns)) if ns == "cel") {
        return Ok(None);
    }
    let id = args.first().map_or(0, |a| a.id);
    let Some(Expr::Ident(name)) = args.first().map(|a| &a.expr) else {
        return Err(helper.new_error(id, "cel.bind() variable names must be simple identifiers"));
    };
    let name = name.clone();
    let Ok([_, init, body]) = <[IdedExpr; 3]>::try_from(std::mem::take(args)) else {
        return Err(helper.new_error(id, "cel.bind() takes three arguments"));
    };
    target.take();
    let range = helper.next_expr(Expr::List(cel::common::ast::ListExpr::new(Vec::new())));
    let cond = helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into())));
    let step = helper.next_expr(Expr::Ident(name.clone()));
    Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(
        ComprehensionExpr {
            iter_range: range,
            iter_var: "#unused".to_string(),
            iter_var2: None,
            accu_var: name,
            accu_init: init,
            loop_cond: cond,
            loop_step: step,
            result: body,
        },
    )))))
}

/// `true` or `false`, lent.
fn cel_bool(b: bool) -> &'static CelBool {
    if b { &CelBool::TRUE } else { &CelBool::FALSE }
}

/// `-1`, `0` or `1`, lent.
fn cel_ordering(o: Ordering) -> &'static CelInt {
    &ORDERINGS[match o {
        Ordering::Less => 0,
        Ordering::Equal => 1,
        Ordering::Greater => 2,
    }]
}

// ---------------------------------------------------------------------------------------
// The device value.

/// `device`.
#[derive(Debug, Clone)]
struct DeviceVal {
    /// `driver`.
    driver: CelString<'static>,
    /// `allowMultipleAllocations`.
    allow_multiple_allocations: CelBool,
    /// `attributes`.
    attributes: DomainMap,
    /// `capacity`.
    capacity: DomainMap,
}

impl Val for DeviceVal {
    fn get_type(&self) -> &Type {
        &DEVICE_TYPE
    }

    fn cel_type() -> &'static Type {
        &DEVICE_TYPE
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .as_any()
            .and_then(|o| o.downcast_ref::<DeviceVal>())
            .is_some_and(|o| {
                o.driver.inner() == self.driver.inner()
                    && o.allow_multiple_allocations == self.allow_multiple_allocations
                    && o.attributes.equals(&self.attributes)
                    && o.capacity.equals(&self.capacity)
            })
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl Indexer for DeviceVal {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let field = idx.downcast_ref::<CelString>().map(CelString::inner);
        match field {
            Some("driver") => Ok(CowVal::Borrowed(&self.driver)),
            Some("allowMultipleAllocations") => {
                Ok(CowVal::Borrowed(&self.allow_multiple_allocations))
            }
            Some("attributes") => Ok(CowVal::Borrowed(&self.attributes)),
            Some("capacity") => Ok(CowVal::Borrowed(&self.capacity)),
            other => Err(ExecutionError::no_such_key(other.unwrap_or_default())),
        }
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

/// `device.attributes` or `device.capacity`: a map of domains, sorted, to maps of ids; an
/// unknown domain is an empty map, as Kubernetes' `mapper` makes it.
#[derive(Debug, Clone, Default)]
struct DomainMap {
    /// Each domain's entries, by domain.
    domains: Vec<(CelString<'static>, CelMap<'static>)>,
    /// The map an unknown domain is.
    empty: CelMap<'static>,
}

impl DomainMap {
    /// The map of `domains`.
    fn new(domains: BTreeMap<&str, Entries>) -> DomainMap {
        DomainMap {
            domains: domains
                .into_iter()
                .map(|(d, entries)| (CelString::from(d.to_string()), CelMap::from(entries)))
                .collect(),
            empty: CelMap::default(),
        }
    }

    /// The entries of `domain`, if it has any.
    fn find(&self, domain: &dyn Val) -> Option<&CelMap<'static>> {
        let domain = domain.downcast_ref::<CelString>()?.inner();
        self.domains
            .iter()
            .find(|(d, _)| d.inner() == domain)
            .map(|(_, m)| m)
    }
}

impl Val for DomainMap {
    fn get_type(&self) -> &Type {
        &MAP_TYPE
    }

    fn cel_type() -> &'static Type {
        &MAP_TYPE
    }

    fn as_container(&self) -> Option<&dyn Container> {
        Some(self)
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn as_iterable<'b, 'v>(&'b self) -> Option<&'b (dyn Iterable + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn as_sizer(&self) -> Option<&dyn Sizer> {
        Some(self)
    }

    fn equals(&self, other: &dyn Val) -> bool {
        if let Some(other) = other.as_any().and_then(|o| o.downcast_ref::<DomainMap>()) {
            return self.domains.len() == other.domains.len()
                && self
                    .domains
                    .iter()
                    .zip(&other.domains)
                    .all(|((a, x), (b, y))| a.inner() == b.inner() && x.equals(y));
        }
        other.downcast_ref::<CelMap>().is_some_and(|other| {
            other.len() == self.domains.len()
                && self
                    .domains
                    .iter()
                    .all(|(d, m)| Indexer::get(other, d).is_ok_and(|v| m.equals(v.as_ref())))
        })
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl Indexer for DomainMap {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        Ok(CowVal::Borrowed(self.find(idx).unwrap_or(&self.empty)))
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

impl Container for DomainMap {
    fn contains(&self, value: &dyn Val) -> Result<bool, ExecutionError> {
        Ok(self.find(value).is_some())
    }
}

impl Sizer for DomainMap {
    fn size(&self) -> CelInt {
        CelInt::from(i64::try_from(self.domains.len()).unwrap_or(i64::MAX))
    }
}

impl Iterable for DomainMap {
    fn iter<'b, 'v>(&'b self) -> Box<dyn traits::Iterator<'b, 'v> + 'b>
    where
        Self: 'v,
    {
        Box::new(Domains(self.domains.iter()))
    }
}

/// The domains of a [`DomainMap`], in order.
struct Domains<'b>(std::slice::Iter<'b, (CelString<'static>, CelMap<'static>)>);

impl<'b, 'v> traits::Iterator<'b, 'v> for Domains<'b> {
    fn next(&mut self) -> Option<&'b (dyn Val + 'v)> {
        self.0.next().map(|(d, _)| d as &dyn Val)
    }
}

// ---------------------------------------------------------------------------------------
// Kubernetes' Quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go).

/// A `kubernetes.Quantity`, in thousandths of its unit as gantry keeps amounts: a finer
/// quantity is rounded up to the next thousandth, and sums saturate at the i64 range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CelQuantity(Amount);

impl Val for CelQuantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }

    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<CelQuantity>() == Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for CelQuantity {}

/// Declares the Quantity library's functions.
fn quantity_library(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn quantity: (CelString) -> Result<CelQuantity>,
        name = "quantity", id = "string_to_quantity")?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> &CelBool,
        name = "isQuantity", id = "is_quantity_string")?;
    cel::add_overload!(env, fn quantity_sign: (CelQuantity) -> &CelInt,
        name = "sign", id = "quantity_sign")?;
    cel::add_member_overload!(env, fn quantity_is_greater_than: (CelQuantity, CelQuantity) -> &CelBool,
        name = "isGreaterThan", id = "quantity_is_greater_than")?;
    cel::add_member_overload!(env, fn quantity_is_less_than: (CelQuantity, CelQuantity) -> &CelBool,
        name = "isLessThan", id = "quantity_is_less_than")?;
    cel::add_member_overload!(env, fn quantity_compare_to: (CelQuantity, CelQuantity) -> &CelInt,
        name = "compareTo", id = "quantity_compare_to")?;
    cel::add_member_overload!(env, fn quantity_as_float: (CelQuantity) -> CelDouble,
        name = "asApproximateFloat", id = "quantity_get_float")?;
    cel::add_member_overload!(env, fn quantity_as_integer: (CelQuantity) -> Result<CelInt>,
        name = "asInteger", id = "quantity_get_int")?;
    cel::add_member_overload!(env, fn quantity_is_integer: (CelQuantity) -> &CelBool,
        name = "isInteger", id = "quantity_is_integer")?;
    cel::add_member_overload!(env, fn quantity_add: (CelQuantity, CelQuantity) -> CelQuantity,
        name = "add", id = "quantity_add")?;
    cel::add_member_overload!(env, fn quantity_add_int: (CelQuantity, CelInt) -> CelQuantity,
        name = "add", id = "quantity_add_int")?;
    cel::add_member_overload!(env, fn quantity_sub: (CelQuantity, CelQuantity) -> CelQuantity,
        name = "sub", id = "quantity_sub")?;
    cel::add_member_overload!(env, fn quantity_sub_int: (CelQuantity, CelInt) -> CelQuantity,
        name = "sub", id = "quantity_sub_int")?;
    Ok(())
}

/// `quantity(s)`.
fn quantity(s: &CelString<'_>) -> Result<CelQuantity, ExecutionError> {
    parse_quantity(s.inner())
        .map(CelQuantity)
        .map_err(|e| ExecutionError::function_error("quantity", e))
}

/// `isQuantity(s)`.
fn is_quantity(s: &CelString<'_>) -> &'static CelBool {
    cel_bool(parse_quantity(s.inner()).is_ok())
}

/// `sign(q)`.
fn quantity_sign(q: &CelQuantity) -> &'static CelInt {
    cel_ordering(q.0.0.cmp(&0))
}

/// `q.isGreaterThan(other)`.
fn quantity_is_greater_than(q: &CelQuantity, other: &CelQuantity) -> &'static CelBool {
    cel_bool(q.0 > other.0)
}

/// `q.isLessThan(other)`.
fn quantity_is_less_than(q: &CelQuantity, other: &CelQuantity) -> &'static CelBool {
    cel_bool(q.0 < other.0)
}

/// `q.compareTo(other)`.
fn quantity_compare_to(q: &CelQuantity, other: &CelQuantity) -> &'static CelInt {
    cel_ordering(q.0.cmp(&other.0))
}

/// `q.asApproximateFloat()`.
fn quantity_as_float(q: &CelQuantity) -> CelDouble {
    // An approximation, as its name says.
    CelDouble::from(q.0.0 as f64 / 1000.0)
}

/// `q.asInteger()`.
fn quantity_as_integer(q: &CelQuantity) -> Result<CelInt, ExecutionError> {
    if q.0.0 % 1000 == 0 {
        Ok(CelInt::from(q.0.0 / 1000))
    } else {
        Err(ExecutionError::function_error(
            "asInteger",
            "cannot convert value to integer",
        ))
    }
}

/// `q.isInteger()`.
fn quantity_is_integer(q: &CelQuantity) -> &'static CelBool {
    cel_bool(q.0.0 % 1000 == 0)
}

/// `q.add(other)`.
fn quantity_add(q: &CelQuantity, other: &CelQuantity) -> CelQuantity {
    CelQuantity(Amount(q.0.0.saturating_add(other.0.0)))
}

/// `q.add(units)`.
fn quantity_add_int(q: &CelQuantity, units: &CelInt) -> CelQuantity {
    CelQuantity(Amount(
        q.0.0.saturating_add(units.inner().saturating_mul(1000)),
    ))
}

/// `q.sub(other)`.
fn quantity_sub(q: &CelQuantity, other: &CelQuantity) -> CelQuantity {
    CelQuantity(Amount(q.0.0.saturating_sub(other.0.0)))
}

/// `q.sub(units)`.
fn quantity_sub_int(q: &CelQuantity, units: &CelInt) -> CelQuantity {
    CelQuantity(Amount(
        q.0.0.saturating_sub(units.inner().saturating_mul(1000)),
    ))
}

/// A quantity's amount; the error is Kubernetes' (`resource.ParseQuantity`), or says the
/// quantity is beyond the range gantry keeps.
fn parse_quantity(s: &str) -> Result<Amount, String> {
    if !quantity_shape(s) {
        return Err(QUANTITY_FORMAT_ERROR.to_string());
    }
    match Quantity::parse(s) {
        Ok(q) => {
            let milli = q.milli_value();
            // `milli_value` saturates at i64::MAX whatever the sign.
            Ok(Amount(if q.is_negative() && milli == i64::MAX {
                i64::MIN
            } else {
                milli
            }))
        }
        Err(e) => Err(match e.reason {
            "unknown suffix" | "malformed exponent" => {
                "unable to parse quantity's suffix".to_string()
            }
            "value out of range" | "exponent out of range" | "too many digits" => {
                format!("quantity {s:?} is beyond the range gantry compares")
            }
            _ => "unable to parse numeric part of quantity".to_string(),
        }),
    }
}

/// Whether `s` matches `^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$`, which Kubernetes
/// checks first.
fn quantity_shape(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let start = i;
    let skip = |i: &mut usize, ok: &dyn Fn(u8) -> bool| {
        while *i < b.len() && ok(b[*i]) {
            *i += 1;
        }
    };
    skip(&mut i, &|c| c.is_ascii_digit() || c == b'.');
    if i == start {
        return false;
    }
    skip(&mut i, &|c| b"eEinumkKMGTP".contains(&c));
    if i < b.len() && matches!(b[i], b'+' | b'-') {
        i += 1;
    }
    skip(&mut i, &|c| c.is_ascii_digit());
    i == b.len()
}

// ---------------------------------------------------------------------------------------
// Kubernetes' Semver library (k8s.io/apiserver/pkg/cel/library/semverlib.go), on
// github.com/blang/semver/v4's parsing and ordering.

/// A `kubernetes.Semver`. Build metadata is checked but not kept: it plays no part in
/// comparisons.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Semver {
    /// The major version.
    major: u64,
    /// The minor version.
    minor: u64,
    /// The patch version.
    patch: u64,
    /// The pre-release identifiers.
    pre: Box<[Prerelease]>,
}

/// A pre-release identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Prerelease {
    /// Digits only.
    Numeric(u64),
    /// Anything else.
    Alphanumeric(Box<str>),
}

impl Semver {
    /// Parses `s` strictly (blang's `semver.Parse`), with its error messages.
    fn parse(s: &str) -> Result<Semver, String> {
        if s.is_empty() {
            return Err("Version string empty".to_string());
        }
        let mut parts = s.splitn(3, '.');
        let (Some(major), Some(minor), Some(rest)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err("No Major.Minor.Patch elements found".to_string());
        };
        let major = version_number(major, "major", "Major")?;
        let minor = version_number(minor, "minor", "Minor")?;
        let (rest, build) = match rest.split_once('+') {
            Some((rest, build)) => (rest, Some(build)),
            None => (rest, None),
        };
        let (patch, pre) = match rest.split_once('-') {
            Some((patch, pre)) => (patch, Some(pre)),
            None => (rest, None),
        };
        let patch = version_number(patch, "patch", "Patch")?;
        let pre = match pre {
            Some(pre) => pre.split('.').map(prerelease).collect::<Result<_, _>>()?,
            None => Box::default(),
        };
        for b in build.into_iter().flat_map(|b| b.split('.')) {
            if b.is_empty() {
                return Err("Build meta data is empty".to_string());
            }
            if !b.bytes().all(is_alphanumeric) {
                return Err(format!(
                    "Invalid character(s) found in build meta data {b:?}"
                ));
            }
        }
        Ok(Semver {
            major,
            minor,
            patch,
            pre,
        })
    }

    /// Parses `s` after normalizing it as Kubernetes does (`normalizeAndParse`): without a
    /// leading `v`, leading zeroes or missing minor and patch numbers.
    fn parse_normalized(s: &str) -> Result<Semver, String> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let mut parts: Vec<String> = s
            .splitn(3, '.')
            .map(|p| {
                if p.len() <= 1 {
                    return p.to_string();
                }
                let p = p.trim_start_matches('0');
                if p.bytes().next().is_some_and(|c| c.is_ascii_digit()) {
                    p.to_string()
                } else {
                    format!("0{p}")
                }
            })
            .collect();
        if parts.len() < 3 {
            if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
                return Err("short version cannot contain PreRelease/Build meta data".to_string());
            }
            parts.resize(3, "0".to_string());
        }
        Semver::parse(&parts.join("."))
    }
}

impl Ord for Semver {
    /// Semantic versioning's precedence: a version with pre-release identifiers comes before
    /// the same one without; numeric identifiers come before the others.
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => self.pre.cmp(&other.pre),
            })
    }
}

impl PartialOrd for Semver {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Prerelease {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Prerelease::Numeric(a), Prerelease::Numeric(b)) => a.cmp(b),
            (Prerelease::Numeric(_), Prerelease::Alphanumeric(_)) => Ordering::Less,
            (Prerelease::Alphanumeric(_), Prerelease::Numeric(_)) => Ordering::Greater,
            (Prerelease::Alphanumeric(a), Prerelease::Alphanumeric(b)) => a.cmp(b),
        }
    }
}

impl PartialOrd for Prerelease {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A version's characters besides the dots (blang's `alphanum`).
fn is_alphanumeric(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// A major, minor or patch number, `which` in the messages.
fn version_number(s: &str, which: &str, which_capitalized: &str) -> Result<u64, String> {
    if !s.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "Invalid character(s) found in {which} number {s:?}"
        ));
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err(format!(
            "{which_capitalized} number must not contain leading zeroes {s:?}"
        ));
    }
    parse_uint(s)
}

/// A pre-release identifier.
fn prerelease(s: &str) -> Result<Prerelease, String> {
    if s.is_empty() {
        return Err("Prerelease is empty".to_string());
    }
    if s.bytes().all(|c| c.is_ascii_digit()) {
        if s.len() > 1 && s.starts_with('0') {
            return Err(format!(
                "Numeric PreRelease version must not contain leading zeroes {s:?}"
            ));
        }
        return parse_uint(s).map(Prerelease::Numeric);
    }
    if s.bytes().all(is_alphanumeric) {
        return Ok(Prerelease::Alphanumeric(s.into()));
    }
    Err(format!("Invalid character(s) found in prerelease {s:?}"))
}

/// Decimal digits as a u64, with Go's `strconv.ParseUint` errors.
fn parse_uint(s: &str) -> Result<u64, String> {
    s.parse().map_err(|_| {
        let why = if s.is_empty() {
            "invalid syntax"
        } else {
            "value out of range"
        };
        format!("strconv.ParseUint: parsing {s:?}: {why}")
    })
}

impl Val for Semver {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }

    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<Semver>()
            .is_some_and(|o| o.cmp(self) == Ordering::Equal)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Semver {}

/// Declares the Semver library's functions (its version 1, with normalization).
fn semver_library(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn semver: (CelString) -> Result<Semver>,
        name = "semver", id = "string_to_semver")?;
    cel::add_overload!(env, fn semver_normalized: (CelString, CelBool) -> Result<Semver>,
        name = "semver", id = "string_bool_to_semver")?;
    cel::add_overload!(env, fn is_semver: (CelString) -> &CelBool,
        name = "isSemver", id = "is_semver_string")?;
    cel::add_overload!(env, fn is_semver_normalized: (CelString, CelBool) -> &CelBool,
        name = "isSemver", id = "is_semver_string_bool")?;
    cel::add_member_overload!(env, fn semver_is_greater_than: (Semver, Semver) -> &CelBool,
        name = "isGreaterThan", id = "semver_is_greater_than")?;
    cel::add_member_overload!(env, fn semver_is_less_than: (Semver, Semver) -> &CelBool,
        name = "isLessThan", id = "semver_is_less_than")?;
    cel::add_member_overload!(env, fn semver_compare_to: (Semver, Semver) -> &CelInt,
        name = "compareTo", id = "semver_compare_to")?;
    cel::add_member_overload!(env, fn semver_major: (Semver) -> CelInt,
        name = "major", id = "semver_major")?;
    cel::add_member_overload!(env, fn semver_minor: (Semver) -> CelInt,
        name = "minor", id = "semver_minor")?;
    cel::add_member_overload!(env, fn semver_patch: (Semver) -> CelInt,
        name = "patch", id = "semver_patch")?;
    Ok(())
}

/// `semver(s)`, or `semver(s, normalize)`.
fn parse_semver(s: &str, normalize: bool) -> Result<Semver, ExecutionError> {
    let parsed = if normalize {
        Semver::parse_normalized(s)
    } else {
        Semver::parse(s)
    };
    parsed.map_err(|e| ExecutionError::function_error("semver", e))
}

/// `semver(s)`.
fn semver(s: &CelString<'_>) -> Result<Semver, ExecutionError> {
    parse_semver(s.inner(), false)
}

/// `semver(s, normalize)`.
fn semver_normalized(s: &CelString<'_>, normalize: &CelBool) -> Result<Semver, ExecutionError> {
    parse_semver(s.inner(), *normalize.inner())
}

/// `isSemver(s)`.
fn is_semver(s: &CelString<'_>) -> &'static CelBool {
    cel_bool(Semver::parse(s.inner()).is_ok())
}

/// `isSemver(s, normalize)`.
fn is_semver_normalized(s: &CelString<'_>, normalize: &CelBool) -> &'static CelBool {
    cel_bool(parse_semver(s.inner(), *normalize.inner()).is_ok())
}

/// `v.isGreaterThan(other)`.
fn semver_is_greater_than(v: &Semver, other: &Semver) -> &'static CelBool {
    cel_bool(v > other)
}

/// `v.isLessThan(other)`.
fn semver_is_less_than(v: &Semver, other: &Semver) -> &'static CelBool {
    cel_bool(v < other)
}

/// `v.compareTo(other)`.
fn semver_compare_to(v: &Semver, other: &Semver) -> &'static CelInt {
    cel_ordering(v.cmp(other))
}

/// `v.major()`; Kubernetes converts the unsigned number as Go does, wrapping.
fn semver_major(v: &Semver) -> CelInt {
    CelInt::from(v.major as i64)
}

/// `v.minor()`.
fn semver_minor(v: &Semver) -> CelInt {
    CelInt::from(v.minor as i64)
}

/// `v.patch()`.
fn semver_patch(v: &Semver) -> CelInt {
    CelInt::from(v.patch as i64)
}

// ---------------------------------------------------------------------------------------
// Constants: calls of literals computed once, when compiling (as cel-go's optimizer does).

/// The values of a selector's constant calls, which its expression names `@k0`, `@k1`...
#[derive(Debug, Default)]
struct Constants(Vec<(String, Box<dyn Val>)>);

impl Constants {
    /// Rewrites `e` to evaluate faster: each call of `quantity`, `isQuantity`, `semver` or
    /// `isSemver` on literals becomes its value (a call that fails is left to fail when
    /// evaluated), and each field of `device`, unless a variable of that name hides it
    /// (`shadowed`), a variable of its own (`device.driver`), which [`Variables`] resolves
    /// without the interpreter's lookup of qualified names.
    fn fold(&mut self, e: &mut IdedExpr, shadowed: bool) {
        let folded = match &mut e.expr {
            Expr::Call(call) => {
                if let Some(target) = call.target.as_deref_mut() {
                    self.fold(target, shadowed);
                }
                call.args.iter_mut().for_each(|a| self.fold(a, shadowed));
                if call.target.is_none() {
                    self.constant(call)
                } else {
                    None
                }
            }
            Expr::Select(select) => match &select.operand.expr {
                Expr::Ident(name) if name == "device" && !shadowed && !select.test => {
                    Some(Expr::Ident(format!("device.{}", select.field)))
                }
                _ => {
                    self.fold(&mut select.operand, shadowed);
                    None
                }
            },
            Expr::List(list) => {
                list.elements
                    .iter_mut()
                    .for_each(|x| self.fold(x, shadowed));
                None
            }
            Expr::Map(map) => {
                for entry in &mut map.entries {
                    if let EntryExpr::MapEntry(entry) = &mut entry.expr {
                        self.fold(&mut entry.key, shadowed);
                        self.fold(&mut entry.value, shadowed);
                    }
                }
                None
            }
            Expr::Comprehension(c) => {
                self.fold(&mut c.iter_range, shadowed);
                self.fold(&mut c.accu_init, shadowed);
                let inside = shadowed
                    || [Some(&c.iter_var), c.iter_var2.as_ref(), Some(&c.accu_var)]
                        .into_iter()
                        .flatten()
                        .any(|v| v == "device");
                for part in [&mut c.loop_cond, &mut c.loop_step, &mut c.result] {
                    self.fold(part, inside);
                }
                None
            }
            Expr::Ident(_) | Expr::Literal(_) | Expr::Struct(_) | Expr::Unspecified => None,
        };
        if let Some(folded) = folded {
            e.expr = folded;
        }
    }

    /// The expression standing for the constant call `call`, if it is one.
    fn constant(&mut self, call: &CallExpr) -> Option<Expr> {
        let literal = |i: usize| match call.args.get(i).map(|a| &a.expr) {
            Some(Expr::Literal(l)) => Some(l),
            _ => None,
        };
        let Some(LiteralValue::String(s)) = literal(0) else {
            return None;
        };
        let normalize = match (call.args.len(), literal(1)) {
            (1, _) => false,
            (2, Some(LiteralValue::Boolean(b))) => *b.inner(),
            _ => return None,
        };
        let value: Box<dyn Val> = match (call.func_name.as_str(), call.args.len()) {
            ("quantity", 1) => Box::new(CelQuantity(parse_quantity(s.inner()).ok()?)),
            ("semver", _) => Box::new(parse_semver(s.inner(), normalize).ok()?),
            ("isQuantity", 1) => {
                let b = parse_quantity(s.inner()).is_ok();
                return Some(Expr::Literal(LiteralValue::Boolean(b.into())));
            }
            ("isSemver", _) => {
                let b = parse_semver(s.inner(), normalize).is_ok();
                return Some(Expr::Literal(LiteralValue::Boolean(b.into())));
            }
            _ => return None,
        };
        let name = format!("{CONSTANT_PREFIX}{}", self.0.len());
        self.0.push((name.clone(), value));
        Some(Expr::Ident(name))
    }

    /// The constant named `name`.
    fn get(&self, name: &str) -> Option<&dyn Val> {
        if !name.starts_with(CONSTANT_PREFIX) {
            return None;
        }
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_ref())
    }
}

/// The variables of one evaluation: `device`, its fields as [`Constants::fold`] names them,
/// and the selector's constants.
struct Variables<'a> {
    /// `device`.
    device: &'a DeviceVal,
    /// The selector's constants.
    constants: &'a Constants,
}

impl VariableResolver for Variables<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        let d = self.device;
        let value: &dyn Val = match variable {
            "device" => d,
            "device.driver" => &d.driver,
            "device.attributes" => &d.attributes,
            "device.capacity" => &d.capacity,
            "device.allowMultipleAllocations" => &d.allow_multiple_allocations,
            _ => self.constants.get(variable)?,
        };
        Some(CowVal::Borrowed(value))
    }
}

// ---------------------------------------------------------------------------------------
// Static checks and the cost bound.

/// What compiling knows of an expression's worst case.
#[derive(Debug, Clone, Copy)]
struct Bound {
    /// Its cost (see [`MAX_COST`]).
    cost: u64,
    /// The most elements, entries or characters its value has.
    len: u64,
    /// The most each of its elements, or each of its entries' values, has.
    elem: u64,
    /// The most each of its keys has, for a map.
    key: u64,
    /// The most any value nested in it has, at any depth.
    inner: u64,
    /// Its type, when it is known; `None` for `dyn`.
    ty: Option<&'static str>,
}

impl Bound {
    /// A value of that shape, costing nothing yet.
    const fn shape(len: u64, elem: u64, key: u64, inner: u64, ty: Option<&'static str>) -> Bound {
        Bound {
            cost: 0,
            len,
            elem,
            key,
            inner,
            ty,
        }
    }

    /// A scalar of type `ty`.
    const fn scalar(ty: &'static str) -> Bound {
        Bound::shape(1, 0, 0, 0, Some(ty))
    }

    /// A string of at most `len` characters.
    const fn string(len: u64) -> Bound {
        Bound::shape(len, 0, 0, 0, Some("string"))
    }

    /// The most this value or any value nested in it has.
    fn deep(self) -> u64 {
        self.len.max(self.inner)
    }

    /// This shape, costing `cost`.
    fn costing(self, cost: u64) -> Bound {
        Bound { cost, ..self }
    }

    /// A value that may be this one or `other`.
    fn or(self, other: Bound) -> Bound {
        Bound {
            cost: self.cost.max(other.cost),
            len: self.len.max(other.len),
            elem: self.elem.max(other.elem),
            key: self.key.max(other.key),
            inner: self.inner.max(other.inner),
            ty: self.ty.filter(|t| other.ty == Some(*t)),
        }
    }

    /// An element, or an entry's value, of this value.
    fn element(self) -> Bound {
        Bound::shape(self.elem, self.inner, self.inner, self.inner, None)
    }

    /// What iterating over this value binds: an element of a list, a key of a map.
    fn item(self) -> Bound {
        Bound::shape(
            self.elem.max(self.key),
            self.inner,
            self.inner,
            self.inner,
            None,
        )
    }
}

/// `device`.
const DEVICE: Bound = Bound::shape(
    4,
    MAX_VALUE_LENGTH,
    0,
    MAX_VALUE_LENGTH,
    Some("kubernetes.DRADevice"),
);
/// `device.attributes` and `device.capacity`: domains to maps of ids to values.
const DEVICE_MAP: Bound = Bound::shape(
    MAX_ENTRIES,
    MAX_ENTRIES,
    MAX_DOMAIN_LENGTH,
    MAX_VALUE_LENGTH,
    None,
);

/// The type names an expression may use as values (`type(x) == int`).
const TYPE_NAMES: [&str; 11] = [
    "bool",
    "bytes",
    "double",
    "int",
    "list",
    "map",
    "null_type",
    "optional_type",
    "string",
    "type",
    "uint",
];

/// The namespaces of the environment's qualified functions (`optional.of(x)`).
const NAMESPACES: [&str; 3] = ["optional", "strings", "lists"];

/// Walks an expression: checks its depth, the identifiers and `device` fields it names, and
/// bounds its cost.
struct Estimator<'a> {
    /// The variables in scope, innermost last.
    scope: Vec<(&'a str, Bound)>,
    /// How deep the walk is.
    depth: usize,
    /// Where each node is, for errors.
    source: &'a SourceInfo,
}

impl<'a> Estimator<'a> {
    /// An estimator for an expression parsed from `source`.
    fn new(source: &'a SourceInfo) -> Self {
        Estimator {
            scope: Vec::new(),
            depth: 0,
            source,
        }
    }

    /// A compilation error at the node `id`, as the parser writes its own.
    fn error(&self, id: u64, message: &str) -> String {
        let text = &self.source.source;
        let start = self
            .source
            .offset_for(id)
            .map_or(0, |(start, _)| start as usize)
            .min(text.len());
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
        let line = text[..start].matches('\n').count() + 1;
        let column = start - line_start + 1;
        let snippet = text[line_start..].lines().next().unwrap_or_default();
        format!(
            "compilation failed: ERROR: <input>:{line}:{column}: {message}\n| {snippet}\n| {:.>column$}",
            "^"
        )
    }

    /// Whether `name` is a variable in scope.
    fn in_scope(&self, name: &str) -> bool {
        self.scope.iter().any(|(n, _)| *n == name)
    }

    /// Bounds `e`, unless it nests too deep.
    fn expr(&mut self, e: &'a IdedExpr) -> Result<Bound, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(
                e.id,
                &format!("expression recursion limit exceeded: {MAX_DEPTH}"),
            ));
        }
        let bound = self.node(e);
        self.depth -= 1;
        bound
    }

    /// Bounds the node `e`.
    fn node(&mut self, e: &'a IdedExpr) -> Result<Bound, String> {
        match &e.expr {
            Expr::Literal(literal) => Ok(literal_bound(literal).costing(1)),
            Expr::Ident(name) => self.ident(e.id, name),
            Expr::Select(select) => self.select(e.id, select),
            Expr::Call(call) => self.call(call),
            Expr::List(list) => {
                let mut shape = Bound::shape(list.elements.len() as u64, 0, 0, 0, None);
                let mut cost = 1 + shape.len;
                for element in &list.elements {
                    let b = self.expr(element)?;
                    cost = cost.saturating_add(b.cost);
                    shape.elem = shape.elem.max(b.len);
                    shape.inner = shape.inner.max(b.deep());
                }
                Ok(shape.costing(cost))
            }
            Expr::Map(map) => {
                let mut shape = Bound::shape(map.entries.len() as u64, 0, 0, 0, None);
                let mut cost = 1 + shape.len;
                for entry in &map.entries {
                    let EntryExpr::MapEntry(entry) = &entry.expr else {
                        return Err(self.error(entry.id, "unsupported map entry"));
                    };
                    let (k, v) = (self.expr(&entry.key)?, self.expr(&entry.value)?);
                    cost = cost.saturating_add(k.cost).saturating_add(v.cost);
                    shape.elem = shape.elem.max(v.len);
                    shape.key = shape.key.max(k.len);
                    shape.inner = shape.inner.max(k.deep()).max(v.deep());
                }
                Ok(shape.costing(cost))
            }
            Expr::Comprehension(c) => self.comprehension(c),
            Expr::Struct(s) => Err(self.error(
                e.id,
                &format!(
                    "undeclared reference to '{}' (in container '')",
                    s.type_name
                ),
            )),
            Expr::Unspecified => Err(self.error(e.id, "unsupported expression")),
        }
    }

    /// Bounds the identifier `name`.
    fn ident(&self, id: u64, name: &str) -> Result<Bound, String> {
        if let Some((_, b)) = self.scope.iter().rev().find(|(n, _)| *n == name) {
            return Ok(b.costing(1));
        }
        if name == "device" {
            return Ok(DEVICE.costing(1));
        }
        if TYPE_NAMES.contains(&name) {
            return Ok(Bound::scalar("type").costing(1));
        }
        Err(self.error(
            id,
            &format!("undeclared reference to '{name}' (in container '')"),
        ))
    }

    /// Bounds `operand.field`, or `has(operand.field)`.
    fn select(&mut self, id: u64, select: &'a SelectExpr) -> Result<Bound, String> {
        let field = select.field.as_str();
        let on_device =
            matches!(&select.operand.expr, Expr::Ident(n) if n == "device" && !self.in_scope(n));
        let (shape, operand_cost) = if on_device {
            let shape = match field {
                "driver" => Bound::string(MAX_DRIVER_LENGTH),
                "allowMultipleAllocations" => Bound::scalar("bool"),
                "attributes" | "capacity" => DEVICE_MAP,
                _ => return Err(self.error(id, &format!("undefined field '{field}'"))),
            };
            (shape, 1)
        } else {
            let operand = self.expr(&select.operand)?;
            (operand.element(), operand.cost)
        };
        let cost = operand_cost.saturating_add(1);
        if select.test {
            return Ok(Bound::scalar("bool").costing(cost));
        }
        Ok(shape.costing(cost))
    }

    /// Bounds a call.
    fn call(&mut self, call: &'a CallExpr) -> Result<Bound, String> {
        let mut args = Vec::with_capacity(call.args.len() + 1);
        let qualified;
        let name = match call.target.as_deref() {
            Some(IdedExpr {
                expr: Expr::Ident(ns),
                ..
            }) if NAMESPACES.contains(&ns.as_str()) && !self.in_scope(ns) => {
                qualified = format!("{ns}.{}", call.func_name);
                qualified.as_str()
            }
            Some(target) => {
                args.push(self.expr(target)?);
                call.func_name.as_str()
            }
            None => call.func_name.as_str(),
        };
        for a in &call.args {
            args.push(self.expr(a)?);
        }
        let children = args.iter().fold(0u64, |c, b| c.saturating_add(b.cost));
        let (shape, work) = match name {
            operators::CONDITIONAL if args.len() == 3 => {
                let chosen = args[1].or(args[2]);
                let cost = 1u64
                    .saturating_add(args[0].cost)
                    .saturating_add(chosen.cost);
                return Ok(chosen.costing(cost));
            }
            "flatten" | "lists.range" => {
                // A size computed when evaluating is not bounded: the call is refused.
                let n = match call.args.first().map(|a| &a.expr) {
                    None if name == "flatten" => 1,
                    Some(Expr::Literal(LiteralValue::Int(n))) => {
                        u64::try_from(*n.inner()).unwrap_or(0)
                    }
                    _ => u64::MAX,
                };
                sized_call(name, n, &args)
            }
            _ => call_shape(name, &args),
        };
        let work = work.div_ceil(TRAVERSAL_DIVISOR);
        Ok(shape.costing(1u64.saturating_add(children).saturating_add(work)))
    }

    /// Bounds a comprehension: its step and condition run once per element of its range.
    fn comprehension(&mut self, c: &'a ComprehensionExpr) -> Result<Bound, String> {
        let range = self.expr(&c.iter_range)?;
        let init = self.expr(&c.accu_init)?;
        let iterations = range.len;
        let item = range.item();
        // A list accumulator (`map`, `filter`) grows by an element per iteration at most; a
        // scalar one (`all`, `exists`, `exists_one`) does not.
        let mut accu = if init.ty.is_some() {
            init
        } else {
            Bound {
                len: init.len.saturating_add(iterations),
                elem: init.elem.max(item.deep()),
                inner: init.inner.max(init.elem).max(item.deep()),
                ..init
            }
        };
        self.scope.push((c.accu_var.as_str(), accu));
        self.scope.push((c.iter_var.as_str(), item));
        if let Some(var) = &c.iter_var2 {
            self.scope.push((var.as_str(), item));
        }
        let body = self.expr(&c.loop_cond).and_then(|cond| {
            let step = self.expr(&c.loop_step)?;
            Ok((cond.cost.saturating_add(step.cost), step))
        });
        self.scope
            .truncate(self.scope.len() - 1 - usize::from(c.iter_var2.is_some()));
        let (per_iteration, step) = body?;
        accu.elem = accu.elem.max(step.elem);
        accu.key = accu.key.max(step.key);
        accu.inner = accu.inner.max(step.inner);
        if let Some(last) = self.scope.last_mut() {
            last.1 = accu;
        }
        let result = self.expr(&c.result);
        self.scope.pop();
        let result = result?;
        let cost = 1u64
            .saturating_add(range.cost)
            .saturating_add(init.cost)
            .saturating_add(iterations.saturating_mul(per_iteration))
            .saturating_add(result.cost);
        Ok(result.costing(cost))
    }
}

/// The bound of a literal.
fn literal_bound(literal: &LiteralValue) -> Bound {
    match literal {
        LiteralValue::Boolean(_) => Bound::scalar("bool"),
        LiteralValue::Int(_) => Bound::scalar("int"),
        LiteralValue::UInt(_) => Bound::scalar("uint"),
        LiteralValue::Double(_) => Bound::scalar("double"),
        LiteralValue::Null => Bound::scalar("null_type"),
        LiteralValue::String(s) => Bound::string(s.inner().chars().count() as u64),
        LiteralValue::Bytes(b) => Bound::shape(b.inner().len() as u64, 0, 0, 0, Some("bytes")),
    }
}

/// The result type of the function `name`, when it is the same for all its overloads.
fn result_type(name: &str) -> Option<&'static str> {
    Some(match name {
        operators::EQUALS
        | operators::NOT_EQUALS
        | operators::LESS
        | operators::LESS_EQUALS
        | operators::GREATER
        | operators::GREATER_EQUALS
        | operators::IN
        | operators::LOGICAL_AND
        | operators::LOGICAL_OR
        | operators::LOGICAL_NOT
        | operators::NOT_STRICTLY_FALSE
        | "contains"
        | "startsWith"
        | "endsWith"
        | "matches"
        | "isQuantity"
        | "isSemver"
        | "isGreaterThan"
        | "isLessThan"
        | "isInteger"
        | "hasValue"
        | "bool" => "bool",
        "size" | "compareTo" | "sign" | "major" | "minor" | "patch" | "asInteger" | "indexOf"
        | "lastIndexOf" | "int" => "int",
        "uint" => "uint",
        "asApproximateFloat" | "double" => "double",
        "lowerAscii" | "upperAscii" | "trim" | "substring" | "charAt" | "replace" | "join"
        | "format" | "strings.quote" | "string" => "string",
        "quantity" | "add" | "sub" => "kubernetes.Quantity",
        "semver" => "kubernetes.Semver",
        "type" => "type",
        _ => return None,
    })
}

/// The shape of a call's value, and the work it does besides evaluating its arguments
/// (`args`, the target first), in characters or elements.
fn call_shape(name: &str, args: &[Bound]) -> (Bound, u64) {
    let none = Bound::shape(0, 0, 0, 0, None);
    let arg = |i: usize| args.get(i).copied().unwrap_or(none);
    let (a, b) = (arg(0), arg(1));
    let boolean = Bound::scalar("bool");
    match name {
        operators::ADD
        | operators::SUBSTRACT
        | operators::MULTIPLY
        | operators::DIVIDE
        | operators::MODULO
            if matches!(a.ty, Some("int" | "uint" | "double")) && a.ty == b.ty =>
        {
            (Bound { cost: 0, ..a }, 0)
        }
        operators::ADD => {
            let len = a.len.saturating_add(b.len);
            let ty = a.ty.filter(|t| b.ty == Some(*t));
            let shape = Bound::shape(
                len,
                a.elem.max(b.elem),
                a.key.max(b.key),
                a.inner.max(b.inner),
                ty,
            );
            (shape, len)
        }
        operators::EQUALS | operators::NOT_EQUALS => (boolean, a.deep().max(b.deep())),
        operators::LESS
        | operators::LESS_EQUALS
        | operators::GREATER
        | operators::GREATER_EQUALS => (boolean, a.len.max(b.len)),
        operators::IN => (boolean, b.len.saturating_mul(a.deep().max(1))),
        "matches" => (boolean, a.len.saturating_mul(b.len.saturating_add(1))),
        operators::INDEX | operators::OPT_INDEX | operators::OPT_SELECT => (a.element(), 0),
        "replace" => {
            let len = (a.len.saturating_add(1)).saturating_mul(arg(2).len.saturating_add(1));
            (Bound::string(len), len)
        }
        "split" => {
            let len = a.len.saturating_add(1);
            (Bound::shape(len, a.len, 0, a.len, None), len)
        }
        "join" => {
            let len = a.len.saturating_mul(a.elem.saturating_add(b.len));
            (Bound::string(len), len)
        }
        "format" => {
            let len = (a.len.saturating_add(1))
                .saturating_mul(b.deep().saturating_add(1))
                .saturating_mul(b.len.saturating_add(1));
            (Bound::string(len), len)
        }
        "strings.quote" => {
            let len = a.len.saturating_mul(6).saturating_add(2);
            (Bound::string(len), len)
        }
        "string" => (Bound::string(a.len.max(32)), a.len),
        "charAt" => (Bound::string(1), a.len),
        "bytes" => (Bound::shape(a.len, 0, 0, 0, Some("bytes")), a.len),
        "distinct" | "sort" | "@sortByAssociatedKeys" => {
            (Bound { cost: 0, ..a }, a.len.saturating_mul(a.len))
        }
        "contains" | "startsWith" | "endsWith" | "indexOf" | "lastIndexOf" | "quantity"
        | "isQuantity" | "semver" | "isSemver" | "int" | "uint" | "double" | "bool" => (
            Bound::shape(1, 0, 0, 0, result_type(name)),
            a.len.saturating_add(b.len),
        ),
        _ => match result_type(name) {
            Some("string") => (Bound::string(a.len), a.len),
            Some(ty) => (Bound::scalar(ty), 0),
            // Anything else hands back at most what it is given.
            None => {
                let widest = args.iter().copied().reduce(Bound::or).unwrap_or(none);
                (Bound { cost: 0, ..widest }, a.len)
            }
        },
    }
}

/// The shape of `flatten(n)` or `lists.range(n)`, and its work: as long as what it builds.
fn sized_call(name: &str, n: u64, args: &[Bound]) -> (Bound, u64) {
    if name == "lists.range" {
        return (Bound::shape(n, 1, 0, 1, None), n);
    }
    let list = args.first().copied().unwrap_or(Bound::scalar("list"));
    let factor = u32::try_from(n)
        .ok()
        .and_then(|n| list.inner.max(1).checked_pow(n))
        .unwrap_or(u64::MAX);
    let len = list.len.saturating_mul(factor);
    (
        Bound::shape(len, list.inner, list.inner, list.inner, None),
        len,
    )
}

#[cfg(test)]
#[path = "cel_tests.rs"]
mod tests;
