//! A text Klaud writes in English and Chinese, both written where the text
//! is defined, so neither language can drift from the other or be
//! forgotten.

use std::borrow::Cow;

/// One text in both languages.
#[derive(Debug, Clone, PartialEq, Eq)]
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

    /// The Chinese when `zh`, else the English: for renderers that write
    /// one language per pass.
    pub fn pick(&self, zh: bool) -> &str {
        if zh { &self.zh } else { &self.en }
    }

    /// Both languages on one line, English first: `English / 中文`.
    pub fn both(&self) -> String {
        format!("{} / {}", self.en, self.zh)
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
        assert_eq!(DONE.pick(false), "done");
        assert_eq!(DONE.pick(true), "完成");
        assert_eq!(DONE.both(), "done / 完成");
        assert_eq!(Bilingual::find(&[DONE], "done"), Some(&DONE));
        assert_eq!(Bilingual::same("x").pick(true), "x");
    }
}
