//! Per-job gauges in the Prometheus text format, for node_exporter's textfile
//! collector, and the trainer's progress read from `results.csv`. Pure.

use std::fmt::Write as _;

/// The labels every gauge of one job carries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Labels {
    pub run: String,
    pub stage: String,
    /// The array task, or empty.
    pub task: String,
    pub user: String,
    pub account: String,
    /// The slice or GPU: `1g.5gb`, or the GPU's name.
    pub slice: String,
}

/// What one job publishes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gauges {
    pub used_bytes: u64,
    pub total_bytes: u64,
    /// Growth over the guard's window, bytes per second (absent with too few samples).
    pub growth_bytes_per_second: Option<f64>,
    /// Epochs the trainer completed (results.csv rows).
    pub epoch: Option<u32>,
    /// mAP50-95 of the latest epoch.
    pub map50_95: Option<f64>,
    /// 0 fine, 1 warned, 2 stopped by the guard.
    pub guard_state: u8,
}

fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// The gauge families, their help and what they mean.
pub const FAMILIES: &[(&str, &str)] = &[
    (
        "yolo_sched_job_gpu_memory_used_bytes",
        "GPU memory the job holds on its slice or GPU.",
    ),
    (
        "yolo_sched_job_gpu_memory_total_bytes",
        "GPU memory of the job's slice or GPU.",
    ),
    (
        "yolo_sched_job_gpu_memory_growth_bytes_per_second",
        "Growth of the job's GPU memory over the memory guard's window.",
    ),
    (
        "yolo_sched_job_training_epoch",
        "Training epochs completed (rows of results.csv).",
    ),
    (
        "yolo_sched_job_training_map50_95",
        "mAP50-95 of the latest completed epoch.",
    ),
    (
        "yolo_sched_job_memory_guard_state",
        "Memory guard: 0 fine, 1 warned, 2 stopped the job.",
    ),
];

/// The textfile: one gauge per family, `# HELP`/`# TYPE` lines first.
pub fn render(labels: &Labels, g: &Gauges) -> String {
    let l = format!(
        "run=\"{}\",stage=\"{}\",task=\"{}\",user=\"{}\",account=\"{}\",slice=\"{}\"",
        escape(&labels.run),
        escape(&labels.stage),
        escape(&labels.task),
        escape(&labels.user),
        escape(&labels.account),
        escape(&labels.slice)
    );
    let values: [Option<String>; 6] = [
        Some(g.used_bytes.to_string()),
        Some(g.total_bytes.to_string()),
        g.growth_bytes_per_second
            .filter(|v| v.is_finite())
            .map(|v| format!("{v:.1}")),
        g.epoch.map(|e| e.to_string()),
        g.map50_95.filter(|v| v.is_finite()).map(|v| format!("{v}")),
        Some(g.guard_state.to_string()),
    ];
    let mut out = String::with_capacity(1024);
    for ((name, help), value) in FAMILIES.iter().zip(values) {
        if let Some(v) = value {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{l}}} {v}"
            );
        }
    }
    out
}

/// A file name for the textfile directory: `yolo_sched_<run>_<key>.prom`, with
/// anything but letters, digits, `-`, `_` and `.` replaced.
pub fn file_name(run: &str, key: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("yolo_sched_{}_{}.prom", clean(run), clean(key))
}

/// Epochs completed and the latest mAP50-95 from the text of `results.csv`
/// (read by `rundir::results`, its one reader): the last readable row's.
pub fn latest_progress(csv: &str) -> (Option<u32>, Option<f64>) {
    let Some(epochs) = crate::rundir::results::parse(csv) else {
        return (None, None);
    };
    match epochs.last() {
        Some(e) => (Some(e.epoch), e.map50_95),
        None => (Some(0), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_textfile_has_every_family_and_escaped_labels() {
        let labels = Labels {
            run: "demo-1a2b".into(),
            stage: "train".into(),
            task: String::new(),
            user: "ana\"\\x".into(),
            account: "lab".into(),
            slice: "1g.5gb".into(),
        };
        let text = render(
            &labels,
            &Gauges {
                used_bytes: 10,
                total_bytes: 20,
                growth_bytes_per_second: Some(1.25),
                epoch: Some(3),
                map50_95: Some(0.5),
                guard_state: 1,
            },
        );
        assert!(text.contains("yolo_sched_job_gpu_memory_used_bytes{run=\"demo-1a2b\",stage=\"train\",task=\"\",user=\"ana\\\"\\\\x\",account=\"lab\",slice=\"1g.5gb\"} 10\n"), "{text}");
        assert!(text.contains("# TYPE yolo_sched_job_training_epoch gauge\n"));
        assert_eq!(text.matches("# HELP").count(), 6);
        let sparse = render(&labels, &Gauges::default());
        assert_eq!(sparse.matches("# HELP").count(), 3, "{sparse}");
    }

    #[test]
    fn results_csv_gives_the_latest_epoch_and_map() {
        let csv = "                  epoch,  time, metrics/mAP50-95(B), x\n 1, 2, 0.1, 0\n 2, 4, 0.25, 0\n";
        assert_eq!(latest_progress(csv), (Some(2), Some(0.25)));
        assert_eq!(latest_progress("epoch,x\n"), (Some(0), None));
        assert_eq!(latest_progress(""), (None, None));
        // An epoch that is no count (`rundir::results::epoch_of`) is never
        // cast to a gauge: the last readable row stands.
        let bad = "epoch,metrics/mAP50-95(B)\n1,0.1\ninf,0.9\n";
        assert_eq!(latest_progress(bad), (Some(1), Some(0.1)));
        assert_eq!(file_name("r/1", "train.3"), "yolo_sched_r_1_train.3.prom");
    }
}
