//! Signing an agent request: the `Content-Digest` of its body (RFC 9530) and one signature,
//! `sig1`, covering what the service requires (decisions §6). The signature base comes from
//! [`super::base::signature_base`], the same function the verifier rebuilds it with.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use sfv::{Integer, KeyRef, ListSerializer, StringRef};

use super::{RequestHead, SignatureError, SigningKey, base, content_digest};

/// The request to sign, as it will be sent.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    /// e.g. `POST`.
    pub method: &'a str,
    /// `host[:port]` of the service's public address (no default port), as the service knows
    /// itself (`SERVICE_BASE_URL`).
    pub authority: &'a str,
    /// The path as sent, percent-encoded.
    pub path: &'a str,
    /// The query as sent, without `?`; `None` when there is none.
    pub query: Option<&'a str>,
    /// The exact body bytes (as sent: after any gzip); empty when there is none.
    pub body: &'a [u8],
}

/// Who signs, and the parameters that make the signature unique.
#[derive(Debug, Clone, Copy)]
pub struct Signer<'a> {
    pub key: &'a SigningKey,
    /// The `key_id` of the enrolment or renewal answer.
    pub key_id: &'a str,
    /// Unix seconds (the service refuses signatures older than 5 minutes).
    pub created: i64,
    /// Never reused with this key within the replay window.
    pub nonce: &'a str,
}

/// The header fields a signed request carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureHeaders {
    /// `Content-Digest` (RFC 9530, sha-256), when the request has a body.
    pub content_digest: Option<String>,
    /// `Signature-Input`.
    pub signature_input: String,
    /// `Signature`.
    pub signature: String,
}

impl SignatureHeaders {
    /// `(name, value)` of each header to send.
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        let mut pairs = Vec::with_capacity(3);
        if let Some(digest) = &self.content_digest {
            pairs.push(("content-digest", digest.as_str()));
        }
        pairs.push(("signature-input", self.signature_input.as_str()));
        pairs.push(("signature", self.signature.as_str()));
        pairs
    }
}

/// Signs `request`: `@method`, `@authority`, `@path`, `@query` when it has a query and
/// `content-digest` when it has a body, with `created`, `keyid` and `nonce`.
pub fn sign(
    request: &Outgoing<'_>,
    signer: &Signer<'_>,
) -> Result<SignatureHeaders, SignatureError> {
    let query = request.query.filter(|q| !q.is_empty());
    let digest = (!request.body.is_empty()).then(|| content_digest(request.body));
    let mut components = vec![
        "@method".to_owned(),
        "@authority".to_owned(),
        "@path".to_owned(),
    ];
    if query.is_some() {
        components.push("@query".to_owned());
    }
    if digest.is_some() {
        components.push("content-digest".to_owned());
    }
    let params = serialized_params(&components, signer)?;
    let headers: Vec<(&str, &str)> = digest
        .as_deref()
        .map(|d| ("content-digest", d))
        .into_iter()
        .collect();
    let head = RequestHead {
        method: request.method,
        authority: request.authority,
        path: request.path,
        query,
        headers: &headers,
    };
    let signature_base = base::signature_base(&head, &components, &params)?;
    let signature = signer.key.sign(signature_base.as_bytes());
    Ok(SignatureHeaders {
        content_digest: digest,
        signature_input: format!("sig1={params}"),
        signature: format!("sig1=:{}:", BASE64.encode(signature)),
    })
}

/// `("@method" …);created=…;keyid="…";nonce="…"`: the inner list as Structured Fields
/// serialize it, which is what the verifier serializes again from the header it receives.
fn serialized_params(components: &[String], signer: &Signer<'_>) -> Result<String, SignatureError> {
    let bad = |what: &'static str| move |_| SignatureError::InvalidParameter(what);
    let created = Integer::try_from(signer.created).map_err(bad("created"))?;
    let key_id = StringRef::from_str(signer.key_id).map_err(bad("keyid"))?;
    let nonce = StringRef::from_str(signer.nonce).map_err(bad("nonce"))?;
    let mut list = ListSerializer::new();
    {
        let mut inner = list.inner_list();
        for component in components {
            let _ = inner.bare_item(StringRef::from_str(component).map_err(bad("component"))?);
        }
        let key = |name: &'static str| KeyRef::from_str(name).map_err(bad(name));
        let _ = inner
            .finish()
            .parameter(key("created")?, created)
            .parameter(key("keyid")?, key_id)
            .parameter(key("nonce")?, nonce);
    }
    list.finish()
        .ok_or(SignatureError::MalformedSignatureInput("empty".to_owned()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::signature::{SignedRequest, parse};

    const VECTOR: &str = include_str!("../../testdata/rfc9421-check-in.json");

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Signing the vector's request with its key and parameters gives its headers byte for
    /// byte (Ed25519 signatures are deterministic), so the signer and an independent RFC 9421
    /// implementation agree.
    #[test]
    fn signing_the_vector_request_gives_the_vector_headers() {
        let v: serde_json::Value = serde_json::from_str(VECTOR).unwrap();
        let seed: [u8; 32] = hex(v["private_key_seed_hex"].as_str().unwrap())
            .try_into()
            .unwrap();
        let key = SigningKey::ed25519_from_seed(&seed);
        let body = v["request"]["body"].as_str().unwrap().as_bytes();
        let headers = sign(
            &Outgoing {
                method: "POST",
                authority: "fleet.example.com",
                path: "/v1/agent/check-in",
                query: None,
                body,
            },
            &Signer {
                key: &key,
                key_id: "1f2e3d4c5b6a",
                created: 1_795_000_000,
                nonce: "b6f1d2c3a4e5",
            },
        )
        .unwrap();
        let sent = &v["request"]["headers"];
        assert_eq!(
            headers.content_digest.as_deref(),
            sent["Content-Digest"].as_str()
        );
        assert_eq!(
            Some(headers.signature_input.as_str()),
            sent["Signature-Input"].as_str()
        );
        assert_eq!(Some(headers.signature.as_str()), sent["Signature"].as_str());
    }

    fn verify_round_trip(key: &SigningKey, query: Option<&str>, body: &[u8]) {
        let headers = sign(
            &Outgoing {
                method: "POST",
                authority: "127.0.0.1:8080",
                path: "/v1/agent/jobs/job_x/result",
                query,
                body,
            },
            &Signer {
                key,
                key_id: "ab12",
                created: 1_800_000_000,
                nonce: "n-1",
            },
        )
        .unwrap();
        let pairs = headers.pairs();
        let request = SignedRequest {
            method: "POST",
            authority: "127.0.0.1:8080",
            path: "/v1/agent/jobs/job_x/result",
            query,
            headers: &pairs,
            body: Some(body),
        };
        let parsed = parse(&request).unwrap();
        assert_eq!(parsed.params.key_id, "ab12");
        assert_eq!(parsed.params.nonce, "n-1");
        parsed.verify(&key.public_key()).unwrap();
        // Another path under the same signature is refused.
        let moved = SignedRequest {
            path: "/v1/agent/check-in",
            ..request
        };
        assert!(parse(&moved).unwrap().verify(&key.public_key()).is_err());
    }

    #[test]
    fn what_is_signed_verifies_with_either_algorithm_with_and_without_body_and_query() {
        let ed = SigningKey::ed25519_from_seed(&[9; 32]);
        verify_round_trip(&ed, None, br#"{"status":"succeeded"}"#);
        verify_round_trip(&ed, Some("a=1&b=%20"), b"");
        let pem = ed.to_pkcs8_pem().unwrap();
        let again = SigningKey::from_pkcs8_pem(&pem).unwrap();
        assert_eq!(again.public_key(), ed.public_key());

        let p256_pem = {
            use p256::elliptic_curve::Generate as _;
            use p256::pkcs8::EncodePrivateKey as _;
            p256::ecdsa::SigningKey::generate()
                .to_pkcs8_pem(p256::pkcs8::LineEnding::LF)
                .unwrap()
                .to_string()
        };
        let p256 = SigningKey::from_pkcs8_pem(&p256_pem).unwrap();
        assert_eq!(format!("{p256:?}"), "SigningKey(ecdsa-p256-sha256)");
        verify_round_trip(&p256, Some("x=y"), b"{}");
        assert!(SigningKey::from_pkcs8_pem("not a key").is_err());
    }

    #[test]
    fn parameters_that_cannot_be_structured_fields_are_refused() {
        let key = SigningKey::ed25519_from_seed(&[1; 32]);
        let request = Outgoing {
            method: "POST",
            authority: "fleet.test",
            path: "/",
            query: None,
            body: b"",
        };
        let with = |key_id, nonce| Signer {
            key: &key,
            key_id,
            created: 1,
            nonce,
        };
        assert!(sign(&request, &with("k\u{7}", "n")).is_err());
        assert!(sign(&request, &with("k", "n\u{e9}")).is_err());
        let no_authority = Outgoing {
            authority: "a b",
            ..request
        };
        assert!(sign(&no_authority, &with("k", "n")).is_err());
    }
}
