//! The memory time series of one job: a bounded ring of samples, the growth
//! rate over a span (least squares), and the compact CSV form kept in the run's
//! state directory. Pure.

use std::collections::VecDeque;

/// One reading of the job's device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Unix seconds.
    pub t: f64,
    /// Bytes the job holds (the slice's use on MIG; its processes' on a whole GPU).
    pub used: u64,
    /// Bytes in use on the device, by anyone.
    pub device_used: u64,
    /// Bytes the device has.
    pub total: u64,
    /// `used` is the job's own (a slice, its processes, or a GPU nobody
    /// else uses); false when it is the device's, standing in for a use the
    /// agent cannot know: such a sample is never evidence for a stop.
    pub own: bool,
}

/// The last `capacity` samples, oldest first.
#[derive(Debug, Clone)]
pub struct Series {
    samples: VecDeque<Sample>,
    capacity: usize,
}

/// The CSV header of the series file.
pub const CSV_HEADER: &str = "t_unix,job_used_bytes,device_used_bytes,total_bytes";

impl Series {
    pub fn new(capacity: usize) -> Series {
        let capacity = capacity.max(2);
        Series {
            samples: VecDeque::with_capacity(capacity.min(4096)),
            capacity,
        }
    }

    /// Add a sample; the oldest goes when the ring is full. A sample older
    /// than the last one (the clock stepped back) is dropped.
    pub fn push(&mut self, s: Sample) {
        if self.samples.back().is_some_and(|last| s.t < last.t) {
            return;
        }
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    pub fn last(&self) -> Option<&Sample> {
        self.samples.back()
    }

    /// Samples taken at or after `from` (Unix seconds), oldest first.
    pub fn since(&self, from: f64) -> impl Iterator<Item = &Sample> + Clone {
        let start = self.samples.partition_point(|s| s.t < from);
        self.samples.range(start..)
    }

    /// Growth in bytes per second of the job's memory over the samples at or
    /// after `from`: the least-squares slope, with the span it covers. `None`
    /// with fewer than two samples or no time between them.
    pub fn rate_since(&self, from: f64) -> Option<Rate> {
        rate_of(self.since(from))
    }

    /// The compact form kept on disk: one line per sample under `CSV_HEADER`.
    pub fn to_csv(&self) -> String {
        let mut out = String::with_capacity(48 * self.samples.len() + 64);
        out.push_str(CSV_HEADER);
        out.push('\n');
        for s in &self.samples {
            out.push_str(&format!(
                "{:.3},{},{},{}\n",
                s.t, s.used, s.device_used, s.total
            ));
        }
        out
    }
}

/// A growth rate and the span of samples it was fitted on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub bytes_per_s: f64,
    /// Seconds from the first to the last sample used.
    pub span_s: f64,
    pub samples: usize,
}

/// Least-squares slope of `used` over `t`.
pub fn rate_of<'a>(samples: impl Iterator<Item = &'a Sample> + Clone) -> Option<Rate> {
    let mut n = 0usize;
    let (mut first, mut last) = (f64::NAN, f64::NAN);
    let (mut st, mut sy) = (0.0, 0.0);
    for s in samples.clone() {
        if n == 0 {
            first = s.t;
        }
        last = s.t;
        n += 1;
        st += s.t;
        sy += s.used as f64;
    }
    if n < 2 || last <= first {
        return None;
    }
    let (mt, my) = (st / n as f64, sy / n as f64);
    let (mut num, mut den) = (0.0, 0.0);
    for s in samples {
        let dt = s.t - mt;
        num += dt * (s.used as f64 - my);
        den += dt * dt;
    }
    (den > 0.0).then(|| Rate {
        bytes_per_s: num / den,
        span_s: last - first,
        samples: n,
    })
}

/// The sample of the fullest of a job's devices: the highest use (the job's
/// own where known, else the device's) as a share of the device's memory. On
/// several GPUs of one node (DDP) the first rank to run out ends the
/// training, so the fullest device is the job's memory.
pub fn fullest(
    samples: &[crate::nvml::memory::MemorySample],
) -> Option<crate::nvml::memory::MemorySample> {
    let share = |m: &crate::nvml::memory::MemorySample| {
        m.job_used.unwrap_or(m.device_used) as f64 / m.total.max(1) as f64
    };
    samples
        .iter()
        .copied()
        .max_by(|a, b| share(a).total_cmp(&share(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fullest_device_stands_for_the_job() {
        use crate::nvml::memory::MemorySample;
        let gib = 1u64 << 30;
        let m = |used: u64, total: u64| MemorySample {
            device_used: used * gib,
            total: total * gib,
            job_used: None,
            others: None,
        };
        // 30 of 40 GiB and 60 of 80 GiB are both 75 %; 70 of 80 GiB is fuller.
        let picked = fullest(&[m(30, 40), m(70, 80), m(60, 80)]).unwrap();
        assert_eq!(picked.device_used, 70 * gib);
        assert_eq!(fullest(&[]), None);
    }

    fn s(t: f64, used: u64) -> Sample {
        Sample {
            t,
            used,
            device_used: used,
            total: 1 << 32,
            own: true,
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_and_refuses_time_travel() {
        let mut r = Series::new(3);
        for i in 0..5 {
            r.push(s(i as f64, i));
        }
        assert_eq!(r.len(), 3);
        assert_eq!(r.since(0.0).next().unwrap().t, 2.0);
        r.push(s(1.0, 99));
        assert_eq!(r.last().unwrap().used, 4, "an older sample is dropped");
    }

    #[test]
    fn the_slope_is_bytes_per_second_and_noise_averages_out() {
        let mut r = Series::new(100);
        for i in 0..61 {
            // 10 MB/s with +-3 MB of alternating noise.
            let noise: i64 = if i % 2 == 0 { 3_000_000 } else { -3_000_000 };
            r.push(s(i as f64, (1_000_000_000 + i * 10_000_000 + noise) as u64));
        }
        let rate = r.rate_since(0.0).unwrap();
        assert!((rate.bytes_per_s - 10e6).abs() < 0.2e6, "{rate:?}");
        assert_eq!(rate.span_s, 60.0);
        assert_eq!(rate.samples, 61);
        let late = r.rate_since(30.0).unwrap();
        assert_eq!(late.samples, 31);
    }

    #[test]
    fn too_few_samples_have_no_rate_and_the_csv_has_a_header() {
        let mut r = Series::new(10);
        assert!(r.rate_since(0.0).is_none());
        r.push(s(5.0, 1));
        assert!(r.rate_since(0.0).is_none());
        assert_eq!(r.to_csv(), format!("{CSV_HEADER}\n5.000,1,1,4294967296\n"));
    }
}
