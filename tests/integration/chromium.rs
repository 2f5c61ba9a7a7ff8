//! A real headless Chromium (Debian package `chromium`, installed by
//! `slurm/deps.sh`) loading a page from a file: the DOM after load, the
//! console messages, the requests the page made, and a screenshot.
//!
//! Console messages come from Chromium's own log (`--enable-logging=stderr
//! --v=0` prints each as `INFO:CONSOLE…`); requests from its network log
//! (`--log-net-log`): every `URL_REQUEST_START_JOB` whose initiator is an
//! origin, that is the page's (Chromium's own background fetches say
//! `not an origin`). `detectors_see_a_bad_page` proves both detectors see
//! what they are there to see.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{run_bounded, EXPECT_CLUSTER_ENV};

pub const WIDTH: u32 = 1280;
pub const HEIGHT: u32 = 2400;

pub fn binary() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Chromium, or a failure saying how to get it (these tests are ignored
/// unless asked for; CI asks, with `YOLO_SCHED_EXPECT_CLUSTER=1`).
#[track_caller]
pub fn require() -> PathBuf {
    match binary() {
        Some(b) => b,
        None => {
            let ci = std::env::var(EXPECT_CLUSTER_ENV).is_ok_and(|v| v == "1");
            panic!(
                "no headless Chromium at /usr/bin/chromium{}: `bash slurm/deps.sh` installs the Debian package",
                if ci { " (required in CI)" } else { "" }
            )
        }
    }
}

pub struct Loaded {
    pub dom: String,
    /// The text of each console message.
    pub console: Vec<String>,
    /// URLs the page asked for over the network.
    pub requests: Vec<String>,
    pub png: Vec<u8>,
}

fn base(chrome: &Path, profile: &Path) -> Command {
    let mut c = Command::new(chrome);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .arg(format!("--window-size={WIDTH},{HEIGHT}"));
    c
}

/// The page's requests in a net log: `URL_REQUEST_START_JOB` events whose
/// initiator is an origin.
#[track_caller]
pub fn page_requests(net_log: &str) -> Vec<String> {
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(net_log) else {
        panic!("Chromium's net log is not JSON");
    };
    let start_job = doc["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
        .as_u64()
        .expect("URL_REQUEST_START_JOB in the net log's constants");
    doc["events"]
        .as_array()
        .expect("net log events")
        .iter()
        .filter(|e| e["type"].as_u64() == Some(start_job))
        .filter(|e| e["params"]["initiator"].as_str() != Some("not an origin"))
        .filter_map(|e| e["params"]["url"].as_str().map(str::to_string))
        .collect()
}

/// Load `page` (a file) twice: once for the DOM, console and requests, once
/// for the screenshot. Each run gets a new empty profile.
pub fn load(page: &Path) -> Loaded {
    let chrome = require();
    let work = tempfile::tempdir().unwrap();
    let url = format!("file://{}", page.canonicalize().unwrap().display());
    let net = work.path().join("net.json");
    let out = run_bounded(
        base(&chrome, &work.path().join("p1"))
            .args(["--enable-logging=stderr", "--v=0"])
            .arg(format!("--log-net-log={}", net.display()))
            .arg("--dump-dom")
            .arg(&url),
        Duration::from_secs(90),
    )
    .expect("chromium --dump-dom finished in time");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let console = stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(|l| l.split_once("] ").map_or(l, |(_, m)| m).to_string())
        .collect();
    let requests = page_requests(&std::fs::read_to_string(&net).expect("the net log"));
    let shot = work.path().join("shot.png");
    let out = run_bounded(
        base(&chrome, &work.path().join("p2"))
            .arg(format!("--screenshot={}", shot.display()))
            .arg(&url),
        Duration::from_secs(90),
    )
    .expect("chromium --screenshot finished in time");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Loaded {
        dom,
        console,
        requests,
        png: std::fs::read(&shot).expect("a screenshot"),
    }
}

/// Width and height from a PNG's IHDR, after checking the signature.
#[track_caller]
pub fn png_size(png: &[u8]) -> (u32, u32) {
    assert!(png.len() > 24, "a PNG of {} bytes", png.len());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&png[12..16], b"IHDR");
    let be = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

/// The page printed to PDF by Chromium (no header or footer).
#[track_caller]
pub fn print_pdf(page: &Path) -> Vec<u8> {
    let chrome = require();
    let work = tempfile::tempdir().unwrap();
    let pdf = work.path().join("page.pdf");
    let out = run_bounded(
        base(&chrome, &work.path().join("p"))
            .arg("--no-pdf-header-footer")
            .arg(format!("--print-to-pdf={}", pdf.display()))
            .arg(format!("file://{}", page.canonicalize().unwrap().display())),
        Duration::from_secs(90),
    )
    .expect("chromium --print-to-pdf finished in time");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&pdf).expect("a PDF");
    assert!(bytes.starts_with(b"%PDF-"), "not a PDF");
    bytes
}
