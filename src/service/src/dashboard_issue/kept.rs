//! What the dashboard issue keeps for Klaud: the hidden, versioned state
//! block (the ignores maintainers made there and the last steering notes)
//! and the checkboxes maintainers tick. The body is edited by people, so
//! both are read as hostile input: bounded, and a block that does not read
//! is a note on the issue, never a panic.

use chrono::{DateTime, Utc};
use klaud_claims::PullNumber;
use serde::{Deserialize, Serialize};

/// Why the state block in the issue body does not read (shown as a note on
/// the issue; the block itself is kept byte for byte, never written anew,
/// and planning holds until it reads again).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct UnreadableState {
    message: String,
    /// The block is a newer version than this Klaud reads: a newer
    /// instance keeps the issue, and this one leaves it alone.
    pub newer: bool,
}

/// Opens the state block; the version follows.
const STATE_OPEN: &str = "<!-- klaud:state ";
/// The version this Klaud writes and reads.
const STATE_VERSION: &str = "v1";
/// Closes an HTML comment.
const COMMENT_CLOSE: &str = "-->";
/// Largest state block read (GitHub bodies stop at 65536 characters).
pub const MAX_STATE_BYTES: usize = 32 * 1024;
/// Most ignores the dashboard keeps.
pub const MAX_IGNORES: usize = 100;
/// Most closed PRs remembered as already turned into rules; the oldest
/// are forgotten first (their rules, if still kept, stay in `ignores`).
pub const MAX_DECLINED: usize = 500;
/// Steering notes shown (newest last).
pub const MAX_NOTES: usize = 10;
/// Longest family, image, login or note kept.
const MAX_FIELD: usize = 400;
/// Most run-now requests waiting for a wave.
pub const MAX_RUN_NOW: usize = 20;
/// Most ticked boxes applied in one pass; the rest wait for the next.
pub const MAX_ACTIONS: usize = 50;
/// Lines longer than this are nobody's checkbox.
const MAX_LINE: usize = 2_000;
/// Marks a steering checkbox: `<!-- klaud:do <action> -->`.
const DO_OPEN: &str = "<!-- klaud:do ";

/// The state the issue carries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kept {
    /// Ignores made on the dashboard, oldest first.
    #[serde(default)]
    pub ignores: Vec<KeptIgnore>,
    /// The last steering notes (what was applied or refused), oldest first.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Klaud PRs closed unmerged whose "not this image" rule is already in
    /// `ignores` (or was undone there): each becomes a rule once, so an
    /// undo stays undone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub declined: Vec<PullNumber>,
    /// Families a maintainer asked to run now, waiting for a wave that
    /// plans them first; each is cleared with a note once a wave has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_now: Vec<KeptRunNow>,
    /// Playbook entries Klaud learned, waiting for a maintainer's box or
    /// for the playbook to have them (see `learned`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub learned: Vec<super::learned::KeptLearned>,
}

/// One run-now request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeptRunNow {
    /// The family (`configs/<file>:<key>`).
    pub family: String,
    /// Who ticked the box.
    pub by: String,
    /// When Klaud took it.
    pub at: DateTime<Utc>,
}

/// One ignore made on the dashboard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeptIgnore {
    /// The family (`configs/<file>:<key>`).
    pub family: String,
    /// One image (`repository:tag`, normalized) until a newer one; `None`:
    /// the whole family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Who ticked the box.
    pub by: String,
    /// When Klaud applied it.
    pub at: DateTime<Utc>,
    /// The Klaud PR whose closing without merging made this rule ("not
    /// this image"); `None`: a box ticked here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<PullNumber>,
}

impl Kept {
    /// Adds a note, keeping the last `MAX_NOTES`.
    pub fn note(&mut self, text: String) {
        self.notes.push(clip(&text));
        let excess = self.notes.len().saturating_sub(MAX_NOTES);
        self.notes.drain(..excess);
    }

    /// Takes in the "not this image" rule of each PR a person closed
    /// (`declined`, from the journal) that is not yet known here: the rule
    /// then lives in the issue, on GitHub, whatever happens to the store.
    /// Returns whether anything changed.
    pub fn absorb_declined(
        &mut self,
        declined: &[(String, klaud_lifecycle::model::Declined)],
        now: DateTime<Utc>,
    ) -> bool {
        let mut changed = false;
        for (family, d) in declined {
            if self.declined.contains(&d.pull) {
                continue;
            }
            self.declined.push(d.pull);
            changed = true;
            let exists = self
                .ignores
                .iter()
                .any(|i| i.family == *family && i.image.as_deref() == Some(d.image.as_str()));
            if exists || self.ignores.len() >= MAX_IGNORES {
                continue;
            }
            self.ignores.push(KeptIgnore {
                family: clip(family),
                image: Some(clip(&d.image)),
                by: clip(&d.by),
                at: now,
                pull: Some(d.pull),
            });
        }
        let excess = self.declined.len().saturating_sub(MAX_DECLINED);
        self.declined.drain(..excess);
        changed
    }

    /// The block as written into the body: JSON inside an HTML comment,
    /// with every `>` escaped so no value can close the comment.
    pub fn block(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned());
        format!(
            "{STATE_OPEN}{STATE_VERSION} {} {COMMENT_CLOSE}",
            json.replace('>', "\\u003e")
        )
    }

    /// The block in `body`: `Ok(None)` without one, `Err` naming what is
    /// wrong with one that does not read.
    pub fn read(body: &str) -> Result<Option<Kept>, UnreadableState> {
        Self::read_block(body).map_err(|message| UnreadableState {
            newer: newer_version(body),
            message,
        })
    }

    /// The state block in `body` exactly as written (from its opening to
    /// its `-->`, or to the end of the body when it never closes), to keep
    /// byte for byte when it does not read.
    pub fn raw_block(body: &str) -> Option<&str> {
        let start = body.find(STATE_OPEN)?;
        let rest = &body[start..];
        Some(match rest[STATE_OPEN.len()..].find(COMMENT_CLOSE) {
            Some(end) => &rest[..STATE_OPEN.len() + end + COMMENT_CLOSE.len()],
            None => rest,
        })
    }

    fn read_block(body: &str) -> Result<Option<Kept>, String> {
        let Some(start) = body.find(STATE_OPEN) else {
            return Ok(None);
        };
        let rest = &body[start + STATE_OPEN.len()..];
        let Some(end) = rest.find(COMMENT_CLOSE) else {
            return Err("the state block does not end (no `-->`)".into());
        };
        let inner = rest[..end].trim();
        if inner.len() > MAX_STATE_BYTES {
            return Err(format!(
                "the state block has {} bytes, more than the {MAX_STATE_BYTES} Klaud reads",
                inner.len()
            ));
        }
        let (version, json) = inner.split_once(char::is_whitespace).unwrap_or((inner, ""));
        if version != STATE_VERSION {
            return Err(format!(
                "the state block is version {version:?}; this Klaud reads {STATE_VERSION:?}"
            ));
        }
        let kept: Kept = serde_json::from_str(json.trim()).map_err(|e| {
            format!(
                "the state block is not valid: {e} (line {}, column {})",
                e.line(),
                e.column()
            )
        })?;
        kept.check()?;
        Ok(Some(kept))
    }

    fn check(&self) -> Result<(), String> {
        if self.ignores.len() > MAX_IGNORES {
            return Err(format!(
                "the state block holds {} ignores, more than {MAX_IGNORES}",
                self.ignores.len()
            ));
        }
        if self.declined.len() > MAX_DECLINED {
            return Err(format!(
                "the state block remembers {} closed PRs, more than {MAX_DECLINED}",
                self.declined.len()
            ));
        }
        if self.run_now.len() > MAX_RUN_NOW {
            return Err(format!(
                "the state block holds {} run-now requests, more than {MAX_RUN_NOW}",
                self.run_now.len()
            ));
        }
        for (i, r) in self.run_now.iter().enumerate() {
            for (name, v) in [("family", &r.family), ("by", &r.by)] {
                if v.is_empty() || v.len() > MAX_FIELD || v.chars().any(char::is_whitespace) {
                    return Err(format!(
                        "run_now[{i}].{name} {:?} is empty, too long or has spaces",
                        v.chars().take(60).collect::<String>()
                    ));
                }
            }
        }
        if self.learned.len() > super::learned::MAX_LEARNED {
            return Err(format!(
                "the state block holds {} learned entries, more than {}",
                self.learned.len(),
                super::learned::MAX_LEARNED
            ));
        }
        if let Some(i) = self.learned.iter().position(|l| !l.is_bounded()) {
            return Err(format!(
                "learned[{i}] is not an entry Klaud proposes (id, family, path, base or YAML out of bounds)"
            ));
        }
        if self.notes.len() > MAX_NOTES {
            return Err(format!(
                "the state block holds {} notes, more than {MAX_NOTES}",
                self.notes.len()
            ));
        }
        for (i, ig) in self.ignores.iter().enumerate() {
            let field = |name: &str, v: &str| -> Result<(), String> {
                if v.is_empty() || v.len() > MAX_FIELD || v.chars().any(char::is_whitespace) {
                    return Err(format!(
                        "ignores[{i}].{name} {:?} is empty, too long or has spaces",
                        v.chars().take(60).collect::<String>()
                    ));
                }
                Ok(())
            };
            field("family", &ig.family)?;
            field("by", &ig.by)?;
            if let Some(image) = &ig.image {
                field("image", image)?;
            }
        }
        if let Some(i) = self.notes.iter().position(|n| n.len() > MAX_FIELD * 2) {
            return Err(format!("notes[{i}] is too long"));
        }
        Ok(())
    }
}

/// `text` cut to a bounded length on a character boundary.
/// Whether the state block in `body` names a version newer than the one
/// this Klaud writes (`v2` and up, where this Klaud writes `v1`).
fn newer_version(body: &str) -> bool {
    let version_of = |v: &str| v.strip_prefix('v').and_then(|n| n.parse::<u32>().ok());
    let Some(start) = body.find(STATE_OPEN) else {
        return false;
    };
    let version = body[start + STATE_OPEN.len()..]
        .split(|c: char| c.is_whitespace() || c == '-')
        .next()
        .unwrap_or("");
    matches!(
        (version_of(version), version_of(STATE_VERSION)),
        (Some(found), Some(ours)) if found > ours
    )
}

pub fn clip(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.len() <= MAX_FIELD {
        return one_line;
    }
    let mut end = MAX_FIELD;
    while !one_line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &one_line[..end])
}

/// What a ticked box asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Lift the family's cooldown now.
    Retry { family: String },
    /// Plan the family first on the next wave, whatever the budget.
    RunNow { family: String },
    /// Never bump the family (until undone).
    IgnoreFamily { family: String },
    /// Never propose this image to the family; a newer one is.
    IgnoreImage { family: String, image: String },
    /// Undo a dashboard ignore.
    Unignore {
        family: String,
        image: Option<String>,
    },
    /// Open a pull request adding a learned entry to the playbook.
    AddPlaybookEntry { id: String },
}

impl Action {
    /// The marker text after `klaud:do `.
    pub fn code(&self) -> String {
        match self {
            Action::Retry { family } => format!("retry {family}"),
            Action::RunNow { family } => format!("run-now {family}"),
            Action::IgnoreFamily { family } => format!("ignore {family}"),
            Action::IgnoreImage { family, image } => format!("ignore {family} {image}"),
            Action::Unignore {
                family,
                image: None,
            } => format!("unignore {family}"),
            Action::Unignore {
                family,
                image: Some(image),
            } => format!("unignore {family} {image}"),
            Action::AddPlaybookEntry { id } => format!("playbook-add {id}"),
        }
    }

    /// A checkbox line for this action, unticked; without its box when a
    /// name in it (from the repository or the issue) could end the hidden
    /// marker early or would not read back as one word.
    pub fn checkbox(&self, label: &str) -> String {
        let code = self.code();
        let readable = code.len() <= MAX_LINE / 2
            && !code.contains(['<', '>'])
            && Action::parse(&code).as_ref() == Some(self);
        if readable {
            format!("- [ ] {label} {DO_OPEN}{code} {COMMENT_CLOSE}")
        } else {
            format!(
                "- {label} (no box: a name here cannot be written into its marker / 名称无法写入标记，无复选框)"
            )
        }
    }

    fn parse(code: &str) -> Option<Self> {
        let words: Vec<&str> = code.split_whitespace().collect();
        if words.iter().any(|w| w.len() > MAX_FIELD) {
            return None;
        }
        let owned = |s: &str| s.to_owned();
        match words.as_slice() {
            ["retry", f] => Some(Action::Retry { family: owned(f) }),
            ["run-now", f] => Some(Action::RunNow { family: owned(f) }),
            ["playbook-add", id] => Some(Action::AddPlaybookEntry { id: owned(id) }),
            ["ignore", f] => Some(Action::IgnoreFamily { family: owned(f) }),
            ["ignore", f, i] => Some(Action::IgnoreImage {
                family: owned(f),
                image: owned(i),
            }),
            ["unignore", f] => Some(Action::Unignore {
                family: owned(f),
                image: None,
            }),
            ["unignore", f, i] => Some(Action::Unignore {
                family: owned(f),
                image: Some(owned(i)),
            }),
            _ => None,
        }
    }
}

/// The ticked steering boxes of `body`, in order, each once, at most
/// [`MAX_ACTIONS`]. A box whose marker does not read is skipped.
pub fn ticked(body: &str) -> Vec<Action> {
    let mut out: Vec<Action> = Vec::new();
    for line in body.lines().filter(|l| l.len() <= MAX_LINE) {
        let t = line.trim_start();
        let Some(rest) = ["- [x]", "- [X]", "* [x]", "* [X]"]
            .iter()
            .find_map(|p| t.strip_prefix(p))
        else {
            continue;
        };
        let Some(code) = rest
            .find(DO_OPEN)
            .map(|i| &rest[i + DO_OPEN.len()..])
            .and_then(|r| r.find(COMMENT_CLOSE).map(|e| &r[..e]))
        else {
            continue;
        };
        if let Some(a) = Action::parse(code)
            && !out.contains(&a)
        {
            out.push(a);
        }
        if out.len() >= MAX_ACTIONS {
            break;
        }
    }
    out
}

/// `text` with every ticked box unticked (Klaud has applied them).
pub fn untick(text: &str) -> String {
    text.lines()
        .map(|line| {
            let indent = line.len() - line.trim_start().len();
            let t = &line[indent..];
            for (ticked, open) in [("- [x]", "- [ ]"), ("- [X]", "- [ ]"), ("* [x]", "* [ ]")] {
                if let Some(rest) = t.strip_prefix(ticked) {
                    return format!("{}{open}{rest}", &line[..indent]);
                }
            }
            line.to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_round_trips_and_cannot_be_closed_by_a_value() {
        let mut kept = Kept::default();
        kept.ignores.push(KeptIgnore {
            family: "configs/a.yaml:k-->".into(),
            image: Some("lmsysorg/sglang:v1".into()),
            by: "alice".into(),
            at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            pull: None,
        });
        kept.note("applied --> <b>".into());
        let body = format!("text\n{}\nmore", kept.block());
        assert_eq!(body.matches("-->").count(), 1, "{body}");
        assert_eq!(Kept::read(&body), Ok(Some(kept)));
    }

    #[test]
    fn a_closed_pull_becomes_a_rule_once_and_an_undo_stays_undone() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let declined = vec![(
            "configs/a.yaml:k".to_owned(),
            klaud_lifecycle::model::Declined {
                pull: PullNumber::from(7),
                by: "alice".into(),
                family: "0123456789abcdef".into(),
                image: "lmsysorg/sglang:v1".into(),
            },
        )];
        let mut kept = Kept::default();
        assert!(kept.absorb_declined(&declined, at));
        assert_eq!(kept.ignores.len(), 1);
        assert_eq!(kept.ignores[0].pull, Some(PullNumber::from(7)));
        assert_eq!(kept.declined, vec![PullNumber::from(7)]);
        let round = Kept::read(&kept.block()).unwrap().unwrap();
        assert_eq!(round, kept);
        // Undone on the dashboard: the journal still knows the closed PR,
        // and it is not made a rule again.
        kept.ignores.clear();
        assert!(!kept.absorb_declined(&declined, at));
        assert!(kept.ignores.is_empty());
    }

    #[test]
    fn a_malformed_block_is_an_error_naming_what_is_wrong() {
        let read_err = |body: &str| Kept::read(body).unwrap_err().to_string();
        let e = read_err("<!-- klaud:state v1 {\"ignores\": 3} -->");
        assert!(e.contains("not valid") && e.contains("column"), "{e}");
        let e = read_err("<!-- klaud:state v9 {} -->");
        assert!(e.contains("v9"), "{e}");
        let e = read_err("<!-- klaud:state v1 {}");
        assert!(e.contains("does not end"), "{e}");
        let huge = format!(
            "<!-- klaud:state v1 {{\"notes\": [\"{}\"]}} -->",
            "x".repeat(MAX_STATE_BYTES)
        );
        assert!(read_err(&huge).contains("more than"));
        let spaced = r#"<!-- klaud:state v1 {"ignores": [{"family": "a b", "by": "x", "at": "2026-01-01T00:00:00Z"}]} -->"#;
        assert!(read_err(spaced).contains("ignores[0].family"));
        assert_eq!(Kept::read("no block"), Ok(None));
    }

    #[test]
    fn a_run_now_box_reads_and_its_request_round_trips_bounded() {
        let run = Action::RunNow {
            family: "configs/a.yaml:k".into(),
        };
        let body = run.checkbox("Run now").replace("[ ]", "[x]");
        assert!(
            body.contains("<!-- klaud:do run-now configs/a.yaml:k -->"),
            "{body}"
        );
        assert_eq!(ticked(&body), vec![run]);
        let mut kept = Kept::default();
        kept.run_now.push(KeptRunNow {
            family: "configs/a.yaml:k".into(),
            by: "alice".into(),
            at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
        });
        assert_eq!(Kept::read(&kept.block()), Ok(Some(kept.clone())));
        // Without a request the block is what older versions wrote.
        assert!(!Kept::default().block().contains("run_now"));
        let spaced = r#"<!-- klaud:state v1 {"run_now": [{"family": "a b", "by": "x", "at": "2026-01-01T00:00:00Z"}]} -->"#;
        let e = Kept::read(spaced).unwrap_err().to_string();
        assert!(e.contains("run_now[0].family"), "{e}");
    }

    #[test]
    fn ticked_boxes_are_read_once_and_unticked() {
        let retry = Action::Retry {
            family: "configs/a.yaml:k".into(),
        };
        let image = Action::IgnoreImage {
            family: "configs/a.yaml:k".into(),
            image: "vllm/vllm-openai:v1".into(),
        };
        let body = format!(
            "{}\n{}\n{}\n  - [X] again <!-- klaud:do retry configs/a.yaml:k -->\n- [x] junk <!-- klaud:do explode -->",
            retry.checkbox("Retry").replace("[ ]", "[x]"),
            image.checkbox("Ignore"),
            Action::Unignore {
                family: "configs/b.yaml:j".into(),
                image: None
            }
            .checkbox("Undo")
        );
        assert_eq!(ticked(&body), vec![retry]);
        let clean = untick(&body);
        assert!(ticked(&clean).is_empty(), "{clean}");
        assert!(clean.contains("  - [ ] again"), "{clean}");
    }
}
