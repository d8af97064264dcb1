//! What one rendering of a chat template may allocate.
//!
//! minijinja bounds instructions (fuel) and recursion, not memory: one `~`, `*`, `indent`,
//! `replace` or `join` can make a string many times larger than its inputs. So every
//! operation that makes a string or a collection is charged, *before* it allocates, an
//! upper bound of the bytes it will allocate, against a budget kept in the rendering's
//! state: at most [`MAX_RENDERED_BYTES`] for one operation and
//! [`TEMPLATE_ALLOCATION_LIMIT`] for the whole rendering; past either the rendering stops
//! with [`OverBudget`]. A string charged [`TRACKED_BYTES`] or more is credited back once
//! nothing holds it any more (seen through a weak reference when the budget runs out), so
//! a template that builds its prompt as `ns.out = ns.out ~ message` is charged what it
//! holds, not the sum of every version of it; everything else stays charged.
//!
//! Where the charges come from:
//! - the environment starts empty and holds only the builtin filters wrapped with their
//!   bounds, `pycompat`'s methods by name with theirs, the builtin tests (which return
//!   booleans), `range` (lazy, at most 100 000 numbers), and `dict`/`namespace` (charged
//!   their copy); a builtin this module does not name does not exist for a template;
//! - `+`, `*`, `~` and slices, and all template text, through the source rewrite of
//!   [`super::rewrite`];
//! - every emitted value, including those emitted into `{% set %}` blocks and macros,
//!   through the formatter.
//!
//! The same hooks check how deep what they make nests (see [`check_depth`]): list and map
//! literals holding computed values and the values of `{% set %}` go through
//! `__pagoda_nested` and `__pagoda_stored` (the rewrite puts them there).
//!
//! Left uncharged is what a single instruction allocates from the template text alone
//! (a list or map literal, keyword arguments, a loop object, a macro's closure): at most
//! a few dozen bytes per instruction, so the fuel bounds it.

use std::fmt::{self, Write as _};
use std::io;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use minijinja::value::{Object, Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Output, State, context, filters, functions, tests};

use super::{MAX_RENDERED_BYTES, MAX_VALUE_DEPTH, TEMPLATE_ALLOCATION_LIMIT};

/// Bytes charged for each element of a list or map a template makes (a `Value` is 24).
const VALUE_BYTES: usize = 32;
/// The most elements a charged collection can have.
const MAX_ITEMS: usize = MAX_RENDERED_BYTES / VALUE_BYTES;
/// Where a rendering keeps its [`Budget`] among its state's temporaries.
const BUDGET_KEY: &str = "pagoda.allocation_budget";

/// A rendering would allocate more than its budget allows.
#[derive(Debug, thiserror::Error)]
#[error(
    "the template would make a value over {MAX_RENDERED_BYTES} bytes or hold over {TEMPLATE_ALLOCATION_LIMIT} bytes of values"
)]
pub(super) struct OverBudget;

/// A value would nest deeper than [`MAX_VALUE_DEPTH`], or a namespace would hold a
/// namespace or a macro.
#[derive(Debug, thiserror::Error)]
#[error(
    "the template would nest values over {MAX_VALUE_DEPTH} deep, or put a namespace or a macro in a namespace"
)]
pub(super) struct TooDeep;

/// Whether `error` is, or was caused by, [`OverBudget`].
pub(super) fn is_over_budget(error: &Error) -> bool {
    caused_by::<OverBudget>(error)
}

/// Whether `error` is, or was caused by, [`TooDeep`].
pub(super) fn is_too_deep(error: &Error) -> bool {
    caused_by::<TooDeep>(error)
}

fn caused_by<T: std::error::Error + 'static>(error: &Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = cause {
        if error.is::<T>() {
            return true;
        }
        cause = error.source();
    }
    false
}

/// Strings charged at least this many bytes are credited back once nothing holds them.
const TRACKED_BYTES: usize = 4096;

/// What one rendering has been charged.
#[derive(Debug, Default)]
struct Budget(Mutex<Ledger>);

impl Object for Budget {}

#[derive(Debug, Default)]
struct Ledger {
    charged: usize,
    /// Values looked at to check how deep values nest (see [`check_depth`]).
    inspected: usize,
    /// Charged strings that may still be held, with what each was charged.
    strings: Vec<(Weak<str>, usize)>,
    /// `strings.len()` after the last sweep.
    swept: usize,
}

impl Ledger {
    /// Charges `bytes`: false past the limit. Before refusing, credits back the strings
    /// nobody holds any more, if their list has doubled since it last did (so sweeping
    /// costs a constant per string).
    fn charge(&mut self, bytes: usize) -> bool {
        if self.charged + bytes > TEMPLATE_ALLOCATION_LIMIT && self.strings.len() >= 2 * self.swept {
            self.sweep();
        }
        self.charged += bytes;
        self.charged <= TEMPLATE_ALLOCATION_LIMIT
    }

    /// Credits back the strings nobody holds any more.
    fn sweep(&mut self) {
        let mut freed = 0;
        self.strings.retain(|(string, bytes)| {
            let held = string.strong_count() > 0;
            if !held {
                freed += bytes;
            }
            held
        });
        self.charged -= freed;
        self.swept = self.strings.len();
    }

    /// Remembers `value`, charged `bytes`, to credit them back once it is dropped.
    fn track(&mut self, value: &Value, bytes: usize) {
        if bytes >= TRACKED_BYTES
            && value.kind() == ValueKind::String
            && let Ok(string) = Arc::<str>::try_from(value.clone())
        {
            self.strings.push((Arc::downgrade(&string), bytes));
        }
    }
}

fn over_budget() -> Error {
    Error::new(ErrorKind::InvalidOperation, OverBudget.to_string()).with_source(OverBudget)
}

/// Runs `f` on the ledger of the rendering `state` belongs to.
fn with_ledger<T>(state: &State, f: impl FnOnce(&mut Ledger) -> T) -> Option<T> {
    let budget = state.get_or_set_temp_object(BUDGET_KEY, Budget::default);
    let mut ledger = budget.0.lock().ok()?;
    Some(f(&mut ledger))
}

/// Charges `bytes` for a value of `size` bytes to the rendering `state` belongs to, or the
/// error that stops it.
fn charge(state: &State, size: usize, bytes: usize) -> Result<(), Error> {
    if size <= MAX_RENDERED_BYTES && with_ledger(state, |ledger| ledger.charge(bytes)) == Some(true) {
        Ok(())
    } else {
        Err(over_budget())
    }
}

/// `make`'s value once `bytes` are charged for it; a string is credited back once dropped.
fn charged(state: &State, bytes: usize, make: impl FnOnce() -> Result<Value, Error>) -> Result<Value, Error> {
    charge(state, bytes, bytes)?;
    let value = make()?;
    with_ledger(state, |ledger| ledger.track(&value, bytes));
    Ok(value)
}

/// An environment in which everything a template can call is charged to its budget.
pub(super) fn environment() -> Environment<'static> {
    let mut env = Environment::empty();
    add_filters(&mut env);
    add_tests(&mut env);
    env.add_function("range", functions::range);
    env.add_function("dict", guard(Value::from_function(functions::dict), all_copied));
    let namespace = guard(Value::from_function(functions::namespace), all_copied);
    env.add_function("namespace", move |state: &State, args: Rest<Value>| {
        args.iter().try_for_each(|arg| check_depth(state, arg, Holder::Namespace))?;
        namespace(state, args)
    });
    env.add_function("__pagoda_op", operator);
    env.add_function("__pagoda_sliced", sliced);
    env.add_function("__pagoda_nested", |state: &State, value: Value| {
        check_depth(state, &value, Holder::Value).map(|()| value)
    });
    env.add_function("__pagoda_stored", |state: &State, value: Value| {
        check_depth(state, &value, Holder::Namespace).map(|()| value)
    });
    env.set_formatter(emit);
    env.set_unknown_method_callback(method);
    env
}

/// An upper bound of the bytes a filter or function allocates for these arguments.
type Bound = fn(&[Value]) -> usize;

/// `original`, called once its bound is charged; what it makes may not nest too deep.
fn guard(original: Value, bound: Bound) -> impl Fn(&State, Rest<Value>) -> Result<Value, Error> {
    move |state: &State, args: Rest<Value>| {
        let value = charged(state, bound(&args), || original.call(state, &args))?;
        check_depth(state, &value, Holder::Value)?;
        Ok(value)
    }
}

/// The most values one rendering may look at to check how deep values nest.
const MAX_INSPECTED: usize = 1 << 26;

/// What will hold a value whose depth is checked.
#[derive(Clone, Copy, PartialEq)]
enum Holder {
    /// A list, a map or a variable.
    Value,
    /// A namespace: then it may hold no namespace (or a cycle could form, or a chain of
    /// namespaces nest without bound) and no macro (whose closure could hold the previous
    /// one).
    Namespace,
}

/// Checks that `value` nests at most [`MAX_VALUE_DEPTH`] deep and may go where `holder`
/// says: displaying, serializing, comparing or dropping a value recurses once a level.
/// Everything that nests values is checked (list and map literals, every filter,
/// function and method, what a namespace is given), so a value looked at here nests at
/// most about twice as deep (a checked list may hold a namespace whose values were
/// checked when they were stored), and the walk stops there.
fn check_depth(state: &State, value: &Value, holder: Holder) -> Result<(), Error> {
    let left = with_ledger(state, |ledger| MAX_INSPECTED.saturating_sub(ledger.inspected)).unwrap_or(0);
    let mut walk = DepthWalk { holder, left };
    let fits = walk.fits(value, 0);
    with_ledger(state, |ledger| ledger.inspected += left - walk.left);
    if fits {
        Ok(())
    } else {
        Err(Error::new(ErrorKind::InvalidOperation, TooDeep.to_string()).with_source(TooDeep))
    }
}

struct DepthWalk {
    holder: Holder,
    /// Values it may still look at.
    left: usize,
}

impl DepthWalk {
    fn fits(&mut self, value: &Value, depth: usize) -> bool {
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        match value.kind() {
            ValueKind::Seq | ValueKind::Iterable | ValueKind::Map if depth >= MAX_VALUE_DEPTH => false,
            ValueKind::Seq | ValueKind::Iterable => {
                value.try_iter().is_ok_and(|mut items| items.all(|item| self.fits(&item, depth + 1)))
            }
            ValueKind::Map => {
                if self.holder == Holder::Namespace && is_namespace_or_macro(value) {
                    return false;
                }
                let Some(pairs) = value.as_object().and_then(|object| object.try_iter_pairs()) else {
                    return true;
                };
                let mut pairs = pairs;
                pairs.all(|(key, item)| self.fits(&key, depth + 1) && self.fits(&item, depth + 1))
            }
            ValueKind::Plain => self.holder == Holder::Value,
            _ => true,
        }
    }
}

/// Whether `value` is a namespace or a macro (whose closure holds the values it sees):
/// minijinja's types are private, but their `Debug` starts with their name (only the
/// first piece written is kept, so nothing they hold is visited).
fn is_namespace_or_macro(value: &Value) -> bool {
    struct FirstPiece(Option<String>);
    impl fmt::Write for FirstPiece {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            if self.0.is_none() {
                self.0 = Some(s.chars().take(16).collect());
            }
            Err(fmt::Error)
        }
    }
    let Some(object) = value.as_object() else { return false };
    let mut first = FirstPiece(None);
    let _ = write!(first, "{object:?}");
    first.0.is_some_and(|piece| piece == "Namespace" || piece.starts_with("<macro"))
}

/// The test `original`, called once its bound is charged.
fn guard_test(original: Value, bound: Bound) -> impl Fn(&State, Rest<Value>) -> Result<bool, Error> {
    move |state: &State, args: Rest<Value>| {
        let bytes = bound(&args);
        charge(state, bytes, bytes)?;
        Ok(original.call(state, &args)?.is_true())
    }
}

macro_rules! guarded_filters {
    ($env:ident: $($name:literal => $filter:path, $bound:expr;)*) => {
        $($env.add_filter($name, guard(Value::from_function($filter), $bound));)*
    };
}

fn add_filters(env: &mut Environment<'static>) {
    guarded_filters!(env:
        "safe" => filters::safe, copy;
        "escape" => filters::escape, escaped;
        "e" => filters::escape, escaped;
        "lower" => filters::lower, cased;
        "upper" => filters::upper, cased;
        "title" => filters::title, cased;
        "capitalize" => filters::capitalize, cased;
        "replace" => filters::replace, replaced;
        "length" => filters::length, nothing;
        "count" => filters::length, nothing;
        "dictsort" => filters::dictsort, pairs;
        "items" => filters::items, pairs;
        "reverse" => filters::reverse, copy;
        "trim" => filters::trim, copy;
        "join" => filters::join, joined;
        "split" => filters::split, split;
        "lines" => filters::lines, lines;
        "default" => filters::default, nothing;
        "d" => filters::default, nothing;
        "round" => filters::round, nothing;
        "abs" => filters::abs, nothing;
        "int" => filters::int, nothing;
        "float" => filters::float, nothing;
        "attr" => filters::attr, nothing;
        "first" => filters::first, nothing;
        "last" => filters::last, nothing;
        "min" => filters::min, nothing;
        "max" => filters::max, nothing;
        "sort" => filters::sort, listed;
        "list" => filters::list, listed;
        "string" => filters::string, text;
        "bool" => filters::bool, nothing;
        "batch" => filters::batch, batched;
        "slice" => filters::slice, batched;
        "sum" => filters::sum, nothing;
        "indent" => filters::indent, indented;
        "select" => filters::select, listed;
        "reject" => filters::reject, listed;
        "selectattr" => filters::selectattr, listed;
        "rejectattr" => filters::rejectattr, listed;
        "map" => filters::map, listed;
        "groupby" => filters::groupby, pairs;
        "unique" => filters::unique, listed;
        "chain" => filters::chain, all_listed;
        "zip" => filters::zip, all_listed;
        "pprint" => filters::pprint, debug_text;
        "format" => filters::format, formatted;
        "tojson" => filters::tojson, json;
    );
}

fn add_tests(env: &mut Environment<'static>) {
    env.add_test("undefined", tests::is_undefined);
    env.add_test("defined", tests::is_defined);
    env.add_test("none", tests::is_none);
    env.add_test("safe", tests::is_safe);
    env.add_test("escaped", tests::is_safe);
    env.add_test("boolean", tests::is_boolean);
    env.add_test("odd", tests::is_odd);
    env.add_test("even", tests::is_even);
    env.add_test("divisibleby", tests::is_divisibleby);
    env.add_test("number", tests::is_number);
    env.add_test("integer", tests::is_integer);
    env.add_test("int", tests::is_integer);
    env.add_test("float", tests::is_float);
    env.add_test("string", tests::is_string);
    env.add_test("sequence", tests::is_sequence);
    env.add_test("iterable", tests::is_iterable);
    env.add_test("mapping", tests::is_mapping);
    env.add_test("startingwith", guard_test(Value::from_function(tests::is_startingwith), stringified));
    env.add_test("endingwith", guard_test(Value::from_function(tests::is_endingwith), stringified));
    env.add_test("lower", tests::is_lower);
    env.add_test("upper", tests::is_upper);
    env.add_test("sameas", tests::is_sameas);
    for name in ["eq", "equalto", "=="] {
        env.add_test(name, tests::is_eq);
    }
    for name in ["ne", "!="] {
        env.add_test(name, tests::is_ne);
    }
    for name in ["lt", "lessthan", "<"] {
        env.add_test(name, tests::is_lt);
    }
    for name in ["le", "<="] {
        env.add_test(name, tests::is_le);
    }
    for name in ["gt", "greaterthan", ">"] {
        env.add_test(name, tests::is_gt);
    }
    for name in ["ge", ">="] {
        env.add_test(name, tests::is_ge);
    }
    env.add_test("in", guard_test(Value::from_function(tests::is_in), tested_in));
    env.add_test("true", tests::is_true);
    env.add_test("false", tests::is_false);
    env.add_test("filter", tests::is_filter);
    env.add_test("test", tests::is_test);
}

/// `__pagoda_op(op, a, b)`: `a op b` for `+`, `*`, `~` and `in`, once what it allocates is charged.
fn operator(state: &State, op: &str, a: Value, b: Value) -> Result<Value, Error> {
    match op {
        "~" => charged(state, text_len(&a).saturating_add(text_len(&b)), || Ok(concat(&a, &b))),
        "+" => charged(state, added(&a, &b), || plain("a + b", a, b)),
        "*" => charged(state, repeated(&a, &b), || plain("a * b", a, b)),
        "in" => charged(state, contained(&a, &b), || plain("a in b", a, b)),
        _ => Err(Error::new(ErrorKind::InvalidOperation, format!("no operator {op}"))),
    }
}

/// `a ~ b`, made in a buffer of its final size.
fn concat(a: &Value, b: &Value) -> Value {
    let mut text = String::with_capacity(text_len(a) + text_len(b));
    let _ = write!(text, "{a}{b}");
    Value::from(text)
}

/// `expression` of `a` and `b` evaluated by minijinja itself, for its exact semantics.
fn plain(expression: &str, a: Value, b: Value) -> Result<Value, Error> {
    static PLAIN: LazyLock<Environment<'static>> = LazyLock::new(Environment::empty);
    PLAIN.compile_expression(expression)?.eval(context! { a => a, b => b })
}

/// `__pagoda_sliced(x)`: `x`, with a copy of it charged (the slice taken next).
fn sliced(state: &State, value: Value) -> Result<Value, Error> {
    let bytes = copied(&value);
    charge(state, bytes, bytes)?;
    Ok(value)
}

/// The formatter: charges what `{{ value }}` writes, in the output or in a capture, twice
/// over (the buffer it grows may double its capacity to take it).
fn emit(out: &mut Output, state: &State, value: &Value) -> Result<(), Error> {
    let len = text_len(value);
    charge(state, len, len.saturating_mul(2))?;
    minijinja::escape_formatter(out, state, value)
}

/// `pycompat`'s methods, the ones with a bound only.
fn method(state: &State, value: &Value, name: &str, args: &[Value]) -> Result<Value, Error> {
    let bound = method_bound(value, name, args).ok_or_else(|| Error::from(ErrorKind::UnknownMethod))?;
    let made = charged(state, bound, || {
        minijinja_contrib::pycompat::unknown_method_callback(state, value, name, args)
    })?;
    check_depth(state, &made, Holder::Value)?;
    Ok(made)
}

fn method_bound(value: &Value, name: &str, args: &[Value]) -> Option<usize> {
    let arg = |i| positional(args, i);
    Some(match (value.kind(), name) {
        (ValueKind::String, "upper" | "lower" | "title" | "capitalize") => cased(std::slice::from_ref(value)),
        (ValueKind::String, "strip" | "lstrip" | "rstrip") => text_len(value),
        (ValueKind::String, "replace") => replace_bound(value, arg(0), arg(1)),
        (ValueKind::String, "split") => split_bound(value, arg(0).as_str()),
        (ValueKind::String, "splitlines") => split_bound(value, Some("\n")),
        (ValueKind::String, "format") => format_bound(value, args),
        (ValueKind::String, "join") => join_bound(arg(0), value),
        (
            ValueKind::String,
            "count" | "find" | "rfind" | "startswith" | "endswith" | "islower" | "isupper" | "isspace"
            | "isdigit" | "isnumeric" | "isalnum" | "isalpha" | "isascii",
        ) => 0,
        (ValueKind::Map, "keys" | "values") => listed(std::slice::from_ref(value)),
        (ValueKind::Map, "items") => pairs(std::slice::from_ref(value)),
        (ValueKind::Map, "get") | (ValueKind::Seq, "count") => 0,
        _ => return None,
    })
}

/// Counts what is written to it, and refuses more than [`MAX_RENDERED_BYTES`].
struct Counter(usize);

impl Counter {
    fn add(&mut self, bytes: usize) -> bool {
        self.0 += bytes;
        self.0 <= MAX_RENDERED_BYTES
    }
}

impl fmt::Write for Counter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.add(s.len()) { Ok(()) } else { Err(fmt::Error) }
    }
}

/// As JSON for `tojson`, which writes `<`, `>`, `&` and `'` as six-byte escapes.
impl io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let escaped = buf.iter().filter(|b| b"<>&'".contains(b)).count();
        if self.add(buf.len() + 5 * escaped) { Ok(buf.len()) } else { Err(io::Error::other("too long")) }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The bytes `write` writes, counted up to just past [`MAX_RENDERED_BYTES`].
fn measure(write: impl FnOnce(&mut Counter) -> fmt::Result) -> usize {
    let mut counter = Counter(0);
    let _ = write(&mut counter);
    counter.0
}

/// Bytes of `value` as text, as `{{ value }}`, `~` and `|string` write it.
fn text_len(value: &Value) -> usize {
    value.as_str().map_or_else(|| measure(|c| write!(c, "{value}")), str::len)
}

/// How many elements iterating `value` gives (for a string, at most its bytes).
fn items(value: &Value) -> usize {
    match value.as_str() {
        Some(s) => s.len(),
        None => {
            value.len().unwrap_or_else(|| value.try_iter().map_or(0, |it| it.take(MAX_ITEMS + 1).count()))
        }
    }
}

/// Bytes of a copy of `value`: a string's bytes, or its elements' (a map's keys and values).
fn copied(value: &Value) -> usize {
    match (value.as_str(), value.kind()) {
        (Some(s), _) => s.len(),
        (None, ValueKind::Map) => items(value).saturating_mul(2 * VALUE_BYTES),
        (None, _) => items(value).saturating_mul(VALUE_BYTES),
    }
}

static UNDEFINED: Value = Value::UNDEFINED;

/// The `i`-th positional argument, or undefined.
fn positional(args: &[Value], i: usize) -> &Value {
    args.get(i).filter(|arg| !arg.is_kwargs()).unwrap_or(&UNDEFINED)
}

/// The keyword argument `name`, if given.
fn keyword(args: &[Value], name: &str) -> Option<Value> {
    let kwargs = args.last().filter(|arg| arg.is_kwargs())?;
    kwargs.get_attr(name).ok().filter(|value| !value.is_undefined())
}

fn nothing(_: &[Value]) -> usize {
    0
}

fn copy(args: &[Value]) -> usize {
    copied(positional(args, 0))
}

fn text(args: &[Value]) -> usize {
    text_len(positional(args, 0))
}

/// Case mapping: a character's upper or lower case takes at most three times its bytes.
fn cased(args: &[Value]) -> usize {
    text(args).saturating_mul(3)
}

/// HTML escaping: at most six bytes a byte.
fn escaped(args: &[Value]) -> usize {
    text(args).saturating_mul(6)
}

fn listed(args: &[Value]) -> usize {
    items(positional(args, 0)).saturating_mul(VALUE_BYTES)
}

/// A list of pairs: the pair and its two elements.
fn pairs(args: &[Value]) -> usize {
    listed(args).saturating_mul(3)
}

fn all_listed(args: &[Value]) -> usize {
    args.iter().map(|arg| items(arg).saturating_mul(VALUE_BYTES)).fold(0, usize::saturating_add)
}

fn all_copied(args: &[Value]) -> usize {
    args.iter().map(copied).fold(VALUE_BYTES, usize::saturating_add)
}

fn debug_text(args: &[Value]) -> usize {
    measure(|c| write!(c, "{:#?}", positional(args, 0)))
}

fn replaced(args: &[Value]) -> usize {
    replace_bound(positional(args, 0), positional(args, 1), positional(args, 2))
}

fn replace_bound(value: &Value, from: &Value, to: &Value) -> usize {
    let to = text_len(to);
    let matches = match (value.as_str(), from.as_str()) {
        (Some(s), Some(from)) if !from.is_empty() => s.matches(from).count(),
        _ => text_len(value).saturating_add(1),
    };
    text_len(value).saturating_add(matches.saturating_mul(to))
}

fn joined(args: &[Value]) -> usize {
    join_bound(positional(args, 0), positional(args, 1))
}

fn join_bound(items: &Value, separator: &Value) -> usize {
    let separator = text_len(separator);
    let Ok(iter) = items.try_iter() else { return 0 };
    let mut total = 0usize;
    for (i, item) in iter.enumerate() {
        let gap = if i > 0 { separator } else { 0 };
        total = total.saturating_add(gap).saturating_add(text_len(&item));
        if total > MAX_RENDERED_BYTES {
            break;
        }
    }
    total
}

fn split(args: &[Value]) -> usize {
    split_bound(positional(args, 0), positional(args, 1).as_str())
}

fn lines(args: &[Value]) -> usize {
    split_bound(positional(args, 0), Some("\n"))
}

/// The pieces of a string split at `separator` (at whitespace without one).
fn split_bound(value: &Value, separator: Option<&str>) -> usize {
    let Some(s) = value.as_str() else { return text_len(value).saturating_mul(VALUE_BYTES + 1) };
    let pieces = match separator {
        Some("") => s.len() + 2,
        Some(separator) => s.matches(separator).count() + 1,
        None => s.split_whitespace().count(),
    };
    s.len().saturating_add(pieces.saturating_mul(VALUE_BYTES))
}

fn indented(args: &[Value]) -> usize {
    let value = positional(args, 0);
    let width = positional(args, 1).as_usize().or_else(|| keyword(args, "width")?.as_usize()).unwrap_or(4);
    let lines = value.as_str().map_or_else(|| text_len(value), |s| s.matches('\n').count()) + 1;
    text_len(value).saturating_add((lines + 1).saturating_mul(width))
}

/// `tojson`: the JSON text, and the escaped copy made of it.
fn json(args: &[Value]) -> usize {
    let value = positional(args, 0);
    let indent = match positional(args, 1) {
        arg if arg.is_undefined() => keyword(args, "indent"),
        arg => Some(arg.clone()),
    };
    let indent = match indent {
        Some(indent) if indent.kind() == ValueKind::Bool => indent.is_true().then_some(2),
        Some(indent) => Some(indent.as_usize().unwrap_or(0)),
        None => None,
    };
    let mut counter = Counter(0);
    match indent {
        Some(width) if width > MAX_RENDERED_BYTES => return width,
        Some(width) => {
            let indent = vec![b' '; width];
            let formatter = serde_json::ser::PrettyFormatter::with_indent(&indent);
            let _ = serde::Serialize::serialize(
                value,
                &mut serde_json::Serializer::with_formatter(&mut counter, formatter),
            );
        }
        None => {
            let _ = serde_json::to_writer(&mut counter, value);
        }
    }
    counter.0.saturating_mul(2)
}

/// printf (`|format`) or `str.format`: each field can hold every argument at the widest
/// width or precision written in the format or passed as a number.
fn formatted(args: &[Value]) -> usize {
    format_bound(positional(args, 0), &args[args.len().min(1)..])
}

fn format_bound(format: &Value, args: &[Value]) -> usize {
    let Some(format) = format.as_str() else { return 0 };
    let fields = format.matches(['%', '{']).count() + 1;
    let written = format
        .split(|c: char| !c.is_ascii_digit())
        .filter(|digits| !digits.is_empty())
        .map(|digits| digits.parse().unwrap_or(usize::MAX));
    let widest = written.chain(args.iter().filter_map(Value::as_usize)).max().unwrap_or(0);
    let arguments = args.iter().map(text_len).fold(0, usize::saturating_add);
    format.len().saturating_add(fields.saturating_mul(widest.saturating_add(arguments)))
}

/// `batch` and `slice`: the elements, the fill, and one list a batch.
fn batched(args: &[Value]) -> usize {
    let count = positional(args, 1).as_usize().unwrap_or(0);
    items(positional(args, 0)).saturating_add(count.saturating_mul(2)).saturating_mul(VALUE_BYTES)
}

/// Tests on strings write their other arguments out as text.
fn stringified(args: &[Value]) -> usize {
    args.iter().filter(|arg| arg.as_str().is_none()).map(text_len).fold(0, usize::saturating_add)
}

/// `a in b` writes `a` out as text to look for it in a string `b`.
fn contained(a: &Value, b: &Value) -> usize {
    if b.as_str().is_some() && a.as_str().is_none() { text_len(a) } else { 0 }
}

fn tested_in(args: &[Value]) -> usize {
    contained(positional(args, 0), positional(args, 1))
}

fn added(a: &Value, b: &Value) -> usize {
    let sequence = |v: &Value| matches!(v.kind(), ValueKind::Seq | ValueKind::Iterable);
    match (a.as_str(), b.as_str()) {
        (Some(a), Some(b)) => a.len().saturating_add(b.len()),
        _ if sequence(a) && sequence(b) => items(a).saturating_add(items(b)).saturating_mul(VALUE_BYTES),
        _ => 0,
    }
}

fn repeated(a: &Value, b: &Value) -> usize {
    let (value, times) = if a.kind() == ValueKind::Number { (b, a) } else { (a, b) };
    copied(value).saturating_mul(times.as_usize().unwrap_or(0))
}
