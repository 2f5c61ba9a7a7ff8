//! The one generator of random ids: a run id's suffix, a submission's
//! journal token, a registry publish's id and snapshot names. The kernel's
//! randomness (`/dev/urandom`); where that cannot be read, the clock and the
//! process id, so two processes still differ.

use std::io::Read;

/// Random lowercase hex of `bytes` bytes (`2 * bytes` digits).
pub fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    let filled = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if filled.is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
            ^ (u128::from(std::process::id()) << 64);
        for (i, x) in b.iter_mut().enumerate() {
            *x = (t >> ((i % 16) * 8)) as u8;
        }
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_hex_of_the_asked_length_and_differ() {
        let a = random_hex(8);
        assert_eq!(a.len(), 16);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "{a}"
        );
        assert_ne!(random_hex(8), random_hex(8));
        assert_eq!(random_hex(0), "");
    }
}
