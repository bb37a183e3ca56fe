//! Evaluation of GitHub Actions `${{ }}` expressions against an event.
//!
//! Hand-written over `github-actions-expressions`' AST: that crate (1.32)
//! parses expressions and constant-folds literals (`Expr::consteval`), but it
//! has no evaluator over contexts (`github.event.*`, `inputs`, `needs`), no
//! `*` filters, no status functions and no notion of a value that cannot be
//! known before the run executes. Its public value semantics are reused:
//! `Evaluation::as_boolean` (truthiness), `Evaluation::sema()` (GitHub's loose,
//! case-insensitive equality and ordering, and its number formatting).
//!
//! Three-valued on purpose: step outputs, job outputs, matrix values and
//! secrets exist only while a run executes, so an expression that reads them
//! yields [`V::Unknown`]. `&&`/`||` still decide when the known side settles
//! the truthiness (`false && unknown` is false), so a condition is unknown
//! only when the unknowable part actually matters.
//!
//! Semantics follow GitHub's "Evaluate expressions in workflows and actions"
//! page and the reference implementation in `actions/languageservices`.

use github_actions_expressions::{
    Evaluation, Expr, SpannedExpr,
    call::{Call, Function},
    literal::Literal,
    op::{BinExpr, BinOp, UnOp},
};
use serde_json::Value as Json;

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// The expression does not parse.
    #[error("invalid expression `{expr}`: {reason}")]
    Syntax {
        /// The expression text, without `${{ }}`.
        expr: String,
        /// What the parser said.
        reason: String,
    },
    /// A `${{` without its closing `}}`.
    #[error("unclosed `${{{{` in `{0}`")]
    Unclosed(String),
    /// A context name GitHub does not know (GitHub: "Unrecognized named-value").
    #[error("unrecognized named-value: '{0}'")]
    UnknownContext(String),
    /// A function received arguments GitHub refuses at run time.
    #[error("{0}")]
    Function(String),
    /// The value depends on something only known while the run executes.
    #[error("`{0}` depends on values only known while the run executes")]
    NotKnowable(String),
}

/// A value during evaluation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum V {
    /// A fully known value.
    Json(Json),
    /// Not knowable before the run executes.
    Unknown,
    /// An object whose members may be unknown (the `needs` context: a job's
    /// result can be known while its outputs are not).
    Partial(Vec<(String, V)>),
}

impl V {
    pub(crate) fn null() -> Self {
        V::Json(Json::Null)
    }

    /// GitHub truthiness, `None` when unknown.
    pub(crate) fn truthy(&self) -> Option<bool> {
        match self {
            V::Json(j) => Some(to_eval(j).as_boolean()),
            V::Partial(_) => Some(true),
            V::Unknown => None,
        }
    }
}

/// What status functions answer where they are evaluated.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Status {
    pub success: Option<bool>,
    pub failure: Option<bool>,
}

impl Status {
    /// Outside a job (run-name, workflow concurrency) nothing has failed yet.
    pub(crate) const FRESH: Status = Status {
        success: Some(true),
        failure: Some(false),
    };
}

/// The contexts an expression can read.
pub(crate) struct Scope<'a> {
    pub github: &'a Json,
    /// `None` where the inputs are not known (a reusable workflow's steps,
    /// whose inputs come from the caller's `with:`).
    pub inputs: Option<&'a Json>,
    pub vars: &'a Json,
    /// `Some` where the `needs` context exists (job-level `if:`).
    pub needs: Option<&'a V>,
    pub status: Status,
}

/// Contexts that exist in GitHub but only while jobs or steps execute.
const RUNTIME_CONTEXTS: &[&str] = &[
    "steps", "matrix", "strategy", "env", "secrets", "runner", "job", "jobs",
];

/// A piece of a string that may contain `${{ }}` templates.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    Lit(&'a str),
    Expr(&'a str),
}

/// Splits a string into literal text and `${{ }}` expressions. The closing
/// `}}` is searched outside single-quoted string literals, so `'}}'` inside an
/// expression does not end it. Hand-written: the models crate only recognises
/// a string that is one whole `${{ }}`, and the expressions crate only parses
/// bare expressions.
pub(crate) fn split_template(s: &str) -> Result<Vec<Piece<'_>>, EvalError> {
    let mut pieces = Vec::new();
    let mut rest = s;
    while let Some(open) = rest.find("${{") {
        if open > 0 {
            pieces.push(Piece::Lit(&rest[..open]));
        }
        let body = &rest[open + 3..];
        let mut in_string = false;
        let mut close = None;
        let bytes = body.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\'' => in_string = !in_string,
                b'}' if !in_string && bytes.get(i + 1) == Some(&b'}') => {
                    close = Some(i);
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        let Some(close) = close else {
            return Err(EvalError::Unclosed(s.to_string()));
        };
        pieces.push(Piece::Expr(&body[..close]));
        rest = &body[close + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Lit(rest));
    }
    Ok(pieces)
}

fn parse(src: &str) -> Result<SpannedExpr<'_>, EvalError> {
    Expr::parse(src.trim()).map_err(|e| EvalError::Syntax {
        expr: src.trim().to_string(),
        reason: e.to_string(),
    })
}

/// Checks that every expression in a template parses.
pub(crate) fn check_template(s: &str) -> Result<(), EvalError> {
    for piece in split_template(s)? {
        if let Piece::Expr(e) = piece {
            parse(e)?;
        }
    }
    Ok(())
}

/// How an `if:` is written: GitHub accepts a bare expression or `${{ }}`.
enum CondForm<'a> {
    Bare(&'a str),
    Template(&'a str),
}

fn cond_form(src: &str) -> Result<CondForm<'_>, EvalError> {
    let t = src.trim();
    if !t.contains("${{") {
        return Ok(CondForm::Bare(t));
    }
    let pieces = split_template(t)?;
    match pieces.as_slice() {
        [Piece::Expr(e)] => Ok(CondForm::Bare(e)),
        _ => Ok(CondForm::Template(t)),
    }
}

/// Checks that a condition parses.
pub(crate) fn check_condition(src: &str) -> Result<(), EvalError> {
    match cond_form(src)? {
        CondForm::Bare(e) => parse(e).map(|_| ()),
        CondForm::Template(t) => check_template(t),
    }
}

/// Whether a condition calls a status function; without one GitHub prefixes
/// the condition with `success() &&`.
pub(crate) fn condition_uses_status(src: &str) -> Result<bool, EvalError> {
    let exprs: Vec<&str> = match cond_form(src)? {
        CondForm::Bare(e) => vec![e],
        CondForm::Template(t) => split_template(t)?
            .into_iter()
            .filter_map(|p| match p {
                Piece::Expr(e) => Some(e),
                Piece::Lit(_) => None,
            })
            .collect(),
    };
    for e in exprs {
        if uses_status(&parse(e)?) {
            return Ok(true);
        }
    }
    Ok(false)
}

fn uses_status(e: &SpannedExpr<'_>) -> bool {
    match &e.inner {
        Expr::Call(Call { func, args }) => {
            matches!(
                func,
                Function::Success | Function::Always | Function::Cancelled | Function::Failure
            ) || args.iter().any(uses_status)
        }
        Expr::Context(ctx) => ctx.parts.iter().any(uses_status),
        Expr::Index(inner) => uses_status(inner),
        Expr::BinExpr(BinExpr { lhs, rhs, .. }) => uses_status(lhs) || uses_status(rhs),
        Expr::UnExpr { expr, .. } => uses_status(expr),
        Expr::Literal(_) | Expr::Star | Expr::Identifier(_) => false,
    }
}

/// Evaluates a condition (`if:`) to its truthiness; `None` when unknown.
pub(crate) fn eval_condition(src: &str, scope: &Scope<'_>) -> Result<Option<bool>, EvalError> {
    match cond_form(src)? {
        CondForm::Bare(e) => Ok(eval(&parse(e)?, scope)?.truthy()),
        CondForm::Template(t) => Ok(eval_template(t, scope)?.truthy()),
    }
}

/// Evaluates a string with `${{ }}` templates. A string that is exactly one
/// expression keeps the expression's type; anything else is a string.
pub(crate) fn eval_template(s: &str, scope: &Scope<'_>) -> Result<V, EvalError> {
    let pieces = split_template(s)?;
    if let [Piece::Expr(e)] = pieces.as_slice() {
        return eval(&parse(e)?, scope);
    }
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Lit(l) => out.push_str(l),
            Piece::Expr(e) => match eval(&parse(e)?, scope)? {
                V::Json(j) => out.push_str(&stringify(&j)),
                V::Unknown | V::Partial(_) => return Ok(V::Unknown),
            },
        }
    }
    Ok(V::Json(Json::String(out)))
}

/// Evaluates a template to a string, refusing unknowable values.
pub(crate) fn eval_string(s: &str, scope: &Scope<'_>) -> Result<String, EvalError> {
    match eval_template(s, scope)? {
        V::Json(j) => Ok(stringify(&j)),
        V::Unknown | V::Partial(_) => Err(EvalError::NotKnowable(s.trim().to_string())),
    }
}

/// A value an expression may stringify to, with its truthiness.
#[derive(Debug, Clone, PartialEq)]
enum Alt {
    Str(String, bool),
    /// Some falsy value of unknown origin (`''`, `false`, `0`, `null`).
    AnyFalsy,
}

/// The values an expression can take when only its literals are known:
/// `Some(alternatives)`, or `None` when it may be anything. Follows `&&`/`||`
/// operand selection, so `inputs.x && 'a_' || 'b_'` can only be `a_` or `b_`.
fn alternatives(e: &SpannedExpr<'_>) -> Option<Vec<Alt>> {
    match &e.inner {
        Expr::Literal(l) => {
            let j = literal(l);
            Some(vec![Alt::Str(stringify(&j), to_eval(&j).as_boolean())])
        }
        Expr::BinExpr(BinExpr {
            lhs,
            op: BinOp::Or,
            rhs,
        }) => {
            let mut alts: Vec<Alt> = alternatives(lhs)?
                .into_iter()
                .filter(|a| matches!(a, Alt::Str(_, true)))
                .collect();
            alts.extend(alternatives(rhs)?);
            Some(alts)
        }
        Expr::BinExpr(BinExpr {
            lhs,
            op: BinOp::And,
            rhs,
        }) => {
            let mut alts: Vec<Alt> = match alternatives(lhs) {
                Some(l) => l
                    .into_iter()
                    .filter(|a| !matches!(a, Alt::Str(_, true)))
                    .collect(),
                None => vec![Alt::AnyFalsy],
            };
            alts.extend(alternatives(rhs)?);
            Some(alts)
        }
        _ => None,
    }
}

/// A regular expression (anchored) for the strings a template can produce:
/// literal text as is, each `${{ }}` as its possible values or, when those
/// are unknown, any text.
pub(crate) fn template_pattern(s: &str) -> Result<String, EvalError> {
    let mut pattern = String::from("^");
    for piece in split_template(s)? {
        match piece {
            Piece::Lit(l) => pattern.push_str(&regex::escape(l)),
            Piece::Expr(e) => match alternatives(&parse(e)?) {
                None => pattern.push_str(".*"),
                Some(alts) => {
                    let alts: Vec<String> = alts
                        .iter()
                        .map(|a| match a {
                            Alt::Str(s, _) => regex::escape(s),
                            Alt::AnyFalsy => "|false|0".into(),
                        })
                        .collect();
                    pattern.push_str(&format!("(?:{})", alts.join("|")));
                }
            },
        }
    }
    pattern.push('$');
    Ok(pattern)
}

pub(crate) fn to_eval(j: &Json) -> Evaluation {
    match j {
        Json::Null => Evaluation::Null,
        Json::Bool(b) => Evaluation::Boolean(*b),
        Json::Number(n) => Evaluation::Number(n.as_f64().unwrap_or(f64::NAN)),
        Json::String(s) => Evaluation::String(s.clone()),
        // Containers only matter for their kind: GitHub compares them by
        // reference, so two containers are never equal and never ordered.
        Json::Array(_) => Evaluation::Array(Vec::new()),
        Json::Object(_) => Evaluation::Object(Default::default()),
    }
}

/// GitHub's string form of a value (`null` is empty, numbers without `.0`).
pub(crate) fn stringify(j: &Json) -> String {
    to_eval(j).sema().to_string()
}

fn literal(l: &Literal<'_>) -> Json {
    match l {
        // Whole numbers stay integers so `toJSON(3)` prints `3`, not `3.0`.
        Literal::Number(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => Json::from(*n as i64),
        Literal::Number(n) => serde_json::Number::from_f64(*n)
            .map(Json::Number)
            .unwrap_or(Json::Null),
        Literal::String(s) => Json::String(s.to_string()),
        Literal::Boolean(b) => Json::Bool(*b),
        Literal::Null => Json::Null,
    }
}

fn eval(e: &SpannedExpr<'_>, scope: &Scope<'_>) -> Result<V, EvalError> {
    match &e.inner {
        Expr::Literal(l) => Ok(V::Json(literal(l))),
        Expr::Identifier(id) => root(id.as_str(), scope),
        Expr::Context(ctx) => {
            let mut parts = ctx.parts.iter().peekable();
            let Some(head) = parts.next() else {
                return Ok(V::null());
            };
            let mut cur = match &head.inner {
                Expr::Identifier(id) => match borrowed_root(id.as_str(), scope) {
                    // Walk plain member and index steps by reference, so
                    // `github.event.x` copies `x`, not the whole payload.
                    Some(mut at) => {
                        while let Some(part) = parts.peek() {
                            let next = match &part.inner {
                                Expr::Identifier(id) => member_ref(at, id.as_str()),
                                Expr::Index(inner) if !matches!(inner.inner, Expr::Star) => {
                                    match eval(inner, scope)? {
                                        V::Json(Json::String(key)) => member_ref(at, &key),
                                        V::Json(Json::Number(n)) => index_ref(at, n.as_f64()),
                                        V::Json(_) => &Json::Null,
                                        V::Unknown | V::Partial(_) => return Ok(V::Unknown),
                                    }
                                }
                                _ => break,
                            };
                            at = next;
                            parts.next();
                        }
                        V::Json(at.clone())
                    }
                    None => root(id.as_str(), scope)?,
                },
                _ => eval(head, scope)?,
            };
            let mut filtered = false;
            for part in parts {
                match &part.inner {
                    Expr::Identifier(id) => cur = member(cur, filtered, id.as_str()),
                    Expr::Star => {
                        cur = star(cur, filtered);
                        filtered = true;
                    }
                    Expr::Index(inner) if matches!(inner.inner, Expr::Star) => {
                        cur = star(cur, filtered);
                        filtered = true;
                    }
                    Expr::Index(inner) => match eval(inner, scope)? {
                        V::Json(Json::String(key)) => cur = member(cur, filtered, &key),
                        V::Json(Json::Number(n)) => cur = index(cur, filtered, n.as_f64()),
                        V::Json(_) => cur = V::null(),
                        V::Unknown | V::Partial(_) => cur = V::Unknown,
                    },
                    _ => {
                        return Err(EvalError::Syntax {
                            expr: e.origin.raw.to_string(),
                            reason: "unexpected context component".into(),
                        });
                    }
                }
            }
            Ok(cur)
        }
        Expr::Star | Expr::Index(_) => Err(EvalError::Syntax {
            expr: e.origin.raw.to_string(),
            reason: "`*` or `[...]` outside a context".into(),
        }),
        Expr::UnExpr {
            op: UnOp::Not,
            expr,
        } => Ok(match eval(expr, scope)?.truthy() {
            Some(b) => V::Json(Json::Bool(!b)),
            None => V::Unknown,
        }),
        Expr::BinExpr(BinExpr { lhs, op, rhs }) => {
            let l = eval(lhs, scope)?;
            match op {
                BinOp::And => match l.truthy() {
                    Some(false) => Ok(l),
                    Some(true) => eval(rhs, scope),
                    None => {
                        let r = eval(rhs, scope)?;
                        Ok(if r.truthy() == Some(false) {
                            r
                        } else {
                            V::Unknown
                        })
                    }
                },
                BinOp::Or => match l.truthy() {
                    Some(true) => Ok(l),
                    Some(false) => eval(rhs, scope),
                    None => {
                        let r = eval(rhs, scope)?;
                        Ok(if r.truthy() == Some(true) {
                            r
                        } else {
                            V::Unknown
                        })
                    }
                },
                _ => {
                    let r = eval(rhs, scope)?;
                    let (V::Json(a), V::Json(b)) = (&l, &r) else {
                        return Ok(V::Unknown);
                    };
                    let (a, b) = (to_eval(a), to_eval(b));
                    let (a, b) = (a.sema(), b.sema());
                    let result = match op {
                        BinOp::Eq => a == b,
                        BinOp::Neq => a != b,
                        BinOp::Lt => a < b,
                        BinOp::Le => a <= b,
                        BinOp::Gt => a > b,
                        BinOp::Ge => a >= b,
                        BinOp::And | BinOp::Or => unreachable!("handled above"),
                    };
                    Ok(V::Json(Json::Bool(result)))
                }
            }
        }
        Expr::Call(call) => eval_call(call, scope),
    }
}

fn borrowed_root<'a>(name: &str, scope: &Scope<'a>) -> Option<&'a Json> {
    match name.to_ascii_lowercase().as_str() {
        "github" => Some(scope.github),
        "inputs" => scope.inputs,
        "vars" => Some(scope.vars),
        _ => None,
    }
}

static NULL: Json = Json::Null;

fn member_ref<'a>(at: &'a Json, key: &str) -> &'a Json {
    match at {
        Json::Object(m) => get_ci(m, key).unwrap_or(&NULL),
        _ => &NULL,
    }
}

fn index_ref(at: &Json, n: Option<f64>) -> &Json {
    match (at, n) {
        (Json::Array(items), Some(n)) if n >= 0.0 && n.fract() == 0.0 => {
            items.get(n as usize).unwrap_or(&NULL)
        }
        _ => &NULL,
    }
}

fn root(name: &str, scope: &Scope<'_>) -> Result<V, EvalError> {
    let lower = name.to_ascii_lowercase();
    match lower.as_str() {
        "github" => Ok(V::Json(scope.github.clone())),
        "inputs" => Ok(scope.inputs.map_or(V::Unknown, |i| V::Json(i.clone()))),
        "vars" => Ok(V::Json(scope.vars.clone())),
        "needs" => match scope.needs {
            Some(needs) => Ok(needs.clone()),
            None => Err(EvalError::UnknownContext(name.to_string())),
        },
        _ if RUNTIME_CONTEXTS.contains(&lower.as_str()) => Ok(V::Unknown),
        _ => Err(EvalError::UnknownContext(name.to_string())),
    }
}

/// Property lookup; GitHub context keys are case-insensitive.
fn get_ci<'a>(map: &'a serde_json::Map<String, Json>, key: &str) -> Option<&'a Json> {
    map.get(key).or_else(|| {
        map.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })
}

fn member(cur: V, filtered: bool, key: &str) -> V {
    match cur {
        V::Unknown => V::Unknown,
        V::Partial(members) if !filtered => members
            .into_iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
            .unwrap_or(V::null()),
        V::Partial(_) => V::Unknown,
        V::Json(j) if filtered => {
            // A filtered array keeps only elements that have the property.
            let Json::Array(items) = j else {
                return V::Json(Json::Array(Vec::new()));
            };
            V::Json(Json::Array(
                items
                    .iter()
                    .filter_map(|item| match item {
                        Json::Object(m) => get_ci(m, key).cloned(),
                        _ => None,
                    })
                    .collect(),
            ))
        }
        V::Json(Json::Object(m)) => V::Json(get_ci(&m, key).cloned().unwrap_or(Json::Null)),
        V::Json(_) => V::null(),
    }
}

fn index(cur: V, filtered: bool, n: Option<f64>) -> V {
    let pick = |j: &Json| -> Option<Json> {
        let n = n?;
        if n < 0.0 || n.fract() != 0.0 {
            return None;
        }
        match j {
            Json::Array(items) => items.get(n as usize).cloned(),
            _ => None,
        }
    };
    match cur {
        V::Unknown | V::Partial(_) => V::Unknown,
        V::Json(Json::Array(items)) if filtered => {
            V::Json(Json::Array(items.iter().filter_map(pick).collect()))
        }
        V::Json(j) => V::Json(pick(&j).unwrap_or(Json::Null)),
    }
}

fn star(cur: V, filtered: bool) -> V {
    let values = |j: &Json| -> Vec<Json> {
        match j {
            Json::Array(items) => items.clone(),
            Json::Object(m) => m.values().cloned().collect(),
            _ => Vec::new(),
        }
    };
    match cur {
        V::Unknown => V::Unknown,
        V::Partial(members) => {
            let mut out = Vec::new();
            for (_, v) in members {
                match v {
                    V::Json(j) => out.push(j),
                    V::Unknown | V::Partial(_) => return V::Unknown,
                }
            }
            V::Json(Json::Array(out))
        }
        V::Json(Json::Array(items)) if filtered => {
            V::Json(Json::Array(items.iter().flat_map(values).collect()))
        }
        V::Json(j) => V::Json(Json::Array(values(&j))),
    }
}

fn eval_call(call: &Call<'_>, scope: &Scope<'_>) -> Result<V, EvalError> {
    let status = |v: Option<bool>| Ok(v.map_or(V::Unknown, |b| V::Json(Json::Bool(b))));
    match call.func {
        Function::Always => return Ok(V::Json(Json::Bool(true))),
        // Klaud never plans a run that is already being cancelled.
        Function::Cancelled => return Ok(V::Json(Json::Bool(false))),
        Function::Success => return status(scope.status.success),
        Function::Failure => return status(scope.status.failure),
        // File contents are not part of the event.
        Function::HashFiles => return Ok(V::Unknown),
        _ => {}
    }
    let mut args = Vec::with_capacity(call.args.len());
    for arg in &call.args {
        match eval(arg, scope)? {
            V::Json(j) => args.push(j),
            V::Unknown | V::Partial(_) => return Ok(V::Unknown),
        }
    }
    let b = |v: bool| Ok(V::Json(Json::Bool(v)));
    let s = |v: String| Ok(V::Json(Json::String(v)));
    match (call.func, args.as_slice()) {
        (Function::Contains, [search, item]) => match search {
            Json::Array(items) => b(items
                .iter()
                .any(|el| to_eval(el).sema() == to_eval(item).sema())),
            Json::Object(_) => b(false),
            _ => b(upper(&stringify(search)).contains(&upper(&stringify(item)))),
        },
        (Function::StartsWith, [a, p]) if is_primitive(a) && is_primitive(p) => {
            b(upper(&stringify(a)).starts_with(&upper(&stringify(p))))
        }
        (Function::EndsWith, [a, p]) if is_primitive(a) && is_primitive(p) => {
            b(upper(&stringify(a)).ends_with(&upper(&stringify(p))))
        }
        (Function::StartsWith | Function::EndsWith, [_, _]) => b(false),
        (Function::Format, [template, rest @ ..]) => s(format(&stringify(template), rest)?),
        (Function::Join, [items, sep @ ..]) => {
            let sep = sep.first().map_or_else(|| ",".to_string(), stringify);
            match items {
                Json::Array(items) => s(items.iter().map(stringify).collect::<Vec<_>>().join(&sep)),
                Json::Object(_) => s(String::new()),
                other => s(stringify(other)),
            }
        }
        (Function::ToJSON, [value]) => s(serde_json::to_string_pretty(value)
            .map_err(|e| EvalError::Function(format!("toJSON: {e}")))?),
        (Function::FromJSON, [text]) => {
            let text = stringify(text);
            if text.trim().is_empty() {
                return Err(EvalError::Function("fromJSON: empty input".into()));
            }
            serde_json::from_str::<Json>(&text)
                .map(V::Json)
                .map_err(|e| EvalError::Function(format!("fromJSON: invalid JSON `{text}`: {e}")))
        }
        (Function::Case, args) => {
            let (pairs, default) = args.split_at(args.len().saturating_sub(1));
            for pair in pairs.chunks(2) {
                match pair {
                    [Json::Bool(true), value] => return Ok(V::Json(value.clone())),
                    [Json::Bool(false), _] => {}
                    _ => {
                        return Err(EvalError::Function(
                            "case: predicates must be booleans".into(),
                        ));
                    }
                }
            }
            Ok(V::Json(default.first().cloned().unwrap_or(Json::Null)))
        }
        (func, _) => Err(EvalError::Function(format!(
            "{func:?}: wrong number of arguments"
        ))),
    }
}

fn is_primitive(j: &Json) -> bool {
    !matches!(j, Json::Array(_) | Json::Object(_))
}

fn upper(s: &str) -> String {
    s.to_uppercase()
}

/// GitHub's `format`: `{N}` placeholders, `{{` and `}}` escapes; anything
/// else with a brace is an error, as on GitHub.
fn format(template: &str, args: &[Json]) -> Result<String, EvalError> {
    let invalid = || {
        EvalError::Function(format!(
            "The following format string is invalid: {template}"
        ))
    };
    let mut out = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                out.push('{');
            }
            '{' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                if digits.is_empty() || chars.next() != Some('}') {
                    return Err(invalid());
                }
                let n: usize = digits.parse().map_err(|_| invalid())?;
                let arg = args.get(n).ok_or_else(|| {
                    EvalError::Function(format!(
                        "The following format string references more arguments than were supplied: {template}"
                    ))
                })?;
                out.push_str(&stringify(arg));
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                out.push('}');
            }
            '}' => return Err(invalid()),
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with(github: Json, f: impl FnOnce(&Scope<'_>)) {
        let inputs = json!({"flag": true, "name": "smoke"});
        let vars = json!({});
        let scope = Scope {
            github: &github,
            inputs: Some(&inputs),
            vars: &vars,
            needs: None,
            status: Status::FRESH,
        };
        f(&scope);
    }

    fn ev(src: &str) -> V {
        let github = json!({
            "event_name": "pull_request",
            "event": {
                "action": "labeled",
                "label": {"name": "Sweep"},
                "pull_request": {
                    "number": 7,
                    "title": "Bump vllm",
                    "draft": false,
                    "labels": [{"name": "full-sweep-enabled"}, {"name": "x"}, {"color": "red"}],
                }
            }
        });
        let mut out = V::Unknown;
        with(github, |scope| {
            out = eval(&parse(src).unwrap(), scope).unwrap()
        });
        out
    }

    #[test]
    fn loose_equality_and_case_insensitive_strings() {
        assert_eq!(
            ev("github.event.label.name == 'sweep'"),
            V::Json(json!(true))
        );
        assert_eq!(ev("'1' == 1"), V::Json(json!(true)));
        assert_eq!(ev("null == 0"), V::Json(json!(true)));
        assert_eq!(
            ev("github.event.pull_request.draft == false"),
            V::Json(json!(true))
        );
        assert_eq!(ev("1 < 2 && 'a' < 'B'"), V::Json(json!(true)));
        assert_eq!(ev("'abc' == 'abd'"), V::Json(json!(false)));
    }

    #[test]
    fn and_or_return_operands_like_github() {
        assert_eq!(
            ev("github.event.missing || 'fallback'"),
            V::Json(json!("fallback"))
        );
        assert_eq!(
            ev("github.event.pull_request.title || 'x'"),
            V::Json(json!("Bump vllm"))
        );
        assert_eq!(ev("'' && 'never'"), V::Json(json!("")));
        assert_eq!(ev("!github.event.pull_request.draft"), V::Json(json!(true)));
    }

    #[test]
    fn star_filters_collect_present_properties() {
        assert_eq!(
            ev("github.event.pull_request.labels.*.name"),
            V::Json(json!(["full-sweep-enabled", "x"]))
        );
        assert_eq!(
            ev("contains(github.event.pull_request.labels.*.name, 'FULL-SWEEP-ENABLED')"),
            V::Json(json!(true))
        );
        assert_eq!(
            ev("github.event.pull_request.labels[1].name"),
            V::Json(json!("x"))
        );
        assert_eq!(
            ev("github.event['pull_request']['number']"),
            V::Json(json!(7))
        );
    }

    #[test]
    fn functions_follow_github() {
        assert_eq!(ev("format('{0}-{1}{{}}', 'a', 2)"), V::Json(json!("a-2{}")));
        assert_eq!(
            ev("join(github.event.pull_request.labels.*.name, ', ')"),
            V::Json(json!("full-sweep-enabled, x"))
        );
        assert_eq!(
            ev("startsWith('klaud/auto-x', 'KLAUD/')"),
            V::Json(json!(true))
        );
        assert_eq!(ev("endsWith('abc', 'bc')"), V::Json(json!(true)));
        assert_eq!(ev("fromJSON('{\"a\": [1]}').a[0]"), V::Json(json!(1)));
        assert_eq!(ev("toJSON(fromJSON('[]'))"), V::Json(json!("[]")));
        assert_eq!(
            ev("toJSON(github.event.label)"),
            V::Json(json!("{\n  \"name\": \"Sweep\"\n}"))
        );
        assert_eq!(
            ev("inputs.flag && success() && !failure() && always()"),
            V::Json(json!(true))
        );
        assert_eq!(ev("cancelled()"), V::Json(json!(false)));
    }

    #[test]
    fn runtime_contexts_are_unknown_unless_decided() {
        assert_eq!(ev("steps.a.outputs.b == 'x'"), V::Unknown);
        assert_eq!(ev("false && steps.a.outputs.b"), V::Json(json!(false)));
        assert_eq!(ev("steps.a.outputs.b && false"), V::Json(json!(false)));
        assert_eq!(ev("steps.a.outputs.b || 'yes'"), V::Json(json!("yes")));
        assert_eq!(ev("!matrix.x"), V::Unknown);
    }

    #[test]
    fn malformed_expressions_are_errors_not_panics() {
        let github = json!({});
        with(github, |scope| {
            for bad in [
                "",
                "(",
                "a ==",
                "foo(1)",
                "contains(1)",
                "'unterminated",
                "a..b",
                "[0]",
                "1 +",
                "format('{0')",
                "format('{1}', 'a')",
                "format('}')",
                "fromJSON('{')",
                "fromJSON('')",
                "nosuchcontext.x",
                "needs.a.result",
                "case(1, 2, 3)",
                "github.event[",
                "!!!!",
                "toJSON(",
                "\u{0}",
                "${{",
            ] {
                let result = parse(bad).and_then(|e| eval(&e, scope));
                assert!(result.is_err(), "{bad:?} should be refused, got {result:?}");
            }
            let deep = format!("{}true{}", "(".repeat(500), ")".repeat(500));
            assert!(parse(&deep).is_err());
        });
    }

    #[test]
    fn templates_split_outside_string_literals() {
        assert_eq!(
            split_template("a ${{ 'x}}y' }} b").unwrap(),
            vec![Piece::Lit("a "), Piece::Expr(" 'x}}y' "), Piece::Lit(" b")]
        );
        assert!(split_template("a ${{ b").is_err());
        assert_eq!(split_template("plain").unwrap(), vec![Piece::Lit("plain")]);
        let github = json!({"event": {"pull_request": {"title": "T"}}, "run_id": 42});
        with(github, |scope| {
            assert_eq!(
                eval_string("Run - ${{ github.event.pull_request.title }}", scope).unwrap(),
                "Run - T"
            );
            assert_eq!(
                eval_string("${{ github.run_id }}-${{ inputs.flag }}", scope).unwrap(),
                "42-true"
            );
            assert_eq!(
                eval_template("${{ inputs.flag }}", scope).unwrap(),
                V::Json(json!(true))
            );
            assert!(eval_string("${{ steps.x.outputs.y }}", scope).is_err());
        });
    }

    #[test]
    fn template_patterns_keep_literal_alternatives() {
        let matches = |t: &str, v: &str| {
            regex::Regex::new(&template_pattern(t).unwrap())
                .unwrap()
                .is_match(v)
        };
        let logs = "${{ inputs.eval-only && 'eval_server_logs_' || 'server_logs_' }}${{ env.R }}";
        assert!(matches(logs, "server_logs_dsr1"));
        assert!(matches(logs, "eval_server_logs_dsr1"));
        assert!(!matches(logs, "klaud-sweep-manifest"));
        assert!(matches(
            "results_${{ inputs.prefix || 'all' }}",
            "results_all"
        ));
        assert!(matches(
            "results_${{ inputs.prefix || 'all' }}",
            "results_bmk"
        ));
        assert!(matches("bmk_${{ env.R }}", "bmk_x"));
        assert!(!matches("bmk_${{ env.R }}", "eval_x"));
        assert!(matches("a${{ x && 'b' }}", "afalse") && matches("a${{ x && 'b' }}", "ab"));
        assert!(template_pattern("${{ (").is_err());
    }

    #[test]
    fn conditions_accept_bare_and_curly_forms() {
        let github = json!({"event_name": "push"});
        with(github, |scope| {
            assert_eq!(
                eval_condition("github.event_name == 'push'", scope).unwrap(),
                Some(true)
            );
            assert_eq!(
                eval_condition("${{ github.event_name == 'pull_request' }}", scope).unwrap(),
                Some(false)
            );
            // Mixed text makes a non-empty string: always true, as on GitHub.
            assert_eq!(
                eval_condition("${{ false }} && ${{ false }}", scope).unwrap(),
                Some(true)
            );
            assert!(condition_uses_status("always() && x").unwrap());
            assert!(!condition_uses_status("github.x").unwrap());
        });
    }
}
