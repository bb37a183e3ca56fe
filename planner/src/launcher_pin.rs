//! Whether a family's launcher ignores the master config's `image`.
//!
//! The benchmark workflow runs `runners/launch_${RUNNER_NAME%%_*}.sh` on a
//! node of the family's runner label, with the master's `image` in
//! `$IMAGE`. Most launchers turn `$IMAGE` into what runs (`docker run
//! $IMAGE`, a squash file named after it), but a launcher can map a
//! framework to one fixed container whatever the tag: the H100 launcher
//! sets `SQUASH_FILE=/mnt/…/lmsysorg_sglang_v0.5.8.post1-cu130.sqsh` for
//! `dynamo-sglang`. Bumping such a family would spend GPU hours measuring
//! the old container, so the readiness gate blocks it before any claim.
//!
//! Only what a reader can tell for sure counts as a pin: an assignment of
//! a literal (no `$`, no command substitution) to a variable that carries
//! the container (`IMAGE`, `SQUASH_FILE`, `CONTAINER_IMAGE`, `CONTAINER_KEY`,
//! `DOCKER_IMAGE`) or a literal `--container-image=`, on a line the
//! family's framework, model prefix, precision and multi-node setting can
//! reach. The reader follows `if`/`elif`/`else`/`fi` and evaluates the
//! `[[ $VAR == "x" ]]` tests on those four variables; any other test is
//! "maybe", so a pin under it still counts, while a branch the family can
//! never take does not. Here-documents, `case` patterns and `docker run`
//! argument lists are not searched for pins: a literal there is not
//! reported (no false block), as the launchers of the real repository
//! never pin there. Hand-written, bounded and panic-free: launchers are
//! outside input.

use std::path::Path;

use crate::capacity::RunnerClusters;
use crate::limits::{MAX_LAUNCHER_BYTES, MAX_LAUNCHER_LINE_BYTES};
use crate::repo::{Family, Repository};

/// The reason code of a family blocked by its launcher.
pub const REASON: &str = "launcher-pins-image";

/// Variables whose value is the container a launcher runs.
const IMAGE_VARIABLES: &[&str] = &[
    "IMAGE",
    "SQUASH_FILE",
    "CONTAINER_IMAGE",
    "CONTAINER_KEY",
    "DOCKER_IMAGE",
];

/// Deepest `[[ … ]]` / `( … )` nesting evaluated; deeper reads as "maybe".
const MAX_CONDITION_DEPTH: usize = 16;

/// Deepest `if` nesting followed; deeper lines read as "maybe".
const MAX_IF_DEPTH: usize = 64;

/// A launcher line that runs a fixed container for the family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherPin {
    /// Repository-relative launcher path, e.g. `runners/launch_h100-dgxc-slurm.sh`.
    pub launcher: String,
    /// 1-based line.
    pub line: usize,
    /// What it sets: a variable name or `--container-image`.
    pub variable: String,
    /// The literal it sets, quotes removed.
    pub value: String,
}

impl std::fmt::Display for LauncherPin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{} sets {}={}",
            self.launcher, self.line, self.variable, self.value
        )
    }
}

/// Why a launcher could not be analysed.
#[derive(Debug, thiserror::Error)]
pub enum LauncherPinError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_LAUNCHER_BYTES`].
    #[error("{path}: {bytes} bytes, more than the {MAX_LAUNCHER_BYTES} a launcher may have")]
    TooLarge { path: String, bytes: u64 },
    /// The file is not UTF-8.
    #[error("{path}: not valid UTF-8 (first bad byte at offset {offset})")]
    NotUtf8 { path: String, offset: usize },
}

/// What the launcher's tests can know about a family: the workflow's
/// `FRAMEWORK`, `MODEL_PREFIX`, `PRECISION` and `IS_MULTINODE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchFacts {
    pub framework: String,
    pub model_prefix: String,
    pub precision: String,
    pub multinode: bool,
}

impl LaunchFacts {
    /// The facts of a family's master entry.
    pub fn of(family: &Family) -> Self {
        Self {
            framework: family.entry.framework.clone(),
            model_prefix: family.entry.model_prefix.clone(),
            precision: family.entry.precision.clone(),
            multinode: family.entry.multinode,
        }
    }

    fn value(&self, variable: &str) -> Option<&str> {
        match variable {
            "FRAMEWORK" => Some(&self.framework),
            "MODEL_PREFIX" => Some(&self.model_prefix),
            "PRECISION" => Some(&self.precision),
            // The multi-node template exports `IS_MULTINODE=true`; the
            // single-node one leaves it unset.
            "IS_MULTINODE" => Some(if self.multinode { "true" } else { "" }),
            _ => None,
        }
    }
}

/// The launchers a family's runs can use, repository-relative, in name
/// order: one per cluster of its runner label in `configs/runners.yaml`
/// (the workflow runs `launch_${RUNNER_NAME%%_*}.sh`), those that exist.
pub fn launchers_of(repository: &Repository, family: &Family) -> Vec<String> {
    let Ok(runners) = RunnerClusters::read(repository) else {
        return Vec::new();
    };
    let Some(clusters) = runners.clusters(&family.entry.runner) else {
        return Vec::new();
    };
    clusters
        .iter()
        .map(|c| format!("{}runners/launch_{c}.sh", repository.prefix()))
        .filter(|p| repository.root().join(p).is_file())
        .collect()
}

/// The first pin among the launchers `family`'s runs can use, if any. A
/// launcher that cannot be read is an error naming it.
pub fn launcher_pin(
    repository: &Repository,
    family: &Family,
) -> Result<Option<LauncherPin>, LauncherPinError> {
    let facts = LaunchFacts::of(family);
    for path in launchers_of(repository, family) {
        let text = read_launcher(repository.root(), &path)?;
        if let Some(pin) = pins_for(&path, &text, &facts).into_iter().next() {
            return Ok(Some(pin));
        }
    }
    Ok(None)
}

/// The readiness reason of a pin: the code, then where and what.
pub fn block_reason(pin: &LauncherPin, family: &Family) -> String {
    format!(
        "{REASON}: {pin}, a fixed container for framework {} whatever the master's image ({}), so a bump of {} would measure that container; make the launcher derive it from $IMAGE",
        family.entry.framework,
        family.image(),
        family.key
    )
}

/// Reads a launcher, bounded by [`MAX_LAUNCHER_BYTES`].
pub fn read_launcher(root: &Path, path: &str) -> Result<String, LauncherPinError> {
    let full = root.join(path);
    let io = |source| LauncherPinError::Io {
        path: path.to_owned(),
        source,
    };
    let bytes = std::fs::metadata(&full).map_err(io)?.len();
    if bytes > MAX_LAUNCHER_BYTES as u64 {
        return Err(LauncherPinError::TooLarge {
            path: path.to_owned(),
            bytes,
        });
    }
    let data = std::fs::read(&full).map_err(io)?;
    if data.len() > MAX_LAUNCHER_BYTES {
        return Err(LauncherPinError::TooLarge {
            path: path.to_owned(),
            bytes: data.len() as u64,
        });
    }
    String::from_utf8(data).map_err(|e| LauncherPinError::NotUtf8 {
        path: path.to_owned(),
        offset: e.utf8_error().valid_up_to(),
    })
}

/// Three-valued truth: what a test is for the family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tri {
    True,
    False,
    Maybe,
}

impl Tri {
    fn not(self) -> Self {
        match self {
            Tri::True => Tri::False,
            Tri::False => Tri::True,
            Tri::Maybe => Tri::Maybe,
        }
    }

    fn and(self, other: Self) -> Self {
        match (self, other) {
            (Tri::False, _) | (_, Tri::False) => Tri::False,
            (Tri::True, Tri::True) => Tri::True,
            _ => Tri::Maybe,
        }
    }

    fn or(self, other: Self) -> Self {
        self.not().and(other.not()).not()
    }
}

/// One open `if`: whether the branch being read can run, and whether an
/// earlier branch of the same `if` can.
struct Frame {
    current: Tri,
    earlier: Tri,
}

/// Every pin in one launcher's text that `facts` can reach, in line order.
pub fn pins_for(path: &str, text: &str, facts: &LaunchFacts) -> Vec<LauncherPin> {
    let mut out = Vec::new();
    let mut frames: Vec<Frame> = Vec::new();
    // `if` levels past MAX_IF_DEPTH, and `case` blocks: counted, not read.
    let mut unread_depth = 0usize;
    let mut heredoc: Option<(String, bool)> = None;
    let lines: Vec<&str> = text.lines().collect();
    let mut index = 0;
    while index < lines.len() {
        let first = index;
        if let Some((end, strip_tabs)) = &heredoc {
            let line = if *strip_tabs {
                lines[index].trim_start_matches('\t')
            } else {
                lines[index]
            };
            if line == end {
                heredoc = None;
            }
            index += 1;
            continue;
        }
        let mut command = bounded(lines[index]).to_owned();
        while command.ends_with('\\') && index + 1 < lines.len() {
            if command.len() + lines[index + 1].len() > MAX_LAUNCHER_LINE_BYTES {
                break;
            }
            command.pop();
            index += 1;
            command.push(' ');
            command.push_str(lines[index].trim());
        }
        index += 1;
        let code = strip_comment(&command);
        let code = code.trim();
        if code.is_empty() {
            continue;
        }
        heredoc = heredoc_start(code);
        let unread = if unread_depth > 0 {
            Tri::Maybe
        } else {
            Tri::True
        };
        let reach = frames
            .iter()
            .fold(unread, |acc, frame| acc.and(frame.current));
        let words = first_word(code);
        match words {
            "if" => {
                if one_line_if(code) {
                    continue;
                }
                if frames.len() >= MAX_IF_DEPTH || unread_depth > 0 {
                    unread_depth += 1;
                    continue;
                }
                let cond = evaluate(condition_text(code, "if"), facts);
                frames.push(Frame {
                    current: cond,
                    earlier: cond,
                });
                continue;
            }
            "elif" => {
                if unread_depth == 0
                    && let Some(frame) = frames.last_mut()
                {
                    let cond = evaluate(condition_text(code, "elif"), facts);
                    frame.current = frame.earlier.not().and(cond);
                    frame.earlier = frame.earlier.or(cond);
                }
                continue;
            }
            "else" => {
                if unread_depth == 0
                    && let Some(frame) = frames.last_mut()
                {
                    frame.current = frame.earlier.not();
                    frame.earlier = Tri::True;
                }
                continue;
            }
            "fi" | "fi;" => {
                if unread_depth > 0 {
                    unread_depth -= 1;
                } else {
                    frames.pop();
                }
                continue;
            }
            "case" => {
                if !code.ends_with("esac") {
                    unread_depth += 1;
                }
                continue;
            }
            "esac" | "esac;" => {
                unread_depth = unread_depth.saturating_sub(1);
                continue;
            }
            _ => {}
        }
        if reach == Tri::False {
            continue;
        }
        if let Some((variable, value)) = literal_pin(code) {
            out.push(LauncherPin {
                launcher: path.to_owned(),
                line: first + 1,
                variable,
                value,
            });
        }
    }
    out
}

/// The line, cut at [`MAX_LAUNCHER_LINE_BYTES`] on a character boundary.
fn bounded(line: &str) -> &str {
    if line.len() <= MAX_LAUNCHER_LINE_BYTES {
        return line.trim_end();
    }
    let mut end = MAX_LAUNCHER_LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

fn first_word(code: &str) -> &str {
    code.split(|c: char| c.is_whitespace() || c == ';')
        .next()
        .unwrap_or("")
}

/// `if …; then …; fi` on one line opens nothing.
fn one_line_if(code: &str) -> bool {
    let trimmed = code.trim_end_matches(';').trim_end();
    trimmed.ends_with(" fi") || trimmed.ends_with(";fi")
}

/// The test of an `if`/`elif` line: after the keyword, before `then`.
fn condition_text<'a>(code: &'a str, keyword: &str) -> &'a str {
    let rest = code[keyword.len()..].trim();
    let rest = rest.strip_suffix("then").map(str::trim_end).unwrap_or(rest);
    rest.strip_suffix(';').unwrap_or(rest).trim()
}

/// A here-document's terminator and whether `<<-` strips leading tabs.
fn heredoc_start(code: &str) -> Option<(String, bool)> {
    let mut in_single = false;
    let mut in_double = false;
    let bytes = code.as_bytes();
    let mut i = 0;
    while i + 1 < bytes.len() {
        match bytes[i] {
            b'\'' if !in_double => in_single = !in_single,
            b'"' if !in_single => in_double = !in_double,
            b'<' if !in_single && !in_double && bytes[i + 1] == b'<' => {
                // `<<<` is a here-string, not a document.
                if bytes.get(i + 2) == Some(&b'<') {
                    return None;
                }
                let mut rest = &code[i + 2..];
                let strip = rest.starts_with('-');
                if strip {
                    rest = &rest[1..];
                }
                let word: String = rest
                    .trim_start()
                    .chars()
                    .take_while(|c| !c.is_whitespace() && *c != ';' && *c != '>' && *c != '|')
                    .filter(|c| *c != '\'' && *c != '"')
                    .collect();
                return (!word.is_empty()).then_some((word, strip));
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The line without a trailing `# comment` (a `#` outside quotes, at the
/// start or after a blank; `${X#y}` and `s/#/_/` keep theirs).
fn strip_comment(line: &str) -> &str {
    let mut in_single = false;
    let mut in_double = false;
    let mut prev_blank = true;
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !in_double => in_single = !in_single,
            '"' if !in_single => in_double = !in_double,
            '#' if !in_single && !in_double && prev_blank => return &line[..i],
            _ => {}
        }
        prev_blank = c.is_whitespace();
    }
    line
}

/// A literal container set by this command, if it is one: `NAME=literal`
/// (also after `export`/`local`/`readonly`) for a container variable, or
/// `--container-image=literal`.
fn literal_pin(code: &str) -> Option<(String, String)> {
    let mut rest = code;
    for keyword in ["export ", "local ", "readonly ", "declare "] {
        if let Some(r) = rest.strip_prefix(keyword) {
            rest = r.trim_start();
        }
    }
    if let Some((name, value)) = rest.split_once('=')
        && IMAGE_VARIABLES.contains(&name)
    {
        let value = first_shell_word(value)?;
        return is_literal(&value).then(|| (name.to_owned(), value));
    }
    let at = code.find("--container-image")?;
    let after = &code[at + "--container-image".len()..];
    let value = after
        .strip_prefix('=')
        .or_else(|| after.strip_prefix(' '))?;
    let value = first_shell_word(value.trim_start())?;
    is_literal(&value).then(|| ("--container-image".to_owned(), value))
}

/// The first shell word of `text` with its quotes removed; `None` when
/// it is empty or its quotes do not close.
fn first_shell_word(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() || c == ';' || c == '&' || c == '|' => break,
            (_, c) => out.push(c),
        }
    }
    (quote.is_none() && !out.is_empty()).then_some(out)
}

/// A value with no expansion at all: what it names cannot follow `$IMAGE`.
fn is_literal(value: &str) -> bool {
    !value.contains(['$', '`', '*', '?', '(', '{'])
}

/// Evaluates an `if` test for the family; anything not understood is
/// [`Tri::Maybe`].
fn evaluate(text: &str, facts: &LaunchFacts) -> Tri {
    let tokens = tokenize(text);
    let mut parser = Parser {
        tokens: &tokens,
        at: 0,
        facts,
    };
    let value = parser.or(0);
    if parser.at == tokens.len() {
        value
    } else {
        Tri::Maybe
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Open2,
    Close2,
    And,
    Or,
    Not,
    Paren,
    EndParen,
    /// A word; `quoted` when any of it was in quotes (no glob then).
    Word {
        text: String,
        quoted: bool,
    },
}

fn tokenize(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            c if c.is_whitespace() => i += 1,
            '[' if next == Some('[') => {
                out.push(Token::Open2);
                i += 2;
            }
            ']' if next == Some(']') => {
                out.push(Token::Close2);
                i += 2;
            }
            '&' if next == Some('&') => {
                out.push(Token::And);
                i += 2;
            }
            '|' if next == Some('|') => {
                out.push(Token::Or);
                i += 2;
            }
            '(' => {
                out.push(Token::Paren);
                i += 1;
            }
            ')' => {
                out.push(Token::EndParen);
                i += 1;
            }
            '!' if next.is_none_or(char::is_whitespace) => {
                out.push(Token::Not);
                i += 1;
            }
            _ => {
                let mut word = String::new();
                let mut quoted = false;
                let mut quote: Option<char> = None;
                while i < chars.len() {
                    let c = chars[i];
                    match quote {
                        Some(q) if c == q => quote = None,
                        Some(_) => word.push(c),
                        None if c == '\'' || c == '"' => {
                            quote = Some(c);
                            quoted = true;
                        }
                        None if c.is_whitespace() || c == '(' || c == ')' => break,
                        None if (c == '&' || c == '|' || c == ']')
                            && chars.get(i + 1) == Some(&c) =>
                        {
                            break;
                        }
                        None => word.push(c),
                    }
                    i += 1;
                }
                out.push(Token::Word { text: word, quoted });
            }
        }
    }
    out
}

struct Parser<'t> {
    tokens: &'t [Token],
    at: usize,
    facts: &'t LaunchFacts,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn or(&mut self, depth: usize) -> Tri {
        let mut value = self.and(depth);
        while self.peek() == Some(&Token::Or) {
            self.at += 1;
            value = value.or(self.and(depth));
        }
        value
    }

    fn and(&mut self, depth: usize) -> Tri {
        let mut value = self.unary(depth);
        while self.peek() == Some(&Token::And) {
            self.at += 1;
            value = value.and(self.unary(depth));
        }
        value
    }

    fn unary(&mut self, depth: usize) -> Tri {
        if depth >= MAX_CONDITION_DEPTH {
            // Give up on the rest: the caller sees unread tokens.
            self.at = self.tokens.len() + 1;
            return Tri::Maybe;
        }
        match self.peek() {
            Some(Token::Not) => {
                self.at += 1;
                self.unary(depth + 1).not()
            }
            Some(Token::Paren) => {
                self.at += 1;
                let value = self.or(depth + 1);
                if self.peek() == Some(&Token::EndParen) {
                    self.at += 1;
                    value
                } else {
                    self.at = self.tokens.len() + 1;
                    Tri::Maybe
                }
            }
            Some(Token::Open2) => {
                self.at += 1;
                let value = self.or(depth + 1);
                if self.peek() == Some(&Token::Close2) {
                    self.at += 1;
                    value
                } else {
                    self.at = self.tokens.len() + 1;
                    Tri::Maybe
                }
            }
            Some(Token::Word { .. }) => self.simple(),
            _ => {
                self.at = self.tokens.len() + 1;
                Tri::Maybe
            }
        }
    }

    /// `word op word`, or any other run of words (a command, `-z x`): the
    /// latter is [`Tri::Maybe`].
    fn simple(&mut self) -> Tri {
        let start = self.at;
        while let Some(Token::Word { .. }) = self.peek() {
            self.at += 1;
        }
        let words = &self.tokens[start..self.at];
        let [
            Token::Word { text: left, .. },
            Token::Word { text: op, .. },
            Token::Word {
                text: right,
                quoted,
            },
        ] = words
        else {
            return Tri::Maybe;
        };
        let Some(actual) = variable_of(left).and_then(|v| self.facts.value(v)) else {
            return Tri::Maybe;
        };
        if right.contains('$') {
            return Tri::Maybe;
        }
        let matches = if *quoted {
            Some(actual == right)
        } else {
            glob_match(right, actual)
        };
        let Some(matches) = matches else {
            return Tri::Maybe;
        };
        match op.as_str() {
            "==" | "=" => bool_tri(matches),
            "!=" => bool_tri(!matches),
            _ => Tri::Maybe,
        }
    }
}

fn bool_tri(b: bool) -> Tri {
    if b { Tri::True } else { Tri::False }
}

/// `$NAME` or `${NAME}` (quotes already removed) → `NAME`.
fn variable_of(word: &str) -> Option<&str> {
    let name = word.strip_prefix('$')?;
    let name = name
        .strip_prefix('{')
        .and_then(|n| n.strip_suffix('}'))
        .unwrap_or(name);
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some(name)
}

/// An unquoted `[[ == ]]` pattern: `*` matches any run; `?` and `[…]`
/// are not evaluated (`None`).
fn glob_match(pattern: &str, text: &str) -> Option<bool> {
    if pattern.contains(['?', '[', '\\']) {
        return None;
    }
    Some(crate::glob::wildcard(pattern, text))
}

#[cfg(test)]
mod tests;
