//! Printing results: a two-column table for people, JSON for machines.

/// Prints `rows` as an aligned two-column table.
pub fn print_table(rows: &[(&str, String)]) {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (key, value) in rows {
        println!("{key:<width$}  {value}");
    }
}

/// Prints `rows` under `header` as columns, each as wide as its widest cell (counted in
/// characters, as `format!` pads).
pub fn print_columns<const N: usize>(header: [&str; N], rows: &[[String; N]]) {
    let header = header.map(str::to_owned);
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}

/// Milliseconds with a precision that suits the size.
pub fn ms(d: std::time::Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.0} ms")
    }
}
