//! `yolo-sched compare`: a leaderboard of training runs, one row per run (per
//! variant for sweeps), from what the runs recorded.
//!
//! Nothing here decides a run's state: each run goes through
//! `run::status::of_run` (the one run model), and training progress comes
//! from `results.csv` through `rundir::results`. `facts` reads what one run
//! wrote (`train[-N]/args.yaml`, `results.csv`, `prepare/summary.json`, the
//! val and export logs); `board` is pure: filter, group by dataset, rank.
//!
//! Runs on different data are never ranked together: rows are grouped by the
//! dataset's content fingerprint (`dataset::fingerprint`, recorded by the
//! prepare stage in `prepare/summary.json`); a run without one (its prepare
//! stage has not run) is grouped by its dataset path and marked unverified.
//!
//! `row` is one row's fields; `board` filters, groups and ranks them;
//! `render` writes a board's cells and CSV.

mod board;
pub(crate) mod facts;
pub(crate) mod registry;
pub(crate) mod render;
mod row;

pub use board::{board, Board, Group, Options, SortKey};
pub use facts::facts;
pub use row::Row;
