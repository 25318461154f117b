//! Agent request bodies: the exact bytes (signatures and `Content-Digest` cover them as sent),
//! read piece by piece up to a bound and only once the caller may send that much; then, for
//! `Content-Encoding: gzip`, decompression to the same bound, so that a gzip bomb costs at
//! most that much memory; then strict JSON.

use std::io::Read;

use flate2::read::GzDecoder;
use futures::StreamExt;
use serde::de::DeserializeOwned;

use crate::http::error::ApiError;

/// Largest body a signed agent call may carry, as sent and decompressed.
pub const MAX_SIGNED: usize = crate::http::middleware::AGENT_BODY_LIMIT;
/// Largest enrolment body, as sent and decompressed: a token, a CSR and the facts.
pub const MAX_ENROLMENT: usize = crate::http::middleware::ENROLMENT_BODY_LIMIT;

/// Reads `body` whole, handing each piece to `each` as it arrives (which may refuse it), and
/// stops at the first byte past `limit` (413).
pub async fn read(
    body: poem::Body,
    limit: usize,
    mut each: impl FnMut(&[u8]) -> Result<(), ApiError>,
) -> Result<Vec<u8>, ApiError> {
    let mut pieces = std::pin::pin!(body.into_bytes_stream());
    let mut out = Vec::new();
    while let Some(piece) = pieces.next().await {
        let piece = piece.map_err(|_| {
            // Past the edge's bound, or the client went away: the edge answers 413 for the
            // former.
            ApiError::invalid("The request body could not be read.")
        })?;
        if out.len().saturating_add(piece.len()) > limit {
            return Err(ApiError::PayloadTooLarge);
        }
        each(&piece)?;
        out.extend_from_slice(&piece);
    }
    Ok(out)
}

/// The body as the handler should parse it: decompressed (to at most `max` bytes) when it was
/// gzip.
pub fn decode(raw: &[u8], content_encoding: Option<&str>, max: usize) -> Result<Vec<u8>, ApiError> {
    match content_encoding
        .map(str::trim)
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("") | Some("identity") => Ok(raw.to_vec()),
        Some("gzip") | Some("x-gzip") => {
            let mut out = Vec::new();
            let mut limited = GzDecoder::new(raw).take(max as u64 + 1);
            limited
                .read_to_end(&mut out)
                .map_err(|_| ApiError::invalid("the gzip body could not be decompressed"))?;
            if out.len() > max {
                return Err(ApiError::PayloadTooLarge);
            }
            Ok(out)
        }
        Some(other) => Err(ApiError::invalid(format!(
            "Content-Encoding {other} is not accepted; send gzip or nothing"
        ))),
    }
}

/// Parses JSON strictly into `T`, saying where it went wrong: the field, as the bounds name
/// it (`updates[3].impact.reboot`), and the line and column.
pub fn json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut reader).map_err(|e| {
        let at = e.path().to_string();
        let err = e.into_inner();
        // `.` is the body itself, `?` a place the parser could not name (not JSON).
        if at.is_empty() || at == "." || at.starts_with('?') {
            ApiError::invalid(format!("The request body is not acceptable: {err}"))
        } else {
            ApiError::invalid(format!("{at}: {err}"))
        }
    })
}

/// The OpenAPI description of an agent's JSON request body of `T`.
pub fn json_request<T: poem_openapi::types::Type>(
    description: &'static str,
) -> poem_openapi::registry::MetaRequest {
    poem_openapi::registry::MetaRequest {
        description: Some(description),
        content: vec![poem_openapi::registry::MetaMediaType {
            content_type: "application/json",
            schema: T::schema_ref(),
        }],
        required: true,
    }
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
            decode(&gzip(body), Some("gzip"), MAX_SIGNED)
                .ok()
                .as_deref(),
            Some(&body[..])
        );
        assert_eq!(
            decode(body, None, MAX_SIGNED).ok().as_deref(),
            Some(&body[..])
        );
        assert!(matches!(
            decode(b"not gzip", Some("gzip"), MAX_SIGNED),
            Err(ApiError::InvalidRequest(_))
        ));
        assert!(matches!(
            decode(body, Some("br"), MAX_SIGNED),
            Err(ApiError::InvalidRequest(_))
        ));
    }

    #[test]
    fn a_body_of_the_wrong_shape_is_refused_naming_the_field() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Impact {
            reboot: bool,
        }
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Update {
            impact: Option<Impact>,
        }
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Body {
            updates: Vec<Update>,
        }
        let refused = json::<Body>(br#"{"updates": [{}, {"impact": {"reboot": -1}}]}"#);
        let Err(ApiError::InvalidRequest(detail)) = refused else {
            panic!("refused: {refused:?}");
        };
        assert!(detail.starts_with("updates[1].impact.reboot: "), "{detail}");
        let Err(ApiError::InvalidRequest(detail)) = json::<Body>(b"{not json") else {
            panic!("not JSON is refused");
        };
        assert!(
            detail.starts_with("The request body is not acceptable"),
            "{detail}"
        );
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
            decode(&bomb, Some("gzip"), MAX_SIGNED),
            Err(ApiError::PayloadTooLarge)
        ));
        // The enrolment bound is far smaller.
        let small = gzip(&vec![b' '; MAX_ENROLMENT + 1]);
        assert!(matches!(
            decode(&small, Some("gzip"), MAX_ENROLMENT),
            Err(ApiError::PayloadTooLarge)
        ));
        assert!(decode(&small, Some("gzip"), MAX_SIGNED).is_ok());
    }
}
