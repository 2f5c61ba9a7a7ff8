//! What a job needed, as opposed to what it asked for (pure).
//!
//! **The carrier.** The job agent measures each training's GPU memory; at
//! the end of the training, and while it runs (so a job cancelled or killed
//! keeps its last figure), it appends its measurement to the job's own
//! comment (`scontrol update JobId=J Comment=…`, which Slurm lets a job's
//! owner do while the job runs), after the run's tag:
//!
//! ```text
//! yolo-sched:RUN:TOKEN:train ysneed=1;job=4711;slice=1g.10gb;epochs=12;peak_mib=6144/9856
//! ```
//!
//! `peak_mib` is the peak the job held on each of its devices over what the
//! device holds (`+` between devices of a job on several GPUs). With
//! `AccountingStoreFlags=job_comment` slurmdbd keeps the comment, so one
//! `sacct --allusers` call gives the administrator every user's
//! measurements, with no file of any run directory read ([`render`],
//! [`parse`]).
//!
//! **Trust.** A comment is the job owner's to write: a measurement is taken
//! only when it names the job it is stored with (a comment copied from
//! another job is refused), its numbers are plain decimal integers within
//! what any GPU holds (a peak of at most its device's memory, the device at
//! most [`MAX_DEVICE_MIB`]), it has no control character and is at most
//! [`MAX_CARRIER_BYTES`] long. Anything else is refused and counted,
//! never planned from. An owner can still understate their own job's need:
//! that misleads only the plan of the jobs they submit, and the type they
//! asked for stays the upper bound.
//!
//! **The need rule.** A job's need is, in this order: the measured peak
//! (the fullest device) plus the right-sizing's headroom
//! ([`MEASURED_HEADROOM`]); Slurm's own
//! `TRESUsageInMax` `gres/gpumem` (Slurm 23.02+ built with NVML) plus the
//! same headroom; else the memory of the type it asked for. It runs on the
//! smallest type of the nodes' models that holds its need ([`fit_type`]),
//! never on one larger than it asked for.

use serde::Serialize;

use crate::mig::demand::is_type_name;
use crate::mig::GpuGeometry;

/// Headroom added to a measured peak: peaks vary between epochs (also
/// `report`'s right-sizing hints).
pub const MEASURED_HEADROOM: f64 = 1.10;

/// The word that starts a measurement in a comment.
pub const CARRIER_KEY: &str = "ysneed=1;";

/// The longest measurement read or written (the comment as a whole is the
/// run tag, a space and this).
pub const MAX_CARRIER_BYTES: usize = 512;

/// The most devices one measurement names (a node's GPUs).
pub const MAX_DEVICES: usize = 64;

/// The largest device memory believed: 1 TiB (an H200 has 141 GB).
pub const MAX_DEVICE_MIB: u64 = 1 << 20;

/// The most epochs believed.
pub const MAX_EPOCHS: u64 = 1_000_000;

/// One job's measurement, as the agent writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Measurement {
    /// `SLURM_JOB_ID` of the job measured (an array task's own id).
    pub job: String,
    /// The type of the device it ran on (the MIG profile, else the GPU's name).
    pub slice: String,
    /// Epochs completed (results.csv), when known.
    pub epochs: Option<u64>,
    /// Per device: (peak MiB the job held, MiB the device has).
    pub devices: Vec<(u64, u64)>,
}

impl Measurement {
    /// The fullest device's peak, MiB.
    pub fn peak_mib(&self) -> u64 {
        self.devices.iter().map(|d| d.0).max().unwrap_or(0)
    }
}

/// Why a comment's measurement was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// It names another job than the one it is stored with.
    OtherJob,
    /// A number that is not a plain integer within bounds, a peak over its
    /// device's memory, no device, too many devices.
    BadNumber,
    /// Control characters, not the format, a repeated or missing key, too long.
    Malformed,
}

/// A type name as the carrier keeps it: the characters a GRES type may
/// have, at most 64 (anything else becomes `-`).
fn clean_type(s: &str) -> String {
    let t: String = s
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'))
        .take(crate::mig::demand::MAX_TYPE_CHARS)
        .collect();
    if t.is_empty() {
        "-".to_string()
    } else {
        t
    }
}

/// The measurement as the comment carries it (without the run tag before it).
pub fn render(m: &Measurement) -> String {
    let devices: Vec<String> = m
        .devices
        .iter()
        .take(MAX_DEVICES)
        .map(|(p, t)| format!("{p}/{t}"))
        .collect();
    let mut out = format!(
        "{CARRIER_KEY}job={};slice={}",
        clean_type(&m.job),
        clean_type(&m.slice)
    );
    if let Some(e) = m.epochs {
        out.push_str(&format!(";epochs={}", e.min(MAX_EPOCHS)));
    }
    out.push_str(&format!(";peak_mib={}", devices.join("+")));
    out
}

/// `comment` with its measurement replaced by `m`'s: the run tag (whatever
/// precedes the first space) is kept.
pub fn with_measurement(comment: &str, m: &Measurement) -> String {
    let tag = comment.split(' ').next().unwrap_or("").trim();
    if tag.is_empty() || tag.starts_with(CARRIER_KEY) {
        render(m)
    } else {
        format!("{tag} {}", render(m))
    }
}

/// A plain decimal integer up to `max` (no sign, no exponent, no spaces).
fn number(s: &str, max: u64) -> Result<u64, Refusal> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Refusal::BadNumber);
    }
    match s.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(Refusal::BadNumber),
    }
}

/// The measurement a job's stored comment carries: `Ok(None)` when it
/// carries none, `Err` when it carries one that cannot be trusted.
/// `job_id` is the job the comment is stored with (sacct's `JobIDRaw`).
pub fn parse(comment: &str, job_id: &str) -> Result<Option<Measurement>, Refusal> {
    let Some(at) = comment.find(CARRIER_KEY) else {
        return Ok(None);
    };
    let body = &comment[at..];
    if body.len() > MAX_CARRIER_BYTES || comment.chars().any(char::is_control) {
        return Err(Refusal::Malformed);
    }
    let body = body[CARRIER_KEY.len()..].trim_end();
    let (mut job, mut slice, mut epochs, mut peaks) = (None, None, None, None);
    for item in body.split(';') {
        let Some((k, v)) = item.split_once('=') else {
            return Err(Refusal::Malformed);
        };
        let slot = match k {
            "job" => &mut job,
            "slice" => &mut slice,
            "epochs" => &mut epochs,
            "peak_mib" => &mut peaks,
            // A later version's keys are skipped.
            _ => continue,
        };
        if slot.replace(v).is_some() {
            return Err(Refusal::Malformed);
        }
    }
    let (Some(job), Some(peaks)) = (job, peaks) else {
        return Err(Refusal::Malformed);
    };
    if job != job_id {
        return Err(Refusal::OtherJob);
    }
    let slice = match slice {
        Some(s) if s == "-" || is_type_name(s) => s.to_string(),
        Some(_) => return Err(Refusal::Malformed),
        None => "-".to_string(),
    };
    let epochs = epochs.map(|e| number(e, MAX_EPOCHS)).transpose()?;
    let mut devices = Vec::new();
    for d in peaks.split('+') {
        let (p, t) = d.split_once('/').ok_or(Refusal::Malformed)?;
        let (p, t) = (number(p, MAX_DEVICE_MIB)?, number(t, MAX_DEVICE_MIB)?);
        if p > t || t == 0 {
            return Err(Refusal::BadNumber);
        }
        devices.push((p, t));
    }
    if devices.is_empty() || devices.len() > MAX_DEVICES {
        return Err(Refusal::BadNumber);
    }
    Ok(Some(Measurement {
        job: job.to_string(),
        slice,
        epochs,
        devices,
    }))
}

/// `gres/gpumem` of a `TRESUsageInMax` list, MiB: Slurm prints bytes, or
/// a number with a binary unit (`6.50G`, `6656M`, `6815744K`). `None` when
/// absent (Slurm before 23.02, or built without NVML) or not a number.
pub fn gpumem_mib(tres: &str) -> Option<u64> {
    let value = tres
        .split(',')
        .find_map(|item| item.trim().strip_prefix("gres/gpumem="))?;
    let (digits, unit) = match value.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => value.split_at(i),
        None => (value, ""),
    };
    if digits.is_empty() || digits.len() > 24 {
        return None;
    }
    let n: f64 = digits.parse().ok()?;
    let scale = match unit {
        "" => 1.0 / 1048576.0,
        "K" => 1.0 / 1024.0,
        "M" => 1.0,
        "G" => 1024.0,
        "T" => 1048576.0,
        _ => return None,
    };
    let mib = n * scale;
    (mib.is_finite() && mib >= 0.0 && mib <= MAX_DEVICE_MIB as f64).then(|| mib.ceil() as u64)
}

/// MiB needed for a measured peak: the right-sizing's headroom added.
pub fn with_headroom(peak_mib: u64) -> u64 {
    (peak_mib as f64 * MEASURED_HEADROOM).ceil() as u64
}

/// Where a job's need comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The job agent's measurement, carried in the job's comment.
    Measured,
    /// Slurm's `TRESUsageInMax` `gres/gpumem`.
    Gpumem,
    /// Nothing measured: the type it asked for.
    Asked,
}

/// The type a job that asked for `asked` and needs `need_mib` runs on, on
/// nodes of `models`: the smallest profile or whole GPU of those models that
/// holds `need_mib` (least memory, then fewest compute slices), or `asked`
/// when none is smaller than it (never a larger type than asked, and never
/// one for a type no built-in model has, or a job of several instances,
/// whose ranks need one device each).
pub fn fit_type(asked: &str, count: u32, need_mib: u64, models: &[&GpuGeometry]) -> String {
    let Some(asked_mib) = super::simulate::memory_of(asked) else {
        return asked.to_string();
    };
    if count != 1 {
        return asked.to_string();
    }
    let mut best: Option<(u64, u8, &str)> = None;
    for g in models {
        for p in g.profiles() {
            if p.memory_mib >= need_mib && !p.name.contains('+') {
                let key = (p.memory_mib, p.compute_slices, p.name.as_str());
                if best.is_none_or(|b| key < b) {
                    best = Some(key);
                }
            }
        }
    }
    match best {
        Some((mib, _, name)) if mib < asked_mib => name.to_string(),
        _ => asked.to_string(),
    }
}

/// Measurements that were not trusted, by why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// Naming another job than the one the comment is stored with.
    pub other_job: u64,
    /// A number out of bounds, or a peak over what its type holds.
    pub bad_number: u64,
    /// Not the format (control characters, too long, keys missing or repeated).
    pub malformed: u64,
}

impl Refused {
    pub fn total(&self) -> u64 {
        self.other_job + self.bad_number + self.malformed
    }
}

/// Jobs and GPU-hours (of the type asked) of one part of the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Covered {
    pub jobs: u64,
    pub gpu_hours: f64,
}

impl Covered {
    fn add(&mut self, gpu_hours: f64) {
        self.jobs += 1;
        self.gpu_hours += gpu_hours;
    }
}

/// Where the window's needs came from, and what was refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Needs {
    /// Planned from the job agent's measurement.
    pub measured: Covered,
    /// From Slurm's `gres/gpumem`.
    pub gpumem: Covered,
    /// From the type asked (nothing measured, or nothing trusted).
    pub asked: Covered,
    /// Of those planned from a measurement, the jobs that fit a smaller
    /// type than they asked for (filled by [`plan`]).
    pub smaller: Covered,
    pub refused: Refused,
    /// Jobs submitted by yolo-sched (their comment names a run) that carry
    /// no measurement: their agent could not write it (no NVML, an older
    /// yolo-sched), or accounting does not keep comments.
    pub tagged_unmeasured: u64,
}

/// The need of one job from its comment and `TRESUsageInMax`, in the
/// order of the need rule, MiB with headroom (`None`: the type asked).
/// `job_id` is the line's `JobIDRaw`, `asked` its type.
pub fn need_of(
    job_id: &str,
    asked: &str,
    comment: &str,
    usage_max: &str,
    refused: &mut Refused,
) -> (Option<u64>, Source) {
    match parse(comment, job_id) {
        Ok(Some(m)) => {
            let peak = m.peak_mib();
            // A job holds at most what its instance has: a larger peak is
            // not this job's.
            let over = super::simulate::memory_of(asked)
                .is_some_and(|mib| peak as f64 > mib as f64 * 1.05 + 1024.0);
            if over {
                refused.bad_number += 1;
            } else {
                return (Some(with_headroom(peak)), Source::Measured);
            }
        }
        Ok(None) => {}
        Err(Refusal::OtherJob) => refused.other_job += 1,
        Err(Refusal::BadNumber) => refused.bad_number += 1,
        Err(Refusal::Malformed) => refused.malformed += 1,
    }
    match gpumem_mib(usage_max) {
        Some(mib) if mib > 0 => (Some(with_headroom(mib)), Source::Gpumem),
        _ => (None, Source::Asked),
    }
}

/// Names kept once (types, users, accounts), numbered in order of arrival.
#[derive(Debug, Clone, Default)]
pub struct Names {
    index: std::collections::HashMap<String, u32>,
    names: Vec<String>,
}

impl Names {
    pub fn id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.index.insert(name.to_string(), i);
        self.names.push(name.to_string());
        i
    }

    pub fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map_or("", String::as_str)
    }
}

/// One typed job of the window as the need rule sees it: a few dozen bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobNeed {
    pub kind: u32,
    pub user: u32,
    pub account: u32,
    pub count: u32,
    pub seconds: u64,
    pub arrival_s: u64,
    /// MiB with headroom; 0: the type asked.
    pub need_mib: u64,
    /// What accounting recorded (start − submit); `None`: never started.
    pub wait_s: Option<u64>,
    pub source: Source,
}

/// The window's typed jobs, in the order they were read.
#[derive(Debug, Clone, Default)]
pub struct Jobs {
    pub list: Vec<JobNeed>,
    pub kinds: Names,
    pub users: Names,
    pub accounts: Names,
}

/// GPU-hours of a job of `count` × `kind` for `seconds`.
fn gpu_hours(kind: &str, count: u32, seconds: u64) -> f64 {
    seconds as f64 * f64::from(count) * super::simulate::gpu_share(kind) / 3600.0
}

/// The window's demand as jobs need it: each job of the type it fits on the
/// nodes of `models` ([`fit_type`]) when its need is known, else the type
/// it asked, in the order read (each type's queue in arrival order). With
/// the type each job was planned on, and `needs.smaller` filled.
pub fn plan(
    jobs: &Jobs,
    models: &[&GpuGeometry],
    needs: &mut Needs,
) -> (crate::mig::Demand, Vec<String>) {
    let mut demand = crate::mig::Demand::new();
    let mut fits = Vec::with_capacity(jobs.list.len());
    let mut cache: std::collections::HashMap<(u32, u32, u64), String> = Default::default();
    needs.smaller = Covered::default();
    for j in &jobs.list {
        let asked = jobs.kinds.name(j.kind);
        let fit = if j.need_mib == 0 {
            asked.to_string()
        } else {
            cache
                .entry((j.kind, j.count, j.need_mib))
                .or_insert_with(|| fit_type(asked, j.count, j.need_mib, models))
                .clone()
        };
        if fit != asked {
            needs.smaller.add(gpu_hours(asked, j.count, j.seconds));
        }
        demand.add_arriving(&fit, j.count, j.seconds, j.arrival_s);
        fits.push(fit);
    }
    (demand, fits)
}

/// One user's or account's jobs that asked for more than they used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Oversized {
    /// `user` or `account`.
    pub by: &'static str,
    pub name: String,
    /// Jobs of theirs planned from a measurement (or gpumem).
    pub measured_jobs: u64,
    /// Of those, the jobs that would have fitted a smaller type.
    pub jobs: u64,
    /// GPU-hours those held as asked, and would have held on what fits.
    pub gpu_hours_asked: f64,
    pub gpu_hours_fit: f64,
    /// What they asked → what would have fitted, with the number of jobs.
    pub moves: std::collections::BTreeMap<String, u64>,
    /// Their recorded waits (hours, summed), and the predicted ones on the
    /// advised layout with every job asking what fits (each job the mean
    /// wait of its type there).
    pub waited_h: f64,
    pub predicted_wait_h: f64,
    /// `waited_h − predicted_wait_h`.
    pub wait_saved_h: f64,
}

/// Per user and per account, the jobs that asked for more than they used
/// (largest GPU-hours saved first). `fits` from [`plan`]; `mean_wait_s`:
/// the predicted mean wait of each planned type's jobs on the advised layout.
pub fn oversized(
    jobs: &Jobs,
    fits: &[String],
    mean_wait_s: &dyn Fn(&str) -> Option<f64>,
) -> Vec<Oversized> {
    use std::collections::BTreeMap;
    let mut by: BTreeMap<(&'static str, String), Oversized> = BTreeMap::new();
    for (j, fit) in jobs.list.iter().zip(fits) {
        if j.source == Source::Asked {
            continue;
        }
        let asked = jobs.kinds.name(j.kind);
        for (who, name) in [
            ("user", jobs.users.name(j.user)),
            ("account", jobs.accounts.name(j.account)),
        ] {
            let o = by
                .entry((who, name.to_string()))
                .or_insert_with(|| Oversized {
                    by: who,
                    name: name.to_string(),
                    measured_jobs: 0,
                    jobs: 0,
                    gpu_hours_asked: 0.0,
                    gpu_hours_fit: 0.0,
                    moves: BTreeMap::new(),
                    waited_h: 0.0,
                    predicted_wait_h: 0.0,
                    wait_saved_h: 0.0,
                });
            o.measured_jobs += 1;
            if fit == asked {
                continue;
            }
            o.jobs += 1;
            o.gpu_hours_asked += gpu_hours(asked, j.count, j.seconds);
            o.gpu_hours_fit += gpu_hours(fit, j.count, j.seconds);
            *o.moves.entry(format!("{asked} → {fit}")).or_default() += 1;
            if let (Some(w), Some(p)) = (j.wait_s, mean_wait_s(fit)) {
                o.waited_h += w as f64 / 3600.0;
                o.predicted_wait_h += p / 3600.0;
            }
        }
    }
    let mut out: Vec<Oversized> = by
        .into_values()
        .filter(|o| o.jobs > 0)
        .map(|mut o| {
            o.wait_saved_h = o.waited_h - o.predicted_wait_h;
            o
        })
        .collect();
    out.sort_by(|a, b| {
        a.by.cmp(b.by).reverse().then(
            (b.gpu_hours_asked - b.gpu_hours_fit)
                .total_cmp(&(a.gpu_hours_asked - a.gpu_hours_fit))
                .then(a.name.cmp(&b.name)),
        )
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::builtin;

    fn m(devices: Vec<(u64, u64)>) -> Measurement {
        Measurement {
            job: "4711".into(),
            slice: "a100".into(),
            epochs: Some(3),
            devices,
        }
    }

    #[test]
    fn a_measurement_round_trips_through_the_comment_after_the_run_tag() {
        let one = m(vec![(6144, 40536)]);
        let c = with_measurement("yolo-sched:r-1:ab:train", &one);
        assert_eq!(
            c,
            "yolo-sched:r-1:ab:train ysneed=1;job=4711;slice=a100;epochs=3;peak_mib=6144/40536"
        );
        assert_eq!(parse(&c, "4711"), Ok(Some(one.clone())));
        // A later measurement replaces the earlier one, the tag stays.
        let two = m(vec![(7000, 81559), (9000, 81559)]);
        let c2 = with_measurement(&c, &two);
        assert_eq!(c2.matches(CARRIER_KEY).count(), 1, "{c2}");
        assert!(c2.starts_with("yolo-sched:r-1:ab:train ysneed=1;"), "{c2}");
        let back = parse(&c2, "4711").unwrap().unwrap();
        assert_eq!(back.peak_mib(), 9000);
        // A comment without one carries none.
        assert_eq!(parse("yolo-sched:r-1:ab:train", "4711"), Ok(None));
        assert_eq!(parse("", "4711"), Ok(None));
        // A hostile slice name is cleaned when written.
        let mut odd = one;
        odd.slice = "1g.5gb\u{1b}[31m;job=1".into();
        let c = with_measurement("t", &odd);
        assert_eq!(parse(&c, "4711").unwrap().unwrap().slice, "1g.5gb31mjob1");
    }

    #[test]
    fn forged_or_garbage_measurements_are_refused_by_why() {
        let ok = "yolo-sched:r:t:train ysneed=1;job=12;slice=1g.5gb;epochs=2;peak_mib=100/4864";
        assert!(parse(ok, "12").unwrap().is_some());
        let cases = [
            // Copied from another job.
            (ok, "13", Refusal::OtherJob),
            (
                &ok.replace("100/", "-100/") as &str,
                "12",
                Refusal::BadNumber,
            ),
            (
                &ok.replace("100/4864", "1e30/4864"),
                "12",
                Refusal::BadNumber,
            ),
            (
                &ok.replace("100/4864", "100/1000000000000000000000000000000"),
                "12",
                Refusal::BadNumber,
            ),
            (
                &ok.replace("100/4864", "5000/4864"),
                "12",
                Refusal::BadNumber,
            ),
            (&ok.replace("100/4864", "1/0"), "12", Refusal::BadNumber),
            (&ok.replace("100/4864", ""), "12", Refusal::Malformed),
            (
                &ok.replace("epochs=2", "epochs=99999999"),
                "12",
                Refusal::BadNumber,
            ),
            (
                &ok.replace("job=12", "job=12;job=13"),
                "12",
                Refusal::Malformed,
            ),
            (
                &ok.replace("slice=1g.5gb", "slice=a b"),
                "12",
                Refusal::Malformed,
            ),
            (
                &ok.replace(";peak_mib=100/4864", ""),
                "12",
                Refusal::Malformed,
            ),
            (
                &ok.replace("train", "tr\u{1b}[2Jain"),
                "12",
                Refusal::Malformed,
            ),
            (&ok.replace("train", "tr\u{7}ain"), "12", Refusal::Malformed),
            (
                &format!("{ok};x={}", "9".repeat(600)),
                "12",
                Refusal::Malformed,
            ),
            (
                &ok.replace("100/4864", &vec!["1/2"; 65].join("+")),
                "12",
                Refusal::BadNumber,
            ),
        ];
        for (comment, job, why) in cases {
            assert_eq!(parse(comment, job), Err(why), "{comment:?}");
        }
        // Unknown keys of a later version are skipped.
        assert!(parse(&format!("{ok};util=50"), "12").unwrap().is_some());
    }

    #[test]
    fn gpumem_is_read_in_slurms_units() {
        let t = "cpu=00:01:02,energy=0,fs/disk=1234,gres/gpumem=6G,gres/gpuutil=90,mem=1.50G";
        assert_eq!(gpumem_mib(t), Some(6144));
        assert_eq!(gpumem_mib("gres/gpumem=6442450944"), Some(6144));
        assert_eq!(gpumem_mib("gres/gpumem=6656M,mem=1G"), Some(6656));
        assert_eq!(gpumem_mib("gres/gpumem=6815744K"), Some(6656));
        assert_eq!(gpumem_mib("gres/gpumem=1.5G"), Some(1536));
        for bad in [
            "",
            "cpu=1,mem=2G",
            "gres/gpumem=-1",
            "gres/gpumem=1e30",
            "gres/gpumem=9P",
            "gres/gpumem=2000T",
            "gres/gpumem=",
        ] {
            assert_eq!(gpumem_mib(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_job_runs_on_the_smallest_type_that_holds_its_need_never_a_larger_one() {
        let a100 = builtin::a100_40gb();
        let h200 = builtin::h200();
        // 6 GiB measured + 10 %: 6.6 GiB. On an A100-40GB the smallest
        // profile holding it is 1g.10gb (9.62 GiB, one compute slice).
        let need = with_headroom(6144);
        assert_eq!(need, 6759);
        assert_eq!(fit_type("a100", 1, need, &[&a100]), "1g.10gb");
        assert_eq!(fit_type("h200", 1, need, &[&h200]), "1g.18gb");
        // Never larger than asked: a 1g.5gb job measured at 4.5 GiB stays.
        assert_eq!(
            fit_type("1g.5gb", 1, with_headroom(4600), &[&a100]),
            "1g.5gb"
        );
        // What fills the whole GPU keeps it.
        assert_eq!(fit_type("a100", 1, 39_000, &[&a100]), "a100");
        // A type no model has, and several ranks, keep what they asked.
        assert_eq!(fit_type("v100", 1, 100, &[&a100]), "v100");
        assert_eq!(fit_type("a100", 2, 100, &[&a100]), "a100");
    }
}
