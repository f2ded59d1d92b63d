//! Fitting text into the columns of `gpumon status` and `gpumon top`.

/// `s` cut to at most `n` characters, the last one `…` when it was cut.
pub fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_ends_in_an_ellipsis_within_the_width() {
        assert_eq!(truncate("node-1", 12), "node-1");
        assert_eq!(truncate("a-very-long-job-name", 8), "a-very-…");
        assert_eq!(truncate("ééééé", 4).chars().count(), 4);
    }
}
