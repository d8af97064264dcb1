//! The source rewrite that puts every operation minijinja runs without a hook under the
//! rendering budget of [`super::budget`]:
//!
//! - template text becomes `{{ "text" }}`, so that the budget's formatter sees it too
//!   (text emitted inside `{% set %}` blocks and macros would otherwise grow captured
//!   strings unchecked);
//! - `a + b`, `a * b` and `a ~ b` become `__pagoda_op("+", a, b)` and so on, which check
//!   the size of the result before making it (and are no longer folded at compile time,
//!   where `'x' * 99999999` would allocate while the template loads); `a in b` (and
//!   `a not in b`) too, since it writes `a` out as text when `b` is a string;
//! - `x[a:b]` becomes `__pagoda_sliced(x)[a:b]`, which charges the copy.
//!
//! The operators and slices are found in minijinja's AST (`unstable_machinery`) and
//! spliced into the source by their spans; everything else is copied as written.

use std::ops::Range;

use minijinja::machinery::ast::{self, BinOpKind, CallArg, CompareOpKind, Expr, Stmt};
use minijinja::machinery::{Span, Token, WhitespaceConfig, parse, tokenize};
use minijinja::syntax::SyntaxConfig;
use minijinja::{Error, ErrorKind};

/// The most tokens one tag may hold: an expression nests no deeper than its tokens, and
/// minijinja's compiler (and the rewrite) recurse once a level (real templates stay under
/// a thousand).
const MAX_TAG_TOKENS: usize = 4096;

/// Names the rewrite introduces; a template may not use them itself.
const RESERVED_PREFIX: &str = "__pagoda";

/// The whitespace handling of HF transformers' chat templates.
fn whitespace() -> WhitespaceConfig {
    WhitespaceConfig { keep_trailing_newline: false, lstrip_blocks: true, trim_blocks: true }
}

/// `source` rewritten as described above, or why it cannot be.
pub(super) fn rewrite(name: &str, source: &str) -> Result<String, Error> {
    let text_free = text_as_expressions(source)?;
    parse(source, name, SyntaxConfig, whitespace())?;
    let tokens = tokens(&text_free)?;
    let ast = parse(&text_free, name, SyntaxConfig, whitespace())?;
    let mut finder = Finder { tokens: &tokens, edits: Vec::new() };
    finder.stmt(&ast)?;
    let mut edits = finder.edits;
    edits.sort_by_key(|edit| (edit.range.start, std::cmp::Reverse(edit.range.end)));
    // A bare tuple's span is that of its last item: the item, if a literal, is wrapped once.
    edits.dedup_by(|a, b| a.range == b.range && a.kind == b.kind);
    Ok(splice(&text_free, 0..text_free.len(), &edits))
}

/// `source` with each run of template text written as a string expression and comments
/// dropped: only tags are left, so whitespace control has nothing more to do.
fn text_as_expressions(source: &str) -> Result<String, Error> {
    let mut out = String::with_capacity(source.len() * 2);
    let (mut tag_start, mut tag_tokens) = (0, 0);
    for token in tokenize(source, false, SyntaxConfig, whitespace()) {
        let (token, span) = token?;
        tag_tokens += 1;
        if tag_tokens > MAX_TAG_TOKENS {
            return Err(unsupported(format!("a tag of more than {MAX_TAG_TOKENS} tokens")));
        }
        match token {
            Token::TemplateData(text) if !text.is_empty() => {
                out.push_str("{{ \"");
                escape_into(&mut out, text);
                out.push_str("\" }}");
            }
            Token::VariableStart | Token::BlockStart => {
                (tag_start, tag_tokens) = (span.start_offset as usize, 0)
            }
            Token::VariableEnd | Token::BlockEnd => {
                out.push_str(&source[tag_start..span.end_offset as usize])
            }
            Token::Ident(name) if name.starts_with(RESERVED_PREFIX) => {
                return Err(unsupported(format!("the name {name} is reserved")));
            }
            _ => {}
        }
    }
    Ok(out)
}

/// `text` as the inside of a double-quoted Jinja string.
fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
}

fn tokens(source: &str) -> Result<Vec<(Token<'_>, Span)>, Error> {
    tokenize(source, false, SyntaxConfig, whitespace()).collect()
}

fn unsupported(why: impl Into<String>) -> Error {
    Error::new(ErrorKind::SyntaxError, why.into())
}

/// One node to rewrite: its source range and how.
#[derive(Debug)]
struct Edit {
    range: Range<usize>,
    kind: EditKind,
}

#[derive(Debug, PartialEq)]
enum EditKind {
    /// A binary operator: its name, the range of its token(s), and whether `not` negates it.
    Op(&'static str, Range<usize>, bool),
    /// A slice: where its opening bracket is.
    Slice(usize),
    /// An expression passed to `__pagoda_<name>`, in parentheses if it may be a bare tuple.
    Call(&'static str, bool),
}

/// Walks the AST and records the nodes to rewrite.
struct Finder<'a> {
    tokens: &'a [(Token<'a>, Span)],
    edits: Vec<Edit>,
}

impl Finder<'_> {
    fn stmts(&mut self, stmts: &[Stmt<'_>]) -> Result<(), Error> {
        stmts.iter().try_for_each(|stmt| self.stmt(stmt))
    }

    fn stmt(&mut self, stmt: &Stmt<'_>) -> Result<(), Error> {
        match stmt {
            Stmt::Template(t) => self.stmts(&t.children),
            Stmt::EmitExpr(e) => self.expr(&e.expr),
            Stmt::EmitRaw(_) | Stmt::Continue(_) | Stmt::Break(_) => Ok(()),
            Stmt::ForLoop(f) => {
                self.expr(&f.iter)?;
                self.exprs(f.filter_expr.iter())?;
                self.stmts(&f.body)?;
                self.stmts(&f.else_body)
            }
            Stmt::IfCond(i) => {
                self.expr(&i.expr)?;
                self.stmts(&i.true_body)?;
                self.stmts(&i.false_body)
            }
            Stmt::WithBlock(w) => {
                self.exprs(w.assignments.iter().map(|(_, value)| value))?;
                self.stmts(&w.body)
            }
            Stmt::Set(s) => {
                self.set_value(s)?;
                self.expr(&s.expr)
            }
            Stmt::SetBlock(s) => {
                self.exprs(s.filter.iter())?;
                self.stmts(&s.body)
            }
            Stmt::AutoEscape(_) => Err(unsupported("autoescape is not supported in chat templates")),
            Stmt::FilterBlock(f) => {
                self.expr(&f.filter)?;
                self.stmts(&f.body)
            }
            Stmt::Block(b) => self.stmts(&b.body),
            Stmt::Import(i) => self.expr(&i.expr),
            Stmt::FromImport(i) => self.expr(&i.expr),
            Stmt::Extends(e) => self.expr(&e.name),
            Stmt::Include(i) => self.expr(&i.name),
            Stmt::Macro(m) => self.macro_decl(m),
            Stmt::CallBlock(c) => {
                self.call(&c.call)?;
                self.macro_decl(&c.macro_decl)
            }
            Stmt::Do(d) => self.call(&d.call),
        }
    }

    fn macro_decl(&mut self, m: &ast::Macro<'_>) -> Result<(), Error> {
        self.exprs(m.defaults.iter())?;
        self.stmts(&m.body)
    }

    fn exprs<'e>(&mut self, exprs: impl IntoIterator<Item = &'e Expr<'e>>) -> Result<(), Error> {
        exprs.into_iter().try_for_each(|expr| self.expr(expr))
    }

    fn expr(&mut self, expr: &Expr<'_>) -> Result<(), Error> {
        match expr {
            Expr::Var(_) | Expr::Const(_) => Ok(()),
            Expr::Slice(s) => {
                let node = chain_start(&s.expr, s.span())..s.span().end_offset as usize;
                let bracket = self.last_at_depth_zero(node.clone(), |t| matches!(t, Token::BracketOpen))?;
                let bracket = self.tokens[bracket].1.start_offset as usize;
                self.edits.push(Edit { range: node, kind: EditKind::Slice(bracket) });
                self.expr(&s.expr)?;
                self.exprs(s.start.iter().chain(&s.stop).chain(&s.step))
            }
            Expr::UnaryOp(u) => self.expr(&u.expr),
            Expr::BinOp(b) => {
                if let Some((name, is_op)) = guarded_op(b.op) {
                    let node = self.binary_node(b.op, b.span());
                    let (operator, negated) = self.operator(node.clone(), is_op)?;
                    self.edits.push(Edit { range: node, kind: EditKind::Op(name, operator, negated) });
                }
                self.expr(&b.left)?;
                self.expr(&b.right)
            }
            Expr::Compare(c)
                if c.ops.iter().any(|op| matches!(op.op, CompareOpKind::In | CompareOpKind::NotIn)) =>
            {
                Err(unsupported("`in` in a chain of comparisons is not supported in chat templates"))
            }
            Expr::Compare(c) => {
                self.expr(&c.expr)?;
                self.exprs(c.ops.iter().map(|op| &op.expr))
            }
            Expr::IfExpr(i) => {
                self.expr(&i.test_expr)?;
                self.expr(&i.true_expr)?;
                self.exprs(i.false_expr.iter())
            }
            Expr::Filter(f) => {
                self.exprs(f.expr.iter())?;
                self.args(&f.args)
            }
            Expr::Test(t) => {
                self.expr(&t.expr)?;
                self.args(&t.args)
            }
            Expr::GetAttr(g) => self.expr(&g.expr),
            Expr::GetItem(g) => {
                self.expr(&g.expr)?;
                self.expr(&g.subscript_expr)
            }
            Expr::Call(c) => self.call(c),
            Expr::List(l) => {
                self.literal(range(l.span()), l.items.iter().all(|item| item.as_const().is_some()))?;
                self.exprs(&l.items)
            }
            Expr::Map(m) => {
                let constant = m.keys.iter().chain(&m.values).all(|item| item.as_const().is_some());
                self.literal(range(m.span()), constant)?;
                self.exprs(m.keys.iter().chain(&m.values))
            }
        }
    }

    /// Routes a list or map literal that holds computed values through `__pagoda_nested`,
    /// which checks how deep the value it makes nests. A literal whose span is not its
    /// brackets (a bare tuple, only on the right of `{% set %}`) is checked there.
    fn literal(&mut self, node: Range<usize>, constant: bool) -> Result<(), Error> {
        if constant {
            return Ok(());
        }
        let inside = self.tokens.iter().position(|(_, s)| s.start_offset as usize == node.start);
        let Some(first) = inside.filter(|&at| {
            matches!(self.tokens[at].0, Token::BracketOpen | Token::BraceOpen | Token::ParenOpen)
        }) else {
            return Ok(());
        };
        let mut depth = 0i32;
        for (token, span) in &self.tokens[first..] {
            match token {
                Token::ParenOpen | Token::BracketOpen | Token::BraceOpen => depth += 1,
                Token::ParenClose | Token::BracketClose | Token::BraceClose => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                if span.end_offset as usize == node.end {
                    self.edits.push(Edit { range: node, kind: EditKind::Call("nested", false) });
                }
                break;
            }
        }
        Ok(())
    }

    /// Routes the value of `{% set target = value %}` through `__pagoda_stored` when the
    /// target is a namespace's attribute (the one way a value outlives a loop iteration),
    /// else through `__pagoda_nested`: both check how deep it nests, and the first that it
    /// holds no namespace or macro.
    fn set_value(&mut self, set: &ast::Set<'_>) -> Result<(), Error> {
        let into_namespace = match &set.target {
            Expr::GetAttr(_) => true,
            Expr::List(l) => l.items.iter().any(|item| matches!(item, Expr::GetAttr(_))),
            _ => false,
        };
        let start = range(set.target.span()).start;
        let at = self.tokens.iter().position(|(_, s)| s.start_offset as usize >= start);
        let mut after = self.tokens[at.unwrap_or(self.tokens.len())..].iter();
        let assign = after.by_ref().find(|(t, _)| matches!(t, Token::Assign));
        let end = after.find(|(t, _)| matches!(t, Token::BlockEnd));
        let (Some((_, assign)), Some((_, end))) = (assign, end) else {
            return Err(unsupported("an assignment the bounded renderer cannot place"));
        };
        let value = assign.end_offset as usize..end.start_offset as usize;
        let kind = EditKind::Call(if into_namespace { "stored" } else { "nested" }, true);
        self.edits.push(Edit { range: value, kind });
        Ok(())
    }

    fn call(&mut self, call: &ast::Call<'_>) -> Result<(), Error> {
        self.expr(&call.expr)?;
        self.args(&call.args)
    }

    fn args(&mut self, args: &[CallArg<'_>]) -> Result<(), Error> {
        self.exprs(args.iter().map(|arg| match arg {
            CallArg::Pos(e) | CallArg::Kwarg(_, e) | CallArg::PosSplat(e) | CallArg::KwargSplat(e) => e,
        }))
    }

    /// The source range of a binary node: minijinja starts the span of a comparison (`in`
    /// among them) at the token before it.
    fn binary_node(&self, op: BinOpKind, span: Span) -> Range<usize> {
        let node = range(span);
        if !matches!(op, BinOpKind::In) {
            return node;
        }
        let before = self.tokens.iter().position(|(_, s)| s.start_offset as usize == node.start);
        let start = before
            .and_then(|at| self.tokens.get(at + 1))
            .map_or(node.start, |(_, s)| s.start_offset as usize);
        start..node.end
    }

    /// The range of a binary node's operator (`not in` included), and whether it is negated.
    fn operator(&self, node: Range<usize>, is_op: TokenTest) -> Result<(Range<usize>, bool), Error> {
        let at = self.last_at_depth_zero(node.clone(), is_op)?;
        let operator = range(self.tokens[at].1);
        match at.checked_sub(1).map(|before| &self.tokens[before]) {
            Some((Token::Ident("not"), not)) if node.contains(&(not.start_offset as usize)) => {
                Ok((not.start_offset as usize..operator.end, true))
            }
            _ => Ok((operator, false)),
        }
    }

    /// The index of the last token in `node` outside any brackets that `wanted` accepts:
    /// the operator of a left-associative binary node, or the bracket opening a slice.
    fn last_at_depth_zero(&self, node: Range<usize>, wanted: TokenTest) -> Result<usize, Error> {
        let mut depth = 0i32;
        let mut found = None;
        let inside =
            self.tokens.iter().enumerate().filter(|(_, (_, s))| node.contains(&(s.start_offset as usize)));
        for (at, (token, _)) in inside {
            if depth == 0 && wanted(token) {
                found = Some(at);
            }
            match token {
                Token::ParenOpen | Token::BracketOpen | Token::BraceOpen => depth += 1,
                Token::ParenClose | Token::BracketClose | Token::BraceClose => depth -= 1,
                _ => {}
            }
        }
        found.ok_or_else(|| unsupported("an operator the bounded renderer cannot place"))
    }
}

/// Whether a token is the one looked for.
type TokenTest = fn(&Token<'_>) -> bool;

/// The operators that can allocate more than their operands hold: their name for
/// `__pagoda_op` and their token.
fn guarded_op(op: BinOpKind) -> Option<(&'static str, TokenTest)> {
    match op {
        BinOpKind::Add => Some(("+", |t| matches!(t, Token::Plus))),
        BinOpKind::Mul => Some(("*", |t| matches!(t, Token::Mul))),
        BinOpKind::Concat => Some(("~", |t| matches!(t, Token::Tilde))),
        BinOpKind::In => Some(("in", |t| matches!(t, Token::Ident("in")))),
        _ => None,
    }
}

/// Where the postfix chain ending in `expr` (the object of a node spanning `own`) starts:
/// minijinja starts the span of a postfix node after the first at the `.`, `[` or `(`
/// before it, and only the chain's first node at its start.
fn chain_start(expr: &Expr<'_>, own: Span) -> usize {
    match expr {
        Expr::GetAttr(g) => chain_start(&g.expr, g.span()),
        Expr::GetItem(g) => chain_start(&g.expr, g.span()),
        Expr::Slice(s) => chain_start(&s.expr, s.span()),
        Expr::Call(c) => chain_start(&c.expr, c.span()),
        _ => own.start_offset as usize,
    }
}

fn range(span: Span) -> Range<usize> {
    span.start_offset as usize..span.end_offset as usize
}

/// `source[range]` with the `edits` inside it applied (sorted by start, outer first).
fn splice(source: &str, range: Range<usize>, edits: &[Edit]) -> String {
    let mut out = String::new();
    let mut position = range.start;
    let mut rest = edits;
    while let Some((edit, tail)) = rest.split_first() {
        let nested = tail.partition_point(|inner| inner.range.start < edit.range.end);
        out.push_str(&source[position..edit.range.start]);
        out.push_str(&apply(source, edit, &tail[..nested]));
        position = edit.range.end;
        rest = &tail[nested..];
    }
    out.push_str(&source[position..range.end]);
    out
}

/// The rewritten text of one edit, with the edits nested in it applied.
fn apply(source: &str, edit: &Edit, nested: &[Edit]) -> String {
    let (start, end) = (edit.range.start, edit.range.end);
    match &edit.kind {
        EditKind::Op(name, operator, negated) => {
            let (left, right) = nested.split_at(nested.partition_point(|e| e.range.start < operator.start));
            let left = splice(source, start..operator.start, left);
            let right = splice(source, operator.end..end, right);
            let call = format!("{RESERVED_PREFIX}_op(\"{name}\", {}, {})", left.trim(), right.trim());
            if *negated { format!("(not {call})") } else { call }
        }
        EditKind::Slice(bracket) => {
            let (object, rest) = nested.split_at(nested.partition_point(|e| e.range.start < *bracket));
            let object = splice(source, start..*bracket, object);
            let rest = splice(source, *bracket..end, rest);
            format!("{RESERVED_PREFIX}_sliced({object}){rest}")
        }
        EditKind::Call(name, tuple) => {
            let inner = splice(source, start..end, nested);
            let (trimmed, lead) = (inner.trim(), inner.len() - inner.trim_start().len());
            let (lead, trail) = (&inner[..lead], &inner[lead + trimmed.len()..]);
            if *tuple {
                format!("{lead}{RESERVED_PREFIX}_{name}(({trimmed})){trail}")
            } else {
                format!("{lead}{RESERVED_PREFIX}_{name}({trimmed}){trail}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(source: &str) -> String {
        rewrite("t", source).unwrap()
    }

    #[test]
    fn text_becomes_string_expressions_after_whitespace_control() {
        assert_eq!(
            rewritten("a\"\\\n{# c #}\n  {% if x -%}\n  b{% endif %}\n"),
            r#"{{ "a\"\\\n" }}{% if x -%}{{ "b" }}{% endif %}"#
        );
        assert_eq!(rewritten("{% raw %}{{ x }}{% endraw %}"), r#"{{ "{{ x }}" }}"#);
    }

    #[test]
    fn growing_operators_and_slices_become_calls() {
        assert_eq!(rewritten("{{ a ~ b ~ c }}"), r#"{{ __pagoda_op("~", __pagoda_op("~", a, b), c) }}"#);
        assert_eq!(
            rewritten("{{ (a + b) * (c|f(d ~ e)) - x[1:] }}"),
            r#"{{ __pagoda_op("*", (__pagoda_op("+", a, b)), (c|f(__pagoda_op("~", d, e)))) - __pagoda_sliced(x)[1:] }}"#
        );
        assert_eq!(
            rewritten("{{ -x + y.z[0][::-1] ~ (a ~ b)[1:][:2] }}"),
            r#"{{ __pagoda_op("+", -x, __pagoda_op("~", __pagoda_sliced(y.z[0])[::-1], __pagoda_sliced(__pagoda_sliced((__pagoda_op("~", a, b)))[1:])[:2])) }}"#
        );
        assert_eq!(
            rewritten("{% set ns.s = ns.s ~ 'x' %}"),
            r#"{% set ns.s = __pagoda_stored((__pagoda_op("~", ns.s, 'x'))) %}"#
        );
        assert_eq!(
            rewritten("{% if a not in b and not c in d[1:] %}{% endif %}"),
            r#"{% if (not __pagoda_op("in", a, b)) and not __pagoda_op("in", c, __pagoda_sliced(d)[1:]) %}{% endif %}"#
        );
    }

    #[test]
    fn computed_literals_and_assigned_values_are_checked() {
        assert_eq!(
            rewritten("{% set a, ns.l = [1, [2]], [ns.l, {'k': x}] %}{{ (x, 1) }}{{ dict(a=[x]) }}"),
            r#"{% set a, ns.l = __pagoda_stored(([1, [2]], __pagoda_nested([ns.l, __pagoda_nested({'k': x})]))) %}{{ __pagoda_nested((x, 1)) }}{{ dict(a=__pagoda_nested([x])) }}"#
        );
        assert_eq!(rewritten("{% set l = l, 1 -%}"), r#"{% set l = __pagoda_nested((l, 1)) -%}"#);
    }

    #[test]
    fn reserved_names_and_autoescape_are_refused() {
        assert!(rewrite("t", "{{ __pagoda_op('~', a, b) }}").is_err());
        assert!(rewrite("t", "{% autoescape true %}x{% endautoescape %}").is_err());
        assert!(rewrite("t", "{{ a in b in c }}").is_err());
        assert!(rewrite("t", &format!("{{{{ a{} }}}}", ".b".repeat(20000))).is_err());
    }
}
