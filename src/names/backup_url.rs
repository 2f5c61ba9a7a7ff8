//! `s3://bucket/prefix` URLs of the checkpoint backup, checked strictly: the
//! bucket follows the S3 naming rules and each prefix segment is plain
//! (letters, digits, `.`, `_`, `-`; no `..`), so a URL can never name
//! another place than it reads as, nor carry anything a shell would act on.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A checked backup location: a bucket and a key prefix (no leading or
/// trailing `/`; empty for the bucket's root).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupUrl {
    pub bucket: String,
    pub prefix: String,
}

const MAX_URL: usize = 512;

impl BackupUrl {
    /// Parse and check `s3://bucket[/prefix]`. `Err` says what is wrong and
    /// what is expected.
    pub fn parse(text: &str) -> Result<BackupUrl, String> {
        // Keys in a URL would be echoed into job and CI logs: say where they
        // are, never what they are.
        if let Some(why) = carries_credentials(text) {
            return Err(format!(
                "carries {why}; the value is not shown. Credentials never go in a backup URL: they come from the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or an AWS_PROFILE; docs/backup.md). Write only s3://bucket/prefix here, and replace the keys that were written down"
            ));
        }
        if text.len() > MAX_URL {
            return Err(format!(
                "is {} characters long; at most {MAX_URL} are allowed",
                text.len()
            ));
        }
        let Some(rest) = text.strip_prefix("s3://") else {
            return Err(format!(
                "{text:?} is not an s3:// URL; expected s3://bucket/prefix (endpoint and region come from AWS_ENDPOINT_URL and AWS_REGION)"
            ));
        };
        let rest = rest.trim_end_matches('/');
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        check_bucket(bucket)?;
        for segment in prefix.split('/').filter(|_| !prefix.is_empty()) {
            check_segment(segment).map_err(|e| format!("{text:?}: {e}"))?;
        }
        Ok(BackupUrl {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// This location with `segment` appended (a run id, a save directory's name).
    pub fn join(&self, segment: &str) -> Result<BackupUrl, String> {
        check_segment(segment)?;
        let prefix = if self.prefix.is_empty() {
            segment.to_string()
        } else {
            format!("{}/{segment}", self.prefix)
        };
        Ok(BackupUrl {
            bucket: self.bucket.clone(),
            prefix,
        })
    }

    /// Whether `self` is `other` or lies under it (`s3://b/p/q` is under `s3://b/p`,
    /// `s3://b/pq` is not).
    pub fn is_within(&self, other: &BackupUrl) -> bool {
        self.bucket == other.bucket
            && (other.prefix.is_empty()
                || self.prefix == other.prefix
                || self
                    .prefix
                    .strip_prefix(&other.prefix)
                    .is_some_and(|r| r.starts_with('/')))
    }

    /// The object key of `relative` (`weights/last.pt`) under this prefix.
    pub fn key(&self, relative: &str) -> String {
        if self.prefix.is_empty() {
            relative.to_string()
        } else {
            format!("{}/{relative}", self.prefix)
        }
    }
}

impl fmt::Display for BackupUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "s3://{}", self.bucket)
        } else {
            write!(f, "s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

/// What in `text` looks like a credential: user information before the
/// bucket (`s3://AKIA…:secret@bucket`), or a query or fragment (a presigned
/// URL's `?X-Amz-Signature=…`, `X-Amz-Credential`, `X-Amz-Security-Token`).
fn carries_credentials(text: &str) -> Option<&'static str> {
    let lower = text.to_ascii_lowercase();
    if lower.contains("x-amz-") {
        Some("a request signature or credential (`X-Amz-…`, from a presigned URL)")
    } else if text.contains('@') {
        Some("user information (`user:secret@` before the bucket), which is a credential")
    } else if text.contains('?') || text.contains('#') {
        Some("a query (`?…`), which in an S3 URL holds a signature or credential")
    } else {
        None
    }
}

fn check_bucket(bucket: &str) -> Result<(), String> {
    let ok_chars = bucket
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if (3..=63).contains(&bucket.len())
        && ok_chars
        && ends_ok(bucket.chars().next())
        && ends_ok(bucket.chars().last())
        && !bucket.contains("..")
    {
        Ok(())
    } else {
        Err(format!(
            "bucket {bucket:?} is not a valid S3 bucket name: expected 3 to 63 lowercase letters, digits, '.' or '-', starting and ending with a letter or digit (e.g. s3://checkpoints/yolo)"
        ))
    }
}

fn check_segment(segment: &str) -> Result<(), String> {
    let ok = !segment.is_empty()
        && segment.len() <= 128
        && segment != "."
        && segment != ".."
        && segment
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "prefix segment {segment:?} is not allowed: expected letters, digits, '.', '_' or '-' between single slashes (no empty segment, no '..')"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bucket_and_prefix() {
        let u = BackupUrl::parse("s3://ckpt/yolo/team-a/").unwrap();
        assert_eq!(u.bucket, "ckpt");
        assert_eq!(u.prefix, "yolo/team-a");
        assert_eq!(u.to_string(), "s3://ckpt/yolo/team-a");
        assert_eq!(u.key("weights/last.pt"), "yolo/team-a/weights/last.pt");
        let root = BackupUrl::parse("s3://ckpt").unwrap();
        assert_eq!(root.prefix, "");
        assert_eq!(root.key("a"), "a");
    }

    #[test]
    fn refuses_what_is_not_plain() {
        for bad in [
            "http://ckpt/x",
            "s3://Ck/x",
            "s3://ab",
            "s3://ckpt//x",
            "s3://ckpt/../x",
            "s3://ckpt/a b",
            "s3://ckpt/$(id)",
            "s3://-ckpt/x",
            "s3://ckpt/x'y",
        ] {
            assert!(BackupUrl::parse(bad).is_err(), "{bad} accepted");
        }
        assert!(BackupUrl::parse(&format!("s3://ckpt/{}", "a".repeat(600))).is_err());
    }

    #[test]
    fn credentials_in_a_url_are_refused_and_never_echoed() {
        for (bad, needle) in [
            (
                "s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY@ckpt/x",
                "user information",
            ),
            (
                "s3://ckpt/x?X-Amz-Signature=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
                "X-Amz-",
            ),
            (
                "https://ckpt.s3.amazonaws.com/x?x-amz-credential=wJalrXUtnFEMIK7MDENG",
                "X-Amz-",
            ),
            (
                "s3://ckpt/x?token=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
                "a query",
            ),
            (
                "s3://ckpt/wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY@x",
                "user information",
            ),
        ] {
            let e = BackupUrl::parse(bad).unwrap_err();
            assert!(e.contains(needle), "{bad}: {e}");
            assert!(
                e.contains("AWS_ACCESS_KEY_ID") && e.contains("environment"),
                "{e}"
            );
            for secret in ["wJalrXUtnFEMIK7MDENG", "AKIAIOSFODNN7EXAMPLE"] {
                assert!(!e.contains(secret), "{bad} echoed: {e}");
            }
        }
    }

    #[test]
    fn within_is_by_whole_segments() {
        let site = BackupUrl::parse("s3://ckpt/yolo").unwrap();
        assert!(BackupUrl::parse("s3://ckpt/yolo").unwrap().is_within(&site));
        assert!(BackupUrl::parse("s3://ckpt/yolo/a")
            .unwrap()
            .is_within(&site));
        assert!(!BackupUrl::parse("s3://ckpt/yolox")
            .unwrap()
            .is_within(&site));
        assert!(!BackupUrl::parse("s3://other/yolo")
            .unwrap()
            .is_within(&site));
        let root = BackupUrl::parse("s3://ckpt").unwrap();
        assert!(site.is_within(&root));
        assert!(site.join("run-1").unwrap().is_within(&site));
        assert!(site.join("..").is_err());
    }
}
