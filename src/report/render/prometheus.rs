//! `--format prometheus`: the text exposition format 0.0.4, for
//! node_exporter's textfile collector.
//!
//! Every metric is a gauge. Each report is a fresh snapshot made by a fresh
//! process: nothing here only ever grows over the life of one exporter, which
//! is what a counter promises (`rate()` would read a drop as a reset). Even
//! slice-hours "since --since" fall when old jobs leave the sliding window.
//! No sample carries a timestamp: the textfile collector refuses them.

use std::fmt::Write as _;

use super::super::model::{AccountingStatus, Report};
use super::Selection;
use crate::report::model::Section;

/// Every metric name starts with this.
pub const PREFIX: &str = "yolo_sched_";

/// A label value with `\`, `"` and newline escaped as the format requires.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text escapes `\` and newline only.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// One metric family being built.
struct Family {
    name: String,
    help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    fn new(name: &str, help: &'static str) -> Self {
        Family {
            name: format!("{PREFIX}{name}"),
            help,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, labels: &[(&'static str, &str)], value: f64) {
        self.samples.push((
            labels.iter().map(|(k, v)| (*k, v.to_string())).collect(),
            value,
        ));
    }

    /// Families without samples are left out: a HELP/TYPE pair with nothing
    /// under it only confuses readers.
    fn write(&self, out: &mut String) {
        if self.samples.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {} {}", self.name, escape_help(self.help));
        let _ = writeln!(out, "# TYPE {} gauge", self.name);
        for (labels, value) in &self.samples {
            out.push_str(&self.name);
            if !labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{k}=\"{}\"", escape_label(v));
                }
                out.push('}');
            }
            out.push(' ');
            out.push_str(&format_value(*value));
            out.push('\n');
        }
    }
}

/// The advice's needs and site-wide right-sizing: where the jobs' needs came
/// from, and per user and account what asked for more than it used.
fn need_families(a: &crate::report::model::LayoutAdvice) -> Vec<Family> {
    let n = &a.needs;
    let mut jobs = Family::new(
        "advice_jobs_by_need",
        "Last week's typed GPU jobs by where their need came from: measured (the job agent, in the job's comment), gpumem (Slurm's TRESUsageInMax), asked (the type asked for); smaller: measured jobs that fit a smaller type.",
    );
    let mut hours = Family::new(
        "advice_gpu_hours_by_need",
        "GPU-hours (of the types asked) of last week's typed GPU jobs by where their need came from.",
    );
    for (source, c) in [
        ("measured", &n.measured),
        ("gpumem", &n.gpumem),
        ("asked", &n.asked),
        ("smaller", &n.smaller),
    ] {
        jobs.add(&[("source", source)], c.jobs as f64);
        hours.add(&[("source", source)], c.gpu_hours);
    }
    let mut refused = Family::new(
        "advice_needs_refused",
        "Measurements in job comments not trusted (naming another job, numbers out of bounds, malformed).",
    );
    refused.add(&[("why", "other_job")], n.refused.other_job as f64);
    refused.add(&[("why", "bad_number")], n.refused.bad_number as f64);
    refused.add(&[("why", "malformed")], n.refused.malformed as f64);
    let mut over = Family::new(
        "advice_oversized_jobs",
        "Jobs of a user or account that asked for a larger type than their measured memory needed.",
    );
    let mut saved = Family::new(
        "advice_oversized_gpu_hours_saved",
        "GPU-hours those jobs held beyond the type that would have fitted them.",
    );
    let mut wait = Family::new(
        "advice_oversized_wait_saved_hours",
        "Hours of waiting those jobs would have saved asking what fits, on the advised layout (recorded minus predicted).",
    );
    for o in &a.oversized {
        let labels = [("by", o.by), ("name", o.name.as_str())];
        over.add(&labels, o.jobs as f64);
        saved.add(&labels, o.gpu_hours_asked - o.gpu_hours_fit);
        wait.add(&labels, o.wait_saved_h);
    }
    vec![jobs, hours, refused, over, saved, wait]
}

/// The advisor's own gauges (`yolo-sched advise --format prometheus`): the
/// report's advice section alone.
pub fn advice(a: &crate::report::model::LayoutAdvice) -> String {
    let mut out = String::new();
    if a.error.is_some() {
        return out;
    }
    let mut advised = Family::new(
        "advice_node_layout_advised",
        "1 when the node is cut as `yolo-sched advise` would cut it, 0 when it would re-cut it.",
    );
    for n in &a.nodes {
        advised.add(&[("node", n.node.as_str())], f64::from(u8::from(n.advised)));
    }
    let mut wait = Family::new(
        "advice_mean_wait_seconds",
        "Mean wait of the window's typed GPU jobs: measured (accounting), simulated as the nodes are cut now (current), and as advised.",
    );
    wait.add(&[("setup", "measured")], a.measured_mean_wait_s);
    wait.add(&[("setup", "current")], a.predicted_mean_wait_s);
    wait.add(&[("setup", "advised")], a.advised_mean_wait_s);
    advised.write(&mut out);
    wait.write(&mut out);
    for f in need_families(a) {
        f.write(&mut out);
    }
    out
}

/// Render the selected sections. `generated_unix` is the report time.
pub fn render(report: &Report, selection: &Selection, generated_unix: i64) -> String {
    let mut families = Vec::new();
    let mut generated = Family::new(
        "report_generated_timestamp_seconds",
        "Unix time when yolo-sched report made this snapshot.",
    );
    generated.add(&[], generated_unix as f64);
    families.push(generated);

    if let (Some(inv), true) = (&report.inventory, selection.has(Section::Inventory)) {
        families.extend(inventory_families(inv));
    }
    if let (Some(q), true) = (&report.queue, selection.has(Section::Queue)) {
        families.extend(queue_families(q));
    }
    if let (Some(u), true) = (&report.usage, selection.has(Section::Usage)) {
        families.extend(usage_families(u));
    }
    if let (Some(r), true) = (&report.runs, selection.has(Section::Runs)) {
        families.extend(runs_families(r));
    }
    if let (Some(a), true) = (&report.advice, selection.has(Section::Advice)) {
        families.extend(advice_families(a));
    }
    if let (Some(rs), true) = (&report.right_sizing, selection.has(Section::RightSizing)) {
        families.extend(right_sizing_families(rs));
    }

    let mut out = String::new();
    for f in &families {
        f.write(&mut out);
    }
    out
}

/// The inventory section: node states, slices per node and free usable ones.
fn inventory_families(inv: &crate::report::model::Inventory) -> Vec<Family> {
    let mut families = Vec::new();
    let mut info = Family::new(
        "node_info",
        "Always 1; the node's state (idle, mixed, allocated, drained, draining, down, ...) and drain reason as labels.",
    );
    let mut slices = Family::new(
        "node_slices",
        "GRES units (MIG slices, whole GPUs, shards) on a node by type and state (allocated or free).",
    );
    let mut configured = Family::new(
        "node_slices_configured",
        "GRES units configured on a node by type.",
    );
    for n in &inv.nodes {
        let reason = n.reason.clone().unwrap_or_default();
        info.add(
            &[("node", &n.node), ("state", &n.state), ("reason", &reason)],
            1.0,
        );
        for g in &n.gres {
            configured.add(&[("node", &n.node), ("type", &g.kind)], g.total as f64);
            slices.add(
                &[("node", &n.node), ("type", &g.kind), ("state", "allocated")],
                g.allocated as f64,
            );
            slices.add(
                &[("node", &n.node), ("type", &g.kind), ("state", "free")],
                g.free as f64,
            );
        }
    }
    let mut usable = Family::new(
        "slices_free_usable",
        "Free GRES units by type on nodes that accept jobs (not drained or down).",
    );
    for t in &inv.totals {
        usable.add(&[("type", &t.kind)], t.free_usable as f64);
    }
    families.extend([info, slices, configured, usable]);
    families
}

/// The queue section: jobs and slices, reasons, waits, never-runnable jobs.
fn queue_families(q: &crate::report::model::Queue) -> Vec<Family> {
    let mut families = Vec::new();
    let mut jobs = Family::new(
        "queue_jobs",
        "Jobs by partition, GRES type and state (running or pending); array tasks count one each.",
    );
    let mut slices = Family::new(
        "queue_slices",
        "GRES units held by running jobs or asked for by pending jobs, by partition, type and state.",
    );
    for r in &q.by_partition_type {
        let l = |state| {
            [
                ("partition", r.partition.as_str()),
                ("type", r.kind.as_str()),
                ("state", state),
            ]
        };
        jobs.add(&l("running"), r.running_jobs as f64);
        jobs.add(&l("pending"), r.pending_jobs as f64);
        slices.add(&l("running"), r.running_slices as f64);
        slices.add(&l("pending"), r.pending_slices as f64);
    }
    let mut reasons = Family::new(
        "queue_pending_reason_jobs",
        "Pending jobs by Slurm reason code (Resources, Priority, Dependency, ...).",
    );
    for r in &q.pending_reasons {
        reasons.add(&[("reason", &r.reason)], r.jobs as f64);
    }
    let mut median = Family::new(
        "queue_median_wait_seconds",
        "Median time pending jobs of a GRES type have waited since submission.",
    );
    let mut oldest = Family::new(
        "queue_oldest_wait_seconds",
        "How long the oldest pending job of a GRES type has waited since submission.",
    );
    // The wait distribution: cumulative like a histogram's buckets, but a
    // gauge (a snapshot of the jobs waiting now). Types × 6 series, bounded.
    let mut waits = Family::new(
        "queue_pending_wait_jobs",
        "Pending jobs of a GRES type that have waited less than below_seconds (cumulative; +Inf is all of them).",
    );
    for t in &q.by_type {
        let mut seen = 0;
        for ((upper, _), n) in crate::report::model::WAIT_BUCKETS
            .iter()
            .zip(&t.wait_buckets)
        {
            seen += n;
            let bound = if *upper == i64::MAX {
                "+Inf".to_string()
            } else {
                upper.to_string()
            };
            waits.add(&[("type", &t.kind), ("below_seconds", &bound)], seen as f64);
        }
        if let Some(m) = t.median_wait_seconds {
            median.add(&[("type", &t.kind)], m as f64);
        }
        if let Some(o) = &t.oldest_pending {
            oldest.add(&[("type", &t.kind)], o.wait_seconds as f64);
        }
    }
    let mut never = Family::new(
        "queue_never_runnable_jobs",
        "Pending jobs that can never start (DependencyNeverSatisfied, BadConstraints).",
    );
    never.add(&[], q.never_runnable_jobs as f64);
    let mut unparsed = Family::new(
        "queue_unparsed_lines",
        "Lines of squeue output the report could not read (expected 0).",
    );
    unparsed.add(&[], q.unparsed_lines as f64);
    families.extend([
        jobs, slices, reasons, median, waits, oldest, never, unparsed,
    ]);
    families
}

/// The usage section: slices held and slice-hours per user, the window.
fn usage_families(u: &crate::report::model::Usage) -> Vec<Family> {
    let mut families = Vec::new();
    let mut held = Family::new(
        "user_slices_held",
        "GRES units held now by running jobs, by user, account and type.",
    );
    let mut hours = Family::new(
        "user_slice_hours",
        "Allocated slice-hours in the usage window (see yolo_sched_usage_window_seconds), by user, account and type. A gauge: the window slides.",
    );
    for r in &u.rows {
        let labels = [
            ("user", r.user.as_str()),
            ("account", r.account.as_str()),
            ("type", r.kind.as_str()),
        ];
        if r.slices_held > 0 {
            held.add(&labels, r.slices_held as f64);
        }
        if let Some(h) = r.slice_hours {
            hours.add(&labels, h);
        }
    }
    let mut available = Family::new(
        "accounting_available",
        "1 when sacct answered, so slice-hours are reported; 0 when accounting is disabled or failed.",
    );
    available.add(
        &[],
        f64::from(u8::from(u.accounting.status == AccountingStatus::Ok)),
    );
    let mut window = Family::new(
        "usage_window_seconds",
        "Length of the slice-hours window (--since).",
    );
    window.add(&[], u.window_seconds as f64);
    families.extend([held, hours, available, window]);
    families
}

/// The runs section: runs by state, failing stages, unreadable manifests.
fn runs_families(r: &crate::report::model::Runs) -> Vec<Family> {
    let mut families = Vec::new();
    let mut runs = Family::new(
        "runs",
        "yolo-sched runs readable by the reporting user, by state.",
    );
    for s in &r.by_state {
        runs.add(&[("state", &s.state)], s.runs as f64);
    }
    let mut failures = Family::new(
        "run_stage_failures",
        "Runs in which a stage of this name failed.",
    );
    for s in &r.failing_stages {
        failures.add(&[("stage", &s.stage)], s.failures as f64);
    }
    let mut unreadable = Family::new(
        "runs_unreadable_manifests",
        "Run manifests that could not be read.",
    );
    unreadable.add(&[], r.unreadable.len() as f64);
    families.extend([runs, failures, unreadable]);
    families
}

/// The advice section, when there is advice.
fn advice_families(a: &crate::report::model::LayoutAdvice) -> Vec<Family> {
    let mut families = Vec::new();
    if a.error.is_none() {
        let mut advised = Family::new(
            "advice_node_layout_advised",
            "1 when the node is cut as `yolo-sched advise` would cut it from last week's accounting, 0 when it would re-cut it.",
        );
        for n in &a.nodes {
            advised.add(&[("node", n.node.as_str())], f64::from(u8::from(n.advised)));
        }
        let mut wait = Family::new(
            "advice_mean_wait_seconds",
            "Mean wait of last week's typed GPU jobs: measured (accounting), simulated as the nodes are cut now (current), and as advised.",
        );
        wait.add(&[("setup", "measured")], a.measured_mean_wait_s);
        wait.add(&[("setup", "current")], a.predicted_mean_wait_s);
        wait.add(&[("setup", "advised")], a.advised_mean_wait_s);
        let mut waited = Family::new(
            "advice_waited_gpu_hours",
            "GPU-hours of last week's typed GPU jobs that waited over a minute to start (accounting).",
        );
        waited.add(&[], a.waited_gpu_hours);
        families.extend([advised, wait, waited]);
        families.extend(need_families(a));
    }
    families
}

/// The right-sizing section: stages with data and hints.
fn right_sizing_families(rs: &crate::report::model::RightSizing) -> Vec<Family> {
    let mut families = Vec::new();
    let mut data = Family::new(
        "rightsizing_stages_with_data",
        "Run stages that recorded a memory figure and a requested profile.",
    );
    data.add(&[], rs.stages_with_data as f64);
    let mut hints = Family::new(
        "rightsizing_hints",
        "Run stages whose memory figure fits a smaller MIG profile than requested.",
    );
    hints.add(&[], rs.hints.len() as f64);
    families.extend([data, hints]);
    families
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::*;

    #[test]
    fn label_escaping() {
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("two\nlines"), "two\\nlines");
        assert_eq!(
            escape_label("ReqNodeNotAvail, UnavailableNodes:n2"),
            "ReqNodeNotAvail, UnavailableNodes:n2"
        );
    }

    #[test]
    fn values() {
        assert_eq!(format_value(3.0), "3");
        assert_eq!(format_value(0.25), "0.25");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
    }

    #[test]
    fn families_have_help_type_and_escaped_labels() {
        let report = Report {
            schema_version: SCHEMA_VERSION,
            generated_at: String::new(),
            generated_unix: 0,
            filters: Filters::default(),
            inventory: Some(Inventory {
                nodes: vec![NodeRow {
                    node: "n1".into(),
                    state: "drained".into(),
                    reason: Some("fan \"3\" \\ broken\nagain".into()),
                    partitions: vec![],
                    gres: vec![GresCount {
                        kind: "gpu:1g.5gb".into(),
                        total: 4,
                        allocated: 1,
                        free: 3,
                    }],
                }],
                totals: vec![],
            }),
            queue: None,
            usage: None,
            runs: None,
            right_sizing: None,
            leaderboard: None,
            curves: vec![],
            curves_omitted: 0,
            searches: vec![],
            advice: None,
        };
        let text = render(&report, &Selection::all(), 1_700_000_000);
        assert!(text.starts_with("# HELP yolo_sched_report_generated_timestamp_seconds Unix time"));
        assert!(text.contains("# TYPE yolo_sched_node_info gauge\n"));
        assert!(text.contains(
            r#"yolo_sched_node_info{node="n1",state="drained",reason="fan \"3\" \\ broken\nagain"} 1"#
        ));
        assert!(
            text.contains(r#"yolo_sched_node_slices{node="n1",type="gpu:1g.5gb",state="free"} 3"#)
        );
        assert!(!text.contains("counter"));
        // The empty totals family is left out entirely.
        assert!(!text.contains("slices_free_usable"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.starts_with(PREFIX), "{line}");
        }
    }

    /// The advice section: a gauge per node (is it cut as advised), the mean
    /// waits measured, simulated now and as advised; nothing when the advisor
    /// failed (its reason is in the text and JSON forms).
    #[test]
    fn layout_advice_is_a_gauge_per_node_and_three_waits() {
        use crate::report::model::{LayoutAdvice, NodeAdvice};
        let advice = LayoutAdvice {
            window_seconds: 7 * 86400,
            jobs: 40,
            jobs_waited: 12,
            waited_gpu_hours: 3.5,
            measured_mean_wait_s: 5400.0,
            predicted_mean_wait_s: 5000.0,
            advised_mean_wait_s: 600.0,
            needs: Default::default(),
            oversized: Vec::new(),
            nodes: vec![
                NodeAdvice {
                    node: "gpu1".into(),
                    advised: false,
                    now: "whole; whole".into(),
                    advised_layout: "1g.5gb*7; whole".into(),
                },
                NodeAdvice {
                    node: "gpu2".into(),
                    advised: true,
                    now: "1g.5gb*7".into(),
                    advised_layout: "1g.5gb*7".into(),
                },
            ],
            error: None,
        };
        let mut report = Report {
            schema_version: SCHEMA_VERSION,
            generated_at: String::new(),
            generated_unix: 0,
            filters: Filters::default(),
            inventory: None,
            queue: None,
            usage: None,
            runs: None,
            right_sizing: None,
            leaderboard: None,
            curves: vec![],
            curves_omitted: 0,
            searches: vec![],
            advice: Some(advice.clone()),
        };
        let text = render(&report, &Selection::all(), 1_700_000_000);
        assert!(
            text.contains(r#"yolo_sched_advice_node_layout_advised{node="gpu1"} 0"#),
            "{text}"
        );
        assert!(text.contains(r#"yolo_sched_advice_node_layout_advised{node="gpu2"} 1"#));
        assert!(text.contains(r#"yolo_sched_advice_mean_wait_seconds{setup="advised"} 600"#));
        assert!(text.contains("yolo_sched_advice_waited_gpu_hours 3.5"));
        // Not selected: not rendered.
        let only_queue = Selection::parse(&["queue".into()]).unwrap();
        assert!(!render(&report, &only_queue, 0).contains("advice"));
        report.advice = Some(LayoutAdvice::failed(1, "node x: refusing to guess".into()));
        assert!(!render(&report, &Selection::all(), 0).contains("advice_"));
        // The table form says what to do.
        report.advice = Some(advice);
        let tables = crate::report::render::tables(
            &report,
            &Selection::all(),
            crate::report::render::Style::Human,
        );
        let t = tables.iter().find(|t| t.name == "advice").unwrap();
        assert_eq!(t.rows.len(), 2);
        assert!(
            t.notes.iter().any(|n| n.contains("1 node(s) to re-cut")),
            "{:?}",
            t.notes
        );
    }

    #[test]
    fn queue_waits_are_cumulative_per_type_and_bounded() {
        let report = Report {
            schema_version: SCHEMA_VERSION,
            generated_at: String::new(),
            generated_unix: 0,
            filters: Filters::default(),
            inventory: None,
            queue: Some(crate::report::model::Queue {
                by_type: vec![crate::report::model::TypeWait {
                    kind: "gpu:1g.5gb".into(),
                    running_jobs: 1,
                    pending_jobs: 6,
                    median_wait_seconds: Some(700),
                    wait_buckets: vec![1, 0, 4, 0, 0, 1],
                    oldest_pending: None,
                }],
                ..Default::default()
            }),
            usage: None,
            runs: None,
            right_sizing: None,
            leaderboard: None,
            curves: vec![],
            curves_omitted: 0,
            searches: vec![],
            advice: None,
        };
        let text = render(&report, &Selection::all(), 0);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("yolo_sched_queue_pending_wait_jobs{"))
            .collect();
        assert_eq!(
            lines,
            [
                r#"yolo_sched_queue_pending_wait_jobs{type="gpu:1g.5gb",below_seconds="60"} 1"#,
                r#"yolo_sched_queue_pending_wait_jobs{type="gpu:1g.5gb",below_seconds="600"} 1"#,
                r#"yolo_sched_queue_pending_wait_jobs{type="gpu:1g.5gb",below_seconds="3600"} 5"#,
                r#"yolo_sched_queue_pending_wait_jobs{type="gpu:1g.5gb",below_seconds="21600"} 5"#,
                r#"yolo_sched_queue_pending_wait_jobs{type="gpu:1g.5gb",below_seconds="86400"} 5"#,
                r#"yolo_sched_queue_pending_wait_jobs{type="gpu:1g.5gb",below_seconds="+Inf"} 6"#,
            ]
        );
        assert!(text.contains("# TYPE yolo_sched_queue_pending_wait_jobs gauge\n"));
    }
}
