//! What lives in a run directory, on a floor below everything that writes or
//! reads one (render, backup, agent, registry, run, compare, report): the
//! names (`layout`), the manifest (`manifest`, and the user's run index and
//! state directory beside it), Ultralytics' `results.csv` (`results`), the
//! resumability check of a training directory (`checkpoint`) and the memory
//! guard's record of a task (`guard`), a search's summary (`search`). These depend only on `fsutil`, `text`
//! and `spec`'s hash, never on a module above them.

pub mod checkpoint;
pub(crate) mod guard;
pub(crate) mod layout;
pub mod manifest;
pub(crate) mod results;
pub(crate) mod search;
pub(crate) mod trained;
pub(crate) mod ultralytics;
