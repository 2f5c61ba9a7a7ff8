//! The alternative the report did not take, kept to measure it: read
//! `squeue --json` as a stream from stdin, the `jobs` array one job at a time
//! into a small struct (unknown fields skipped, no document tree), and feed
//! the same aggregation the compact listing feeds. bench/report/run.sh times
//! this against the compact path; docs/report.md has the figures.
//!
//! usage: cargo bench --bench report_squeue_json -- [json|compact] < FILE

use std::fmt;
use std::io::Read;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use yolo_sched::report::queue::QueueAggregator;
use yolo_sched::report::Filter;
use yolo_sched::slurm::squeue::listing::{self, QueueLine};
use yolo_sched::slurm::squeue::read;

/// The fields the report uses, by their 22.05 names; all others are skipped.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Job {
    job_id: u64,
    array_job_id: u64,
    array_task_string: String,
    job_state: String,
    state_reason: String,
    partition: String,
    user_name: String,
    account: String,
    submit_time: i64,
    node_count: u64,
    tasks: u64,
    tres_per_node: String,
    tres_per_job: String,
    tres_per_task: String,
    tres_alloc_str: String,
    dependency: String,
}

struct Feed<'a>(&'a mut QueueAggregator);

impl<'de> Visitor<'de> for Feed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the squeue --json document")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key == "jobs" {
                map.next_value_seed(Jobs(&mut *self.0))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Feed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

struct Jobs<'a>(&'a mut QueueAggregator);

impl<'de> Visitor<'de> for Jobs<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the jobs array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(job) = seq.next_element::<Job>()? {
            add(self.0, &job);
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Jobs<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

fn add(agg: &mut QueueAggregator, job: &Job) {
    let id = if job.array_task_string.is_empty() {
        job.job_id.to_string()
    } else {
        format!("{}_[{}]", job.array_job_id, job.array_task_string)
    };
    let submitted = chrono::DateTime::from_timestamp(job.submit_time, 0)
        .map(|t| t.with_timezone(&chrono::Local).naive_local());
    let line = QueueLine {
        jobs: read::array_task_count(&id).unwrap_or(1),
        job_id: &id,
        state: &job.job_state,
        phase: listing::phase_of(&job.job_state),
        partition: &job.partition,
        user: &job.user_name,
        account: &job.account,
        submitted,
        nodes: job.node_count.max(1),
        tasks: Some(job.tasks),
        tres_per_node: &job.tres_per_node,
        tres_per_job: &job.tres_per_job,
        tres_per_task: &job.tres_per_task,
        tres_alloc: &job.tres_alloc_str,
        dependency: &job.dependency,
        reason: &job.state_reason,
    };
    agg.add(&line);
}

fn main() {
    // `cargo bench` with no arguments runs every bench target: this one needs
    // input and a mode, which only bench/report/run.sh gives it.
    let Some(mode) = std::env::args().skip(1).find(|a| !a.starts_with('-')) else {
        eprintln!(
            "report_squeue_json: run by bench/report/run.sh (modes: json, compact; input on stdin)"
        );
        return;
    };
    let now = chrono::Local::now().naive_local();
    let mut agg = QueueAggregator::new(now, Filter::default());
    match mode.as_str() {
        "json" => {
            let input = std::io::BufReader::with_capacity(1 << 16, std::io::stdin().lock());
            let mut de = serde_json::Deserializer::from_reader(input);
            Feed(&mut agg).deserialize(&mut de).expect("squeue --json");
        }
        "compact" => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).expect("stdin");
            agg.add_text(&text);
        }
        other => panic!("mode {other}: expected json or compact"),
    }
    let (q, _, _) = agg.finish();
    println!(
        "running {} pending {} never_runnable {}",
        q.running_jobs, q.pending_jobs, q.never_runnable_jobs
    );
}
