//! "Did you mean" suggestions for mistyped names (profiles, layouts).

/// Edit distance (insertions, deletions, substitutions) between two short strings.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != cb);
            cur[j + 1] = substitute.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The candidate closest to `wrong`, if it is close enough to be a typo
/// (at most a third of its length away, and at least two edits allowed).
pub(crate) fn closest<'a, I>(wrong: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let wrong = wrong.to_ascii_lowercase();
    let limit = (wrong.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .map(|c| (edit_distance(&wrong, &c.to_ascii_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by(|x, y| x.0.cmp(&y.0).then(x.1.cmp(y.1)))
        .map(|(_, c)| c)
}

/// `; did you mean `x`?` or nothing.
pub(crate) fn did_you_mean<'a, I>(wrong: &str, candidates: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    match closest(wrong, candidates) {
        Some(c) => format!("; did you mean `{c}`?"),
        None => String::new(),
    }
}

/// "`a`, `b`, `c`" for messages.
pub(crate) fn ticked_list<'a, I>(items: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    items
        .into_iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_counts_edits() {
        assert_eq!(edit_distance("1g.5g", "1g.5gb"), 1);
        assert_eq!(edit_distance("balanced", "balanced"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn closest_picks_a_near_candidate_only() {
        let names = ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb"];
        assert_eq!(closest("1g.5g", names), Some("1g.5gb"));
        assert_eq!(closest("3G.20GB", names), Some("3g.20gb"));
        assert_eq!(closest("7g.80gb", ["1g.5gb"]), None);
        assert_eq!(did_you_mean("2g.10g", names), "; did you mean `2g.10gb`?");
        assert_eq!(did_you_mean("zzz", names), "");
    }
}
