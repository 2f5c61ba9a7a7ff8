//! Training-memory estimate for a YOLO model: the number the GPU choice sizes against.
//!
//! Measured peaks (MMYOLO's YOLOv8 table, 640 px, batch 16 per GPU, AMP):
//! n 2.8, s 4.0, m 7.2, l 9.8, x 12.2 GB. Memory is a fixed part (weights,
//! optimizer state, CUDA context) plus a part per image that grows with the
//! pixel count: Ultralytics' yolov3 trainer used 10.5 GB at batch 8 and 16.9 GB
//! at batch 16, so about a quarter of the batch-16 figure is fixed. Hence
//! `mem = M16 × (0.25 + 0.75 × batch/16 × (imgsz/640)²)`, plus headroom.

use std::fmt;

use serde::Serialize;

/// Fraction of the batch-16 figure that does not scale with the batch.
const FIXED_FRACTION: f64 = 0.25;
/// Safety margin for temporary buffers and fragmentation (the seed's 10 %).
pub const HEADROOM: f64 = 0.10;
/// Batch assumed for AutoBatch: it fits itself to the slice, so any slice that
/// holds a modest batch works.
pub const AUTOBATCH_ESTIMATE_BATCH: u32 = 8;

/// YOLO model sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    N,
    S,
    M,
    L,
    X,
}

impl Scale {
    /// Peak training memory in GiB at 640 px, batch 16.
    pub fn gib_at_640_batch16(self) -> f64 {
        match self {
            Scale::N => 2.8,
            Scale::S => 4.0,
            Scale::M => 7.2,
            Scale::L => 9.8,
            Scale::X => 12.2,
        }
    }
    pub fn letter(self) -> char {
        match self {
            Scale::N => 'n',
            Scale::S => 's',
            Scale::M => 'm',
            Scale::L => 'l',
            Scale::X => 'x',
        }
    }
}

/// Find the scale in a model name: `yolov8s.pt`, `yolo11m.yaml`, `yolov5su.pt`,
/// `yolov8n-seg.pt`, `/path/yolov10b.pt`. YOLOv9's t/c/e and v10's b map to the
/// nearest of n/s/m/l/x by size.
pub fn scale_of(model: &str) -> Option<Scale> {
    let file = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    let stem = file.split('.').next().unwrap_or(&file);
    let rest = stem.strip_prefix("yolo")?;
    let rest = rest.strip_prefix('v').unwrap_or(rest);
    let after_version = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    if after_version.len() == rest.len() && !stem.starts_with("yolo") {
        return None;
    }
    match after_version.chars().next()? {
        'n' | 't' => Some(Scale::N),
        's' => Some(Scale::S),
        'm' => Some(Scale::M),
        'l' | 'b' | 'c' => Some(Scale::L),
        'x' | 'e' => Some(Scale::X),
        _ => None,
    }
}

/// The estimate and how it was reached.
#[derive(Debug, Clone, Serialize)]
pub struct Estimate {
    pub model: String,
    /// `None` when the model name does not say; then the largest scale is assumed.
    pub scale: Option<Scale>,
    pub imgsz: u32,
    pub batch: u32,
    pub autobatch: bool,
    /// Estimated peak, GiB.
    pub gib: f64,
    /// With headroom: what a slice must hold.
    pub needed_gib: f64,
}

impl Estimate {
    pub fn new(model: &str, imgsz: u32, batch: Option<u32>) -> Estimate {
        let scale = scale_of(model);
        let (batch, autobatch) = match batch {
            Some(b) => (b, false),
            None => (AUTOBATCH_ESTIMATE_BATCH, true),
        };
        let m16 = scale.unwrap_or(Scale::X).gib_at_640_batch16();
        let pixels = (f64::from(imgsz) / 640.0).powi(2);
        let gib =
            m16 * (FIXED_FRACTION + (1.0 - FIXED_FRACTION) * f64::from(batch) / 16.0 * pixels);
        Estimate {
            model: model.to_string(),
            scale,
            imgsz,
            batch,
            autobatch,
            gib,
            needed_gib: gib * (1.0 + HEADROOM),
        }
    }
}

impl Estimate {
    /// What each of `gpus` GPUs holds when Ultralytics splits the batch over
    /// them (DDP: `batch` is the total, each rank takes ⌊batch / gpus⌋; sized
    /// here by the ceiling, the larger). AutoBatch is single-GPU: unchanged.
    pub fn per_gpu(&self, gpus: u32) -> Estimate {
        if gpus <= 1 || self.autobatch {
            return self.clone();
        }
        Estimate::new(&self.model, self.imgsz, Some(self.batch.div_ceil(gpus)))
    }
}

impl fmt::Display for Estimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.scale {
            Some(s) => format!("{}-size model {}", s.letter(), self.model),
            None => format!("{} (size unknown, assumed x)", self.model),
        };
        let batch = if self.autobatch {
            format!("AutoBatch (sized as batch {})", self.batch)
        } else {
            format!("batch {}", self.batch)
        };
        write!(
            f,
            "{name}, {} px, {batch} ≈ {:.1} GiB + {:.0}% headroom = {:.1} GiB",
            self.imgsz,
            self.gib,
            HEADROOM * 100.0,
            self.needed_gib
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_from_names() {
        assert_eq!(scale_of("yolov8s.pt"), Some(Scale::S));
        assert_eq!(scale_of("yolo11m.yaml"), Some(Scale::M));
        assert_eq!(scale_of("weights/yolov5su.pt"), Some(Scale::S));
        assert_eq!(scale_of("yolov8n-seg.pt"), Some(Scale::N));
        assert_eq!(scale_of("yolov10b.pt"), Some(Scale::L));
        assert_eq!(scale_of("YOLOv8X.pt"), Some(Scale::X));
        assert_eq!(scale_of("best.pt"), None);
        assert_eq!(scale_of("my-detector.yaml"), None);
    }

    #[test]
    fn the_reference_point_is_reproduced() {
        let e = Estimate::new("yolov8s.pt", 640, Some(16));
        assert!((e.gib - 4.0).abs() < 1e-9);
        assert!((e.needed_gib - 4.4).abs() < 1e-9);
        assert!(
            e.to_string().contains("≈ 4.0 GiB + 10% headroom = 4.4 GiB"),
            "{e}"
        );
    }

    #[test]
    fn memory_grows_with_batch_and_pixels() {
        let base = Estimate::new("yolov8m.pt", 640, Some(16)).gib;
        let half = Estimate::new("yolov8m.pt", 640, Some(8)).gib;
        let big = Estimate::new("yolov8m.pt", 1280, Some(16)).gib;
        assert!(half < base && base < big);
        // Doubling the side quadruples the per-image part.
        assert!((big - (base * 0.25 + base * 0.75 * 4.0)).abs() < 1e-9);
    }

    #[test]
    fn unknown_models_are_sized_as_the_largest() {
        let e = Estimate::new("best.pt", 640, Some(16));
        assert!((e.gib - 12.2).abs() < 1e-9);
        assert!(e.to_string().contains("assumed x"));
    }

    #[test]
    fn several_gpus_share_the_batch() {
        let e = Estimate::new("yolov8x.pt", 1280, Some(64));
        let four = e.per_gpu(4);
        assert_eq!(four.batch, 16);
        assert!(four.needed_gib < e.needed_gib / 3.0, "{four} vs {e}");
        assert_eq!(e.per_gpu(3).batch, 22, "the ceiling of 64 / 3");
        assert_eq!(e.per_gpu(1).batch, 64);
    }

    #[test]
    fn autobatch_is_sized_as_batch_8() {
        let e = Estimate::new("yolov8n.pt", 640, None);
        assert!(e.autobatch);
        assert_eq!(e.batch, 8);
    }
}
