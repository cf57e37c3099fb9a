//! The per-class table of every load report: one header line, one line per class (and a
//! total line that may stop after the first columns), each cell padded to its column's
//! width (the class column left-aligned, numbers right-aligned, one space between), then
//! the per-class reasons lines under it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One column: its title and width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub title: &'static str,
    pub width: usize,
}

/// A column `title` of `width` characters (for `const` column lists).
pub const fn col(title: &'static str, width: usize) -> Column {
    Column { title, width }
}

/// A fixed-width table of per-class rows, written as it is filled.
#[derive(Debug, Clone)]
pub struct ClassTable {
    columns: &'static [Column],
    out: String,
}

impl ClassTable {
    /// A table with its header line written.
    pub fn new(columns: &'static [Column]) -> Self {
        let mut table = Self {
            columns,
            out: String::new(),
        };
        let titles: Vec<String> = columns.iter().map(|c| c.title.to_owned()).collect();
        table.row(&titles);
        table
    }

    /// Writes one line: `cells` fill the first columns in order (cells beyond the last
    /// column are dropped).
    pub fn row(&mut self, cells: &[String]) {
        for (i, (cell, column)) in cells.iter().zip(self.columns).enumerate() {
            let width = column.width;
            let _ = if i == 0 {
                write!(self.out, "{cell:<width$}")
            } else {
                write!(self.out, " {cell:>width$}")
            };
        }
        self.out.push('\n');
    }

    /// The table's lines.
    pub fn finish(self) -> String {
        self.out
    }
}

/// A millisecond cell: one decimal, or `-` when there is no value (no sample).
pub fn cell(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"))
}

/// `"<kind><reason> <count>"` for each reason, in the map's order.
pub fn reason_counts(kind: &str, by_reason: &BTreeMap<String, u64>) -> Vec<String> {
    by_reason
        .iter()
        .map(|(reason, n)| format!("{kind}{reason} {n}"))
        .collect()
}

/// One class's reasons line: `lead`, then `<class>:` padded to the class column (12),
/// then `items` joined by `, `. Without items: `empty` in their place, or no line at all.
pub fn reasons_line(
    lead: &str,
    class: &str,
    items: &[String],
    empty: Option<&str>,
) -> Option<String> {
    let items = if items.is_empty() {
        empty?.to_owned()
    } else {
        items.join(", ")
    };
    Some(format!("{lead}{:<12} {items}\n", format!("{class}:")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLUMNS: &[Column] = &[
        Column {
            title: "class",
            width: 8,
        },
        Column {
            title: "sent",
            width: 5,
        },
        Column {
            title: "p50",
            width: 6,
        },
    ];

    #[test]
    fn cells_are_padded_to_their_columns_and_a_short_row_stops_early() {
        let mut table = ClassTable::new(COLUMNS);
        table.row(&["batch".to_owned(), "12".to_owned(), cell(Some(3.21))]);
        table.row(&["total".to_owned(), "12".to_owned()]);
        table.row(&["idle".to_owned(), "0".to_owned(), cell(None)]);
        assert_eq!(
            table.finish(),
            "class     sent    p50\nbatch       12    3.2\ntotal       12\nidle         0      -\n"
        );
    }

    #[test]
    fn reasons_lines_list_counts_or_say_none() {
        let by_reason = BTreeMap::from([("queue_full".to_owned(), 3), ("deadline".to_owned(), 1)]);
        let items = reason_counts("shed ", &by_reason);
        assert_eq!(
            reasons_line("", "batch", &items, None).as_deref(),
            Some("batch:       shed deadline 1, shed queue_full 3\n")
        );
        assert_eq!(
            reasons_line("rejected ", "chat", &[], Some("none")).as_deref(),
            Some("rejected chat:        none\n")
        );
        assert_eq!(reasons_line("", "chat", &[], None), None);
    }
}
