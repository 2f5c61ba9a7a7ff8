//! The HTML page's leaderboard: `compare`'s board of the report's runs and
//! the training curves of its best rows, and the searches' trials.

use anyhow::Result;

use super::model;

/// The leaderboard of these runs (`compare`'s board, every run, default
/// sort) and the curve of each of its rows.
pub(super) fn leaderboard(
    manifests: &[crate::rundir::manifest::Manifest],
    statuses: &[crate::run::status::RunStatus],
    extra: &[crate::compare::Row],
) -> Result<Leaderboard> {
    let now = chrono::Utc::now();
    let mut rows = extra.to_vec();
    let mut curves = Vec::new();
    let mut searches = Vec::new();
    for (m, st) in manifests.iter().zip(statuses) {
        if let Some(summary) = &st.tune {
            searches.push(model::SearchPlot {
                run_id: m.run_id.clone(),
                summary: summary.clone(),
            });
        }
        for f in crate::compare::facts(m, st, now) {
            if !f.curve.is_empty() {
                curves.push(model::Curve {
                    id: f.row.id.clone(),
                    epochs: f.curve,
                });
            }
            rows.push(f.row);
        }
    }
    let board = crate::compare::board(rows, &crate::compare::Options::default())?;
    // The curves of the best rows of each group, in the board's order: a page
    // of hundreds of charts is read by nobody (`compare --json` has every row).
    let order: Vec<&str> = board
        .groups
        .iter()
        .flat_map(|g| g.rows.iter().take(CURVES_PER_DATASET))
        .map(|r| r.id.as_str())
        .take(CURVES_MAX)
        .collect();
    let all = curves.len();
    curves.retain(|c| order.contains(&c.id.as_str()));
    curves.sort_by_key(|c| order.iter().position(|id| *id == c.id));
    let omitted = (all - curves.len()) as u64;
    Ok(Leaderboard {
        board: Some(board),
        curves,
        omitted,
        searches,
    })
}

/// What the HTML page draws of the runs.
pub(super) struct Leaderboard {
    pub board: Option<crate::compare::Board>,
    pub curves: Vec<model::Curve>,
    /// Rows with a curve left out.
    pub omitted: u64,
    pub searches: Vec<model::SearchPlot>,
}

/// Curves drawn per dataset group, and in all, on the HTML page.
pub const CURVES_PER_DATASET: usize = 6;
pub const CURVES_MAX: usize = 36;
