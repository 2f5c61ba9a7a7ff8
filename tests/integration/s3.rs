//! The local S3-compatible server of the backup tests (SeaweedFS, started by
//! `slurm/s3.sh up`), its client settings, and a TCP relay in front of it
//! that a test can cut to make the store unreachable mid-run.
#![allow(dead_code)] // not every helper is used by every module

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use yolo_sched::names::backup_url::BackupUrl;
use yolo_sched::objstore::{Credentials, Store};

pub const IGNORE: &str = "needs the local S3 server (slurm/s3.sh up)";

/// The server's client settings, from `slurm/s3.sh env`.
#[derive(Clone)]
pub struct S3 {
    pub vars: Vec<(String, String)>,
    pub bucket: String,
}

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm/s3.sh")
}

/// The running server (the test fails when it does not answer: these tests
/// are ignored unless asked for, and then the server must be there).
#[track_caller]
pub fn s3() -> S3 {
    let status = Command::new("bash")
        .arg(script())
        .arg("status")
        .status()
        .unwrap();
    assert!(
        status.success(),
        "this test needs the local S3 server but it does not answer; run `slurm/s3.sh up`"
    );
    let out = Command::new("bash")
        .arg(script())
        .arg("env")
        .output()
        .unwrap();
    let mut vars = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((k, v)) = line.strip_prefix("export ").and_then(|l| l.split_once('=')) {
            vars.push((k.to_string(), v.to_string()));
        }
    }
    let bucket = vars
        .iter()
        .find(|(k, _)| k == "YOLO_S3_BUCKET")
        .map(|(_, v)| v.clone())
        .expect("s3.sh env names the bucket");
    S3 { vars, bucket }
}

impl S3 {
    pub fn get(&self, key: &str) -> String {
        self.vars
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    /// Give `cmd` the server's settings (and none of the caller's AWS_* ones).
    pub fn apply<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("AWS_") {
                cmd.env_remove(&name);
            }
        }
        cmd.env("HOME", "/nonexistent");
        for (k, v) in &self.vars {
            cmd.env(k, v);
        }
        cmd
    }

    /// The same settings through `endpoint` instead (a relay).
    pub fn via(&self, endpoint: &str) -> S3 {
        let mut other = self.clone();
        for (k, v) in other.vars.iter_mut() {
            if k == "AWS_ENDPOINT_URL" {
                *v = endpoint.to_string();
            }
        }
        other
    }

    pub fn credentials(&self) -> Credentials {
        let vars = self.vars.clone();
        Credentials::gather(
            &move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
            None,
        )
    }

    /// A unique `s3://bucket/<prefix>` for one test.
    pub fn url(&self, test: &str) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        format!("s3://{}/tests/{test}-{nanos}", self.bucket)
    }

    /// A client of the bucket, for checking what the server holds.
    pub fn store(&self) -> Store {
        let url = BackupUrl::parse(&format!("s3://{}", self.bucket)).unwrap();
        Store::s3(&url, &self.credentials()).unwrap()
    }
}

/// A TCP relay to the server that can be cut (`down`: live connections are
/// shut, new ones closed at once) and restored (`up`).
pub struct Relay {
    pub port: u16,
    down: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    pub fn start(upstream: &str) -> Relay {
        let target = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let down = Arc::new(AtomicBool::new(false));
        let live: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (d, l) = (down.clone(), live.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(client) = conn else { continue };
                if d.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                {
                    // `down` is checked again under the lock `down()` takes:
                    // a connection accepted just before the cut never outlives it.
                    let mut l = l.lock().unwrap();
                    if d.load(Ordering::SeqCst) {
                        let _ = client.shutdown(Shutdown::Both);
                        let _ = server.shutdown(Shutdown::Both);
                        continue;
                    }
                    l.push(client.try_clone().unwrap());
                    l.push(server.try_clone().unwrap());
                }
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
        });
        Relay { port, down, live }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn down(&self) {
        let mut live = self.live.lock().unwrap();
        self.down.store(true, Ordering::SeqCst);
        for s in live.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    pub fn up(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 64 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
