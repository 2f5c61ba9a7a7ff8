//! "Did you mean …?": the one suggestion policy, for spec keys, site keys,
//! MIG profiles and layouts, GRES types and run ids alike.

/// The candidate closest to `word` (case-insensitive optimal string alignment
/// distance), if it is close enough to be a likely typo: `(length + 1) / 3`
/// edits, at least 1 and at most 3 (`valid` → `val`, not `7g.80gb` → `1g.5gb`).
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word_lc = word.to_lowercase();
    let len = word_lc.chars().count();
    let limit = ((word.chars().count() + 1) / 3).clamp(1, 3);
    let mut best: Option<(usize, &'a str)> = None;
    for c in candidates {
        // The distance is at least the difference in length: a candidate
        // that far off is never near, and a 100,000-character word is not
        // aligned with every candidate (time linear in the word, not a product).
        if len.abs_diff(c.chars().count()) > limit {
            continue;
        }
        let d = distance(&word_lc, &c.to_lowercase());
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Every candidate close enough to `word` to be a likely typo (the `closest`
/// threshold), nearest first, at most `max`.
pub fn close_ones<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    max: usize,
) -> Vec<&'a str> {
    let word_lc = word.to_lowercase();
    let len = word_lc.chars().count();
    let limit = ((word.chars().count() + 1) / 3).clamp(1, 3);
    let mut near: Vec<(usize, &'a str)> = candidates
        .into_iter()
        .filter(|c| len.abs_diff(c.chars().count()) <= limit)
        .map(|c| (distance(&word_lc, &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .collect();
    near.sort();
    near.dedup();
    near.into_iter().take(max).map(|(_, c)| c).collect()
}

/// `; did you mean `x`?` or nothing.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    match closest(word, candidates) {
        Some(c) => format!("; did you mean `{c}`?"),
        None => String::new(),
    }
}

/// "`a`, `b`, `c`" for messages.
pub fn ticked_list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    items
        .into_iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
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

    /// A word far longer than any candidate is never near one, and candidates
    /// within the limit in length are still compared (a 100,000-character
    /// `--layout` took 2.5 s in a debug build aligning it with every name).
    #[test]
    fn a_word_much_longer_than_every_candidate_is_near_none() {
        let long = "x".repeat(100_000);
        assert_eq!(closest(&long, ["balanced", "all-1g"]), None);
        assert!(close_ones(&long, ["balanced"], 3).is_empty());
        assert_eq!(closest("balanc", ["balanced", "all-1g"]), Some("balanced"));
        assert_eq!(
            close_ones("all1g", ["balanced", "all-1g"], 3),
            vec!["all-1g"]
        );
    }

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
        // MIG names follow the same policy.
        let names = ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb"];
        assert_eq!(closest("1g.5g", names), Some("1g.5gb"));
        assert_eq!(closest("3G.20GB", names), Some("3g.20gb"));
        assert_eq!(closest("7g.80gb", ["1g.5gb"]), None);
        assert_eq!(did_you_mean("2g.10g", names), "; did you mean `2g.10gb`?");
        assert_eq!(did_you_mean("zzz", names), "");
        assert_eq!(ticked_list(["a", "b"]), "`a`, `b`");
    }

    #[test]
    fn only_close_ones_are_offered() {
        let runs = ["pcb-20261201-0750-ab12", "pcb-20261201-0751-cd34", "coco"];
        assert_eq!(close_ones("nonexistent-run", runs, 3), Vec::<&str>::new());
        assert_eq!(close_ones("cocoa", runs, 3), ["coco"]);
    }

    #[test]
    fn distance_counts_edits() {
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("abc", "abc"), 0);
        assert_eq!(distance("abc", "acb"), 1);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
