//! `fake-nvml-ctl`: events outside NVML for a fake node — a GPU reset, a reboot —
//! and a look at its saved state. Tests use it the way an admin would use
//! `nvidia-smi -r` or `reboot`.

use std::path::PathBuf;
use std::process::ExitCode;

use nvidia_ml::{control, driver};

const USAGE: &str = "usage: fake-nvml-ctl [--fixture FILE] [--sysroot DIR] <command>

commands:
  reset --gpu N   reset GPU N: its pending MIG mode becomes current, its instances are gone
                  (refused while the fixture lists processes on it)
  reboot          every GPU as after a reset
  state           print the saved state as JSON

--fixture defaults to $FAKE_NVML_FIXTURE, --sysroot to $FAKE_NVML_SYSROOT.";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake-nvml-ctl: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> Result<(), String> {
    let mut fixture = std::env::var_os(driver::FIXTURE_ENV).map(PathBuf::from);
    let mut sysroot = std::env::var_os(driver::SYSROOT_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let mut gpu: Option<usize> = None;
    let mut command: Option<String> = None;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--fixture" => fixture = Some(PathBuf::from(value("--fixture")?)),
            "--sysroot" => sysroot = Some(PathBuf::from(value("--sysroot")?)),
            "--gpu" => {
                let v = value("--gpu")?;
                gpu = Some(
                    v.parse()
                        .map_err(|_| format!("--gpu {v:?}: expected a GPU index"))?,
                );
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            c if command.is_none() && !c.starts_with('-') => command = Some(c.to_string()),
            other => return Err(format!("unexpected argument {other:?}\n{USAGE}")),
        }
    }
    let fixture = fixture.ok_or_else(|| {
        format!(
            "no fixture: pass --fixture or set {}\n{USAGE}",
            driver::FIXTURE_ENV
        )
    })?;
    match command.as_deref() {
        Some("reset") => {
            let gpu = gpu.ok_or_else(|| format!("reset needs --gpu N\n{USAGE}"))?;
            control::reset_gpu(&fixture, sysroot.as_deref(), gpu)
        }
        Some("reboot") => control::reboot(&fixture, sysroot.as_deref()),
        Some("state") => {
            let state = control::state(&fixture)?;
            println!(
                "{}",
                serde_json::to_string_pretty(&state).expect("state serializes")
            );
            Ok(())
        }
        Some(other) => Err(format!("unknown command {other:?}\n{USAGE}")),
        None => Err(USAGE.to_string()),
    }
}
