//! Tests of whole specs: defaults, the issue's example, error collection, sweeps, hashing.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const ISSUE_EXAMPLE: &str = r#"
version = 1

[run]
name = "pcb-defects"
workdir = "runs/pcb-defects"
account = "vision"
qos = "normal"
partition = "gpu"
setup = ["module load cuda", "source ~/venvs/yolo/bin/activate"]

[train]
model = "yolov8s.pt"
data = "datasets/pcb.yaml"
epochs = 100
imgsz = 640
batch = 16
workers = 8
args = { lr0 = 0.01, cos_lr = true }

[resources]
gpu = "auto"
time = "08:00:00"
cpus = 9
mem = "32G"

[stages.prepare]
partition = "cpu"
time = "01:00:00"
cache = "/local/ssd/$USER"

[stages.val]
[stages.export]
formats = ["onnx"]

[sweep]
lr0 = [0.01, 0.001]
batch = [8, 16]
max_parallel = 4
"#;

const MINIMAL: &str = r#"
version = 1
[run]
name = "tiny"
[train]
model = "yolov8n.pt"
data = "data.yaml"
"#;

fn errors_of(text: &str) -> Vec<SpecError> {
    match parse(text, "s.toml") {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(e) => e.errors,
    }
}

fn one_error(text: &str) -> SpecError {
    let errors = errors_of(text);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors.into_iter().next().unwrap()
}

#[test]
fn the_issue_example_parses_with_every_value() {
    let spec = parse(ISSUE_EXAMPLE, "specs/pcb.toml").unwrap();
    assert_eq!(spec.run.name, "pcb-defects");
    assert_eq!(spec.run.workdir.as_str(), "runs/pcb-defects");
    assert_eq!(spec.run.account.as_deref(), Some("vision"));
    assert_eq!(spec.run.qos.as_deref(), Some("normal"));
    assert_eq!(spec.run.partition.as_deref(), Some("gpu"));
    assert_eq!(spec.run.setup.len(), 2);
    assert_eq!(spec.train.model, "yolov8s.pt");
    assert_eq!(spec.train.epochs, Some(100));
    assert_eq!(spec.train.imgsz, Some(640));
    assert_eq!(spec.train.batch, Some(Batch::Images(16)));
    assert_eq!(spec.train.args["lr0"], ArgValue::Float(0.01));
    assert_eq!(spec.train.args["cos_lr"], ArgValue::Bool(true));
    assert_eq!(spec.resources.gpu, GpuRequest::Auto);
    assert_eq!(spec.resources.time.as_ref().unwrap().seconds, 8 * 3600);
    assert_eq!(spec.resources.mem.as_ref().unwrap().mebibytes, 32 * 1024);
    assert_eq!(spec.resources.cpus, Some(9));
    assert_eq!(spec.explicit_workers(), Some(8));
    let prepare = spec.stages.prepare.as_ref().unwrap();
    assert_eq!(prepare.resources.partition.as_deref(), Some("cpu"));
    assert!(prepare.cache.as_ref().unwrap().has_vars());
    assert!(spec.stages.val.is_some());
    assert_eq!(spec.stages.export.as_ref().unwrap().formats, vec!["onnx"]);
    assert_eq!(
        spec.stages(),
        vec![
            StageKind::Prepare,
            StageKind::Train,
            StageKind::Val,
            StageKind::Export
        ]
    );
    assert_eq!(spec.sweep.max_parallel, Some(4));
    assert_eq!(spec.variant_count(), 4);
    assert_eq!(spec.origin.base_dir, std::path::Path::new("specs"));
    assert_eq!(
        spec.data_path(),
        std::path::Path::new("specs/datasets/pcb.yaml")
    );
    assert!(
        spec.origin.warnings.is_empty(),
        "{:?}",
        spec.origin.warnings
    );
}

#[test]
fn defaults_fill_what_a_minimal_spec_leaves_out() {
    let spec = parse(MINIMAL, "tiny.toml").unwrap();
    assert_eq!(spec.run.workdir.as_str(), "runs/tiny");
    assert_eq!(spec.resources.gpu, GpuRequest::Auto);
    assert_eq!(
        spec.stages(),
        vec![StageKind::Prepare, StageKind::Train, StageKind::Export]
    );
    assert_eq!(
        spec.stages.export.as_ref().unwrap().formats,
        vec!["torchscript"]
    );
    assert_eq!(spec.train.epochs, None);
    assert_eq!(
        spec.explicit_workers(),
        None,
        "workers follow the CPUs the stage gets"
    );
    assert_eq!(spec.variant_count(), 1);
    assert_eq!(spec.sweep_variants(), vec![BTreeMap::new()]);
    assert_eq!(spec.origin.base_dir, std::path::Path::new("."));
}

#[test]
fn stages_can_be_switched_off_and_on() {
    let text = format!(
        "{MINIMAL}\n[stages]\nprepare = false\nval = true\n[stages.export]\nenabled = false\n"
    );
    let spec = parse(&text, "s.toml").unwrap();
    assert_eq!(spec.stages(), vec![StageKind::Train, StageKind::Val]);
}

#[test]
fn explicit_workers_are_the_largest_over_the_sweep() {
    let text = format!("{MINIMAL}workers = 4\n[sweep]\nworkers = [2, 6]\n");
    let spec = parse(&text, "s.toml").unwrap();
    assert_eq!(spec.explicit_workers(), Some(6));
}

#[test]
fn sweep_variants_are_the_product_with_the_first_key_slowest() {
    // Keys deliberately not in alphabetical order: file order decides.
    let text = format!("{MINIMAL}\n[sweep]\nlr0 = [0.01, 0.001]\nbatch = [8, 16, 32]\nmodel = [\"yolov8n.pt\", \"yolov8s.pt\"]\n");
    let spec = parse(&text, "s.toml").unwrap();
    let keys: Vec<&str> = spec.sweep.axes.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(keys, ["lr0", "batch", "model"]);
    let variants = spec.sweep_variants();
    assert_eq!(variants.len(), 12);
    assert_eq!(spec.variant_count(), 12);
    let show = |v: &BTreeMap<String, ArgValue>| {
        format!(
            "{} {} {}",
            v["lr0"].to_cli(),
            v["batch"].to_cli(),
            v["model"].to_cli()
        )
    };
    assert_eq!(show(&variants[0]), "0.01 8 yolov8n.pt");
    assert_eq!(show(&variants[1]), "0.01 8 yolov8s.pt");
    assert_eq!(show(&variants[2]), "0.01 16 yolov8n.pt");
    assert_eq!(show(&variants[6]), "0.001 8 yolov8n.pt");
    assert_eq!(show(&variants[11]), "0.001 32 yolov8s.pt");
    // The variant's values override [train].
    let args = spec.train_args(&variants[11]);
    assert_eq!(args["model"], ArgValue::Str("yolov8s.pt".into()));
    assert_eq!(args["batch"], ArgValue::Int(32));
    assert_eq!(args["data"], ArgValue::Str("data.yaml".into()));
}

#[test]
fn every_error_is_reported_sorted_by_line() {
    let text = r#"
version = 1
[run]
name = "bad name"
[train]
model = "yolov8n.pt"
data = "d.yaml"
imgsz = 100
epoch = 3
[resources]
gpu = "1g.5gb:2"
time = "eight hours"
"#;
    let errors = errors_of(text);
    let lines: Vec<usize> = errors.iter().map(|e| e.line).collect();
    assert_eq!(lines, [4, 8, 9, 11, 12], "{errors:#?}");
    let keys: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "run.name",
            "train.imgsz",
            "train.epoch",
            "resources.gpu",
            "resources.time"
        ]
    );
    assert_eq!(errors[2].column, 1);
    assert_eq!(errors[2].help.as_deref(), Some("did you mean `epochs`?"));
}

#[test]
fn several_gpus_are_a_count_of_whole_gpus() {
    let spec = parse(
        &format!("{MINIMAL}[resources]\ngpu = \"h100:4\"\n"),
        "s.toml",
    )
    .unwrap();
    assert_eq!(spec.resources.gpu, GpuRequest::Type("h100".into()));
    assert_eq!(spec.resources.gpus, Some(4));
    let spec = parse(&format!("{MINIMAL}[resources]\ngpus = 2\n"), "s.toml").unwrap();
    assert_eq!(spec.resources.gpu, GpuRequest::Auto);
    assert_eq!(spec.resources.gpus, Some(2));
    let spec = parse(
        &format!("{MINIMAL}[resources]\ngpu = \"a100\"\ngpus = 4\n"),
        "s.toml",
    )
    .unwrap();
    assert_eq!(spec.resources.gpus, Some(4));
    assert_eq!(
        parse(&format!("{MINIMAL}[resources]\ngpu = \"a100\"\n"), "s.toml")
            .unwrap()
            .resources
            .gpus,
        None
    );
    for (resources, wanted) in [
        (
            "gpu = \"1g.5gb\"\ngpus = 2",
            "one CUDA process sees only one MIG device",
        ),
        (
            "gpu = \"shard:2\"\ngpus = 2",
            "shards are pieces of one GPU",
        ),
        ("gpu = \"none\"\ngpus = 2", "trains on the CPU"),
        ("gpu = \"a100:2\"\ngpus = 4", "already asks for 2"),
        ("gpus = 0", "out of range"),
        ("gpus = 65", "out of range"),
        ("gpus = \"4\"", "a number of whole GPUs"),
        (
            "gpu = \"3g.20gb:2\"",
            "one CUDA process sees only one MIG device",
        ),
    ] {
        let e = one_error(&format!("{MINIMAL}[resources]\n{resources}\n"));
        assert!(e.message.contains(wanted), "{resources}: {e:?}");
        assert!(e.key.starts_with("resources.gpu"), "{resources}: {e:?}");
        assert!(e.line > 0, "{e:?}");
    }
}

#[test]
fn unknown_keys_get_suggestions_or_their_home() {
    let e = one_error(&format!("{MINIMAL}[resources]\ngpuz = \"auto\"\n"));
    assert_eq!(e.help.as_deref(), Some("did you mean `gpu`?"));
    let e = one_error(&format!("{MINIMAL}lr0 = 0.01\n"));
    assert!(
        e.help
            .as_deref()
            .unwrap()
            .contains("put it in `train.args`"),
        "{e:?}"
    );
    let e = one_error(&format!("{MINIMAL}time = \"01:00:00\"\n"));
    assert_eq!(
        e.help.as_deref(),
        Some(
            "`time` belongs in [resources]; Ultralytics' own `time` argument goes in `train.args`"
        )
    );
    let e = one_error(&MINIMAL.replace("[train]", "gpu = \"auto\"\n[train]"));
    assert_eq!(e.help.as_deref(), Some("`gpu` belongs in [resources]"));
    let e = one_error(&format!("{MINIMAL}[stages.valid]\n"));
    assert_eq!(e.help.as_deref(), Some("did you mean `val`?"));
    let e = one_error(&format!("{MINIMAL}[stage.prepare]\n"));
    assert_eq!(e.help.as_deref(), Some("did you mean `stages`?"));
}

#[test]
fn sweep_rules() {
    let e = one_error(&format!(
        "{MINIMAL}[sweep]\ndata = [\"a.yaml\", \"b.yaml\"]\n"
    ));
    assert!(e.message.contains("cannot be swept"), "{e:?}");
    let e = one_error(&format!("{MINIMAL}[sweep]\nlr0 = [0.01, 0.01]\n"));
    assert_eq!(e.key, "sweep.lr0[1]");
    assert!(e.message.contains("listed twice"));
    let e = one_error(&format!("{MINIMAL}[sweep]\nimgsz = [640, 650]\n"));
    assert_eq!(e.key, "sweep.imgsz[1]");
    let e = one_error(&format!("{MINIMAL}[sweep]\nlr00 = [0.1]\n"));
    assert_eq!(e.help.as_deref(), Some("did you mean `lr0`?"));
    let e = one_error(&format!("{MINIMAL}[sweep]\nmax_paralel = 3\n"));
    assert_eq!(e.help.as_deref(), Some("did you mean `max_parallel`?"));
    let e = one_error(&format!("{MINIMAL}[sweep]\nbatch = [0.5, -1, 2.5]\n"));
    assert_eq!(e.key, "sweep.batch[2]");
    let huge: String = (0..2001)
        .map(|i| format!("{i}"))
        .collect::<Vec<_>>()
        .join(",");
    let text = format!("{MINIMAL}[sweep]\nseed = [{huge}]\nclose_mosaic = [{huge}]\n");
    let e = one_error(&text);
    assert_eq!(e.key, "sweep");
    assert!(e.message.contains("4004001 variants"), "{e:?}");
}

#[test]
fn version_must_be_one() {
    let e = one_error(&MINIMAL.replace("version = 1", "version = 2"));
    assert_eq!((e.line, e.key.as_str()), (2, "version"));
    assert!(e.message.contains("version 2 is not supported"));
    let e = one_error(&MINIMAL.replace("version = 1", "version = \"1\""));
    assert_eq!(e.help.as_deref(), Some("write 1 without quotes"));
    let e = one_error(&MINIMAL.replace("version = 1", ""));
    assert_eq!((e.line, e.column), (1, 1));
}

#[test]
fn toml_syntax_errors_are_located() {
    let e = one_error("version = 1\n[run]\nname = \"unterminated\n");
    assert_eq!(e.line, 3);
    assert!(e.message.starts_with("invalid TOML"), "{e:?}");
    let errors = errors_of("version = 1\nversion = 1\n");
    assert!(errors[0].message.contains("duplicate"), "{errors:?}");
}

#[test]
fn hostile_values_are_refused_or_kept_inert() {
    let e = one_error(&MINIMAL.replace("name = \"tiny\"", "name = \"$(touch /tmp/pwned)\""));
    assert_eq!(e.key, "run.name");
    let e = one_error(&format!(
        "{MINIMAL}args = {{ optimizer = \"SGD\\nrm -rf ~\" }}\n"
    ));
    assert!(e.message.contains("control character"), "{e:?}");
    let e = one_error(&MINIMAL.replace("[train]", "setup = [\"ok\\nsecond line\"]\n[train]"));
    assert_eq!(e.key, "run.setup[0]");
    let e = one_error(&MINIMAL.replace("[train]", "partition = \"gpu;id\"\n[train]"));
    assert_eq!(e.key, "run.partition");
    let e = one_error(&format!(
        "{MINIMAL}[stages.prepare]\ncache = \"/x/$(id)\"\n"
    ));
    assert_eq!(e.key, "stages.prepare.cache");
    // Shell metacharacters in a plain string argument are allowed: the renderer quotes them.
    let spec = parse(
        &format!("{MINIMAL}args = {{ tracker = \"a b;$(id)\" }}\n"),
        "s.toml",
    )
    .unwrap();
    assert_eq!(spec.train.args["tracker"].to_cli(), "a b;$(id)");
}

#[test]
fn warnings_do_not_fail_the_spec() {
    let text = format!("{MINIMAL}workers = 8\n[resources]\ncpus = 4\ngpu = \"none\"\n");
    let spec = parse(&text, "s.toml").unwrap();
    let keys: Vec<&str> = spec
        .origin
        .warnings
        .iter()
        .map(|w| w.key.as_str())
        .collect();
    assert_eq!(keys, ["resources.cpus", "resources.gpu"]);
    assert_eq!(
        spec.origin.warnings[0].help.as_deref(),
        Some("ask for cpus = 9, or set train.workers = 3")
    );
}

#[test]
fn the_hash_ignores_formatting_but_not_content() {
    let a = parse(ISSUE_EXAMPLE, "a.toml").unwrap();
    let reformatted = ISSUE_EXAMPLE
        .replace("epochs = 100", "epochs    =   100 # comment")
        .replace("[resources]", "# moved\n[resources]");
    let b = parse(&reformatted, "elsewhere/b.toml").unwrap();
    assert_eq!(a.content_hash(), b.content_hash());
    let c = parse(
        &ISSUE_EXAMPLE.replace("epochs = 100", "epochs = 101"),
        "a.toml",
    )
    .unwrap();
    assert_ne!(a.content_hash(), c.content_hash());
    assert_eq!(a.hash_hex().len(), 16);
    // Known FNV-1a 64 values.
    assert_eq!(types::fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(types::fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
}

#[test]
fn error_at_locates_keys_for_later_checks() {
    let spec = parse(ISSUE_EXAMPLE, "a.toml").unwrap();
    let line_of = |needle: &str| {
        ISSUE_EXAMPLE
            .lines()
            .position(|l| l.starts_with(needle))
            .unwrap()
            + 1
    };
    let e = spec.error_at("sweep", "too many variants", None);
    assert_eq!((e.line, e.column), (line_of("[sweep]"), 1));
    let e = spec.error_at("resources.gpu", "no such GPU type", Some("use auto".into()));
    assert_eq!(e.line, line_of("gpu = "));
    assert_eq!(
        e.to_string(),
        format!(
            "a.toml:{}:7: `resources.gpu`: no such GPU type\n    hint: use auto",
            line_of("gpu = ")
        )
    );
    // A key that was not written falls back to its table.
    assert_eq!(
        spec.error_at("resources.nothing", "x", None).line,
        line_of("[resources]")
    );
}

#[test]
fn args_render_as_ultralytics_reads_them() {
    let text = format!(
        "{MINIMAL}args = {{ lr0 = 1.0, lrf = 1e-5, cos_lr = false, freeze = [0, 1], optimizer = \"AdamW\" }}\n"
    );
    let spec = parse(&text, "s.toml").unwrap();
    let cli: Vec<String> = spec
        .train
        .args
        .iter()
        .map(|(k, v)| format!("{k}={}", v.to_cli()))
        .collect();
    assert_eq!(
        cli,
        [
            "cos_lr=False",
            "freeze=[0,1]",
            "lr0=1.0",
            "lrf=1e-5",
            "optimizer=AdamW"
        ]
    );
}

#[test]
fn check_paths_finds_missing_files_relative_to_the_spec() {
    let dir = tempfile::tempdir().unwrap();
    let spec_path = dir.path().join("spec.toml");
    std::fs::write(&spec_path, MINIMAL.replace("yolov8n.pt", "weights/mine.pt")).unwrap();
    let err = load(&spec_path).unwrap_err();
    assert_eq!(crate::error::exit_code_for(&err), 2);
    let text = format!("{err:#}");
    assert!(text.contains("data.yaml does not exist"), "{text}");
    assert!(text.contains("mine.pt does not exist"), "{text}");
    assert!(text.contains(":7:8: `train.data`"), "{text}");
    std::fs::write(dir.path().join("data.yaml"), "names: [a]\n").unwrap();
    std::fs::create_dir(dir.path().join("weights")).unwrap();
    std::fs::write(dir.path().join("weights/mine.pt"), b"").unwrap();
    let spec = load(&spec_path).unwrap();
    assert_eq!(spec.data_path(), dir.path().join("data.yaml"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any text: never a panic, and an error always has a position inside the text.
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        if let Err(e) = parse(&text, "p.toml") {
            let lines = text.lines().count().max(1) + 1;
            for err in e.errors {
                prop_assert!(err.line >= 1 && err.line <= lines, "{err:?}");
            }
        }
    }

    /// Any string as run name and as an argument value: accepted ones hold no
    /// control characters and names keep to their alphabet.
    #[test]
    fn accepted_strings_are_safe(s in any::<String>()) {
        let quoted = toml_string(&s);
        let text = format!(
            "version = 1\n[run]\nname = {quoted}\n[train]\nmodel = \"m.pt\"\ndata = \"d.yaml\"\nargs = {{ tracker = {quoted} }}\n"
        );
        if let Ok(spec) = parse(&text, "p.toml") {
            prop_assert!(spec.run.name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)));
            prop_assert!(!spec.train.args["tracker"].to_cli().chars().any(char::is_control));
        }
    }
}

/// A TOML basic string holding exactly `s`.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[test]
fn bare_pretrained_weights_come_from_beside_the_spec_or_the_site_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::write(cache.path().join("yolov8s.pt"), "w").unwrap();
    std::fs::write(dir.path().join("mine.pt"), "w").unwrap();
    let text =
        "version = 1\n[run]\nname = \"w\"\n[train]\nmodel = \"yolov8s.pt\"\ndata = \"d.yaml\"\n\
                [sweep]\nmodel = [\"mine.pt\", \"yolov8n.yaml\", \"yolov8x.pt\"]\n";
    let file = dir.path().join("s.toml").display().to_string();
    let mut spec = parse(text, &file).unwrap();
    let source = crate::spec::WeightsSource {
        cache: Some(cache.path()),
        downloads_allowed: false,
        registry: false,
    };
    let errors = crate::spec::resolve_weights(&mut spec, &source);
    assert_eq!(
        spec.train.model,
        cache.path().join("yolov8s.pt").display().to_string()
    );
    let swept = &spec.sweep.axes[0].values;
    assert_eq!(
        swept[0],
        ArgValue::Str(dir.path().join("mine.pt").display().to_string())
    );
    assert_eq!(
        swept[1],
        ArgValue::Str("yolov8n.yaml".into()),
        "configs stay Ultralytics' own"
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].key, "sweep.model[2]");
    assert!(errors[0]
        .message
        .contains("yolov8x.pt are neither beside the spec nor in the site's weights directory"));
    let mut spec = parse(text, &file).unwrap();
    let open = crate::spec::WeightsSource {
        cache: None,
        downloads_allowed: true,
        registry: false,
    };
    assert!(crate::spec::resolve_weights(&mut spec, &open).is_empty());
    assert_eq!(
        spec.train.model, "yolov8s.pt",
        "left to Ultralytics where nodes reach the internet"
    );
}

#[test]
fn stage_names_map_both_ways_in_one_place() {
    use crate::spec::StageKind;
    for k in StageKind::ALL {
        assert_eq!(StageKind::from_name(k.name()), Some(k));
        assert_eq!(crate::plan::stage_name(k), k.name());
    }
    assert_eq!(StageKind::from_name("Train"), None);
    assert_eq!(crate::run::resume::stage_kind("val"), Some(StageKind::Val));
}
