//! What happens to a node outside NVML, for tests: a GPU reset and a reboot
//! (the only ways a pending MIG mode becomes current when the fixture says a
//! reset is required), and a look at the saved state. Used by `fake-nvml-ctl`.

use std::path::Path;

use crate::driver::load_or_seed;
use crate::fixture::Fixture;
use crate::model::Machine;
use crate::state::{NodeState, Store};
use crate::sysroot;

/// Apply `change` to the saved state of `fixture` under the state lock and
/// republish the sysroot, as the driver would after the event.
fn change_state(
    fixture_path: &Path,
    sysroot: Option<&Path>,
    change: impl FnOnce(&mut Machine) -> Result<(), String>,
) -> Result<(), String> {
    let fixture = Fixture::load(fixture_path)?;
    let store = Store::beside(fixture_path);
    let _lock = store.lock()?;
    let state = load_or_seed(&store, &fixture)?;
    let mut machine = Machine {
        fixture,
        state,
        caller_is_root: true,
    };
    change(&mut machine)?;
    store.write(&machine.state)?;
    if let Some(root) = sysroot {
        sysroot::publish(root, &machine)?;
    }
    Ok(())
}

/// `nvidia-smi -r -i <gpu>`: pending MIG mode becomes current, instances are gone.
pub fn reset_gpu(fixture: &Path, sysroot: Option<&Path>, gpu: usize) -> Result<(), String> {
    change_state(fixture, sysroot, |m| m.reset_gpu(gpu))
}

/// A reboot: every GPU as after a reset, whatever runs on it.
pub fn reboot(fixture: &Path, sysroot: Option<&Path>) -> Result<(), String> {
    change_state(fixture, sysroot, |m| {
        m.reboot();
        Ok(())
    })
}

/// The saved state (created from the fixture when there is none yet).
pub fn state(fixture_path: &Path) -> Result<NodeState, String> {
    let fixture = Fixture::load(fixture_path)?;
    let store = Store::beside(fixture_path);
    let _lock = store.lock()?;
    load_or_seed(&store, &fixture)
}
