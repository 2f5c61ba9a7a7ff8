//! Image files as Ultralytics checks them: the format from the first bytes (not the
//! extension), the size where the header gives it cheaply, and a truncation check.

use std::fs::File;
use std::io::Read;
use std::path::Path;

/// Extensions Ultralytics treats as images (`ultralytics/data/utils.py` `IMG_FORMATS`).
pub const IMG_FORMATS: &[&str] = &[
    "bmp", "dng", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp", "pfm", "heic",
];

/// Ultralytics refuses images smaller than this on either side (`verify_image_label`).
pub const MIN_SIDE: u32 = 10;

/// How many bytes of the head we read: enough for a JPEG's start-of-frame after
/// typical EXIF blocks without reading whole images.
const HEAD_BYTES: u64 = 256 * 1024;

/// An image format, recognised by its magic bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jpeg,
    Png,
    Bmp,
    Webp,
    Tiff,
    Pfm,
    Heic,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Jpeg => "JPEG",
            Format::Png => "PNG",
            Format::Bmp => "BMP",
            Format::Webp => "WebP",
            Format::Tiff => "TIFF",
            Format::Pfm => "PFM",
            Format::Heic => "HEIC",
        }
    }
}

/// What the header of an image file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    pub format: Format,
    /// (width, height), when the format's header gives it cheaply.
    pub size: Option<(u32, u32)>,
    pub bytes: u64,
    /// A JPEG without its end marker: Ultralytics restores it (a warning).
    pub jpeg_truncated: bool,
}

/// Why an image cannot be used (Ultralytics would drop it as corrupt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageError(pub String);

/// True when the file name has an extension Ultralytics loads as an image.
pub fn has_image_extension(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMG_FORMATS.contains(&e.to_ascii_lowercase().as_str()))
}

/// Read the header (and, for JPEG and PNG, the last bytes) of an image file.
pub fn inspect(path: &Path) -> Result<ImageInfo, ImageError> {
    // Non-blocking, so that a FIFO named like an image is refused, not waited on.
    use crate::fsutil::{Links, NotOpened};
    let mut file = crate::fsutil::open_regular(path, Links::Follow).map_err(|e| match e.why {
        NotOpened::Io(e) => ImageError(format!("cannot open: {e}")),
        _ => ImageError("not a regular file (a FIFO, socket or device)".into()),
    })?;
    let meta = file
        .metadata()
        .map_err(|e| ImageError(format!("cannot stat: {e}")))?;
    let bytes = meta.len();
    if bytes == 0 {
        return Err(ImageError("empty file".into()));
    }
    let mut head = Vec::with_capacity(HEAD_BYTES.min(bytes) as usize);
    (&mut file)
        .take(HEAD_BYTES)
        .read_to_end(&mut head)
        .map_err(|e| ImageError(format!("cannot read: {e}")))?;
    let format = sniff(&head).ok_or_else(|| {
        ImageError(format!(
            "not a readable image: the first bytes ({}) are not those of a JPEG, PNG, BMP, WebP, TIFF, PFM or HEIC file",
            hex_prefix(&head)
        ))
    })?;
    let tail =
        read_tail(&mut file, bytes, 12).map_err(|e| ImageError(format!("cannot read: {e}")))?;
    let mut jpeg_truncated = false;
    let size = match format {
        Format::Png => {
            if !tail.ends_with(PNG_IEND) {
                return Err(ImageError(
                    "truncated PNG: the file does not end with the IEND chunk".into(),
                ));
            }
            Some(
                png_size(&head)
                    .ok_or_else(|| ImageError("PNG without a valid IHDR chunk".into()))?,
            )
        }
        Format::Jpeg => {
            jpeg_truncated = !tail.ends_with(&[0xff, 0xd9]);
            jpeg_size(&head)
        }
        Format::Bmp => bmp_size(&head),
        Format::Webp => webp_size(&head),
        Format::Tiff | Format::Pfm | Format::Heic => None,
    };
    if let Some((w, h)) = size {
        if w < MIN_SIDE || h < MIN_SIDE {
            return Err(ImageError(format!(
                "image is {w}×{h} pixels; Ultralytics drops images under {MIN_SIDE} pixels on a side"
            )));
        }
    }
    Ok(ImageInfo {
        format,
        size,
        bytes,
        jpeg_truncated,
    })
}

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";
/// The IEND chunk: zero length, type, CRC.
const PNG_IEND: &[u8] = b"\x00\x00\x00\x00IEND\xae\x42\x60\x82";

/// The format from the first bytes.
pub fn sniff(head: &[u8]) -> Option<Format> {
    if head.starts_with(&[0xff, 0xd8, 0xff]) {
        Some(Format::Jpeg)
    } else if head.starts_with(PNG_MAGIC) {
        Some(Format::Png)
    } else if head.starts_with(b"BM") && head.len() >= 26 {
        Some(Format::Bmp)
    } else if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        Some(Format::Webp)
    } else if head.starts_with(b"II*\0") || head.starts_with(b"MM\0*") {
        Some(Format::Tiff)
    } else if head.starts_with(b"PF\n") || head.starts_with(b"Pf\n") {
        Some(Format::Pfm)
    } else if head.len() >= 12
        && &head[4..8] == b"ftyp"
        && matches!(
            &head[8..12],
            b"heic" | b"heix" | b"mif1" | b"msf1" | b"heim" | b"heis"
        )
    {
        Some(Format::Heic)
    } else {
        None
    }
}

fn read_tail(file: &mut File, len: u64, n: u64) -> std::io::Result<Vec<u8>> {
    let n = n.min(len);
    crate::fsutil::read_range(file, len - n, n)
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// IHDR is the first chunk: length 13, type, width, height (big-endian).
fn png_size(head: &[u8]) -> Option<(u32, u32)> {
    if be32(head, 8)? != 13 || head.get(12..16)? != b"IHDR" {
        return None;
    }
    Some((be32(head, 16)?, be32(head, 20)?))
}

/// Walk the JPEG segments to the first start-of-frame marker.
fn jpeg_size(head: &[u8]) -> Option<(u32, u32)> {
    let mut i = 2;
    while i + 4 <= head.len() {
        if head[i] != 0xff {
            return None;
        }
        let marker = head[i + 1];
        // Fill bytes and markers without a length.
        if marker == 0xff {
            i += 1;
            continue;
        }
        if marker == 0x01 || (0xd0..=0xd7).contains(&marker) {
            i += 2;
            continue;
        }
        let len = usize::from(be16(head, i + 2)?);
        let is_sof = matches!(marker, 0xc0..=0xcf) && !matches!(marker, 0xc4 | 0xc8 | 0xcc);
        if is_sof {
            let h = be16(head, i + 5)?;
            let w = be16(head, i + 7)?;
            return Some((u32::from(w), u32::from(h)));
        }
        if marker == 0xda || len < 2 {
            return None;
        }
        i += 2 + len;
    }
    None
}

/// BITMAPINFOHEADER (or larger): width and height at 18 and 22, height may be
/// negative (top-down); the old BITMAPCOREHEADER has 16-bit fields.
fn bmp_size(head: &[u8]) -> Option<(u32, u32)> {
    let header_len = le32(head, 14)?;
    if header_len == 12 {
        return Some((u32::from(le16(head, 18)?), u32::from(le16(head, 20)?)));
    }
    let w = le32(head, 18)? as i32;
    let h = le32(head, 22)? as i32;
    Some((w.unsigned_abs(), h.unsigned_abs()))
}

fn webp_size(head: &[u8]) -> Option<(u32, u32)> {
    match head.get(12..16)? {
        b"VP8 " => {
            // Frame tag (3 bytes), start code 9d 01 2a, then 14-bit width and height.
            if head.get(23..26)? != [0x9d, 0x01, 0x2a] {
                return None;
            }
            let w = u32::from(le16(head, 26)? & 0x3fff);
            let h = u32::from(le16(head, 28)? & 0x3fff);
            Some((w, h))
        }
        b"VP8L" => {
            if *head.get(20)? != 0x2f {
                return None;
            }
            let bits = le32(head, 21)?;
            Some(((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1))
        }
        b"VP8X" => {
            let w = u32::from_le_bytes([*head.get(24)?, *head.get(25)?, *head.get(26)?, 0]) + 1;
            let h = u32::from_le_bytes([*head.get(27)?, *head.get(28)?, *head.get(29)?, 0]) + 1;
            Some((w, h))
        }
        _ => None,
    }
}

fn hex_prefix(head: &[u8]) -> String {
    head.iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A minimal valid PNG (8-bit greyscale, stored zlib blocks), for tests and
/// generated fixtures: no image crate needed.
pub fn encode_png_gray(width: u32, height: u32, pixel: impl Fn(u32, u32) -> u8) -> Vec<u8> {
    let mut raw = Vec::with_capacity(((width + 1) * height) as usize);
    for y in 0..height {
        raw.push(0); // filter: none
        for x in 0..width {
            raw.push(pixel(x, y));
        }
    }
    let mut out = PNG_MAGIC.to_vec();
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 0, 0, 0, 0]); // depth 8, greyscale, deflate, no filter, no interlace
    png_chunk(&mut out, b"IHDR", &ihdr);
    png_chunk(&mut out, b"IDAT", &zlib_stored(&raw));
    png_chunk(&mut out, b"IEND", &[]);
    out
}

fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// zlib stream of "stored" (uncompressed) deflate blocks.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let mut chunks = data.chunks(65535).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        out.push(u8::from(chunks.peek().is_none()));
        let len = chunk.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    /// A baseline JPEG header: SOI, an APP0 segment, SOF0 with the size, then EOI.
    fn jpeg(w: u16, h: u16, with_eoi: bool) -> Vec<u8> {
        let mut v = vec![0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10];
        v.extend_from_slice(b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
        v.extend_from_slice(&[0xff, 0xc0, 0x00, 0x0b, 0x08]);
        v.extend_from_slice(&h.to_be_bytes());
        v.extend_from_slice(&w.to_be_bytes());
        v.extend_from_slice(&[0x01, 0x01, 0x11, 0x00]);
        if with_eoi {
            v.extend_from_slice(&[0xff, 0xd9]);
        }
        v
    }

    #[test]
    fn png_written_here_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "a.png",
            &encode_png_gray(32, 20, |x, y| (x ^ y) as u8),
        );
        let info = inspect(&p).unwrap();
        assert_eq!(info.format, Format::Png);
        assert_eq!(info.size, Some((32, 20)));
        // Known CRC of "IEND" proves the checksum is the PNG one.
        assert_eq!(crc32(b"IEND"), 0xae42_6082);
    }

    #[test]
    fn formats_sizes_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let info = inspect(&write(d, "a.jpg", &jpeg(640, 480, true))).unwrap();
        assert_eq!(
            (info.format, info.size, info.jpeg_truncated),
            (Format::Jpeg, Some((640, 480)), false)
        );
        assert!(
            inspect(&write(d, "b.jpg", &jpeg(64, 48, false)))
                .unwrap()
                .jpeg_truncated
        );
        // A PNG under a .jpg name is still an image, as for Ultralytics (PIL reads content).
        let png = encode_png_gray(16, 16, |_, _| 0);
        assert_eq!(
            inspect(&write(d, "c.jpg", &png)).unwrap().format,
            Format::Png
        );
        let cut = &png[..png.len() - 6];
        assert!(inspect(&write(d, "d.png", cut))
            .unwrap_err()
            .0
            .contains("truncated PNG"));
        let tiny = encode_png_gray(8, 32, |_, _| 0);
        assert!(inspect(&write(d, "e.png", &tiny))
            .unwrap_err()
            .0
            .contains("8×32"));
        assert!(inspect(&write(d, "f.jpg", b""))
            .unwrap_err()
            .0
            .contains("empty"));
        let text = inspect(&write(d, "g.jpg", b"<html>not an image</html>")).unwrap_err();
        assert!(text.0.contains("3c 68 74 6d"), "{text:?}");
        let gif = inspect(&write(d, "h.png", b"GIF89a\x10\x00\x10\x00")).unwrap_err();
        assert!(gif.0.contains("not a readable image"));
    }

    #[test]
    fn bmp_and_webp_headers() {
        let mut bmp = b"BM".to_vec();
        bmp.extend_from_slice(&[0; 12]);
        bmp.extend_from_slice(&40u32.to_le_bytes());
        bmp.extend_from_slice(&100i32.to_le_bytes());
        bmp.extend_from_slice(&(-50i32).to_le_bytes());
        assert_eq!(sniff(&bmp), Some(Format::Bmp));
        assert_eq!(bmp_size(&bmp), Some((100, 50)));
        let mut webp = b"RIFF\0\0\0\0WEBPVP8L\0\0\0\0\x2f".to_vec();
        let bits: u32 = (99) | (49 << 14);
        webp.extend_from_slice(&bits.to_le_bytes());
        assert_eq!(sniff(&webp), Some(Format::Webp));
        assert_eq!(webp_size(&webp), Some((100, 50)));
    }

    #[test]
    fn image_extensions_follow_ultralytics() {
        assert!(has_image_extension(Path::new("a/b.JPG")));
        assert!(has_image_extension(Path::new("a/b.webp")));
        assert!(!has_image_extension(Path::new("a/b.gif")));
        assert!(!has_image_extension(Path::new("a/b.txt")));
        assert!(!has_image_extension(Path::new("a/jpg")));
    }
}
