//! Ultralytics' `results.csv`: one row per finished epoch, the losses and
//! validation metrics of that epoch. The one reader of the file: `status`
//! reads the progress from it, `compare` and the HTML report the whole curve,
//! `checkpoint` the last epoch, the job agent's gauges the latest epoch and
//! `models publish` the best one.

use std::path::Path;

use serde::Serialize;

/// The largest `results.csv` read: a row is about 200 bytes, so this holds
/// tens of thousands of epochs.
pub const RESULTS_LIMIT: u64 = 16 << 20;

/// One epoch as Ultralytics wrote it. A column the file does not have (a
/// segmentation run, an older Ultralytics) is `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Epoch {
    pub epoch: u32,
    pub box_loss: Option<f64>,
    pub cls_loss: Option<f64>,
    pub dfl_loss: Option<f64>,
    pub precision: Option<f64>,
    pub recall: Option<f64>,
    pub map50: Option<f64>,
    pub map50_95: Option<f64>,
    pub val_box_loss: Option<f64>,
    /// Seconds since training started, when this Ultralytics records it (`time`).
    pub time: Option<f64>,
}

/// An epoch as `results.csv` holds it: only a whole, finite, non-negative
/// number that fits an epoch counts. A cast would turn `inf` or `1e10` into
/// 4294967295 and `NaN` into 0, so a training that never ran would read as
/// finished; `2.5` is no epoch either.
pub fn epoch_of(field: &str) -> Option<u32> {
    let e = field.trim().parse::<f64>().ok()?;
    (e.is_finite() && e >= 0.0 && e.fract() == 0.0 && e <= f64::from(u32::MAX)).then_some(e as u32)
}

/// The last epoch of a training (a resumed run appends rows): the largest.
pub fn last_epoch(epochs: &[Epoch]) -> Option<u32> {
    epochs.iter().map(|e| e.epoch).max()
}

/// Parse the text of a `results.csv`. `None` when there is no `epoch` column;
/// rows that cannot be read, and rows whose epoch is no epoch (`epoch_of`),
/// are skipped (the file is being appended to).
pub fn parse(text: &str) -> Option<Vec<Epoch>> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next()?.split(',').map(str::trim).collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let epoch_col = col("epoch")?;
    let cols = [
        col("train/box_loss"),
        col("train/cls_loss"),
        col("train/dfl_loss"),
        col("metrics/precision(B)"),
        col("metrics/recall(B)"),
        col("metrics/mAP50(B)"),
        col("metrics/mAP50-95(B)"),
        col("val/box_loss"),
        col("time"),
    ];
    let mut out = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let Some(epoch) = f.get(epoch_col).and_then(|e| epoch_of(e)) else {
            continue;
        };
        let v: [Option<f64>; 9] = std::array::from_fn(|i| {
            cols[i]
                .and_then(|c| f.get(c))
                .and_then(|x| x.parse::<f64>().ok())
                .filter(|x| x.is_finite())
        });
        out.push(Epoch {
            epoch,
            box_loss: v[0],
            cls_loss: v[1],
            dfl_loss: v[2],
            precision: v[3],
            recall: v[4],
            map50: v[5],
            map50_95: v[6],
            val_box_loss: v[7],
            time: v[8],
        });
    }
    Some(out)
}

/// Read and parse a `results.csv` (bounded, regular files only).
pub fn read(path: &Path) -> Option<Vec<Epoch>> {
    let text = crate::fsutil::read_regular(path, RESULTS_LIMIT).ok()?;
    parse(&text)
}

/// The epoch with the best mAP50-95 (the first of equals), if any has one.
pub fn best(epochs: &[Epoch]) -> Option<&Epoch> {
    epochs.iter().filter(|e| e.map50_95.is_some()).fold(
        None,
        |best: Option<&Epoch>, e| match best {
            Some(b) if b.map50_95 >= e.map50_95 => Some(b),
            _ => Some(e),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one epoch rule (the strictest of the three readers there were):
    /// whole, finite, non-negative, within `u32`. A row with anything else in
    /// its epoch column is skipped, never cast.
    #[test]
    fn only_whole_finite_non_negative_epochs_count() {
        for no in [
            "inf",
            "-inf",
            "NaN",
            "1e10",
            "4294967296",
            "-1",
            "2.5",
            "",
            "x",
        ] {
            assert_eq!(epoch_of(no), None, "{no:?}");
        }
        assert_eq!(epoch_of(" 7 "), Some(7));
        assert_eq!(epoch_of("3.0"), Some(3));
        assert_eq!(epoch_of("4294967295"), Some(u32::MAX));
        let rows =
            parse("epoch,metrics/mAP50-95(B)\n1,0.1\ninf,0.9\n2.5,0.8\n1e10,0.7\n2,0.2\n").unwrap();
        let epochs: Vec<u32> = rows.iter().map(|e| e.epoch).collect();
        assert_eq!(epochs, [1, 2]);
        assert_eq!(last_epoch(&rows), Some(2));
        assert_eq!(last_epoch(&[]), None);
    }

    /// The header and two rows of a real Ultralytics 8.4 `results.csv`.
    const REAL: &str = "epoch,time,train/box_loss,train/cls_loss,train/dfl_loss,metrics/precision(B),metrics/recall(B),metrics/mAP50(B),metrics/mAP50-95(B),val/box_loss,val/cls_loss,val/dfl_loss,lr/pg0,lr/pg1,lr/pg2
1,3.1,3.9,5.5,4.2,0.001,0.05,0.0012,0.0003,4.1,5.6,4.3,0.07,0.0003,0.0003
2,5.9,3.7,5.2,4.0,0.002,0.10,0.0030,0.0009,4.0,5.4,4.2,0.04,0.0006,0.0006
";

    #[test]
    fn real_rows_are_read_by_column_name() {
        let e = parse(REAL).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[1].epoch, 2);
        assert_eq!(e[1].map50_95, Some(0.0009));
        assert_eq!(e[1].recall, Some(0.10));
        assert_eq!(e[0].box_loss, Some(3.9));
        assert_eq!(e[1].time, Some(5.9));
        assert_eq!(best(&e).unwrap().epoch, 2);
    }

    #[test]
    fn broken_rows_and_values_are_skipped_not_fatal() {
        let text = "epoch,metrics/mAP50-95(B)\n1,0.5\nx,0.9\n2,NaN\n3,inf\n-1,0.2\n4,0.4\n";
        let e = parse(text).unwrap();
        assert_eq!(e.iter().map(|e| e.epoch).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(e[1].map50_95, None);
        assert_eq!(best(&e).unwrap().epoch, 1);
        assert!(parse("nothing,here\n1,2\n").is_none());
        assert!(parse("").is_none());
    }
}
