//! The one table of every `/klaud` verb as people are told about it: how
//! it is written, what it does in both languages, and who may give it. The
//! PR footer, the reply to an unknown verb and the command table of
//! `configs/README.md` are made from [`COMMANDS`] (a test keeps the README
//! in step).
//!
//! A leaf: it names the verbs but none of their effects, so the report
//! that writes the PR footer reads it without importing the engine that
//! the verbs' files drive (that would close an import loop: the engine
//! writes the reports).

use super::{Command, Permission};

/// Who may give a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// A person who may push: `write`, `maintain` or `admin`
    /// ([`Permission::may_write`]).
    Write,
}

impl Needs {
    /// Whether `role` may give the command.
    pub fn allows(self, role: &Permission) -> bool {
        match self {
            Needs::Write => role.may_write(),
        }
    }

    /// The roles, as replies and the docs name them.
    pub fn roles(self) -> &'static str {
        match self {
            Needs::Write => "write, maintain or admin",
        }
    }
}

/// One `/klaud` command as people are told about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandHelp {
    /// The command it is.
    pub command: Command,
    /// How it is written.
    pub usage: &'static str,
    /// What it does, in English.
    pub en: &'static str,
    /// What it does, in Chinese.
    pub zh: &'static str,
    /// Who may give it.
    pub needs: Needs,
}

/// Every command Klaud answers, in the order people are shown them.
pub const COMMANDS: [CommandHelp; 6] = [
    CommandHelp {
        command: Command::Retry,
        usage: "/klaud retry",
        en: "run the next attempt again now (also lifts the family's cooldown)",
        zh: "立即重新运行下一次尝试（同时解除该系列的冷却）",
        needs: Needs::Write,
    },
    CommandHelp {
        command: Command::Status,
        usage: "/klaud status",
        en: "reply with the candidate's state",
        zh: "回复候选的当前状态",
        needs: Needs::Write,
    },
    CommandHelp {
        command: Command::Stop,
        usage: "/klaud stop",
        en: "Klaud stops changing this PR and its branch and releases its claim",
        zh: "Klaud 不再修改此 PR 及其分支，并释放认领",
        needs: Needs::Write,
    },
    CommandHelp {
        command: Command::Release,
        usage: "/klaud release",
        en: "clean up the candidate (its runs cancelled, the PR closed) and release its claim",
        zh: "清理该候选（取消其运行并关闭 PR），并释放认领",
        needs: Needs::Write,
    },
    CommandHelp {
        command: Command::Try,
        usage: "/klaud try <name> [from <variant>]: <edits>",
        en: "start another variant of this candidate that races this one",
        zh: "为该候选启动另一个变体，与本 PR 并行比较",
        needs: Needs::Write,
    },
    CommandHelp {
        command: Command::Hunt,
        usage: "/klaud hunt [point]",
        en: "find the first nightly between the old and the new image whose smoke fails (the point, if given, is named in the hunt's reports)",
        zh: "在旧镜像与新镜像之间找出第一个冒烟测试失败的 nightly（给出的测试点会写在排查报告中）",
        needs: Needs::Write,
    },
];

/// The command a verb names (any case); an unknown one keeps at most 40
/// characters of what was written, for the help reply.
pub(crate) fn command_of(verb: &str) -> Command {
    COMMANDS
        .into_iter()
        .map(|c| c.command)
        .find(|c| c.verb().eq_ignore_ascii_case(verb))
        .unwrap_or_else(|| Command::Unknown(verb.chars().take(40).collect()))
}

/// The commands' usages, for one line: `` `/klaud retry`, `/klaud status`, … ``.
pub fn usages() -> String {
    COMMANDS
        .iter()
        .map(|c| {
            let verb: Vec<&str> = c.usage.splitn(3, ' ').take(2).collect();
            format!("`{}`", verb.join(" "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Markdown table of the commands in `configs/README.md`.
pub fn docs_table() -> String {
    let mut out = String::from("| command | what it does | who may |\n| --- | --- | --- |\n");
    for c in COMMANDS {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            c.usage,
            c.en,
            c.needs.roles()
        ));
    }
    out
}
