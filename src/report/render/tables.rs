//! The report's sections as named tables, shared by the table and CSV formats.

use super::Selection;
use crate::report::model::{AccountingStatus, Report, Section};

/// One table of a section: a name for CSV, a title, headers and rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableData {
    pub name: &'static str,
    pub section: Section,
    pub title: &'static str,
    pub headers: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
    /// Lines printed under the table in the table format.
    pub notes: Vec<String>,
}

/// Durations for people: `45s`, `12m 05s`, `3h 04m`, `2d 03h`.
pub fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// Usage rows the table format shows (the CSV and JSON have all).
pub const USAGE_ROWS_SHOWN: usize = 50;

/// How a number of seconds is shown: raw for CSV, readable for tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Human,
    Raw,
}

fn seconds(v: Option<i64>, style: Style) -> String {
    match (v, style) {
        (None, _) => String::new(),
        (Some(s), Style::Raw) => s.to_string(),
        (Some(s), Style::Human) => human_duration(s),
    }
}

fn hours(v: Option<f64>) -> String {
    v.map(|h| format!("{h:.2}")).unwrap_or_default()
}

/// All tables of the report that the selection keeps, in section order.
pub fn tables(report: &Report, selection: &Selection, style: Style) -> Vec<TableData> {
    let mut out = Vec::new();
    if let Some(inv) = &report.inventory {
        out.extend(inventory_tables(inv));
    }
    if let Some(q) = &report.queue {
        out.extend(queue_tables(q, style));
    }
    if let Some(u) = &report.usage {
        out.extend(usage_tables(u, style));
    }
    if let Some(r) = &report.runs {
        out.extend(runs_tables(r));
    }
    if let Some(a) = &report.advice {
        out.extend(advice_tables(a));
    }
    if let Some(rs) = &report.right_sizing {
        out.extend(right_sizing_tables(rs));
    }
    out.retain(|t| selection.has_table(t.name));
    out
}

/// The inventory section: slices per node, and per type.
fn inventory_tables(inv: &crate::report::model::Inventory) -> Vec<TableData> {
    let mut out = Vec::new();
    let mut push = |t: TableData| out.push(t);
    let mut rows = Vec::new();
    for n in &inv.nodes {
        let base = [
            n.node.clone(),
            n.state.clone(),
            n.reason.clone().unwrap_or_default(),
        ];
        if n.gres.is_empty() {
            rows.push(
                [
                    &base[..],
                    &[String::new(), "0".into(), "0".into(), "0".into()],
                ]
                .concat(),
            );
        }
        for g in &n.gres {
            rows.push(
                [
                    &base[..],
                    &[
                        g.kind.clone(),
                        g.total.to_string(),
                        g.allocated.to_string(),
                        g.free.to_string(),
                    ],
                ]
                .concat(),
            );
        }
    }
    let notes = if inv.nodes.is_empty() {
        vec!["no nodes (check --partition)".to_string()]
    } else {
        Vec::new()
    };
    push(TableData {
        name: "inventory",
        section: Section::Inventory,
        title: "Slices per node",
        headers: vec![
            "node",
            "state",
            "reason",
            "type",
            "total",
            "allocated",
            "free",
        ],
        rows,
        notes,
    });
    push(TableData {
        name: "inventory-totals",
        section: Section::Inventory,
        title: "Slices per type",
        headers: vec!["type", "total", "allocated", "free", "free_usable"],
        rows: inv
            .totals
            .iter()
            .map(|t| {
                vec![
                    t.kind.clone(),
                    t.total.to_string(),
                    t.allocated.to_string(),
                    t.free.to_string(),
                    t.free_usable.to_string(),
                ]
            })
            .collect(),
        notes: vec!["free_usable: free on nodes that accept jobs (not drained or down)".into()],
    });
    out
}

/// The queue section: jobs per partition and type, waits per type, why
/// jobs wait, and the jobs that can never run.
fn queue_tables(q: &crate::report::model::Queue, style: Style) -> Vec<TableData> {
    let mut out = Vec::new();
    let mut push = |t: TableData| out.push(t);
    let mut notes = vec![format!(
        "{} running, {} pending",
        q.running_jobs, q.pending_jobs
    )];
    if let Some(o) = &q.oldest_pending {
        notes.push(format!(
            "oldest pending: job {} of {} in {}, waiting {} ({})",
            o.job_id,
            o.user,
            o.partition,
            human_duration(o.wait_seconds),
            crate::report::reasons::describe(&o.reason)
        ));
    }
    if q.unparsed_lines > 0 {
        notes.push(format!(
            "{} squeue line(s) could not be read; first: {}",
            q.unparsed_lines,
            q.first_unparsed.clone().unwrap_or_default()
        ));
    }
    push(TableData {
        name: "queue",
        section: Section::Queue,
        title: "Jobs per partition and type",
        headers: vec![
            "partition",
            "type",
            "running_jobs",
            "pending_jobs",
            "running_slices",
            "pending_slices",
        ],
        rows: q
            .by_partition_type
            .iter()
            .map(|r| {
                vec![
                    r.partition.clone(),
                    r.kind.clone(),
                    r.running_jobs.to_string(),
                    r.pending_jobs.to_string(),
                    r.running_slices.to_string(),
                    r.pending_slices.to_string(),
                ]
            })
            .collect(),
        notes,
    });
    push(TableData {
        name: "queue-types",
        section: Section::Queue,
        title: "Waiting per type",
        headers: vec![
            "type",
            "running_jobs",
            "pending_jobs",
            "median_wait",
            "oldest_pending_job",
            "oldest_wait",
        ],
        rows: q
            .by_type
            .iter()
            .map(|t| {
                vec![
                    t.kind.clone(),
                    t.running_jobs.to_string(),
                    t.pending_jobs.to_string(),
                    seconds(t.median_wait_seconds, style),
                    t.oldest_pending
                        .as_ref()
                        .map(|o| o.job_id.clone())
                        .unwrap_or_default(),
                    seconds(t.oldest_pending.as_ref().map(|o| o.wait_seconds), style),
                ]
            })
            .collect(),
        notes: Vec::new(),
    });
    push(TableData {
        name: "queue-reasons",
        section: Section::Queue,
        title: "Why jobs wait",
        headers: vec!["reason", "description", "jobs"],
        rows: q
            .pending_reasons
            .iter()
            .map(|r| vec![r.reason.clone(), r.description.clone(), r.jobs.to_string()])
            .collect(),
        notes: Vec::new(),
    });
    let mut notes = Vec::new();
    if q.never_runnable_jobs > 0 {
        notes.push(format!(
            "{} job(s) can never start: cancel them (scancel) or fix what they wait for",
            q.never_runnable_jobs
        ));
    }
    if q.never_runnable.len() as u64 > 0 && (q.never_runnable.len() as u64) < q.never_runnable_jobs
    {
        notes.push(format!("showing the oldest {}", q.never_runnable.len()));
    }
    push(TableData {
        name: "queue-never-runnable",
        section: Section::Queue,
        title: "Jobs that can never run",
        headers: vec![
            "job_id",
            "jobs",
            "user",
            "account",
            "partition",
            "types",
            "reason",
            "description",
            "dependency",
            "submitted",
        ],
        rows: q
            .never_runnable
            .iter()
            .map(|j| {
                vec![
                    j.job_id.clone(),
                    j.jobs.to_string(),
                    j.user.clone(),
                    j.account.clone(),
                    j.partition.clone(),
                    j.types.join(" "),
                    j.reason.clone(),
                    j.description.clone(),
                    j.dependency.clone(),
                    j.submitted.clone(),
                ]
            })
            .collect(),
        notes,
    });
    out
}

/// The usage section: slices per user (the heaviest, for people).
fn usage_tables(u: &crate::report::model::Usage, style: Style) -> Vec<TableData> {
    let mut out = Vec::new();
    let mut push = |t: TableData| out.push(t);
    let mut notes = Vec::new();
    match u.accounting.status {
        AccountingStatus::Ok => notes.push(format!(
            "slice_hours: allocated slice-hours in the last {}",
            human_duration(u.window_seconds)
        )),
        _ => notes.push(format!(
            "slice-hours unavailable: {}",
            u.accounting.message.clone().unwrap_or_default()
        )),
    }
    // People get the heaviest users; files get every row.
    let mut rows: Vec<&crate::report::model::UsageRow> = u.rows.iter().collect();
    if style == Style::Human && rows.len() > USAGE_ROWS_SHOWN {
        rows.sort_by(|a, b| {
            b.slices_held.cmp(&a.slices_held).then(
                b.slice_hours
                    .unwrap_or(0.0)
                    .total_cmp(&a.slice_hours.unwrap_or(0.0)),
            )
        });
        notes.push(format!(
            "showing the {USAGE_ROWS_SHOWN} of {} rows with the most slices held, then slice-hours; \
             --format csv --section usage lists all",
            rows.len()
        ));
        rows.truncate(USAGE_ROWS_SHOWN);
    }
    push(TableData {
        name: "usage",
        section: Section::Usage,
        title: "Slices per user",
        headers: vec!["user", "account", "type", "slices_held", "slice_hours"],
        rows: rows
            .iter()
            .map(|r| {
                vec![
                    r.user.clone(),
                    r.account.clone(),
                    r.kind.clone(),
                    r.slices_held.to_string(),
                    hours(r.slice_hours),
                ]
            })
            .collect(),
        notes,
    });
    out
}

/// The runs section: runs by state, and the failing stages.
fn runs_tables(r: &crate::report::model::Runs) -> Vec<TableData> {
    let mut out = Vec::new();
    let mut push = |t: TableData| out.push(t);
    let mut notes = vec![format!("{} run(s) in {}", r.runs, r.dir)];
    if let Some(m) = &r.most_failing_stage {
        notes.push(format!(
            "most often failing stage: {} ({} run(s))",
            m.stage, m.failures
        ));
    }
    for u in &r.unreadable {
        notes.push(format!("unreadable manifest {}: {}", u.path, u.error));
    }
    push(TableData {
        name: "runs",
        section: Section::Runs,
        title: "Runs by state",
        headers: vec!["state", "runs"],
        rows: r
            .by_state
            .iter()
            .map(|s| vec![s.state.clone(), s.runs.to_string()])
            .collect(),
        notes,
    });
    push(TableData {
        name: "runs-failing-stages",
        section: Section::Runs,
        title: "Failing stages",
        headers: vec!["stage", "failures"],
        rows: r
            .failing_stages
            .iter()
            .map(|s| vec![s.stage.clone(), s.failures.to_string()])
            .collect(),
        notes: Vec::new(),
    });
    out
}

/// The advice section: the layout advice per node and, when there is
/// advice, the jobs that asked for more than they used.
fn advice_tables(a: &crate::report::model::LayoutAdvice) -> Vec<TableData> {
    let mut out = Vec::new();
    let mut push = |t: TableData| out.push(t);
    let h = |s: f64| format!("{:.2} h", s / 3600.0);
    let mut notes = Vec::new();
    match &a.error {
        Some(e) => notes.push(format!("no layout advice: {e}")),
        None => {
            notes.push(format!(
                "last {}: {} typed GPU job(s); {} waited over a minute ({:.1} GPU-hours), mean wait {} (accounting)",
                human_duration(a.window_seconds),
                a.jobs,
                a.jobs_waited,
                a.waited_gpu_hours,
                h(a.measured_mean_wait_s)
            ));
            let to_change = a.nodes.iter().filter(|n| !n.advised).count();
            notes.push(if to_change == 0 {
                format!(
                    "every node is cut as advised (simulated mean wait {})",
                    h(a.predicted_mean_wait_s)
                )
            } else {
                format!(
                    "{to_change} node(s) to re-cut: simulated mean wait {} as cut now, {} as advised; `yolo-sched advise` prints the plan",
                    h(a.predicted_mean_wait_s),
                    h(a.advised_mean_wait_s)
                )
            });
        }
    }
    push(TableData {
        name: "advice",
        section: Section::Advice,
        title: "Layout advice",
        headers: vec!["node", "advised", "now", "advised_layout"],
        rows: a
            .nodes
            .iter()
            .map(|n| {
                vec![
                    n.node.clone(),
                    if n.advised { "yes" } else { "no" }.to_string(),
                    n.now.clone(),
                    n.advised_layout.clone(),
                ]
            })
            .collect(),
        notes,
    });
    if a.error.is_none() {
        push(TableData {
            name: "advice-oversized",
            section: Section::Advice,
            title: "Jobs that asked for more than they used (site-wide)",
            headers: vec![
                "by",
                "name",
                "jobs",
                "gpu_hours_asked",
                "gpu_hours_fit",
                "asked_to_fit",
                "waited_h",
                "predicted_wait_h",
                "wait_saved_h",
            ],
            rows: a
                .oversized
                .iter()
                .map(|o| {
                    vec![
                        o.by.to_string(),
                        o.name.clone(),
                        o.jobs.to_string(),
                        format!("{:.2}", o.gpu_hours_asked),
                        format!("{:.2}", o.gpu_hours_fit),
                        o.moves
                            .iter()
                            .map(|(m, n)| format!("{m} ×{n}"))
                            .collect::<Vec<_>>()
                            .join("; "),
                        format!("{:.2}", o.waited_h),
                        format!("{:.2}", o.predicted_wait_h),
                        format!("{:.2}", o.wait_saved_h),
                    ]
                })
                .collect(),
            notes: vec![need_note(&a.needs)],
        });
    }
    out
}

/// The right-sizing section's hints.
fn right_sizing_tables(rs: &crate::report::model::RightSizing) -> Vec<TableData> {
    let mut out = Vec::new();
    let mut push = |t: TableData| out.push(t);
    push(TableData {
        name: "right-sizing",
        section: Section::RightSizing,
        title: "Right-sizing hints",
        headers: vec![
            "run_id",
            "stage",
            "job_id",
            "requested",
            "basis",
            "memory_gib",
            "suggested",
            "suggested_usable_gib",
        ],
        rows: rs
            .hints
            .iter()
            .map(|h| {
                vec![
                    h.run_id.clone(),
                    h.stage.clone(),
                    h.job_id.clone().unwrap_or_default(),
                    h.requested.clone(),
                    h.basis.clone(),
                    format!("{:.2}", h.memory_gib),
                    h.suggested.clone(),
                    format!("{:.2}", h.suggested_usable_gib),
                ]
            })
            .collect(),
        notes: vec![rs.note.clone()],
    });
    out
}

/// Where the window's needs came from, in one line.
pub fn need_note(n: &crate::advise::need::Needs) -> String {
    format!(
        "needs: {} job(s) ({:.1} GPU-h) from measured GPU memory, {} ({:.1} GPU-h) from Slurm's gres/gpumem, \
         {} ({:.1} GPU-h) from the type asked; {} measured job(s) ({:.1} GPU-h) fit a smaller type; \
         {} measurement(s) refused",
        n.measured.jobs,
        n.measured.gpu_hours,
        n.gpumem.jobs,
        n.gpumem.gpu_hours,
        n.asked.jobs,
        n.asked.gpu_hours,
        n.smaller.jobs,
        n.smaller.gpu_hours,
        n.refused.total()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(human_duration(-3), "0s");
        assert_eq!(human_duration(59), "59s");
        assert_eq!(human_duration(725), "12m 05s");
        assert_eq!(human_duration(3 * 3600 + 4 * 60 + 5), "3h 04m");
        assert_eq!(human_duration(2 * 86_400 + 3 * 3600), "2d 03h");
    }
}
