//! The `yolo` command-line arguments Ultralytics accepts, with the value types it checks.
//!
//! Source: `ultralytics/cfg/default.yaml` (the list `yolo` checks every `key=value`
//! against, in `check_dict_alignment`) and the type sets `CFG_FLOAT_KEYS`,
//! `CFG_FRACTION_KEYS`, `CFG_INT_KEYS`, `CFG_BOOL_KEYS`, `CFG_STR_KEYS` of
//! `ultralytics/cfg/__init__.py`. The table is the union of two upstream versions so
//! that a spec valid for either is accepted: ultralytics 8.1/8.2 (commit `8b40338`)
//! and 8.4 / YOLO26 (mirror of upstream main, `cfg/default.yaml@0667d87`,
//! `cfg/__init__.py@12d1b2a`). Keys that only the older one has are marked `legacy`
//! (they were removed or renamed later; Ultralytics rejects them in new versions).
//! `yolo train` accepts every key of the file, including predict and export ones,
//! so all are listed.

/// Ultralytics' default `epochs`.
pub const DEFAULT_EPOCHS: u32 = 100;
/// Ultralytics' default `imgsz`.
pub const DEFAULT_IMGSZ: u32 = 640;
/// Ultralytics' default `batch`.
pub const DEFAULT_BATCH: u32 = 16;
/// YOLO models downsample by 32, so the training image size must be a multiple of it.
pub const IMGSZ_STRIDE: u32 = 32;

/// What values an argument takes (as Ultralytics' `check_cfg` checks them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    /// `true`/`false`.
    Bool,
    /// An integer no smaller than `min`.
    Int { min: i64 },
    /// Any integer or float.
    Number,
    /// An integer or float greater than zero (`time`, `workspace`).
    Positive,
    /// A number in [0, 1] (newer versions also take a two-item list of such).
    Fraction,
    /// A number in (0, 1] (`fraction`: the share of the dataset to train on).
    DataFraction,
    /// `true`/`false` (8.1–8.3) or a number in [0, 1] (8.4: `multi_scale`).
    BoolOrFraction,
    /// A number in [0, 1], or a two-item list of numbers (`scale = [0.5, 1.5]`).
    FractionOrPair,
    /// One of the listed strings (matched without regard to case).
    Choice(&'static [&'static str]),
    /// A boolean or one of the listed strings (`cache = "disk"`).
    BoolOrChoice(&'static [&'static str]),
    /// A boolean or any string (`pretrained = "path/to/weights.pt"`).
    BoolOrStr,
    /// A non-empty string.
    Str,
    /// An integer or a list of integers (`freeze = 10`, `freeze = [0, 1, 2]`).
    IntOrIntList,
    /// An integer or a string (`quantize = 8`, `quantize = "fp16"`).
    IntOrStr,
}

/// One `yolo` argument.
#[derive(Debug, Clone, Copy)]
pub struct YoloArg {
    pub name: &'static str,
    pub kind: ArgKind,
    /// Still accepted by Ultralytics with a deprecation warning: what it does instead.
    pub deprecated: Option<&'static str>,
}

const fn arg(name: &'static str, kind: ArgKind) -> YoloArg {
    YoloArg {
        name,
        kind,
        deprecated: None,
    }
}

const fn deprecated(name: &'static str, kind: ArgKind, instead: &'static str) -> YoloArg {
    YoloArg {
        name,
        kind,
        deprecated: Some(instead),
    }
}

use ArgKind::*;

const TASKS: &[&str] = &[
    "detect", "segment", "classify", "pose", "obb", "semantic", "depth",
];
const MODES: &[&str] = &["train", "val", "predict", "export", "track", "benchmark"];
const OPTIMIZERS: &[&str] = &[
    "SGD", "MuSGD", "Adam", "Adamax", "AdamW", "NAdam", "RAdam", "RMSProp", "auto",
];

/// Every argument of `ultralytics/cfg/default.yaml`, in its order.
pub const YOLO_ARGS: &[YoloArg] = &[
    arg("task", Choice(TASKS)),
    arg("mode", Choice(MODES)),
    // Train settings
    arg("model", Str),
    arg("data", Str),
    arg("epochs", Int { min: 1 }),
    arg("time", Positive),
    arg("patience", Int { min: 0 }),
    arg("batch", Number),
    arg("imgsz", Int { min: 32 }),
    arg("save", Bool),
    arg("save_period", Int { min: -1 }),
    arg("cache", BoolOrChoice(&["ram", "disk"])),
    arg("device", Str),
    arg("workers", Int { min: 0 }),
    arg("project", Str),
    arg("name", Str),
    arg("exist_ok", Bool),
    arg("pretrained", BoolOrStr),
    arg("cls_remap", Bool),
    arg("optimizer", Choice(OPTIMIZERS)),
    arg("verbose", Bool),
    arg("seed", Int { min: 0 }),
    arg("deterministic", Bool),
    arg("single_cls", Bool),
    arg("rect", Bool),
    arg("cos_lr", Bool),
    arg("close_mosaic", Int { min: 0 }),
    arg("resume", BoolOrStr),
    arg("amp", Bool),
    arg("fraction", DataFraction),
    arg("profile", Bool),
    arg("freeze", IntOrIntList),
    arg("multi_scale", BoolOrFraction),
    arg("compile", BoolOrStr),
    arg("channels_last", Bool),
    arg("overlap_mask", Bool),
    arg("mask_ratio", Int { min: 1 }),
    arg("dropout", Fraction),
    // Val/Test settings
    arg("val", Bool),
    arg("split", Choice(&["val", "test", "train"])),
    arg("save_json", Bool),
    deprecated("save_hybrid", Bool, "dropped: it has no effect"),
    arg("conf", Fraction),
    arg("iou", Fraction),
    arg("max_det", Int { min: 1 }),
    deprecated(
        "half",
        Bool,
        "mapped onto `quantize = 16`: write that instead",
    ),
    arg("quantize", IntOrStr),
    arg("dnn", Bool),
    arg("plots", Bool),
    deprecated(
        "end2end",
        Bool,
        "mapped onto `nms` (end2end = true is nms = false): write that instead",
    ),
    // Predict settings
    arg("source", Str),
    arg("vid_stride", Int { min: 1 }),
    arg("stream_buffer", Bool),
    arg("visualize", Bool),
    arg("augment", Bool),
    arg("agnostic_nms", Bool),
    arg("classes", IntOrIntList),
    arg("retina_masks", Bool),
    arg("embed", IntOrIntList),
    // Visualize settings
    arg("show", Bool),
    arg("save_frames", Bool),
    arg("save_txt", Bool),
    arg("save_conf", Bool),
    arg("save_crop", Bool),
    arg("show_labels", Bool),
    arg("show_conf", Bool),
    arg("show_boxes", Bool),
    arg("line_width", Int { min: 0 }),
    // Export settings
    arg("format", Str),
    deprecated("keras", Bool, "dropped: it has no effect"),
    arg("optimize", Bool),
    deprecated(
        "int8",
        Bool,
        "mapped onto `quantize = 8`: write that instead",
    ),
    arg("dynamic", Bool),
    arg("simplify", Bool),
    arg("opset", Int { min: 1 }),
    arg("workspace", Positive),
    arg("nms", Bool),
    // Hyperparameters
    arg("lr0", Fraction),
    arg("lrf", Fraction),
    arg("momentum", Fraction),
    arg("weight_decay", Fraction),
    arg("warmup_epochs", Number),
    arg("warmup_momentum", Fraction),
    arg("warmup_bias_lr", Fraction),
    arg("distill_model", Str),
    arg("dis", Number),
    arg("box", Number),
    arg("cls", Number),
    arg("cls_pw", Fraction),
    arg("dfl", Number),
    arg("pose", Number),
    arg("kobj", Number),
    arg("rle", Number),
    arg("angle", Number),
    arg("dlog", Number),
    arg("dgrad", Number),
    arg("dlam", Fraction),
    deprecated("label_smoothing", Fraction, "dropped: it has no effect"),
    arg("nbs", Int { min: 1 }),
    arg("hsv_h", Fraction),
    arg("hsv_s", Fraction),
    arg("hsv_v", Fraction),
    arg("degrees", Number),
    arg("translate", Fraction),
    arg("scale", FractionOrPair),
    arg("shear", Number),
    arg("perspective", Fraction),
    arg("flipud", Fraction),
    arg("fliplr", Fraction),
    arg("bgr", Fraction),
    arg("mosaic", Fraction),
    arg("mixup", Fraction),
    arg("cutmix", Fraction),
    arg("copy_paste", Fraction),
    arg("copy_paste_mode", Choice(&["flip", "mixup"])),
    arg(
        "auto_augment",
        Choice(&["randaugment", "autoaugment", "augmix"]),
    ),
    arg("erasing", Fraction),
    deprecated("crop_fraction", Fraction, "dropped: it has no effect"),
    // Custom config.yaml
    arg("cfg", Str),
    // Old names `_handle_deprecation` still maps.
    deprecated("boxes", Bool, "renamed `show_boxes`"),
    deprecated("hide_labels", Bool, "replaced by `show_labels` (inverted)"),
    deprecated("hide_conf", Bool, "replaced by `show_conf` (inverted)"),
    deprecated("line_thickness", Int { min: 0 }, "renamed `line_width`"),
    // Tracker settings
    arg("tracker", Str),
];

/// Export formats `yolo export format=…` knows (8.4.190's `export_formats()`, plus
/// `tflite` and `tfjs`, which it maps to `litert`).
pub const EXPORT_FORMATS: &[&str] = &[
    "torchscript",
    "onnx",
    "openvino",
    "engine",
    "coreml",
    "coreai",
    "saved_model",
    "pb",
    "tflite",
    "edgetpu",
    "tfjs",
    "paddle",
    "mnn",
    "ncnn",
    "imx",
    "rknn",
    "executorch",
    "axelera",
    "litert",
    "deepx",
    "qnn",
    "hailo",
    "ascend",
    "xilinx",
];

/// Look an argument up by name.
pub fn find(name: &str) -> Option<&'static YoloArg> {
    YOLO_ARGS.iter().find(|a| a.name == name)
}

/// All argument names, for suggestions.
pub fn names() -> impl Iterator<Item = &'static str> {
    YOLO_ARGS.iter().map(|a| a.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn names_are_unique_and_snake_case() {
        let mut seen = BTreeSet::new();
        for a in YOLO_ARGS {
            assert!(seen.insert(a.name), "duplicate {}", a.name);
            assert!(
                a.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{}",
                a.name
            );
        }
        // The full default.yaml has well over 100 keys.
        assert!(YOLO_ARGS.len() > 120, "{}", YOLO_ARGS.len());
    }

    #[test]
    fn kinds_match_ultralytics_type_sets() {
        assert_eq!(find("cos_lr").unwrap().kind, Bool);
        assert_eq!(find("lr0").unwrap().kind, Fraction);
        assert_eq!(find("epochs").unwrap().kind, Int { min: 1 });
        assert_eq!(find("fraction").unwrap().kind, DataFraction);
        assert!(find("label_smoothing").unwrap().deprecated.is_some());
        assert!(find("show_fps").is_none(), "real yolo rejects it");
        assert!(find("epoch").is_none());
    }
}
