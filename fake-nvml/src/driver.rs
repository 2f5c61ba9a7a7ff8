//! The loaded "driver": the fixture named by `FAKE_NVML_FIXTURE`, the state
//! machine, and the rules that keep it in step with the state file (reload when
//! another process changed it; lock, re-read, change, write for every mutation)
//! and with the sysroot's `mig-minors` and device nodes.

use std::path::{Path, PathBuf};

use crate::fixture::Fixture;
use crate::model::{self, Code, Machine};
use crate::state::{NodeState, Stamp, Store};
use crate::sysroot;

/// Path of the JSON fixture; read at `nvmlInit`.
pub const FIXTURE_ENV: &str = "FAKE_NVML_FIXTURE";
/// Without `FAKE_NVML_FIXTURE`, the fixture is this file beside the library itself,
/// so tests in one process can each load their own copy without touching the
/// (process-wide) environment.
pub const FIXTURE_BESIDE_LIBRARY: &str = "fake-nvml.json";
/// When set, `mig-minors`, capability files and device nodes are kept under this root.
pub const SYSROOT_ENV: &str = "FAKE_NVML_SYSROOT";
/// When set to 1, the caller counts as non-root (tests run as root).
pub const NON_ROOT_ENV: &str = "FAKE_NVML_SIMULATE_NON_ROOT";
/// When set, the device files this process may open, as a cgroup's devices
/// controller (Slurm's `ConstrainDevices`) allows them: a comma list of paths
/// such as `/dev/nvidia1,/dev/nvidia-caps/nvidia-cap12`. Unset: every file.
pub const ALLOWED_DEVICES_ENV: &str = "FAKE_NVML_ALLOWED_DEVICES";

/// The device files a constrained process may open, by device minor (the
/// devices controller allows by major:minor; the file name carries the minor).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedDevices {
    /// Minors of `/dev/nvidia<N>`.
    pub gpus: std::collections::BTreeSet<u32>,
    /// Minors of `/dev/nvidia-caps/nvidia-cap<N>`.
    pub caps: std::collections::BTreeSet<u32>,
}

impl AllowedDevices {
    /// Parse the variable's value. Entries that are not a GPU or capability
    /// file (`/dev/nvidiactl`, `/dev/nvidia-uvm`, …) allow nothing NVML
    /// checks here; an empty value allows no GPU at all.
    pub fn parse(value: &str) -> AllowedDevices {
        let mut out = AllowedDevices::default();
        for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let name = entry.rsplit('/').next().unwrap_or(entry);
            if let Some(n) = name.strip_prefix("nvidia-cap").and_then(|n| n.parse().ok()) {
                out.caps.insert(n);
            } else if let Some(n) = name.strip_prefix("nvidia").and_then(|n| n.parse().ok()) {
                out.gpus.insert(n);
            }
        }
        out
    }
}

pub struct Driver {
    pub machine: Machine,
    store: Store,
    sysroot: Option<PathBuf>,
    stamp: Option<Stamp>,
    /// `FAKE_NVML_ALLOWED_DEVICES`: `None` when the process is not constrained.
    pub allowed: Option<AllowedDevices>,
}

/// A failure the NVML caller only sees as a code; the reason goes to stderr.
fn report(message: String) -> Code {
    eprintln!("fake-nvml: {message}");
    model::UNKNOWN
}

impl Driver {
    /// What nvmlInit does: read the fixture and the environment.
    pub fn from_env() -> Result<Driver, Code> {
        let fixture = std::env::var_os(FIXTURE_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(fixture_beside_library);
        let Some(fixture) = fixture else {
            eprintln!(
                "fake-nvml: {FIXTURE_ENV} is not set and there is no {FIXTURE_BESIDE_LIBRARY} beside the library, so there is no fake GPU to drive (see docs/fake-nvml.md)"
            );
            return Err(model::DRIVER_NOT_LOADED);
        };
        let sysroot = std::env::var_os(SYSROOT_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let non_root = std::env::var(NON_ROOT_ENV).is_ok_and(|v| v == "1");
        let mut driver = Driver::open(Path::new(&fixture), sysroot, non_root).map_err(report)?;
        driver.allowed = std::env::var(ALLOWED_DEVICES_ENV)
            .ok()
            .map(|v| AllowedDevices::parse(&v));
        Ok(driver)
    }

    pub fn open(
        fixture_path: &Path,
        sysroot: Option<PathBuf>,
        non_root: bool,
    ) -> Result<Driver, String> {
        let fixture = Fixture::load(fixture_path)?;
        let caller_is_root =
            nix::unistd::geteuid().is_root() && !fixture.simulate_non_root && !non_root;
        let store = Store::beside(fixture_path);
        let lock = store.lock()?;
        let state = load_or_seed(&store, &fixture)?;
        let machine = Machine {
            fixture,
            state,
            caller_is_root,
        };
        if let Some(root) = &sysroot {
            sysroot::publish(root, &machine)?;
        }
        let stamp = store.stamp();
        drop(lock);
        Ok(Driver {
            machine,
            store,
            sysroot,
            stamp,
            allowed: None,
        })
    }

    /// Whether this process may open GPU `gpu` (`/dev/nvidia<minor>`).
    pub fn may_open_gpu(&self, gpu: usize) -> bool {
        self.allowed
            .as_ref()
            .is_none_or(|a| a.gpus.contains(&self.machine.spec(gpu).minor))
    }

    /// Whether this process may open the MIG device of GPU instance `gi`,
    /// compute instance `ci` on GPU `gpu`: the GPU and both access capability
    /// files (what Slurm's MIG lines in gres.conf name).
    pub fn may_open_mig(&self, gpu: usize, gi: u32, ci: u32) -> bool {
        let minor = self.machine.spec(gpu).minor;
        self.may_open_gpu(gpu)
            && self.allowed.as_ref().is_none_or(|a| {
                a.caps.contains(&sysroot::gi_cap_minor(minor, gi))
                    && a.caps.contains(&sysroot::ci_cap_minor(minor, gi, ci))
            })
    }

    /// Pick up changes another process (or library copy) wrote since we last looked.
    pub fn refresh(&mut self) {
        let now = self.store.stamp();
        if now == self.stamp {
            return;
        }
        match self.store.read() {
            Ok(Some(s)) if Machine::state_fits(&self.machine.fixture, &s) => {
                self.machine.state = s;
            }
            Ok(_) => {
                // Deleted or foreign: the driver starts over from the fixture.
                if let Ok(s) = model::initial_state(&self.machine.fixture) {
                    self.machine.state = s;
                }
            }
            Err(e) => {
                report(e);
            }
        }
        self.stamp = now;
    }

    /// Run a state change under the lock on the freshest state; persist it and
    /// republish the sysroot when something changed.
    pub fn mutate<T>(
        &mut self,
        op: impl FnOnce(&mut Machine) -> Result<T, Code>,
    ) -> Result<T, Code> {
        let lock = self.store.lock().map_err(report)?;
        self.machine.state = load_or_seed(&self.store, &self.machine.fixture).map_err(report)?;
        let before = self.machine.state.clone();
        let out = op(&mut self.machine);
        if out.is_err() {
            self.machine.state = before;
        } else if self.machine.state != before {
            self.store.write(&self.machine.state).map_err(report)?;
            if let Some(root) = &self.sysroot {
                sysroot::publish(root, &self.machine).map_err(report)?;
            }
        }
        self.stamp = self.store.stamp();
        drop(lock);
        out
    }
}

/// `fake-nvml.json` in the directory of the loaded library file, if there is one.
/// The library finds its own file in /proc/self/maps by the address of its code.
fn fixture_beside_library() -> Option<PathBuf> {
    let here = fixture_beside_library as fn() -> Option<PathBuf> as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let library = maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (lo, hi) = fields.next()?.split_once('-')?;
        let (lo, hi) = (
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        );
        let path = fields.nth(4)?;
        (lo <= here && here < hi && path.starts_with('/')).then(|| PathBuf::from(path))
    })?;
    let candidate = library.parent()?.join(FIXTURE_BESIDE_LIBRARY);
    candidate.is_file().then_some(candidate)
}

/// The saved state if it belongs to this fixture, else a fresh one (written).
pub fn load_or_seed(store: &Store, fixture: &Fixture) -> Result<NodeState, String> {
    match store.read()? {
        Some(s) if Machine::state_fits(fixture, &s) => Ok(s),
        _ => {
            let s = model::initial_state(fixture)?;
            store.write(&s)?;
            Ok(s)
        }
    }
}
