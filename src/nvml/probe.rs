//! Does NVML load here, and from where.

use std::ffi::OsString;
use std::path::PathBuf;

use serde::Serialize;

/// Environment variable naming the NVML library to load.
pub const LIB_ENV: &str = "YOLO_SCHED_NVML_LIB";
/// What the driver installs; found through the dynamic loader's search path.
pub const DEFAULT_LIB: &str = "libnvidia-ml.so.1";

/// The library to load: the flag, else `YOLO_SCHED_NVML_LIB`, else the driver's default name.
pub fn library_path(flag: Option<&PathBuf>) -> OsString {
    if let Some(p) = flag {
        return p.clone().into_os_string();
    }
    match std::env::var_os(LIB_ENV) {
        Some(v) if !v.is_empty() => v,
        _ => OsString::from(DEFAULT_LIB),
    }
}

/// The outcome of trying to load NVML.
#[derive(Debug, Clone, Serialize)]
pub struct NvmlProbe {
    pub library: String,
    pub loaded: bool,
    pub driver_version: Option<String>,
    pub device_count: Option<u32>,
    pub error: Option<String>,
}

/// Load NVML from `library`, count the devices, and unload it.
pub fn probe(library: &OsString) -> NvmlProbe {
    let shown = library.to_string_lossy().into_owned();
    match nvml_wrapper::Nvml::builder().lib_path(library).init() {
        Ok(nvml) => NvmlProbe {
            library: shown,
            loaded: true,
            driver_version: nvml.sys_driver_version().ok(),
            device_count: nvml.device_count().ok(),
            error: None,
        },
        Err(err) => NvmlProbe {
            library: shown,
            loaded: false,
            driver_version: None,
            device_count: None,
            error: Some(describe_init_error(&err)),
        },
    }
}

fn describe_init_error(err: &nvml_wrapper::error::NvmlError) -> String {
    use nvml_wrapper::error::NvmlError;
    match err {
        NvmlError::LibloadingError(e) => {
            format!("the NVML library could not be loaded ({e}); no NVIDIA driver on this machine?")
        }
        NvmlError::DriverNotLoaded => "the NVIDIA kernel driver is not loaded".to_string(),
        NvmlError::NoPermission => "no permission to use NVML".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_reported_not_panicked() {
        let p = probe(&OsString::from("/nonexistent/libnvidia-ml.so.1"));
        assert!(!p.loaded);
        let e = p.error.unwrap();
        assert!(e.contains("could not be loaded"), "{e}");
    }

    #[test]
    fn flag_wins_over_default() {
        let flag = PathBuf::from("/opt/nvidia/libnvidia-ml.so.1");
        assert_eq!(
            library_path(Some(&flag)),
            OsString::from("/opt/nvidia/libnvidia-ml.so.1")
        );
    }
}
