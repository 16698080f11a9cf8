//! Where a byte offset falls in a text, as the 1-based line and column that errors name
//! (`file:line:column`). Used by every reader of operator text whose parser reports byte spans
//! (the config, the control file and its edits, shield scenarios).

/// 1-based line and column of a byte offset in `text` (an offset past the end counts as the end).
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |nl| before.len() - nl - 1)
        + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_lines_and_columns_from_one() {
        let text = "ab\ncde\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 1), (1, 2));
        assert_eq!(line_column(text, 3), (2, 1));
        assert_eq!(line_column(text, 5), (2, 3));
        assert_eq!(line_column(text, 99), (3, 1));
    }
}
