//! A text Klaud writes in English and Chinese, both written where the text
//! is defined, so neither language can drift from the other or be
//! forgotten.

use std::borrow::Cow;

/// One text in both languages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bilingual {
    /// The English.
    pub en: Cow<'static, str>,
    /// The Chinese.
    pub zh: Cow<'static, str>,
}

/// `Bilingual::new("English", "中文")`, for tables and `const`s.
#[macro_export]
macro_rules! bi {
    ($en:expr, $zh:expr $(,)?) => {
        $crate::Bilingual::new($en, $zh)
    };
}

impl Bilingual {
    /// A fixed text.
    pub const fn new(en: &'static str, zh: &'static str) -> Self {
        Bilingual {
            en: Cow::Borrowed(en),
            zh: Cow::Borrowed(zh),
        }
    }

    /// A text made at run time (one `format!` per language, side by side).
    pub fn owned(en: impl Into<String>, zh: impl Into<String>) -> Self {
        Bilingual {
            en: Cow::Owned(en.into()),
            zh: Cow::Owned(zh.into()),
        }
    }

    /// The same text in both languages (a name, a number, outside text
    /// that has no translation).
    pub fn same(text: impl Into<String>) -> Self {
        let text = text.into();
        Bilingual::owned(text.clone(), text)
    }

    /// Both languages on one line, English first: `English / 中文`.
    pub fn both(&self) -> String {
        format!("{} / {}", self.en, self.zh)
    }

    /// Adds a piece to each language, the two written side by side so a
    /// text built up in one pass over its data keeps them aligned.
    pub fn push(&mut self, en: impl AsRef<str>, zh: impl AsRef<str>) {
        self.en.to_mut().push_str(en.as_ref());
        self.zh.to_mut().push_str(zh.as_ref());
    }

    /// Adds the same piece to both languages (a table row of numbers, a
    /// code span, outside text).
    pub fn push_same(&mut self, text: impl AsRef<str>) {
        let text = text.as_ref();
        self.push(text, text);
    }

    /// Adds another bilingual text, each language to its own.
    pub fn append(&mut self, more: &Bilingual) {
        self.push(&more.en, &more.zh);
    }

    /// True when both languages are empty.
    pub fn is_empty(&self) -> bool {
        self.en.is_empty() && self.zh.is_empty()
    }

    /// The English, then the Chinese folded under a `中文` summary: the
    /// layout of every long text Klaud posts.
    pub fn folded(&self) -> String {
        format!(
            "{}\n<details>\n<summary>中文</summary>\n\n{}\n</details>\n",
            self.en, self.zh
        )
    }

    /// The entry of `table` whose English is `en`.
    pub fn find<'t>(table: &'t [Bilingual], en: &str) -> Option<&'t Bilingual> {
        table.iter().find(|b| b.en == en)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DONE: Bilingual = bi!("done", "完成");

    #[test]
    fn one_text_two_languages() {
        assert_eq!((&*DONE.en, &*DONE.zh), ("done", "完成"));
        assert_eq!(DONE.both(), "done / 完成");
        assert_eq!(Bilingual::find(&[DONE], "done"), Some(&DONE));
        assert_eq!(Bilingual::same("x"), Bilingual::new("x", "x"));
    }

    #[test]
    fn built_in_one_pass() {
        let mut b = Bilingual::default();
        assert!(b.is_empty());
        b.push("Jobs: ", "作业：");
        b.push_same("3");
        b.append(&DONE);
        assert_eq!(b, Bilingual::owned("Jobs: 3done", "作业：3完成"));
        assert_eq!(
            b.folded(),
            "Jobs: 3done\n<details>\n<summary>中文</summary>\n\n作业：3完成\n</details>\n"
        );
    }
}
