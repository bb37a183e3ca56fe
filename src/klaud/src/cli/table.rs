//! The CLI's tables: columns padded to their widest cell, two spaces apart,
//! fitted into [`WIDTH`] columns unless `--wide`. Family strings, image
//! references and digests run long and a plan's reasons longer still, so a
//! table that does not fit elides its widest cells in the middle (both ends
//! of an image reference say the most: the repository and the tag) and
//! wraps its last column, which is free text wherever the CLI has one.

/// The terminal width a table fits in, unless `--wide`.
pub const WIDTH: usize = 100;

/// Below this a cell is not elided further (nor below its header).
const MIN_ELIDED: usize = 16;

/// Below this a cell that keeps its end is not cut further: a family's
/// key with the end of its file name.
const MIN_TAIL: usize = 28;

/// Below this the wrapped last column is not narrowed further.
const MIN_WRAPPED: usize = 16;

/// Marks what an elided cell left out.
const ELLIPSIS: char = '…';

/// How a column gives up width when the table does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Its cells lose their middle (image references, digests).
    Elide,
    /// Its cells lose their start: family strings
    /// (`configs/<file>:<key>`), whose key at the end says the most.
    Tail,
    /// Never narrowed (a URL, a short status word).
    Keep,
    /// Wrapped onto more lines; only for the last column (free text).
    Wrap,
    /// Only for the last column (long free text, such as a plan's
    /// reasons): when the table does not fit, the column's cells go on
    /// lines of their own under their row, indented, so the other columns
    /// keep their width.
    Below,
}

/// How far a cell moved under its row is indented.
const BELOW_INDENT: usize = 4;

/// The table, fitted into `limit` columns (`None`: as wide as its cells),
/// every column elided but the last, which wraps.
pub fn render<R: AsRef<[String]>>(header: &[&str], rows: &[R], limit: Option<usize>) -> String {
    let mut fits = vec![Fit::Elide; header.len()];
    if let Some(last) = fits.last_mut() {
        *last = Fit::Wrap;
    }
    render_fitted(header, &fits, rows, limit)
}

/// [`render`] with each column's [`Fit`] given (`fits` as long as
/// `header`; a `Wrap` before the last column counts as `Elide`).
pub fn render_fitted<R: AsRef<[String]>>(
    header: &[&str],
    fits: &[Fit],
    rows: &[R],
    limit: Option<usize>,
) -> String {
    let last = header.len().saturating_sub(1);
    let fits: Vec<Fit> = (0..header.len())
        .map(|i| match fits.get(i).copied().unwrap_or(Fit::Elide) {
            Fit::Wrap | Fit::Below if i != last => Fit::Elide,
            fit => fit,
        })
        .collect();
    let header: Vec<String> = header.iter().map(|h| clean(h)).collect();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut cells: Vec<String> = r.as_ref().iter().map(|c| clean(c)).collect();
            cells.resize(header.len(), String::new());
            cells
        })
        .collect();
    let natural: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| width(&r[i]))
                .chain([width(&header[i])])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let floors: Vec<usize> = (0..header.len())
        .map(|i| match fits[i] {
            Fit::Keep => natural[i],
            Fit::Elide => width(&header[i]).max(MIN_ELIDED).min(natural[i]),
            Fit::Tail => width(&header[i]).max(MIN_TAIL).min(natural[i]),
            Fit::Wrap => width(&header[i]).max(MIN_WRAPPED).min(natural[i]),
            Fit::Below => natural[i],
        })
        .collect();
    if let Some(limit) = limit
        && fits[last] == Fit::Below
        && natural.iter().sum::<usize>() + 2 * last > limit
    {
        return below(&header, &fits, &rows, limit);
    }
    let wraps = fits.last() == Some(&Fit::Wrap);
    let widths = match limit {
        Some(limit) => fit(&natural, &floors, &fits, wraps, limit),
        None => natural,
    };
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        push_row(&mut out, row, &widths, &fits);
    }
    out
}

/// Column widths within `limit`: the columns that may shrink are capped
/// at one common width, the largest that fits (never below a column's
/// floor), so the longest cells give way first and equally; elided
/// columns (image references) give way before the family strings, which
/// name the row. A wrapped last column keeps its floor meanwhile, then
/// takes what is left. A table whose floors do not fit stays wider than
/// `limit`.
fn fit(natural: &[usize], floors: &[usize], fits: &[Fit], wraps: bool, limit: usize) -> Vec<usize> {
    let Some(last) = natural.len().checked_sub(1) else {
        return Vec::new();
    };
    let gaps = 2 * last;
    let total = |w: &[usize]| w.iter().sum::<usize>() + gaps;
    if total(natural) <= limit {
        return natural.to_vec();
    }
    let mut widths = natural.to_vec();
    if wraps {
        widths[last] = floors[last];
    }
    let columns = if wraps { last } else { last + 1 };
    for phase in [Fit::Elide, Fit::Tail] {
        let shrinks: Vec<usize> = (0..columns).filter(|&i| fits[i] == phase).collect();
        let capped = |cap: usize| -> Vec<usize> {
            let mut w = widths.clone();
            for &i in &shrinks {
                w[i] = natural[i].min(cap).max(floors[i]);
            }
            w
        };
        if shrinks.is_empty() || total(&widths) <= limit {
            continue;
        }
        // The largest cap that fits, by bisection: cheap even for a
        // hostile cell a megabyte long.
        let (mut fits, mut over) = (0usize, natural.iter().copied().max().unwrap_or(0) + 1);
        while fits + 1 < over {
            let mid = fits + (over - fits) / 2;
            if total(&capped(mid)) <= limit {
                fits = mid;
            } else {
                over = mid;
            }
        }
        widths = capped(fits);
    }
    if wraps {
        let used = total(&widths) - widths[last];
        widths[last] = natural[last].min(limit.saturating_sub(used).max(floors[last]));
    }
    widths
}

/// The table without its last column, each row followed by that
/// column's cell on lines of its own (none for an empty cell or `-`).
fn below(header: &[String], fits: &[Fit], rows: &[Vec<String>], limit: usize) -> String {
    let last = header.len() - 1;
    let names: Vec<&str> = header[..last].iter().map(String::as_str).collect();
    let firsts: Vec<&[String]> = rows.iter().map(|r| &r[..last]).collect();
    let table = render_fitted(&names, &fits[..last], &firsts, Some(limit));
    let mut lines = table.lines();
    let mut out = String::new();
    if let Some(head) = lines.next() {
        out.push_str(head);
        out.push('\n');
    }
    for (row, line) in rows.iter().zip(lines) {
        out.push_str(line);
        out.push('\n');
        let text = &row[last];
        if text.is_empty() || text == "-" {
            continue;
        }
        for more in wrap(text, limit.saturating_sub(BELOW_INDENT)) {
            out.push_str(&" ".repeat(BELOW_INDENT));
            out.push_str(more.trim_end());
            out.push('\n');
        }
    }
    out
}

/// One row; a wrapped last cell continues on lines under itself.
fn push_row(out: &mut String, row: &[String], widths: &[usize], fits: &[Fit]) {
    let Some(last) = widths.len().checked_sub(1) else {
        out.push('\n');
        return;
    };
    let cut = |cell: &str, i: usize| match fits[i] {
        Fit::Tail => elide_start(cell, widths[i]),
        _ => elide(cell, widths[i]),
    };
    let mut line = String::new();
    for (i, cell) in row.iter().enumerate().take(last) {
        let cell = cut(cell, i);
        line.push_str(&cell);
        line.push_str(&" ".repeat(widths[i] - width(&cell) + 2));
    }
    let indent = line.chars().count();
    let lines = if fits[last] == Fit::Wrap {
        wrap(&row[last], widths[last])
    } else {
        vec![cut(&row[last], last)]
    };
    let mut wrapped = lines.into_iter();
    line.push_str(&wrapped.next().unwrap_or_default());
    out.push_str(line.trim_end());
    out.push('\n');
    for more in wrapped {
        out.push_str(&" ".repeat(indent));
        out.push_str(more.trim_end());
        out.push('\n');
    }
}

/// One line, whitespace runs as one space, control characters shown as
/// `?`: a cell is often text from outside (an error, a PR title), and a
/// line break or an escape in it would break the table.
fn clean(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn width(text: &str) -> usize {
    text.chars().count()
}

/// `text` in at most `w` characters, its middle replaced by `…`.
pub fn elide(text: &str, w: usize) -> String {
    let n = width(text);
    if n <= w {
        return text.to_owned();
    }
    if w == 0 {
        return String::new();
    }
    let keep = w - 1;
    let head = keep / 2;
    let tail = keep - head;
    let mut out: String = text.chars().take(head).collect();
    out.push(ELLIPSIS);
    out.extend(text.chars().skip(n - tail));
    out
}

/// `text` in at most `w` characters, its start replaced by `…`.
pub fn elide_start(text: &str, w: usize) -> String {
    let n = width(text);
    if n <= w {
        return text.to_owned();
    }
    if w == 0 {
        return String::new();
    }
    let mut out = String::from(ELLIPSIS);
    out.extend(text.chars().skip(n - (w - 1)));
    out
}

/// `text` in lines of at most `w` characters, broken between words; a word
/// longer than a line is cut.
fn wrap(text: &str, w: usize) -> Vec<String> {
    let w = w.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ').filter(|s| !s.is_empty()) {
        let word: Vec<char> = word.chars().collect();
        let used = width(&line);
        if used > 0 && used + 1 + word.len() <= w {
            line.push(' ');
            line.extend(&word);
            continue;
        }
        if used > 0 {
            lines.push(std::mem::take(&mut line));
        }
        let mut pieces = word.chunks(w).peekable();
        while let Some(piece) = pieces.next() {
            if pieces.peek().is_some() {
                lines.push(piece.iter().collect());
            } else {
                line.extend(piece);
            }
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(row: &[&str]) -> Vec<String> {
        row.iter().map(|c| (*c).to_owned()).collect()
    }

    #[test]
    fn a_table_that_fits_is_padded_two_spaces_apart_without_trailing_blanks() {
        let rows = [
            cells(&["a", "long cell", ""]),
            cells(&["wider", "b", "last"]),
        ];
        assert_eq!(
            render(&["ID", "VALUE", "NOTE"], &rows, Some(WIDTH)),
            "ID     VALUE      NOTE\na      long cell\nwider  b          last\n"
        );
        assert_eq!(render::<Vec<String>>(&["ONLY"], &[], Some(WIDTH)), "ONLY\n");
    }

    #[test]
    fn a_wide_table_elides_long_cells_in_the_middle_and_wraps_the_last() {
        let image = format!(
            "nvcr.io/nvidia/tritonserver:25.01-py3@sha256:{}",
            "ab".repeat(32)
        );
        let reason = "newer tag 25.02 is only 2 days old; the minimum age is 7 days ".repeat(4);
        let rows = [cells(&[
            "configs/nvidia-master.yaml:dsr1-fp4-b200-trt",
            "stale-newer",
            &image,
            &image,
            &reason,
        ])];
        let header = ["FAMILY", "STATUS", "CURRENT", "CANDIDATE", "REASONS"];
        let text = render(&header, &rows, Some(WIDTH));
        for line in text.lines() {
            assert!(line.chars().count() <= WIDTH, "{} wide: {line}", line.len());
        }
        assert!(text.contains("nvcr.io/"), "the head is kept: {text}");
        assert!(text.contains('…'), "{text}");
        assert!(text.contains("abab\n") || text.contains("abab "), "{text}");
        let words: Vec<&str> = text.split_whitespace().collect();
        assert!(
            reason.split_whitespace().all(|w| words.contains(&w)),
            "every word of the wrapped column is kept: {text}"
        );
        let wide = render(&header, &rows, None);
        assert_eq!(wide.lines().count(), 2, "{wide}");
        assert!(wide.contains(&image), "{wide}");
    }

    #[test]
    fn cells_are_one_line_and_control_characters_are_shown() {
        let rows = [cells(&["a\n  b", "x\u{1b}[31my"])];
        assert_eq!(
            render(&["K", "V"], &rows, Some(WIDTH)),
            "K    V\na b  x?[31my\n"
        );
    }

    #[test]
    fn a_megabyte_cell_fits_without_a_megabyte_of_work() {
        let huge = "x".repeat(1 << 20);
        let rows = [cells(&[&huge, "ok", &huge])];
        let text = render(&["A", "B", "C"], &rows, Some(WIDTH));
        assert!(text.lines().next().unwrap().chars().count() <= WIDTH);
        assert!(text.lines().nth(1).unwrap().chars().count() <= WIDTH);
    }

    #[test]
    fn a_column_below_goes_under_its_row_when_the_table_does_not_fit() {
        let long = "word ".repeat(40);
        let rows = [
            cells(&["fam", "ok", long.trim()]),
            cells(&["other", "ok", "-"]),
        ];
        let fits = [Fit::Elide, Fit::Keep, Fit::Below];
        let text = render_fitted(&["A", "B", "WHY"], &fits, &rows, Some(WIDTH));
        assert!(text.lines().all(|l| l.chars().count() <= WIDTH), "{text}");
        assert!(
            text.starts_with("A      B\nfam    ok\n    word word"),
            "{text}"
        );
        assert!(text.ends_with("word\nother  ok\n"), "{text}");
        assert_eq!(text.matches("word").count(), 40, "{text}");
        let short = [cells(&["fam", "ok", "why"])];
        assert_eq!(
            render_fitted(&["A", "B", "WHY"], &fits, &short, Some(WIDTH)),
            "A    B   WHY\nfam  ok  why\n",
            "a table that fits keeps the column"
        );
    }

    #[test]
    fn eliding_keeps_both_ends() {
        assert_eq!(elide("abcdefghij", 5), "ab…ij");
        assert_eq!(elide("abc", 5), "abc");
        assert_eq!(elide("abc", 1), "…");
        assert_eq!(elide("abc", 0), "");
        assert_eq!(elide_start("configs/a-master.yaml:key", 8), "…aml:key");
        assert_eq!(elide_start("abc", 3), "abc");
    }
}
