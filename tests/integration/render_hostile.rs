//! Hostile spec values never execute: generated strings go into the spec, the
//! train script is rendered, checked with `bash -n`, and then RUN with bash
//! (outside Slurm, `yolo` replaced by a recorder). The recorder must receive
//! each value as exactly one argument, and nothing the value says may happen.

use std::path::Path;
use std::process::Command;

use proptest::prelude::*;
use yolo_sched::plan::{self, Policy};
use yolo_sched::render::scripts::{render_all, RenderInput};
use yolo_sched::render::Templates;
use yolo_sched::slurm::cluster::Cluster;

const RECORDER: &str =
    "#!/bin/sh\n: > \"$RECORD\"\nfor a in \"$@\"; do printf '%s\\0' \"$a\" >> \"$RECORD\"; done\n";

fn cluster() -> Cluster {
    Cluster::uniform("node", 1, 16, 64000, "gpu:1g.5gb:4", &["gpu"])
}

/// Render the spec's train script, run it, and return the words `yolo` got.
fn run_train_script(dir: &Path, spec_text: &str) -> Option<Vec<String>> {
    std::fs::write(
        dir.join("data.yaml"),
        "path: .\ntrain: images\nval: images\nnames: [a]\n",
    )
    .unwrap();
    let spec = match yolo_sched::spec::parse(spec_text, dir.join("spec.toml").to_str().unwrap()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("spec rejected: {e}");
            return None;
        }
    };
    let workdir = dir.join("run");
    let plan = match plan::plan(&spec, &workdir, &cluster(), &Policy::default()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("plan rejected: {e}");
            return None;
        }
    };
    let recorder = dir.join("yolo-recorder");
    std::fs::write(&recorder, RECORDER).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&recorder, std::fs::Permissions::from_mode(0o755)).unwrap();
    let scripts = render_all(
        &Templates::new(None).unwrap(),
        &RenderInput {
            spec: &spec,
            plan: &plan,
            run_id: "hostile-1",
            yolo_sched: Path::new("/bin/false"),
            yolo: recorder.to_str().unwrap(),
            base_dir: dir,
            font: None,
            models: &Default::default(),
            python: None,
        },
    )
    .unwrap();
    let train = scripts.iter().find(|s| s.file_name == "train.sh").unwrap();
    let script = dir.join("train.sh");
    std::fs::write(&script, &train.text).unwrap();
    for s in &scripts {
        let p = dir.join(&s.file_name);
        std::fs::write(&p, &s.text).unwrap();
        let check = Command::new("bash").arg("-n").arg(&p).output().unwrap();
        assert!(
            check.status.success(),
            "bash -n {}: {}",
            s.file_name,
            String::from_utf8_lossy(&check.stderr)
        );
    }
    std::fs::create_dir_all(&workdir).unwrap();
    let record = dir.join("argv");
    let out = Command::new("bash")
        .arg(&script)
        .env("RECORD", &record)
        .env("SLURM_JOB_ID", "1")
        .env_remove("SLURM_ARRAY_TASK_ID")
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "train.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&record).unwrap();
    Some(
        bytes
            .split(|b| *b == 0)
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8(w.to_vec()).unwrap())
            .collect(),
    )
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn hostile_values_reach_yolo_as_single_words(
        evil in r#"[a-z$`'"; |&()<>*?\\{}!#~=-]{1,24}"#,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let canary = dir.path().join("pwned");
        let payload = format!("{evil}$(touch {c})`touch {c}`;touch {c}", c = canary.display());
        let spec = format!(
            "version = 1\n[run]\nname = \"hostile\"\n[train]\nmodel = {}\ndata = \"data.yaml\"\nepochs = 1\nargs = {{ pretrained = {} }}\n[resources]\ngpu = \"1g.5gb\"\n[stages.prepare]\nenabled = false\n",
            toml_string(&format!("{payload}.pt")),
            toml_string(&format!("{payload}.pt")),
        );
        // Every generated value is printable, so the spec must be accepted:
        // a rejection here would make this test pass without checking anything.
        let words = run_train_script(dir.path(), &spec);
        prop_assert!(words.is_some(), "the spec was rejected: {}", spec);
        let words = words.unwrap();
        prop_assert!(!canary.exists(), "a spec value was executed");
        let model_word = format!("model={payload}.pt");
        let pretrained_word = format!("pretrained={payload}.pt");
        prop_assert!(words.contains(&model_word), "{:?}", words);
        prop_assert!(words.contains(&pretrained_word), "{:?}", words);
    }
}

#[test]
fn the_issue_examples_never_execute() {
    let dir = tempfile::tempdir().unwrap();
    let canary = dir.path().join("pwned");
    // A run name with a command is refused outright.
    let bad_name = format!(
        "version = 1\n[run]\nname = \"x; touch {c}\"\n[train]\nmodel = \"yolov8n.pt\"\ndata = \"data.yaml\"\n",
        c = canary.display()
    );
    std::fs::write(dir.path().join("data.yaml"), "names: [a]\n").unwrap();
    assert!(
        yolo_sched::spec::parse(&bad_name, dir.path().join("spec.toml").to_str().unwrap()).is_err()
    );
    // `$(…)` in args reaches yolo as text.
    let spec = format!(
        "version = 1\n[run]\nname = \"ok\"\n[train]\nmodel = \"yolov8n.pt\"\ndata = \"data.yaml\"\nargs = {{ pretrained = \"$(touch {c}).pt\" }}\n[stages.prepare]\nenabled = false\n",
        c = canary.display()
    );
    let words = run_train_script(dir.path(), &spec).expect("the spec is valid");
    assert!(!canary.exists());
    assert!(
        words.contains(&format!("pretrained=$(touch {}).pt", canary.display())),
        "{words:?}"
    );
}

/// `train.sh` of `spec_text` (in `d`, which holds its data.yaml), rendered
/// with a stand-in `yolo` whose shell body is `yolo_body`, written to
/// `d/train.sh`. The run's workdir is `d/run`.
fn train_script(
    d: &Path,
    spec_text: &str,
    yolo_body: &str,
    font: Option<&Path>,
) -> std::path::PathBuf {
    let spec = yolo_sched::spec::parse(spec_text, d.join("spec.toml").to_str().unwrap()).unwrap();
    let plan = plan::plan(&spec, &d.join("run"), &cluster(), &Policy::default()).unwrap();
    let yolo = d.join("yolo");
    std::fs::write(&yolo, format!("#!/bin/sh\n{yolo_body}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&yolo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let scripts = render_all(
        &Templates::new(None).unwrap(),
        &RenderInput {
            spec: &spec,
            plan: &plan,
            run_id: "render-1",
            yolo_sched: Path::new("/bin/false"),
            yolo: yolo.to_str().unwrap(),
            base_dir: d,
            font,
            models: &Default::default(),
            python: None,
        },
    )
    .unwrap();
    let train = scripts.iter().find(|s| s.file_name == "train.sh").unwrap();
    let script = d.join("train.sh");
    std::fs::write(&script, &train.text).unwrap();
    script
}

/// The tasks of a sweep start together on one node and all copy the site's
/// font into the run's Ultralytics directory: none may fail or leave a
/// half-written font or a temporary file behind (a plain `cp` of two tasks
/// to one new name fails one of them with "File exists").
#[test]
fn sweep_tasks_starting_together_copy_the_font_once_and_whole() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("data.yaml"), "names: [a]\n").unwrap();
    let font = d.join("site-font.ttf");
    let font_bytes: Vec<u8> = (0..16_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&font, &font_bytes).unwrap();
    let spec_text = "version = 1\n[run]\nname = \"fonts\"\n[train]\nmodel = \"yolov8n.pt\"\n\
        data = \"data.yaml\"\nepochs = 1\n[resources]\ngpu = \"1g.5gb\"\n[stages.prepare]\nenabled = false\n\
        [sweep]\nlr0 = [0.01, 0.02, 0.03, 0.04]\n";
    let workdir = d.join("run");
    // The trainer starts right after the copy: it must find the whole font.
    let script = train_script(
        d,
        spec_text,
        &format!(
            "cmp \"$YOLO_CONFIG_DIR/Ultralytics/Arial.ttf\" '{}'",
            font.display()
        ),
        Some(&font),
    );
    let fonts = workdir.join(".ultralytics/Ultralytics");
    for round in 0..5 {
        let _ = std::fs::remove_dir_all(&workdir);
        std::fs::create_dir_all(&workdir).unwrap();
        let children: Vec<_> = (0..4)
            .map(|task| {
                Command::new("bash")
                    .arg(&script)
                    .env("SLURM_JOB_ID", format!("{}", 10 + task))
                    .env("SLURM_ARRAY_JOB_ID", "9")
                    .env("SLURM_ARRAY_TASK_ID", task.to_string())
                    .current_dir(d)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: a task failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            std::fs::read(fonts.join("Arial.ttf")).unwrap() == font_bytes,
            "round {round}"
        );
        let left: Vec<_> = std::fs::read_dir(&fonts)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "Arial.ttf")
            .collect();
        assert!(left.is_empty(), "round {round}: left behind: {left:?}");
    }
}

/// The trainer's CPU threads follow the job's CPUs (`SLURM_CPUS_PER_TASK`),
/// not the node's cores; a value the submitter exported is kept, and a
/// malformed one from the environment is not passed on.
#[test]
fn the_trainer_gets_as_many_cpu_threads_as_the_job_has_cpus() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("data.yaml"), "names: [a]\n").unwrap();
    let spec_text = "version = 1\n[run]\nname = \"threads\"\n[train]\nmodel = \"yolov8n.pt\"\n\
        data = \"data.yaml\"\nepochs = 1\n[resources]\ngpu = \"1g.5gb\"\n[stages.prepare]\nenabled = false\n";
    let workdir = d.join("run");
    let seen = d.join("threads");
    let script = train_script(
        d,
        spec_text,
        &format!(
            "printf '%s' \"${{OMP_NUM_THREADS-unset}}\" >'{}'",
            seen.display()
        ),
        None,
    );
    for (cpus, exported, want) in [
        (Some("3"), None, "3"),
        (Some("3"), Some("1"), "1"),
        (None, None, "unset"),
        (Some("3;touch x"), None, "unset"),
    ] {
        let _ = std::fs::remove_dir_all(&workdir);
        std::fs::create_dir_all(&workdir).unwrap();
        let _ = std::fs::remove_file(&seen);
        let mut cmd = Command::new("bash");
        cmd.arg(&script)
            .env("SLURM_JOB_ID", "42")
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("SLURM_CPUS_PER_TASK")
            .env_remove("OMP_NUM_THREADS")
            .current_dir(d);
        if let Some(c) = cpus {
            cmd.env("SLURM_CPUS_PER_TASK", c);
        }
        if let Some(e) = exported {
            cmd.env("OMP_NUM_THREADS", e);
        }
        let out = cmd.output().unwrap();
        assert!(
            seen.exists(),
            "the trainer did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            std::fs::read_to_string(&seen).unwrap(),
            want,
            "SLURM_CPUS_PER_TASK={cpus:?} OMP_NUM_THREADS={exported:?}"
        );
    }
}
