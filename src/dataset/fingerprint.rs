//! A dataset's content fingerprint, computed while `dataset check` reads every
//! label file anyway: the class names, and for each split every image's path
//! relative to the dataset root, its size in bytes and the bytes of its label
//! file. Two checks of the same data give the same fingerprint wherever the
//! copy lies (the root and the YAML's `path:` are left out); a changed label,
//! an added or removed image, a renamed class change it. Image pixels are not
//! read (their size stands for them), so it costs nothing beyond the check.
//! `compare` uses it so that runs on different data are not ranked together.

use std::path::Path;

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64 bits, fed piece by piece. Two lanes with different offsets make
/// 128 bits, so two datasets colliding by accident is out of the question.
#[derive(Debug, Clone)]
pub struct Fingerprint {
    a: u64,
    b: u64,
}

impl Default for Fingerprint {
    fn default() -> Self {
        Fingerprint {
            a: OFFSET,
            b: OFFSET ^ 0x9e37_79b9_7f4a_7c15,
        }
    }
}

impl Fingerprint {
    /// Add bytes, followed by a separator so that `ab`+`c` differs from `a`+`bc`.
    pub fn add(&mut self, bytes: &[u8]) {
        for b in bytes.iter().chain(std::iter::once(&0xff)) {
            self.a = (self.a ^ u64::from(*b)).wrapping_mul(PRIME);
            self.b = (self.b ^ u64::from(*b)).wrapping_mul(PRIME).rotate_left(5);
        }
    }

    pub fn add_path(&mut self, path: &Path, root: &Path) {
        let rel = path.strip_prefix(root).unwrap_or(path);
        self.add(rel.to_string_lossy().as_bytes());
    }

    /// `fnv128:` and 32 hex digits.
    pub fn finish(&self) -> String {
        format!("fnv128:{:016x}{:016x}", self.a, self.b)
    }
}

/// The hash of one label file's bytes (0 when there is none).
pub fn label_hash(bytes: &[u8]) -> u64 {
    crate::spec::fnv1a64(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_separated_and_order_counts() {
        let of = |parts: &[&str]| {
            let mut f = Fingerprint::default();
            for p in parts {
                f.add(p.as_bytes());
            }
            f.finish()
        };
        assert_eq!(of(&["ab", "c"]), of(&["ab", "c"]));
        assert_ne!(of(&["ab", "c"]), of(&["a", "bc"]));
        assert_ne!(of(&["a", "b"]), of(&["b", "a"]));
        assert!(of(&[]).starts_with("fnv128:") && of(&[]).len() == 7 + 32);
    }

    #[test]
    fn paths_are_relative_to_the_root() {
        let mut a = Fingerprint::default();
        a.add_path(Path::new("/data/one/images/x.png"), Path::new("/data/one"));
        let mut b = Fingerprint::default();
        b.add_path(Path::new("/copy/images/x.png"), Path::new("/copy"));
        assert_eq!(a.finish(), b.finish());
    }
}
