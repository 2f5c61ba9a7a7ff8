//! `squeue`: one read model of its output for every query yolo-sched makes.
//!
//! - `fields`: the one catalog of the fields asked for ([`Field`], each with
//!   its `--Format` name and whether its text is free), the one separator
//!   ([`SEPARATOR`], 0x1F, after every field of every query), the one builder
//!   of the `--Format=` argument ([`format_arg`]: no width, so nothing is
//!   padded or cut) and the one line splitter ([`split`]: a line's columns,
//!   borrowed; a short or foreign line is a [`LineError`] that says so).
//! - `read`: the typed reader of each kind of field, the same in every query.
//! - The queries, each with its field list, checked at compile time to name
//!   its free fields (`Reason`, `Comment`) after all others
//!   (`fields::free_text_last`), so a separator inside one cannot shift a
//!   column that is not free:
//!   - `jobs`: a run's jobs (`status`, `watch`, `list`, `tune escalate`), the
//!     user's tagged jobs (the submission journal), an account's or user's
//!     jobs (teams) and one job's comment (the job agent): 18 fields, the
//!     queue row `status` reads and the facts a run found through Slurm is
//!     made of; a few jobs at a time.
//!   - `listing`: the report's listing of every job: 14 fields, the ones its
//!     sections count by, read borrowed, for queues of 10^5 jobs. It is not
//!     the job queries' list: theirs adds a job's name, directory, times,
//!     elapsed time, nodes, exit code and comment, which no section of the
//!     report reads, and would double the bytes squeue prints and we split
//!     for every job of the cluster (docs/benchmarks.md has the measurement).
//!   - `queue`: node-setup's `auto` queue, arrays expanded: 5 fields, for
//!     10^4 lines within a whole-process budget of about 50 ms.

pub mod fields;
pub mod jobs;
pub mod listing;
pub(crate) mod queue;
pub mod read;

pub use fields::{format_arg, split, Field, LineError, SEPARATOR};
pub use jobs::{by_who, jobs, parse_jobs, tagged, tagged_mine, JobFacts, QueueRow, Tagged, Who};
pub use listing::Filter;
pub use read::{parse_task_list, MAX_TASKS};

#[cfg(test)]
mod tests {
    use super::fields::free_text_last;
    use super::*;

    /// Every query's field list, by the query's name.
    const QUERIES: [(&str, &[Field]); 3] = [
        ("jobs", &jobs::FIELDS),
        ("listing", &listing::FIELDS),
        ("queue", &queue::FIELDS),
    ];

    #[test]
    fn every_query_names_its_free_fields_last_and_each_field_once() {
        for (name, fields) in QUERIES {
            assert!(
                free_text_last(fields),
                "{name}: a free field before a fixed one"
            );
            for (i, f) in fields.iter().enumerate() {
                assert!(!fields[..i].contains(f), "{name}: {f:?} twice");
            }
        }
    }

    #[test]
    fn every_query_asks_with_the_one_separator_and_no_width() {
        for (name, fields) in QUERIES {
            let arg = format_arg(fields);
            let names: Vec<&str> = arg["--Format=".len()..].split(',').collect();
            assert_eq!(names.len(), fields.len(), "{name}: {arg}");
            for (n, f) in names.iter().zip(fields) {
                assert_eq!(*n, format!("{}:{SEPARATOR}", f.name()), "{name}");
            }
        }
    }
}
