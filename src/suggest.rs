//! "Did you mean …?": the closest known name to a misspelt one.

/// The candidate closest to `word` (case-insensitive optimal string alignment
/// distance), if it is close enough to be a likely typo: one edit per three
/// characters, at least 1 and at most 3.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word_lc = word.to_lowercase();
    let limit = (word.chars().count().div_ceil(3)).clamp(1, 3);
    let mut best: Option<(usize, &'a str)> = None;
    for c in candidates {
        let d = distance(&word_lc, &c.to_lowercase());
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Optimal string alignment distance (Levenshtein plus adjacent transpositions).
pub fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        d[i * w] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(w) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1)
                .min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_key() {
        let keys = [
            "model", "data", "epochs", "imgsz", "batch", "workers", "args",
        ];
        assert_eq!(closest("epoch", keys), Some("epochs"));
        assert_eq!(closest("Epochs", keys), Some("epochs"));
        assert_eq!(closest("imgsize", keys), Some("imgsz"));
        assert_eq!(closest("wokrers", keys), Some("workers"));
        assert_eq!(closest("learning_rate", keys), None);
        assert_eq!(closest("x", keys), None);
    }

    #[test]
    fn distance_counts_edits() {
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("abc", "abc"), 0);
        assert_eq!(distance("abc", "acb"), 1);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
