//! Agent request bodies: the exact bytes (signatures and `Content-Digest` cover them as sent),
//! then, for `Content-Encoding: gzip`, decompression bounded at 16 MiB so that a gzip bomb
//! costs at most that much memory, then strict JSON.

use std::io::Read;

use flate2::read::GzDecoder;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Largest decompressed body an agent may send.
pub const MAX_DECOMPRESSED: usize = 16 * 1024 * 1024;

/// The body as the handler should parse it: decompressed when it was gzip.
pub fn decode(raw: &[u8], content_encoding: Option<&str>) -> Result<Vec<u8>, ApiError> {
    match content_encoding
        .map(str::trim)
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("") | Some("identity") => Ok(raw.to_vec()),
        Some("gzip") | Some("x-gzip") => {
            let mut out = Vec::new();
            let mut limited = GzDecoder::new(raw).take(MAX_DECOMPRESSED as u64 + 1);
            limited
                .read_to_end(&mut out)
                .map_err(|_| ApiError::invalid("the gzip body could not be decompressed"))?;
            if out.len() > MAX_DECOMPRESSED {
                return Err(ApiError::PayloadTooLarge);
            }
            Ok(out)
        }
        Some(other) => Err(ApiError::invalid(format!(
            "Content-Encoding {other} is not accepted; send gzip or nothing"
        ))),
    }
}

/// Parses JSON strictly into `T`, saying where it went wrong.
pub fn json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::invalid(format!("The request body is not acceptable: {e}")))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::{Compression, write::GzEncoder};

    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
        encoder.write_all(data).expect("write");
        encoder.finish().expect("finish")
    }

    #[test]
    fn gzip_bodies_are_decompressed_within_the_bound() {
        let body = br#"{"a":1}"#;
        assert_eq!(
            decode(&gzip(body), Some("gzip")).ok().as_deref(),
            Some(&body[..])
        );
        assert_eq!(decode(body, None).ok().as_deref(), Some(&body[..]));
        assert!(matches!(
            decode(b"not gzip", Some("gzip")),
            Err(ApiError::InvalidRequest(_))
        ));
        assert!(matches!(
            decode(body, Some("br")),
            Err(ApiError::InvalidRequest(_))
        ));
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_bound() {
        // 64 MiB of zeros compresses to about 64 KiB.
        let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
        let chunk = vec![0u8; 1024 * 1024];
        for _ in 0..64 {
            encoder.write_all(&chunk).expect("write");
        }
        let bomb = encoder.finish().expect("finish");
        assert!(bomb.len() < 1024 * 1024);
        assert!(matches!(
            decode(&bomb, Some("gzip")),
            Err(ApiError::PayloadTooLarge)
        ));
    }
}
