//! A YAML document tree that remembers where every node is in the source.
//!
//! serde YAML readers re-serialize and lose comments, so Klaud reads with
//! `saphyr-parser` events and keeps byte spans: typed reads get file:line
//! errors, and edits splice exactly one token into the original bytes.
//!
//! The repository is outside input: every read is bounded by
//! [`crate::limits`] (document size, nesting depth, scalar length, and a node
//! budget that counts each alias as every node it stands for). An alias
//! shares its anchored subtree instead of copying it, so memory stays a small
//! multiple of the input whatever the aliases do.

use std::collections::HashMap;
use std::sync::Arc;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde_json::Value;

use crate::limits;

/// How a scalar is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `value`
    Plain,
    /// `'value'`
    SingleQuoted,
    /// `"value"`
    DoubleQuoted,
    /// `|` block
    Literal,
    /// `>` block
    Folded,
}

/// One node of a YAML document, with its position in the source.
#[derive(Debug, Clone)]
pub struct Node {
    /// What the node holds.
    pub kind: NodeKind,
    /// Byte offset where the node starts.
    pub start: usize,
    /// 1-based line of the start.
    pub line: usize,
    /// 1-based column (in characters) of the start.
    pub column: usize,
    /// Whether the node sits inside a flow collection (`{…}` or `[…]`),
    /// where `,`, `]` and `}` end a plain scalar.
    pub in_flow: bool,
    /// Whether the node carries an anchor (`&name`): aliases elsewhere share
    /// its value, so splicing it would change them too.
    pub anchored: bool,
    /// For a node reached through an alias (`*name`), the alias's line: the
    /// node itself (and its position) is the anchored original.
    pub alias_line: Option<usize>,
}

/// The content of a [`Node`]. Contents are shared (`Arc`) so that an alias
/// costs one node, not a copy of what it names.
#[derive(Debug, Clone)]
pub enum NodeKind {
    /// A scalar with its resolved text and how it was written.
    Scalar { value: Arc<str>, style: Style },
    /// A sequence.
    Sequence(Arc<[Node]>),
    /// A mapping, in source order.
    Mapping(Arc<[(Node, Node)]>),
}

/// A YAML syntax problem, with its position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct YamlError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl Node {
    /// The scalar's text, if this is a scalar.
    pub fn as_scalar(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }

    /// The scalar's style, if this is a scalar.
    pub fn style(&self) -> Option<Style> {
        match &self.kind {
            NodeKind::Scalar { style, .. } => Some(*style),
            _ => None,
        }
    }

    /// The mapping entries, if this is a mapping.
    pub fn as_mapping(&self) -> Option<&[(Node, Node)]> {
        match &self.kind {
            NodeKind::Mapping(entries) => Some(entries),
            _ => None,
        }
    }

    /// The items, if this is a sequence.
    pub fn as_sequence(&self) -> Option<&[Node]> {
        match &self.kind {
            NodeKind::Sequence(items) => Some(items),
            _ => None,
        }
    }

    /// The value under a scalar key, if this is a mapping that has it. With
    /// duplicate keys (only kept by [`parse_lenient`]) the last one wins, as in
    /// PyYAML.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_mapping()?
            .iter()
            .rev()
            .find(|(k, _)| k.as_scalar() == Some(key))
            .map(|(_, v)| v)
    }

    /// How many times a scalar key occurs in this mapping.
    pub fn key_count(&self, key: &str) -> usize {
        self.as_mapping().map_or(0, |entries| {
            entries
                .iter()
                .filter(|(k, _)| k.as_scalar() == Some(key))
                .count()
        })
    }

    /// A short name of the node's kind, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match &self.kind {
            NodeKind::Scalar { .. } => "a scalar",
            NodeKind::Sequence(_) => "a sequence",
            NodeKind::Mapping(_) => "a mapping",
        }
    }

    /// Converts to JSON with the YAML 1.1 scalar rules PyYAML applies, since
    /// the benchmark repository's own tooling reads these files with PyYAML
    /// (so `2_063_837` is an integer and `yes` a boolean there).
    pub fn to_json(&self) -> Value {
        match &self.kind {
            NodeKind::Scalar { value, style } => match style {
                Style::Plain => resolve_plain(value),
                _ => Value::String(value.to_string()),
            },
            NodeKind::Sequence(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            NodeKind::Mapping(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.as_scalar()
                                .map_or_else(|| k.to_json().to_string(), str::to_owned),
                            v.to_json(),
                        )
                    })
                    .collect(),
            ),
        }
    }
}

/// Parses a single-document YAML text. An empty text is `Ok(None)`. Duplicate
/// mapping keys are errors (YAML forbids them; PyYAML silently keeps the last).
pub fn parse(text: &str) -> Result<Option<Node>, YamlError> {
    let (root, duplicates, _) = parse_with(text, false, false)?;
    debug_assert!(duplicates.is_empty());
    Ok(root)
}

/// Like [`parse`], but keeps duplicate keys (reporting each) the way PyYAML
/// reads them, for files Klaud only reads a few fields of.
pub fn parse_lenient(text: &str) -> Result<(Option<Node>, Vec<YamlError>), YamlError> {
    parse_with(text, true, false).map(|(root, duplicates, _)| (root, duplicates))
}

/// A document whose top-level entries were read one by one: see
/// [`parse_confined`].
#[derive(Debug, Clone, Default)]
pub struct Confined {
    /// The document. When it is a mapping, it holds every top-level entry
    /// that could be read, in source order, a repeated key as often as it
    /// is written ([`Node::get`] takes the last, as PyYAML does).
    pub root: Option<Node>,
    /// The top-level entries that could not be read, in source order.
    pub broken: Vec<BrokenEntry>,
}

/// A top-level entry that [`parse_confined`] could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenEntry {
    /// Its key, when the key itself could be read as a scalar.
    pub key: Option<String>,
    /// 1-based line of its key.
    pub line: usize,
    /// Byte offset where its key starts.
    pub start: usize,
    /// Why it could not be read.
    pub error: YamlError,
}

/// Reads a document whose top level is a mapping of independent entries
/// (the master configs) so that a problem inside one entry costs only that
/// entry: a duplicate key inside it, nesting past [`limits::MAX_DEPTH`], an
/// oversized scalar, an alias to an unknown anchor, or aliases that cross
/// the node budget (an alias bomb) leave it out of [`Confined::root`] and
/// in [`Confined::broken`]. Repeated top-level keys are kept for the caller
/// to judge. What cannot be confined to an entry is still an error of the
/// whole text: YAML syntax (after which the parser cannot go on), a second
/// document, a text past [`limits::MAX_DOCUMENT_BYTES`].
///
/// A broken entry's nodes do not count against the document's budget, so
/// an alias bomb costs the entries that hold it and not the entries after
/// it; the readable entries together still stay within one budget, which
/// bounds any walk over [`Confined::root`].
pub fn parse_confined(text: &str) -> Result<Confined, YamlError> {
    parse_with(text, false, true).map(|(root, _, broken)| Confined { root, broken })
}

/// [`parse_confined`]'s readable entries alone, for readers of one master
/// entry that must not fail because another entry is broken.
pub fn parse_readable(text: &str) -> Result<Option<Node>, YamlError> {
    parse_confined(text).map(|confined| confined.root)
}

type Parsed = (Option<Node>, Vec<YamlError>, Vec<BrokenEntry>);

fn parse_with(text: &str, keep_duplicates: bool, confined: bool) -> Result<Parsed, YamlError> {
    if text.len() > limits::MAX_DOCUMENT_BYTES {
        return Err(YamlError {
            line: 1,
            column: 1,
            message: format!(
                "the file is {} bytes, more than the {} Klaud reads; split it or remove content",
                text.len(),
                limits::MAX_DOCUMENT_BYTES
            ),
        });
    }
    let positions = Positions::new(text);
    let mut builder = Builder {
        positions: &positions,
        anchors: HashMap::new(),
        documents: 0,
        keep_duplicates,
        duplicates: Vec::new(),
        nodes: 0,
        node_budget: limits::node_budget(text.len()),
        open: 0,
        fatal: false,
        broken: Vec::new(),
        declared: HashMap::new(),
    };
    let mut parser = Parser::new_from_str(text);
    let mut root = None;
    loop {
        let (event, span) = builder.pull(&mut parser)?;
        match event {
            Event::StreamStart | Event::Nothing => {}
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                builder.documents += 1;
                if builder.documents > 1 {
                    return Err(positions
                        .error(&span, "expected a single YAML document, found a second one"));
                }
            }
            Event::DocumentEnd => {}
            Event::MappingStart(anchor, _) if confined => {
                root = Some(builder.confined_mapping(&mut parser, span, anchor)?);
            }
            event => {
                root = Some(builder.node(&mut parser, event, span, false, 0)?);
            }
        }
    }
    Ok((root, builder.duplicates, builder.broken))
}

fn next<'a>(
    parser: &mut Parser<'a, saphyr_parser::StrInput<'a>>,
    positions: &Positions,
) -> Result<(Event<'a>, Span), YamlError> {
    match parser.next_event() {
        Some(Ok(pair)) => Ok(pair),
        Some(Err(err)) => {
            let mark = err.marker();
            Err(YamlError {
                line: mark.line(),
                column: mark.col() + 1,
                message: err.info().to_owned(),
            })
        }
        None => Err(positions.error_at_end("the YAML stream ended unexpectedly")),
    }
}

struct Builder<'p> {
    positions: &'p Positions,
    /// Anchor id → the anchored node and how many nodes it stands for.
    anchors: HashMap<usize, (Node, usize)>,
    documents: usize,
    keep_duplicates: bool,
    duplicates: Vec<YamlError>,
    /// Nodes so far, each alias counted as the nodes it stands for.
    nodes: usize,
    node_budget: usize,
    /// Collections opened and not yet closed in the events read so far:
    /// after an error inside an entry, events are skipped until the count
    /// is back where the entry began.
    open: usize,
    /// The parser failed (or sent an event out of place): nothing after
    /// this can be read, so the error is the whole document's.
    fatal: bool,
    /// Top-level entries [`parse_confined`] left out.
    broken: Vec<BrokenEntry>,
    /// Line of every anchor seen, read or not: an alias to one whose value
    /// failed says so instead of calling it unknown.
    declared: HashMap<usize, usize>,
}

impl Builder<'_> {
    /// The next event, keeping [`Builder::open`] and [`Builder::fatal`].
    fn pull<'a>(
        &mut self,
        parser: &mut Parser<'a, saphyr_parser::StrInput<'a>>,
    ) -> Result<(Event<'a>, Span), YamlError> {
        match next(parser, self.positions) {
            Ok((event, span)) => {
                match event {
                    Event::SequenceStart(..) | Event::MappingStart(..) => self.open += 1,
                    Event::SequenceEnd | Event::MappingEnd => {
                        self.open = self.open.saturating_sub(1)
                    }
                    _ => {}
                }
                Ok((event, span))
            }
            Err(error) => {
                self.fatal = true;
                Err(error)
            }
        }
    }

    /// Skips the rest of a node that failed part way, so that reading can
    /// go on at the next entry: every event until the collections open at
    /// `level` are the only ones open again. Aliases are not followed here,
    /// so skipping costs one step per event of the input.
    fn skip_to<'a>(
        &mut self,
        parser: &mut Parser<'a, saphyr_parser::StrInput<'a>>,
        level: usize,
    ) -> Result<(), YamlError> {
        while self.open > level {
            self.pull(parser)?;
        }
        Ok(())
    }

    /// The top-level mapping of [`parse_confined`]: each entry is read on
    /// its own, and one that fails is skipped and recorded.
    fn confined_mapping<'a>(
        &mut self,
        parser: &mut Parser<'a, saphyr_parser::StrInput<'a>>,
        span: Span,
        anchor: usize,
    ) -> Result<Node, YamlError> {
        let start = self.positions.byte(span.start.index());
        let flow = self.positions.char_at(start) == Some('{');
        self.count(1, &span)?;
        let level = self.open;
        let mut entries: Vec<(Node, Node)> = Vec::new();
        loop {
            let (event, key_span) = self.pull(parser)?;
            if matches!(event, Event::MappingEnd) {
                break;
            }
            let before = self.nodes;
            let line = key_span.start.line();
            let key_start = self.positions.byte(key_span.start.index());
            let key = match self.node(parser, event, key_span, flow, 1) {
                Ok(key) => key,
                Err(error) => {
                    if self.fatal {
                        return Err(error);
                    }
                    self.skip_to(parser, level)?;
                    // The value is skipped whole: its first event, then
                    // whatever that opened.
                    self.pull(parser)?;
                    self.skip_to(parser, level)?;
                    self.nodes = before;
                    self.broken.push(BrokenEntry {
                        key: None,
                        line,
                        start: key_start,
                        error,
                    });
                    continue;
                }
            };
            let (event, value_span) = self.pull(parser)?;
            match self.node(parser, event, value_span, flow, 1) {
                Ok(value) => entries.push((key, value)),
                Err(error) => {
                    if self.fatal {
                        return Err(error);
                    }
                    self.skip_to(parser, level)?;
                    self.nodes = before;
                    self.broken.push(BrokenEntry {
                        key: key.as_scalar().map(str::to_owned),
                        line,
                        start: key_start,
                        error,
                    });
                }
            }
        }
        Ok(Node {
            kind: NodeKind::Mapping(entries.into()),
            start,
            line: span.start.line(),
            column: span.start.col() + 1,
            in_flow: flow,
            anchored: anchor != 0,
            alias_line: None,
        })
    }

    /// Counts `weight` more nodes, refusing past the budget.
    fn count(&mut self, weight: usize, span: &Span) -> Result<(), YamlError> {
        self.nodes = self.nodes.saturating_add(weight);
        if self.nodes > self.node_budget {
            return Err(self.positions.error(
                span,
                &format!(
                    "the document stands for more than {} nodes (aliases counted as what they repeat); \
                     is it an alias bomb? write the values out or use fewer aliases",
                    self.node_budget
                ),
            ));
        }
        Ok(())
    }

    fn node<'a>(
        &mut self,
        parser: &mut Parser<'a, saphyr_parser::StrInput<'a>>,
        event: Event<'a>,
        span: Span,
        in_flow: bool,
        depth: usize,
    ) -> Result<Node, YamlError> {
        let start = self.positions.byte(span.start.index());
        let line = span.start.line();
        let column = span.start.col() + 1;
        if let Event::Scalar(_, _, anchor, _)
        | Event::SequenceStart(anchor, _)
        | Event::MappingStart(anchor, _) = &event
            && *anchor != 0
        {
            self.declared.insert(*anchor, line);
        }
        if depth > limits::MAX_DEPTH {
            return Err(self.positions.error(
                &span,
                &format!(
                    "nested more than {} levels deep; Klaud does not read deeper documents",
                    limits::MAX_DEPTH
                ),
            ));
        }
        let nodes_before = self.nodes;
        if !matches!(event, Event::Alias(_)) {
            self.count(1, &span)?;
        }
        let make = |kind| Node {
            kind,
            start,
            line,
            column,
            in_flow,
            anchored: false,
            alias_line: None,
        };
        let (node, anchor) = match event {
            Event::Scalar(value, style, anchor, _tag) => {
                let style = match style {
                    ScalarStyle::Plain => Style::Plain,
                    ScalarStyle::SingleQuoted => Style::SingleQuoted,
                    ScalarStyle::DoubleQuoted => Style::DoubleQuoted,
                    ScalarStyle::Literal => Style::Literal,
                    ScalarStyle::Folded => Style::Folded,
                };
                if value.len() > limits::MAX_SCALAR_BYTES {
                    return Err(self.positions.error(
                        &span,
                        &format!(
                            "a value of {} bytes, more than the {} Klaud reads",
                            value.len(),
                            limits::MAX_SCALAR_BYTES
                        ),
                    ));
                }
                (
                    make(NodeKind::Scalar {
                        value: Arc::from(value.as_ref()),
                        style,
                    }),
                    anchor,
                )
            }
            Event::SequenceStart(anchor, _tag) => {
                let flow = in_flow || self.positions.char_at(start) == Some('[');
                let mut items = Vec::new();
                loop {
                    let (event, span) = self.pull(parser)?;
                    if matches!(event, Event::SequenceEnd) {
                        break;
                    }
                    items.push(self.node(parser, event, span, flow, depth + 1)?);
                }
                (make(NodeKind::Sequence(items.into())), anchor)
            }
            Event::MappingStart(anchor, _tag) => {
                let flow = in_flow || self.positions.char_at(start) == Some('{');
                let mut entries: Vec<(Node, Node)> = Vec::new();
                // Key → index of its first entry: a scan of the entries per
                // key made a 200k-entry master quadratic.
                let mut index: std::collections::HashMap<String, usize> =
                    std::collections::HashMap::new();
                loop {
                    let (event, span) = self.pull(parser)?;
                    if matches!(event, Event::MappingEnd) {
                        break;
                    }
                    let key = self.node(parser, event, span, flow, depth + 1)?;
                    let (event, span) = self.pull(parser)?;
                    let value = self.node(parser, event, span, flow, depth + 1)?;
                    let first = key.as_scalar().and_then(|name| match index.get(name) {
                        Some(&i) => Some(&entries[i].0),
                        None => {
                            index.insert(name.to_owned(), entries.len());
                            None
                        }
                    });
                    if let (Some(name), Some(first)) = (key.as_scalar(), first) {
                        let error = YamlError {
                            line: key.line,
                            column: key.column,
                            message: format!(
                                "duplicate key {name:?} (first defined on line {}); remove one of them",
                                first.line
                            ),
                        };
                        if !self.keep_duplicates {
                            return Err(error);
                        }
                        self.duplicates.push(error);
                    }
                    entries.push((key, value));
                }
                (make(NodeKind::Mapping(entries.into())), anchor)
            }
            Event::Alias(id) => {
                let Some((target, weight)) = self.anchors.get(&id).cloned() else {
                    let message = match self.declared.get(&id) {
                        Some(anchored) => format!(
                            "alias to the anchor on line {anchored}, whose value could not be read"
                        ),
                        None => "alias to an unknown anchor".to_owned(),
                    };
                    return Err(self.positions.error(&span, &message));
                };
                self.count(weight, &span)?;
                return Ok(Node {
                    alias_line: Some(line),
                    ..target
                });
            }
            other => {
                self.fatal = true;
                return Err(self
                    .positions
                    .error(&span, &format!("unexpected YAML event {other:?}")));
            }
        };
        let node = Node {
            anchored: anchor != 0,
            ..node
        };
        if anchor != 0 {
            let weight = self.nodes - nodes_before;
            self.anchors.insert(anchor, (node.clone(), weight));
        }
        Ok(node)
    }
}

/// Converts the parser's character indices to byte offsets.
struct Positions {
    /// Byte offset of each character; empty when the text is ASCII (then
    /// character and byte indices agree).
    char_to_byte: Vec<usize>,
    text_len: usize,
    last_line: usize,
    bytes: Vec<u8>,
}

impl Positions {
    fn new(text: &str) -> Self {
        let char_to_byte = if text.is_ascii() {
            Vec::new()
        } else {
            text.char_indices().map(|(i, _)| i).collect()
        };
        Self {
            char_to_byte,
            text_len: text.len(),
            last_line: text.lines().count().max(1),
            bytes: text.as_bytes().to_vec(),
        }
    }

    fn byte(&self, char_index: usize) -> usize {
        if self.char_to_byte.is_empty() {
            char_index.min(self.text_len)
        } else {
            self.char_to_byte
                .get(char_index)
                .copied()
                .unwrap_or(self.text_len)
        }
    }

    fn char_at(&self, byte: usize) -> Option<char> {
        self.bytes.get(byte).map(|b| *b as char)
    }

    fn error(&self, span: &Span, message: &str) -> YamlError {
        YamlError {
            line: span.start.line(),
            column: span.start.col() + 1,
            message: message.to_owned(),
        }
    }

    fn error_at_end(&self, message: &str) -> YamlError {
        YamlError {
            line: self.last_line,
            column: 1,
            message: message.to_owned(),
        }
    }
}

/// Why a scalar cannot be spliced in place: the reason is shown to the
/// maintainer with the file and line, so each says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScalarEditError {
    /// The node is a mapping or a list.
    #[error("expected a scalar, found {found}")]
    NotScalar {
        /// What the node is.
        found: &'static str,
    },
    /// The node is an alias of an anchored value elsewhere.
    #[error(
        "the value is a YAML alias (*name, line {alias_line}) of the value on line {line}; write the value out in place of the alias"
    )]
    Alias {
        /// The alias's line.
        alias_line: usize,
        /// The anchored value's line.
        line: usize,
    },
    /// The value carries an anchor its aliases share.
    #[error(
        "the value carries a YAML anchor (&name) that aliases may share; write it without the anchor"
    )]
    Anchored,
    /// A `|` or `>` block scalar.
    #[error("the value is a block scalar (| or >); write it on one line first")]
    BlockScalar,
    /// A quoted scalar that runs over several lines.
    #[error("the quoted value continues on another line; join it into one line first")]
    QuotedOverLines,
    /// A plain scalar that runs over several lines.
    #[error("the value continues on another line; join it into one line first")]
    PlainOverLines,
    /// The new value holds a line break.
    #[error("the new value contains a line break")]
    LineBreak,
    /// The new value would read back as something else written plain.
    #[error("{value:?} cannot be written as a plain YAML scalar")]
    NotPlain {
        /// The value.
        value: String,
    },
}

/// The byte range of a single-line scalar token that starts at `node.start`,
/// re-lexed from the source: the parser's own span of a quoted scalar can
/// run into a following comment. Block scalars and scalars that continue on
/// another line are refused, since splicing them would need reflowing.
pub fn scalar_token(text: &str, node: &Node) -> Result<std::ops::Range<usize>, ScalarEditError> {
    let Some(style) = node.style() else {
        return Err(ScalarEditError::NotScalar {
            found: node.kind_name(),
        });
    };
    // An alias has no token of its own and an anchored token is shared by
    // its aliases: neither can be spliced without changing other values.
    if let Some(alias_line) = node.alias_line {
        return Err(ScalarEditError::Alias {
            alias_line,
            line: node.line,
        });
    }
    if node.anchored {
        return Err(ScalarEditError::Anchored);
    }
    let bytes = text.as_bytes();
    let start = node.start;
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let end = match style {
        Style::Literal | Style::Folded => {
            return Err(ScalarEditError::BlockScalar);
        }
        Style::DoubleQuoted => {
            let mut i = start + 1;
            loop {
                match bytes.get(i) {
                    None | Some(b'\n') => {
                        return Err(ScalarEditError::QuotedOverLines);
                    }
                    Some(b'\\') if bytes.get(i + 1) != Some(&b'\n') => i += 2,
                    Some(b'\\') => {
                        return Err(ScalarEditError::QuotedOverLines);
                    }
                    Some(b'"') => break i + 1,
                    Some(_) => i += 1,
                }
            }
        }
        Style::SingleQuoted => {
            let mut i = start + 1;
            loop {
                match bytes.get(i) {
                    None | Some(b'\n') => {
                        return Err(ScalarEditError::QuotedOverLines);
                    }
                    Some(b'\'') if bytes.get(i + 1) == Some(&b'\'') => i += 2,
                    Some(b'\'') => break i + 1,
                    Some(_) => i += 1,
                }
            }
        }
        Style::Plain => {
            let mut end = line_end;
            for (offset, ch) in text[start..line_end].char_indices() {
                let i = start + offset;
                let after_space = i > start && matches!(bytes[i - 1], b' ' | b'\t');
                if (ch == '#' && after_space) || (node.in_flow && matches!(ch, ',' | ']' | '}')) {
                    end = i;
                    break;
                }
            }
            let token = text[start..end].trim_end_matches([' ', '\t', '\r']);
            let end = start + token.len();
            if node.as_scalar() != Some(token) {
                return Err(ScalarEditError::PlainOverLines);
            }
            end
        }
    };
    Ok(start..end)
}

/// Writes `value` as a scalar token in `style`, or says why it cannot be.
pub fn encode_scalar(value: &str, style: Style) -> Result<String, ScalarEditError> {
    if value.contains(['\n', '\r']) {
        return Err(ScalarEditError::LineBreak);
    }
    match style {
        Style::DoubleQuoted => {
            let mut out = String::with_capacity(value.len() + 2);
            out.push('"');
            for ch in value.chars() {
                match ch {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push('"');
            Ok(out)
        }
        Style::SingleQuoted => Ok(format!("'{}'", value.replace('\'', "''"))),
        Style::Plain => {
            let risky_start = value.starts_with(|c: char| "-?:,[]{}#&*!|>'\"%@`~ ".contains(c));
            if value.is_empty()
                || risky_start
                || value.contains(": ")
                || value.contains(" #")
                || value.ends_with([' ', ':'])
                || !matches!(resolve_plain(value), Value::String(_))
            {
                return Err(ScalarEditError::NotPlain {
                    value: value.to_owned(),
                });
            }
            Ok(value.to_owned())
        }
        Style::Literal | Style::Folded => Err(ScalarEditError::BlockScalar),
    }
}

/// PyYAML's (YAML 1.1) resolution of a plain scalar.
fn resolve_plain(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => {
            return Value::Bool(true);
        }
        "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => {
            return Value::Bool(false);
        }
        _ => {}
    }
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    let first_ok = digits.starts_with(|c: char| c.is_ascii_digit());
    if first_ok && !clean.is_empty() && clean.chars().all(|c| c.is_ascii_digit()) {
        let octal = clean.len() > 1 && clean.starts_with('0');
        let parsed = if octal {
            i64::from_str_radix(&clean, 8).ok()
        } else {
            clean.parse::<i64>().ok()
        };
        if let Some(n) = parsed {
            return Value::from(if negative { -n } else { n });
        }
    }
    if let Some(hex) = clean.strip_prefix("0x")
        && first_ok
        && let Ok(n) = i64::from_str_radix(hex, 16)
    {
        return Value::from(if negative { -n } else { n });
    }
    let looks_float = (first_ok || digits.starts_with('.'))
        && clean.contains('.')
        && clean
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+'));
    if looks_float && let Ok(f) = clean.parse::<f64>() {
        let f = if negative { -f } else { f };
        if let Some(n) = serde_json::Number::from_f64(f) {
            return Value::Number(n);
        }
    }
    Value::String(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(text: &str) -> Node {
        parse(text).unwrap().unwrap()
    }

    #[test]
    fn spans_point_at_tokens_in_bytes() {
        let text = "a: 'é'\nkey:\n  image: \"x:1\"  # note\n  other: plain value # c\n";
        let doc = root(text);
        let image = doc.get("key").unwrap().get("image").unwrap();
        let range = scalar_token(text, image).unwrap();
        assert_eq!(&text[range], "\"x:1\"");
        assert_eq!(image.line, 3);
        let other = doc.get("key").unwrap().get("other").unwrap();
        assert_eq!(&text[scalar_token(text, other).unwrap()], "plain value");
    }

    #[test]
    fn flow_scalars_end_at_flow_indicators() {
        let text = "identity:\n  container: { image: vllm/vllm-openai:v1, x: 1 }\n";
        let doc = root(text);
        let image = doc
            .get("identity")
            .unwrap()
            .get("container")
            .unwrap()
            .get("image")
            .unwrap();
        assert!(image.in_flow);
        assert_eq!(
            &text[scalar_token(text, image).unwrap()],
            "vllm/vllm-openai:v1"
        );
    }

    #[test]
    fn block_and_multiline_scalars_are_refused() {
        let text = "a: |\n  x\nb: one\n  two\nc: \"one\n  two\"\n";
        let doc = root(text);
        for key in ["a", "b", "c"] {
            assert!(scalar_token(text, doc.get(key).unwrap()).is_err(), "{key}");
        }
    }

    #[test]
    fn duplicate_keys_are_errors_with_both_lines() {
        let err = parse("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(err.line, 3);
        assert!(err.message.contains("line 1"), "{err}");
    }

    #[test]
    fn syntax_errors_carry_positions() {
        let err = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(err.line >= 1, "{err}");
        assert!(parse("a: 1\n---\nb: 2\n").is_err());
    }

    /// The 9-level "billion laughs": 3 KB that would expand to 9^9 nodes.
    pub(crate) fn alias_bomb() -> String {
        let mut text = String::from("lol0: &l0 [a,a,a,a,a,a,a,a,a]\n");
        for level in 1..9 {
            let aliases = vec![format!("*l{}", level - 1); 9].join(",");
            text.push_str(&format!("lol{level}: &l{level} [{aliases}]\n"));
        }
        text
    }

    #[test]
    fn an_alias_bomb_is_refused_at_the_alias_that_crosses_the_budget() {
        let text = alias_bomb();
        for result in [parse(&text).map(|_| ()), parse_lenient(&text).map(|_| ())] {
            let err = result.unwrap_err();
            assert!(err.message.contains("alias bomb"), "{err}");
            assert!((2..=9).contains(&err.line), "{err}");
        }
    }

    fn keys(node: &Node) -> Vec<&str> {
        node.as_mapping()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_scalar().unwrap())
            .collect()
    }

    #[test]
    fn a_confined_read_leaves_out_only_the_entries_that_fail() {
        let text = format!(
            "a:\n  x: 1\nb:\n  x: 1\n  x: 2\nc: {}1{}\nd: {}\ne: [1, 2]\na: again\n",
            "[".repeat(limits::MAX_DEPTH + 5),
            "]".repeat(limits::MAX_DEPTH + 5),
            "x".repeat(limits::MAX_SCALAR_BYTES + 1)
        );
        let confined = parse_confined(&text).unwrap();
        let root = confined.root.unwrap();
        assert_eq!(keys(&root), ["a", "e", "a"]);
        assert_eq!(root.get("a").and_then(Node::as_scalar), Some("again"));
        let broken: Vec<(Option<&str>, usize)> = confined
            .broken
            .iter()
            .map(|b| (b.key.as_deref(), b.line))
            .collect();
        assert_eq!(broken, [(Some("b"), 3), (Some("c"), 6), (Some("d"), 7)]);
        assert!(confined.broken[0].error.message.contains("duplicate key"));
        assert_eq!(confined.broken[0].error.line, 5);
        assert!(confined.broken[1].error.message.contains("levels deep"));
        assert!(confined.broken[2].error.message.contains("bytes"));
        assert_eq!(&text[confined.broken[1].start..][..2], "c:");
    }

    #[test]
    fn an_alias_bomb_costs_only_the_entries_that_hold_it_in_a_confined_read() {
        let text = format!("first: 1\n{}last: 2\n", alias_bomb());
        let confined = parse_confined(&text).unwrap();
        let root = confined.root.unwrap();
        let read = keys(&root);
        assert_eq!(read.first(), Some(&"first"));
        assert_eq!(read.last(), Some(&"last"));
        assert!(!confined.broken.is_empty());
        let (first, rest) = confined.broken.split_first().unwrap();
        assert!(first.error.message.contains("alias bomb"), "{first:?}");
        for broken in rest {
            assert!(
                broken.error.message.contains("alias bomb")
                    || broken.error.message.contains("could not be read"),
                "{broken:?}"
            );
        }
        assert!(
            confined
                .broken
                .iter()
                .all(|b| b.key.as_deref().is_some_and(|k| k.starts_with("lol")))
        );
        // The readable entries stay within the one budget.
        let mut scalars = 0usize;
        fn count(node: &Node, n: &mut usize) {
            *n += 1;
            match &node.kind {
                NodeKind::Scalar { .. } => {}
                NodeKind::Sequence(items) => items.iter().for_each(|i| count(i, n)),
                NodeKind::Mapping(entries) => entries.iter().for_each(|(k, v)| {
                    count(k, n);
                    count(v, n)
                }),
            }
        }
        count(&root, &mut scalars);
        assert!(scalars <= limits::node_budget(text.len()), "{scalars}");
    }

    #[test]
    fn a_broken_key_is_confined_and_syntax_errors_are_still_the_whole_texts() {
        let text = format!(
            "? {{a: 1, a: 2}}\n: 1\nok: 2\n? [{}]\n: [x, [y]]\nlast: 3\n",
            "[".repeat(70) + &"]".repeat(70)
        );
        let confined = parse_confined(&text).unwrap();
        assert_eq!(keys(&confined.root.unwrap()), ["ok", "last"]);
        assert_eq!(confined.broken.len(), 2, "{:?}", confined.broken);
        assert!(parse_confined("a: *nowhere\n").is_err());
        assert!(confined.broken.iter().all(|b| b.key.is_none()));
        assert!(parse_confined("a: [1, 2\nb: 3\n").is_err());
        assert!(parse_confined("a: 1\n---\nb: 2\n").is_err());
        // Not a mapping: read as it is.
        let list = parse_confined("- 1\n- 2\n").unwrap();
        assert_eq!(list.root.unwrap().as_sequence().map(<[Node]>::len), Some(2));
        assert!(parse_confined("").unwrap().root.is_none());
    }

    #[test]
    fn aliases_share_the_anchored_value_and_keep_both_lines() {
        let text = "base: &base\n  image: x:1\n  tp: 8\none:\n  <<: *base\ntwo: *base\n";
        let doc = root(text);
        let two = doc.get("two").unwrap();
        assert_eq!(two.alias_line, Some(6));
        assert_eq!(two.line, 1);
        assert_eq!(two.get("image").and_then(Node::as_scalar), Some("x:1"));
        let (NodeKind::Mapping(original), NodeKind::Mapping(shared)) =
            (&doc.get("base").unwrap().kind, &two.kind)
        else {
            panic!("mappings expected");
        };
        assert!(Arc::ptr_eq(original, shared), "the alias copied its target");
        assert!(scalar_token(text, two).is_err());
    }

    #[test]
    fn nesting_past_the_depth_limit_is_refused_with_its_line() {
        let deep = format!(
            "a:\n  {}1{}\n",
            "[".repeat(limits::MAX_DEPTH + 5),
            "]".repeat(limits::MAX_DEPTH + 5)
        );
        let err = parse(&deep).unwrap_err();
        assert_eq!(err.line, 2, "{err}");
        assert!(err.message.contains("levels deep"), "{err}");
        let fine = format!(
            "a: {}1{}\n",
            "[".repeat(limits::MAX_DEPTH - 2),
            "]".repeat(limits::MAX_DEPTH - 2)
        );
        assert!(parse(&fine).is_ok());
    }

    #[test]
    fn an_oversized_scalar_or_document_is_refused() {
        let long = format!("a: b\nc: {}\n", "x".repeat(limits::MAX_SCALAR_BYTES + 1));
        let err = parse(&long).unwrap_err();
        assert_eq!(err.line, 2, "{err}");
        assert!(err.message.contains("bytes"), "{err}");
        let huge = " ".repeat(limits::MAX_DOCUMENT_BYTES + 1);
        assert!(parse(&huge).unwrap_err().message.contains("bytes"));
    }

    #[test]
    fn no_document_has_more_nodes_than_the_cap_whatever_its_size() {
        assert_eq!(limits::node_budget(usize::MAX), limits::MAX_NODES);
        let wide = format!("[{}]\n", "a,".repeat(limits::MAX_NODES + 1));
        assert!(wide.len() < limits::MAX_DOCUMENT_BYTES);
        let err = parse(&wide).unwrap_err();
        assert!(err.message.contains("nodes"), "{err}");
    }

    #[test]
    fn scalars_resolve_like_pyyaml() {
        assert_eq!(resolve_plain("2_063_837"), Value::from(2063837));
        assert_eq!(resolve_plain("0.95"), serde_json::json!(0.95));
        assert_eq!(resolve_plain("true"), Value::Bool(true));
        assert_eq!(resolve_plain("v0.5"), Value::from("v0.5"));
        assert_eq!(resolve_plain("1.3.0rc14"), Value::from("1.3.0rc14"));
        assert_eq!(resolve_plain("~"), Value::Null);
    }

    #[test]
    fn encoding_keeps_the_quote_style() {
        assert_eq!(
            encode_scalar("a:b", Style::DoubleQuoted).unwrap(),
            "\"a:b\""
        );
        assert_eq!(
            encode_scalar("it's", Style::SingleQuoted).unwrap(),
            "'it''s'"
        );
        assert_eq!(
            encode_scalar("vllm/x:v1@sha256:ab", Style::Plain).unwrap(),
            "vllm/x:v1@sha256:ab"
        );
        assert!(encode_scalar("a: b", Style::Plain).is_err());
        assert!(encode_scalar("123", Style::Plain).is_err());
    }
}
