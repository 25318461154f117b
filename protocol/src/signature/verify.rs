//! Verifying a signed request: parsing `Signature-Input`, `Signature` and `Content-Digest`,
//! the coverage the protocol requires, freshness, and the body against its digest.

use std::fmt;

use sfv::{BareItem, Dictionary, FieldType as _, Item, ListEntry, Parser, Version};
use sha2::{Digest as _, Sha256};

use super::{
    PublicKey,
    base::{header_value, signature_base},
    check_alg, verify,
};

/// Oldest accepted `created`: a signature older than this many seconds is refused
/// (decisions.md §6: "older than 5 minutes").
pub const MAX_AGE_S: i64 = 300;
/// Clock-skew allowance: a `created` at most this many seconds ahead of the server's clock is
/// accepted, one further ahead is refused. Symmetric with [`MAX_AGE_S`], so an agent whose
/// clock is a few minutes off still gets through while a signature can never be used for
/// longer than `created + MAX_AGE_S`.
pub const MAX_CLOCK_SKEW_S: i64 = 300;

/// Largest `Signature-Input` value accepted (all field lines combined), in bytes.
pub const MAX_SIGNATURE_INPUT_LEN: usize = 2048;
/// Largest `Signature` value accepted (all field lines combined), in bytes.
pub const MAX_SIGNATURE_LEN: usize = 2048;
/// Largest `Content-Digest` value accepted, in bytes.
pub const MAX_CONTENT_DIGEST_LEN: usize = 1024;
/// Most covered components accepted in one signature.
pub const MAX_COMPONENTS: usize = 16;
/// Longest `keyid`, `nonce`, `alg` or `tag` accepted, in bytes.
pub const MAX_PARAM_LEN: usize = 256;
/// Longest value of one covered component accepted, in bytes.
pub const MAX_COMPONENT_VALUE_LEN: usize = 8192;

const SIGNATURE_INPUT: &str = "signature-input";
const SIGNATURE: &str = "signature";
const CONTENT_DIGEST: &str = "content-digest";

/// Why a signed request was refused. Every variant is a refusal; the HTTP layer answers
/// 401 `unauthenticated` for all of them (the detail is for logs, not for the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A header the protocol needs (`signature-input`, `signature`, `content-digest`) is absent.
    #[error("missing {0} header")]
    MissingHeader(&'static str),
    /// A header is larger than this verifier accepts.
    #[error("{0} header too large")]
    HeaderTooLarge(&'static str),
    /// `Signature-Input` is not a well-formed dictionary of inner lists of strings.
    #[error("malformed Signature-Input: {0}")]
    MalformedSignatureInput(String),
    /// `Signature` is not a well-formed dictionary of byte sequences, or lacks the label.
    #[error("malformed Signature: {0}")]
    MalformedSignature(String),
    /// `Content-Digest` is not a well-formed RFC 9530 dictionary.
    #[error("malformed Content-Digest: {0}")]
    MalformedContentDigest(String),
    /// `Content-Digest` has no `sha-256` member.
    #[error("Content-Digest has no sha-256 digest")]
    UnsupportedDigest,
    /// The body's SHA-256 is not the one in `Content-Digest`.
    #[error("Content-Digest does not match the body")]
    DigestMismatch,
    /// A covered component this verifier does not support (an unknown derived component, or
    /// a component identifier with parameters such as `;sf`, `;req`, `;bs`).
    #[error("unsupported covered component {0}")]
    UnsupportedComponent(String),
    /// The same component is covered twice.
    #[error("component {0} covered twice")]
    DuplicateComponent(String),
    /// More covered components than [`MAX_COMPONENTS`].
    #[error("too many covered components")]
    TooManyComponents,
    /// A component the protocol requires is not covered by the signature.
    #[error("{0} is not covered by the signature")]
    MissingCoverage(&'static str),
    /// A covered header field is absent from the request.
    #[error("covered field {0} is absent from the request")]
    MissingComponentValue(String),
    /// A covered component's value cannot appear in a signature base (control characters,
    /// empty or malformed derived value, too long).
    #[error("invalid value for component {0}")]
    InvalidComponentValue(String),
    /// A required signature parameter (`created`, `keyid`, `nonce`) is absent.
    #[error("missing signature parameter {0}")]
    MissingParameter(&'static str),
    /// A signature parameter has the wrong type or an unacceptable value.
    #[error("invalid signature parameter {0}")]
    InvalidParameter(&'static str),
    /// `alg` names an algorithm this verifier does not support.
    #[error("unsupported algorithm {0}")]
    UnsupportedAlgorithm(String),
    /// `alg` names an algorithm other than the one of the key.
    #[error("alg {alg} does not match the key's algorithm {key}")]
    AlgorithmMismatch {
        /// The `alg` parameter as received.
        alg: String,
        /// The algorithm of the key the caller looked up.
        key: &'static str,
    },
    /// A public key could not be decoded or is not an Ed25519 / P-256 key.
    #[error("invalid public key: {0}")]
    InvalidKey(&'static str),
    /// The signature does not verify under the key (or has the wrong length).
    #[error("signature does not verify")]
    InvalidSignature,
    /// `created` is more than [`MAX_AGE_S`] seconds in the past.
    #[error("signature too old (created {created}, now {now})")]
    Stale {
        /// The `created` parameter.
        created: i64,
        /// The server's clock.
        now: i64,
    },
    /// `created` is more than [`MAX_CLOCK_SKEW_S`] seconds in the future.
    #[error("signature created in the future (created {created}, now {now})")]
    CreatedInFuture {
        /// The `created` parameter.
        created: i64,
        /// The server's clock.
        now: i64,
    },
    /// The optional `expires` parameter is in the past.
    #[error("signature expired (expires {expires}, now {now})")]
    Expired {
        /// The `expires` parameter.
        expires: i64,
        /// The server's clock.
        now: i64,
    },
}

/// What the verifier needs from an HTTP request before its body, independent of the HTTP
/// library: every part of a [`SignedRequest`] but the body.
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    /// As [`SignedRequest::method`].
    pub method: &'a str,
    /// As [`SignedRequest::authority`].
    pub authority: &'a str,
    /// As [`SignedRequest::path`].
    pub path: &'a str,
    /// As [`SignedRequest::query`].
    pub query: Option<&'a str>,
    /// As [`SignedRequest::headers`].
    pub headers: &'a [(&'a str, &'a str)],
}

/// What the verifier needs from an HTTP request, independent of the HTTP library.
#[derive(Debug, Clone, Copy)]
pub struct SignedRequest<'a> {
    /// The method as received, e.g. `POST` (not case-normalised, RFC 9421 §2.2.1).
    pub method: &'a str,
    /// The authority the agent addressed, `host[:port]` without a default port (`:443` for
    /// https). Lowercased here. Behind a proxy, pass the service's configured public
    /// authority, not a forwarded header.
    pub authority: &'a str,
    /// The path as received (still percent-encoded); empty is taken as `/`.
    pub path: &'a str,
    /// The query as received, without the leading `?`; `None` (or empty) when there is none.
    pub query: Option<&'a str>,
    /// Request header fields as `(name, value)`. Names are matched case-insensitively; a
    /// field sent on several lines appears several times, in order.
    pub headers: &'a [(&'a str, &'a str)],
    /// The exact body bytes; `None` or empty when there is no body.
    pub body: Option<&'a [u8]>,
}

/// Signature algorithms this verifier supports (RFC 9421 §3.3 names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// `ed25519` (RFC 9421 §3.3.6).
    Ed25519,
    /// `ecdsa-p256-sha256` (RFC 9421 §3.3.4), signature as raw `r || s`.
    EcdsaP256Sha256,
}

impl Algorithm {
    /// The RFC 9421 `alg` name.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Ed25519 => "ed25519",
            Algorithm::EcdsaP256Sha256 => "ecdsa-p256-sha256",
        }
    }

    /// The algorithm with this RFC 9421 `alg` name, if supported.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "ed25519" => Some(Algorithm::Ed25519),
            "ecdsa-p256-sha256" => Some(Algorithm::EcdsaP256Sha256),
            _ => None,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The signature parameters of the (first) signature, as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureParams {
    /// The signature's label in `Signature-Input` / `Signature` (normally `sig1`).
    pub label: String,
    /// `keyid`: the key's id from enrolment or renewal (the certificate serial, lowercase hex).
    pub key_id: String,
    /// `created`, Unix seconds.
    pub created: i64,
    /// `expires`, Unix seconds, when the agent set it.
    pub expires: Option<i64>,
    /// `nonce`: unique per key within the replay window; the caller checks it.
    pub nonce: String,
    /// `alg`, when the agent set it (already checked to be a supported name).
    pub alg: Option<Algorithm>,
    /// `tag`, when the agent set it.
    pub tag: Option<String>,
    /// The covered component identifiers, in order (`@method`, `content-digest`, …).
    pub components: Vec<String>,
}

impl SignatureParams {
    /// [`check_fresh`] on `created`, and refuses an `expires` in the past.
    pub fn check_fresh(&self, now: i64) -> Result<(), SignatureError> {
        check_fresh(self.created, now)?;
        match self.expires {
            Some(expires) if now > expires => Err(SignatureError::Expired { expires, now }),
            _ => Ok(()),
        }
    }

    /// The last moment (Unix seconds) at which this signature can still pass
    /// [`check_fresh`]: a nonce store needs to remember `(key_id, nonce)` until then.
    pub fn replay_window_end(&self) -> i64 {
        self.created.saturating_add(MAX_AGE_S)
    }
}

/// The outcome of [`parse_head`] (or [`parse`]): everything needed to verify, once the caller
/// has the key, and what the body must turn out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedSignature {
    /// The signature parameters.
    pub params: SignatureParams,
    /// The signature bytes from the `Signature` header.
    pub signature: Vec<u8>,
    /// The signature base rebuilt per RFC 9421 §2.5.
    pub base: String,
    /// What the head says about the body.
    pub body: ExpectedBody,
}

impl ParsedSignature {
    /// Checks that `alg` (if present) matches the key type, then the signature over the base.
    /// Freshness is separate: [`SignatureParams::check_fresh`].
    pub fn verify(&self, key: &PublicKey) -> Result<(), SignatureError> {
        check_alg(self.params.alg, key)?;
        verify(&self.base, &self.signature, key)
    }

    /// A check to feed the body through as it arrives.
    pub fn body_check(&self) -> BodyCheck {
        BodyCheck {
            expected: self.body.clone(),
            hasher: Sha256::new(),
            seen: 0,
        }
    }
}

/// What the head of a request says about its body: the SHA-256 announced in `Content-Digest`
/// (when the header is present) and whether the signature covers that header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedBody {
    sha256: Option<Vec<u8>>,
    covered: bool,
}

/// The body of a signed request, checked as it is read: [`BodyCheck::update`] with each piece
/// in order, then [`BodyCheck::finish`].
#[derive(Debug, Clone)]
pub struct BodyCheck {
    expected: ExpectedBody,
    hasher: Sha256,
    seen: u64,
}

impl BodyCheck {
    /// Takes the next piece of the body. The first non-empty piece of a body whose signature
    /// does not cover `content-digest`, or that came without one, is refused at once.
    pub fn update(&mut self, piece: &[u8]) -> Result<(), SignatureError> {
        if piece.is_empty() {
            return Ok(());
        }
        if self.seen == 0 {
            if !self.expected.covered {
                return Err(SignatureError::MissingCoverage(CONTENT_DIGEST));
            }
            if self.expected.sha256.is_none() {
                return Err(SignatureError::MissingHeader(CONTENT_DIGEST));
            }
        }
        self.hasher.update(piece);
        self.seen = self.seen.saturating_add(piece.len() as u64);
        Ok(())
    }

    /// The body is complete: whenever a `Content-Digest` was sent, it must be the body's.
    pub fn finish(self) -> Result<(), SignatureError> {
        match self.expected.sha256 {
            Some(expected) if expected.as_slice() != self.hasher.finalize().as_slice() => {
                Err(SignatureError::DigestMismatch)
            }
            _ => Ok(()),
        }
    }
}

/// Refuses a `created` more than [`MAX_AGE_S`] seconds before `now` or more than
/// [`MAX_CLOCK_SKEW_S`] seconds after it (both bounds inclusive: exactly 300 s passes).
pub fn check_fresh(created: i64, now: i64) -> Result<(), SignatureError> {
    if now.saturating_sub(created) > MAX_AGE_S {
        return Err(SignatureError::Stale { created, now });
    }
    if created.saturating_sub(now) > MAX_CLOCK_SKEW_S {
        return Err(SignatureError::CreatedInFuture { created, now });
    }
    Ok(())
}

/// Parses the first signature of the request, checks the coverage the protocol requires and
/// the Content-Digest against the body, and rebuilds the signature base: [`parse_head`] and
/// [`ParsedSignature::body_check`] for a body already in memory.
///
/// Required coverage: `@method`, `@authority`, `@path`; `@query` when the request has a
/// (non-empty) query; `content-digest` when it has a (non-empty) body. Whenever a
/// `Content-Digest` header is present it must carry the SHA-256 of the body bytes.
/// Other header fields may be covered as well; derived components other than those four
/// are refused.
pub fn parse(req: &SignedRequest<'_>) -> Result<ParsedSignature, SignatureError> {
    let parsed = parse_head(&RequestHead {
        method: req.method,
        authority: req.authority,
        path: req.path,
        query: req.query,
        headers: req.headers,
    })?;
    let mut body = parsed.body_check();
    body.update(req.body.unwrap_or_default())?;
    body.finish()?;
    Ok(parsed)
}

/// [`parse`] without the body: everything that can be checked before the body is read. The
/// caller verifies the signature, then reads the body through [`ParsedSignature::body_check`].
pub fn parse_head(req: &RequestHead<'_>) -> Result<ParsedSignature, SignatureError> {
    // Signature-Input: a dictionary; the first member must be an inner list of strings.
    let input = header_value(req.headers, SIGNATURE_INPUT)?
        .ok_or(SignatureError::MissingHeader(SIGNATURE_INPUT))?;
    if input.len() > MAX_SIGNATURE_INPUT_LEN {
        return Err(SignatureError::HeaderTooLarge(SIGNATURE_INPUT));
    }
    let dict: Dictionary = Parser::new(&input)
        .with_version(Version::Rfc8941)
        .parse()
        .map_err(|e| SignatureError::MalformedSignatureInput(e.to_string()))?;
    let (label, entry) = dict
        .first()
        .ok_or_else(|| SignatureError::MalformedSignatureInput("no signature".to_owned()))?;
    let label = label.as_str().to_owned();
    let inner = match entry {
        ListEntry::InnerList(inner) => inner,
        ListEntry::Item(_) => {
            return Err(SignatureError::MalformedSignatureInput(
                "member is not an inner list".to_owned(),
            ));
        }
    };
    if inner.items.len() > MAX_COMPONENTS {
        return Err(SignatureError::TooManyComponents);
    }
    let components = component_names(&inner.items)?;
    let mut params = signature_params(&inner.params, label.clone(), components)?;

    // Signature: a dictionary; the same label must be a byte sequence.
    let sig_field =
        header_value(req.headers, SIGNATURE)?.ok_or(SignatureError::MissingHeader(SIGNATURE))?;
    if sig_field.len() > MAX_SIGNATURE_LEN {
        return Err(SignatureError::HeaderTooLarge(SIGNATURE));
    }
    let sigs: Dictionary = Parser::new(&sig_field)
        .with_version(Version::Rfc8941)
        .parse()
        .map_err(|e| SignatureError::MalformedSignature(e.to_string()))?;
    let signature = match sigs.get(label.as_str()) {
        Some(ListEntry::Item(Item {
            bare_item: BareItem::ByteSequence(bytes),
            ..
        })) => bytes.clone(),
        Some(_) => {
            return Err(SignatureError::MalformedSignature(format!(
                "{label} is not a byte sequence"
            )));
        }
        None => {
            return Err(SignatureError::MalformedSignature(format!(
                "no signature labelled {label}"
            )));
        }
    };
    if signature.is_empty() {
        return Err(SignatureError::MalformedSignature(
            "empty signature".to_owned(),
        ));
    }

    // Coverage the protocol requires.
    let covers = |name: &str| params.components.iter().any(|c| c == name);
    for required in ["@method", "@authority", "@path"] {
        if !covers(required) {
            return Err(SignatureError::MissingCoverage(required));
        }
    }
    let query = req.query.filter(|q| !q.is_empty());
    if query.is_some() && !covers("@query") {
        return Err(SignatureError::MissingCoverage("@query"));
    }
    // Content-Digest, whenever present (and necessarily present when covered); the body is
    // held to it as it is read.
    let body = ExpectedBody {
        sha256: header_value(req.headers, CONTENT_DIGEST)?
            .map(|value| announced_sha256(&value))
            .transpose()?,
        covered: covers(CONTENT_DIGEST),
    };
    if body.covered && body.sha256.is_none() {
        return Err(SignatureError::MissingHeader(CONTENT_DIGEST));
    }

    // Signature base, RFC 9421 §2.5, over the serialization of this signature's parameters
    // (RFC 9421 §2.3).
    let serialized = vec![ListEntry::InnerList(inner.clone())]
        .serialize()
        .ok_or_else(|| SignatureError::MalformedSignatureInput("empty".to_owned()))?;
    let base = signature_base(req, &params.components, &serialized)?;

    params.label = label;
    Ok(ParsedSignature {
        params,
        signature,
        base,
        body,
    })
}

/// The covered component identifiers: strings without parameters, each a supported derived
/// component or a lowercase field name, no duplicates.
fn component_names(items: &[Item]) -> Result<Vec<String>, SignatureError> {
    let mut names: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let BareItem::String(name) = &item.bare_item else {
            return Err(SignatureError::MalformedSignatureInput(
                "component identifier is not a string".to_owned(),
            ));
        };
        let name = name.as_str();
        if !item.params.is_empty() {
            return Err(SignatureError::UnsupportedComponent(name.to_owned()));
        }
        if let Some(derived) = name.strip_prefix('@') {
            if !matches!(derived, "method" | "authority" | "path" | "query") {
                return Err(SignatureError::UnsupportedComponent(name.to_owned()));
            }
        } else if name.is_empty()
            || !name.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&b)
            })
        {
            return Err(SignatureError::UnsupportedComponent(name.to_owned()));
        }
        if names.iter().any(|n| n == name) {
            return Err(SignatureError::DuplicateComponent(name.to_owned()));
        }
        names.push(name.to_owned());
    }
    Ok(names)
}

fn signature_params(
    raw: &sfv::Parameters,
    label: String,
    components: Vec<String>,
) -> Result<SignatureParams, SignatureError> {
    let int = |key: &'static str| -> Result<Option<i64>, SignatureError> {
        match raw.get(key) {
            None => Ok(None),
            Some(BareItem::Integer(i)) => {
                let v = i64::from(*i);
                if v < 0 {
                    Err(SignatureError::InvalidParameter(key))
                } else {
                    Ok(Some(v))
                }
            }
            Some(_) => Err(SignatureError::InvalidParameter(key)),
        }
    };
    let string = |key: &'static str| -> Result<Option<String>, SignatureError> {
        match raw.get(key) {
            None => Ok(None),
            Some(BareItem::String(s)) => {
                let s = s.as_str();
                if s.is_empty() || s.len() > MAX_PARAM_LEN {
                    Err(SignatureError::InvalidParameter(key))
                } else {
                    Ok(Some(s.to_owned()))
                }
            }
            Some(_) => Err(SignatureError::InvalidParameter(key)),
        }
    };
    let created = int("created")?.ok_or(SignatureError::MissingParameter("created"))?;
    let expires = int("expires")?;
    let key_id = string("keyid")?.ok_or(SignatureError::MissingParameter("keyid"))?;
    let nonce = string("nonce")?.ok_or(SignatureError::MissingParameter("nonce"))?;
    let tag = string("tag")?;
    let alg = match string("alg")? {
        None => None,
        Some(name) => {
            Some(Algorithm::from_name(&name).ok_or(SignatureError::UnsupportedAlgorithm(name))?)
        }
    };
    // Other parameters are ignored: they are still covered through @signature-params.
    Ok(SignatureParams {
        label,
        key_id,
        created,
        expires,
        nonce,
        alg,
        tag,
        components,
    })
}

/// The `sha-256` member of a Content-Digest (RFC 9530).
fn announced_sha256(value: &str) -> Result<Vec<u8>, SignatureError> {
    if value.len() > MAX_CONTENT_DIGEST_LEN {
        return Err(SignatureError::HeaderTooLarge(CONTENT_DIGEST));
    }
    let dict: Dictionary = Parser::new(value)
        .with_version(Version::Rfc8941)
        .parse()
        .map_err(|e| SignatureError::MalformedContentDigest(e.to_string()))?;
    match dict.get("sha-256") {
        Some(ListEntry::Item(Item {
            bare_item: BareItem::ByteSequence(digest),
            ..
        })) => Ok(digest.clone()),
        Some(_) => Err(SignatureError::MalformedContentDigest(
            "sha-256 is not a byte sequence".to_owned(),
        )),
        None => Err(SignatureError::UnsupportedDigest),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::signature::content_digest;
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as BASE64;
    use ed25519_dalek::Signer as _;
    use p256::elliptic_curve::Generate as _;

    // A copy of ../shared/spec/vectors/rfc9421-check-in.json, so the crate builds on its own.
    const VECTOR: &str = include_str!("../../testdata/rfc9421-check-in.json");

    struct Vector {
        seed: [u8; 32],
        public_raw: Vec<u8>,
        spki_der: Vec<u8>,
        method: String,
        authority: String,
        path: String,
        query: Option<String>,
        body: Vec<u8>,
        headers: Vec<(String, String)>,
        base: String,
        signature: Vec<u8>,
        created: i64,
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn vector() -> Vector {
        let v: serde_json::Value = serde_json::from_str(VECTOR).unwrap();
        let req = &v["request"];
        let url = url::Url::parse(req["url"].as_str().unwrap()).unwrap();
        let authority = match url.port() {
            Some(p) => format!("{}:{p}", url.host_str().unwrap()),
            None => url.host_str().unwrap().to_owned(),
        };
        let headers = req["headers"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.as_str().unwrap().to_owned()))
            .collect();
        let pem = v["public_key_pem"].as_str().unwrap();
        let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let params = req["headers"]["Signature-Input"].as_str().unwrap();
        let created = params
            .split(';')
            .find_map(|p| p.strip_prefix("created="))
            .unwrap()
            .parse()
            .unwrap();
        Vector {
            seed: hex(v["private_key_seed_hex"].as_str().unwrap())
                .try_into()
                .unwrap(),
            public_raw: hex(v["public_key_raw_hex"].as_str().unwrap()),
            spki_der: BASE64.decode(b64).unwrap(),
            method: req["method"].as_str().unwrap().to_owned(),
            authority,
            path: url.path().to_owned(),
            query: url.query().map(str::to_owned),
            body: req["body"].as_str().unwrap().as_bytes().to_vec(),
            headers,
            base: v["signature_base"].as_str().unwrap().to_owned(),
            signature: BASE64.decode(v["signature_b64"].as_str().unwrap()).unwrap(),
            created,
        }
    }

    /// An owned request whose parts the tests can change.
    #[derive(Clone)]
    struct Req {
        method: String,
        authority: String,
        path: String,
        query: Option<String>,
        headers: Vec<(String, String)>,
        body: Option<Vec<u8>>,
    }

    impl Req {
        fn from_vector(v: &Vector) -> Self {
            Req {
                method: v.method.clone(),
                authority: v.authority.clone(),
                path: v.path.clone(),
                query: v.query.clone(),
                headers: v.headers.clone(),
                body: Some(v.body.clone()),
            }
        }

        fn set(&mut self, name: &str, value: &str) {
            self.headers.retain(|(n, _)| n != name);
            self.headers.push((name.to_owned(), value.to_owned()));
        }

        fn parse(&self) -> Result<ParsedSignature, SignatureError> {
            let headers: Vec<(&str, &str)> = self
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            parse(&SignedRequest {
                method: &self.method,
                authority: &self.authority,
                path: &self.path,
                query: self.query.as_deref(),
                headers: &headers,
                body: self.body.as_deref(),
            })
        }

        /// Replaces Signature-Input with `sig1=<inner>` and signs the resulting base with the
        /// vector's Ed25519 key, so a refusal can only come from what is being tested.
        fn resign(&mut self, inner: &str, seed: &[u8; 32]) {
            self.set("signature-input", &format!("sig1={inner}"));
            self.set("signature", "sig1=:AA==:");
            let base = self.parse().unwrap().base;
            let sk = ed25519_dalek::SigningKey::from_bytes(seed);
            let sig = sk.sign(base.as_bytes()).to_bytes();
            self.set("signature", &format!("sig1=:{}:", BASE64.encode(sig)));
        }
    }

    fn vector_key(v: &Vector) -> PublicKey {
        PublicKey::from_ed25519_bytes(&v.public_raw).unwrap()
    }

    #[test]
    fn http_signature_vector_verifies_and_base_matches() {
        let v = vector();
        let parsed = Req::from_vector(&v).parse().unwrap();
        assert_eq!(parsed.base.as_bytes(), v.base.as_bytes());
        assert_eq!(parsed.signature, v.signature);
        assert_eq!(parsed.params.label, "sig1");
        assert_eq!(parsed.params.key_id, "1f2e3d4c5b6a");
        assert_eq!(parsed.params.nonce, "b6f1d2c3a4e5");
        assert_eq!(parsed.params.created, 1_795_000_000);
        assert_eq!(parsed.params.alg, None);
        assert_eq!(
            parsed.params.components,
            ["@method", "@authority", "@path", "content-digest"]
        );
        parsed.params.check_fresh(v.created).unwrap();
        parsed.verify(&vector_key(&v)).unwrap();
        // The same key from its SubjectPublicKeyInfo (the vector's PEM).
        let spki = PublicKey::from_spki_der(&v.spki_der).unwrap();
        assert_eq!(spki.algorithm(), Algorithm::Ed25519);
        assert_eq!(spki, vector_key(&v));
        parsed.verify(&spki).unwrap();
        // The Content-Digest in the vector is the one this module computes.
        assert_eq!(
            content_digest(&v.body),
            v.headers
                .iter()
                .find(|(n, _)| n == "content-digest")
                .unwrap()
                .1
        );
    }

    #[test]
    fn http_signature_header_names_are_case_insensitive_and_authority_lowercased() {
        let v = vector();
        let mut req = Req::from_vector(&v);
        req.headers = req
            .headers
            .iter()
            .map(|(n, val)| (n.to_ascii_uppercase(), val.clone()))
            .collect();
        req.authority = "Fleet.Example.COM".to_owned();
        let parsed = req.parse().unwrap();
        assert_eq!(parsed.base, v.base);
        parsed.verify(&vector_key(&v)).unwrap();
    }

    #[test]
    fn http_signature_tampered_body_is_refused() {
        let v = vector();
        let mut req = Req::from_vector(&v);
        let mut body = v.body.clone();
        body[10] ^= 1;
        req.body = Some(body.clone());
        assert_eq!(req.parse().unwrap_err(), SignatureError::DigestMismatch);
        // A body whose Content-Digest was recomputed no longer matches the signature.
        req.set("content-digest", &content_digest(&body));
        let parsed = req.parse().unwrap();
        assert_eq!(
            parsed.verify(&vector_key(&v)).unwrap_err(),
            SignatureError::InvalidSignature
        );
    }

    #[test]
    fn http_signature_changed_path_query_method_or_authority_is_refused() {
        let v = vector();
        let key = vector_key(&v);
        let mut req = Req::from_vector(&v);
        req.path = "/v1/agent/certificate".to_owned();
        assert_eq!(
            req.parse().unwrap().verify(&key).unwrap_err(),
            SignatureError::InvalidSignature
        );
        let mut req = Req::from_vector(&v);
        req.method = "PUT".to_owned();
        assert_eq!(
            req.parse().unwrap().verify(&key).unwrap_err(),
            SignatureError::InvalidSignature
        );
        let mut req = Req::from_vector(&v);
        req.authority = "fleet.example.com:8443".to_owned();
        assert_eq!(
            req.parse().unwrap().verify(&key).unwrap_err(),
            SignatureError::InvalidSignature
        );
        // A query added to a request whose signature does not cover @query.
        let mut req = Req::from_vector(&v);
        req.query = Some("a=1".to_owned());
        assert_eq!(
            req.parse().unwrap_err(),
            SignatureError::MissingCoverage("@query")
        );
    }

    #[test]
    fn http_signature_query_covered_verifies_and_changed_query_is_refused() {
        let v = vector();
        let key = vector_key(&v);
        let mut req = Req::from_vector(&v);
        req.query = Some("since=2026-01-01&x=%20y".to_owned());
        req.resign(
            r#"("@method" "@authority" "@path" "@query" "content-digest");created=1795000000;keyid="k";nonce="n1";alg="ed25519""#,
            &v.seed,
        );
        let parsed = req.parse().unwrap();
        assert!(
            parsed
                .base
                .contains("\"@query\": ?since=2026-01-01&x=%20y\n")
        );
        assert_eq!(parsed.params.alg, Some(Algorithm::Ed25519));
        parsed.verify(&key).unwrap();
        req.query = Some("since=2025-01-01&x=%20y".to_owned());
        assert_eq!(
            req.parse().unwrap().verify(&key).unwrap_err(),
            SignatureError::InvalidSignature
        );
    }

    #[test]
    fn http_signature_missing_coverage_is_refused() {
        let v = vector();
        // A body whose signature is valid over what it covers but leaves out content-digest:
        // signed without the body, then the body and its (correct) Content-Digest added.
        let mut req = Req::from_vector(&v);
        req.body = None;
        req.headers.retain(|(n, _)| n != "content-digest");
        req.resign(
            r#"("@method" "@authority" "@path");created=1795000000;keyid="k";nonce="n""#,
            &v.seed,
        );
        req.parse().unwrap().verify(&vector_key(&v)).unwrap();
        req.body = Some(v.body.clone());
        req.set("content-digest", &content_digest(&v.body));
        assert_eq!(
            req.parse().unwrap_err(),
            SignatureError::MissingCoverage("content-digest")
        );
        let cases = [
            (
                r#"("@authority" "@path" "content-digest");created=1795000000;keyid="k";nonce="n""#,
                "@method",
            ),
            (
                r#"("@method" "@path" "content-digest");created=1795000000;keyid="k";nonce="n""#,
                "@authority",
            ),
            (
                r#"("@method" "@authority" "content-digest");created=1795000000;keyid="k";nonce="n""#,
                "@path",
            ),
        ];
        for (inner, missing) in cases {
            let mut req = Req::from_vector(&v);
            req.set("signature-input", &format!("sig1={inner}"));
            assert_eq!(
                req.parse().unwrap_err(),
                SignatureError::MissingCoverage(missing),
                "{inner}"
            );
        }
        // A body without any Content-Digest header at all.
        let mut req = Req::from_vector(&v);
        req.headers.retain(|(n, _)| n != "content-digest");
        assert_eq!(
            req.parse().unwrap_err(),
            SignatureError::MissingHeader("content-digest")
        );
        // Covering a header the request does not carry.
        let mut req = Req::from_vector(&v);
        req.set(
            "signature-input",
            r#"sig1=("@method" "@authority" "@path" "content-digest" "x-missing");created=1;keyid="k";nonce="n""#,
        );
        assert_eq!(
            req.parse().unwrap_err(),
            SignatureError::MissingComponentValue("x-missing".to_owned())
        );
    }

    #[test]
    fn http_signature_body_less_request_and_extra_field_verify() {
        let v = vector();
        let mut req = Req::from_vector(&v);
        req.method = "GET".to_owned();
        req.body = None;
        req.headers.retain(|(n, _)| n != "content-digest");
        req.resign(
            r#"("@method" "@authority" "@path" "content-type");created=1795000000;keyid="k";nonce="n""#,
            &v.seed,
        );
        let parsed = req.parse().unwrap();
        assert!(parsed.base.contains("\"content-type\": application/json\n"));
        parsed.verify(&vector_key(&v)).unwrap();
    }

    #[test]
    fn http_signature_wrong_key_or_alg_is_refused() {
        let v = vector();
        let parsed = Req::from_vector(&v).parse().unwrap();
        let other = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let other = PublicKey::from_ed25519_bytes(other.verifying_key().as_bytes()).unwrap();
        assert_eq!(
            parsed.verify(&other).unwrap_err(),
            SignatureError::InvalidSignature
        );
        let p256_key = p256::ecdsa::SigningKey::generate();
        let p256_key =
            PublicKey::from_p256_sec1(&p256_key.verifying_key().to_sec1_bytes()).unwrap();
        assert_eq!(
            parsed.verify(&p256_key).unwrap_err(),
            SignatureError::InvalidSignature
        );
        // alg naming the other algorithm than the key's.
        let mut req = Req::from_vector(&v);
        req.resign(
            r#"("@method" "@authority" "@path" "content-digest");created=1795000000;keyid="k";nonce="n";alg="ecdsa-p256-sha256""#,
            &v.seed,
        );
        assert_eq!(
            req.parse().unwrap().verify(&vector_key(&v)).unwrap_err(),
            SignatureError::AlgorithmMismatch {
                alg: "ecdsa-p256-sha256".to_owned(),
                key: "ed25519"
            }
        );
        req.set(
            "signature-input",
            r#"sig1=("@method" "@authority" "@path" "content-digest");created=1;keyid="k";nonce="n";alg="hmac-sha256""#,
        );
        assert_eq!(
            req.parse().unwrap_err(),
            SignatureError::UnsupportedAlgorithm("hmac-sha256".to_owned())
        );
        // Bad keys.
        assert!(matches!(
            PublicKey::from_ed25519_bytes(&[1; 31]),
            Err(SignatureError::InvalidKey(_))
        ));
        assert!(matches!(
            PublicKey::from_p256_sec1(&[4; 65]),
            Err(SignatureError::InvalidKey(_))
        ));
        assert!(matches!(
            PublicKey::from_spki_der(b"\x30\x03\x02\x01\x00"),
            Err(SignatureError::InvalidKey(_))
        ));
    }

    #[test]
    fn http_signature_freshness() {
        let created = 1_795_000_000;
        check_fresh(created, created).unwrap();
        check_fresh(created, created + MAX_AGE_S).unwrap();
        check_fresh(created, created - MAX_CLOCK_SKEW_S).unwrap();
        assert_eq!(
            check_fresh(created, created + MAX_AGE_S + 1).unwrap_err(),
            SignatureError::Stale {
                created,
                now: created + MAX_AGE_S + 1
            }
        );
        assert!(matches!(
            check_fresh(created, created - MAX_CLOCK_SKEW_S - 1),
            Err(SignatureError::CreatedInFuture { .. })
        ));
        assert!(matches!(
            check_fresh(0, i64::MAX),
            Err(SignatureError::Stale { .. })
        ));
        assert!(matches!(
            check_fresh(i64::MAX, i64::MIN),
            Err(SignatureError::CreatedInFuture { .. })
        ));
        // The vector, one second past the window.
        let v = vector();
        let parsed = Req::from_vector(&v).parse().unwrap();
        assert!(matches!(
            parsed.params.check_fresh(v.created + 301),
            Err(SignatureError::Stale { .. })
        ));
        assert_eq!(parsed.params.replay_window_end(), v.created + MAX_AGE_S);
        // expires in the past.
        let mut req = Req::from_vector(&v);
        req.set(
            "signature-input",
            r#"sig1=("@method" "@authority" "@path" "content-digest");created=100;expires=160;keyid="k";nonce="n""#,
        );
        let params = req.parse().unwrap().params;
        params.check_fresh(150).unwrap();
        assert_eq!(
            params.check_fresh(161).unwrap_err(),
            SignatureError::Expired {
                expires: 160,
                now: 161
            }
        );
    }

    #[test]
    fn http_signature_p256_round_trip() {
        let v = vector();
        let sk = p256::ecdsa::SigningKey::generate();
        let sec1 = sk.verifying_key().to_sec1_bytes();
        let key = PublicKey::from_p256_sec1(&sec1).unwrap();
        assert_eq!(key.algorithm(), Algorithm::EcdsaP256Sha256);
        let spki = {
            use p256::pkcs8::EncodePublicKey as _;
            sk.verifying_key().to_public_key_der().unwrap()
        };
        assert_eq!(PublicKey::from_spki_der(spki.as_bytes()).unwrap(), key);

        let mut req = Req::from_vector(&v);
        req.set(
            "signature-input",
            r#"sig1=("@method" "@authority" "@path" "content-digest");created=1795000000;keyid="p";nonce="n";alg="ecdsa-p256-sha256""#,
        );
        req.set("signature", "sig1=:AA==:");
        let base = req.parse().unwrap().base;
        let sig: p256::ecdsa::Signature =
            p256::ecdsa::signature::Signer::sign(&sk, base.as_bytes());
        let raw = sig.to_bytes();
        assert_eq!(raw.len(), 64);
        req.set("signature", &format!("sig1=:{}:", BASE64.encode(raw)));
        let parsed = req.parse().unwrap();
        parsed.verify(&key).unwrap();
        // Flipping one bit of the signature, or of the base, fails.
        let mut bad = parsed.signature.clone();
        bad[5] ^= 1;
        assert_eq!(
            verify(&parsed.base, &bad, &key).unwrap_err(),
            SignatureError::InvalidSignature
        );
        assert_eq!(
            verify(&format!("{} ", parsed.base), &parsed.signature, &key).unwrap_err(),
            SignatureError::InvalidSignature
        );
        // DER-encoded ECDSA (not what RFC 9421 sends) is refused.
        let der = sig.to_der();
        assert_eq!(
            verify(&parsed.base, der.as_bytes(), &key).unwrap_err(),
            SignatureError::InvalidSignature
        );
        // An Ed25519 key refuses it.
        assert_eq!(
            parsed.verify(&vector_key(&v)).unwrap_err(),
            SignatureError::AlgorithmMismatch {
                alg: "ecdsa-p256-sha256".to_owned(),
                key: "ed25519"
            }
        );
    }

    type Check = fn(&SignatureError) -> bool;

    #[test]
    fn http_signature_malformed_signature_input_is_refused() {
        let v = vector();
        let long = format!(
            r#"sig1=("@method" "@authority" "@path" "content-digest");created=1;keyid="k";nonce="{}""#,
            "n".repeat(MAX_SIGNATURE_INPUT_LEN)
        );
        let many = format!(
            "sig1=({});created=1;keyid=\"k\";nonce=\"n\"",
            (0..=MAX_COMPONENTS)
                .map(|i| format!("\"x-{i}\""))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let ok = r#"("@method" "@authority" "@path" "content-digest")"#;
        let cases: Vec<(String, Check)> = vec![
            ("".into(), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            ("sig1".into(), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            ("sig1=".into(), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            ("sig1=(".into(), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            (r#"sig1=("@method""#.into(), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            (r#"sig1="@method""#.into(), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            ("sig1=(@method @path)".into(), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            (r#"sig1=("@method" 1)"#.into(), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            (r#"sig1=("@method" :AAAA:)"#.into(), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            (format!("SIG1={ok};created=1"), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            (format!("sig1={ok};created=1;;"), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            (format!("sig1={ok},"), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            ("sig1=(\"@m\u{e9}thod\")".into(), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            ("sig1=(\"@method\u{0}\")".into(), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            (r#"sig1=("\q")"#.into(), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            (format!("sig1={ok};created=@1;keyid=\"k\";nonce=\"n\""), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            (format!("sig1={ok};created=1;keyid=%\"k\";nonce=\"n\""), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            (format!("sig1={ok};created=9999999999999999;keyid=\"k\";nonce=\"n\""), |e| matches!(e, SignatureError::MalformedSignatureInput(_))),
            (long, |e| *e == SignatureError::HeaderTooLarge("signature-input")),
            (many, |e| *e == SignatureError::TooManyComponents),
            (format!("sig1={ok}"), |e| *e == SignatureError::MissingParameter("created")),
            (format!("sig1={ok};created=1;nonce=\"n\""), |e| *e == SignatureError::MissingParameter("keyid")),
            (format!("sig1={ok};created=1;keyid=\"k\""), |e| *e == SignatureError::MissingParameter("nonce")),
            (format!("sig1={ok};created=abc;keyid=\"k\";nonce=\"n\""), |e| *e == SignatureError::InvalidParameter("created")),
            (format!("sig1={ok};created=1.5;keyid=\"k\";nonce=\"n\""), |e| *e == SignatureError::InvalidParameter("created")),
            (format!("sig1={ok};created=-1;keyid=\"k\";nonce=\"n\""), |e| *e == SignatureError::InvalidParameter("created")),
            (format!("sig1={ok};created=\"1\";keyid=\"k\";nonce=\"n\""), |e| *e == SignatureError::InvalidParameter("created")),
            (format!("sig1={ok};created=1;keyid=k;nonce=\"n\""), |e| *e == SignatureError::InvalidParameter("keyid")),
            (format!("sig1={ok};created=1;keyid=\"\";nonce=\"n\""), |e| *e == SignatureError::InvalidParameter("keyid")),
            (format!("sig1={ok};created=1;keyid=\"k\";nonce=?1"), |e| *e == SignatureError::InvalidParameter("nonce")),
            (format!("sig1={ok};created=1;keyid=\"k\";nonce=\"{}\"", "n".repeat(MAX_PARAM_LEN + 1)), |e| *e == SignatureError::InvalidParameter("nonce")),
            (format!("sig1={ok};created=1;keyid=\"k\";nonce=\"n\";alg=ed25519"), |e| *e == SignatureError::InvalidParameter("alg")),
            (format!("sig1={ok};created=1;keyid=\"k\";nonce=\"n\";expires=x"), |e| *e == SignatureError::InvalidParameter("expires")),
            (r#"sig1=("@method" "@authority" "@path" "content-digest" "@method");created=1;keyid="k";nonce="n""#.into(), |e| *e == SignatureError::DuplicateComponent("@method".into())),
            (r#"sig1=("@method" "@authority" "@path" "content-digest";sf);created=1;keyid="k";nonce="n""#.into(), |e| *e == SignatureError::UnsupportedComponent("content-digest".into())),
            (r#"sig1=("@method" "@authority" "@path" "content-digest" "@target-uri");created=1;keyid="k";nonce="n""#.into(), |e| *e == SignatureError::UnsupportedComponent("@target-uri".into())),
            (r#"sig1=("@method" "@authority" "@path" "content-digest" "@signature-params");created=1;keyid="k";nonce="n""#.into(), |e| *e == SignatureError::UnsupportedComponent("@signature-params".into())),
            (r#"sig1=("@method" "@authority" "@path" "Content-Digest");created=1;keyid="k";nonce="n""#.into(), |e| *e == SignatureError::UnsupportedComponent("Content-Digest".into())),
            (r#"sig1=("@method" "@authority" "@path" "");created=1;keyid="k";nonce="n""#.into(), |e| *e == SignatureError::UnsupportedComponent(String::new())),
            (r#"sig1=("@method" "@authority" "@path" "a b");created=1;keyid="k";nonce="n""#.into(), |e| *e == SignatureError::UnsupportedComponent("a b".into())),
            (r#"sig1=();created=1;keyid="k";nonce="n""#.into(), |e| *e == SignatureError::MissingCoverage("@method")),
        ];
        for (input, check) in cases {
            let mut req = Req::from_vector(&v);
            req.set("signature-input", &input);
            let err = req.parse().unwrap_err();
            assert!(check(&err), "{input:?} gave {err:?}");
        }
        let mut req = Req::from_vector(&v);
        req.headers.retain(|(n, _)| n != "signature-input");
        assert_eq!(
            req.parse().unwrap_err(),
            SignatureError::MissingHeader("signature-input")
        );
    }

    #[test]
    fn http_signature_malformed_signature_and_digest_are_refused() {
        let v = vector();
        let good = v
            .headers
            .iter()
            .find(|(n, _)| n == "signature")
            .unwrap()
            .1
            .clone();
        let cases: Vec<(String, Check)> = vec![
            ("".into(), |e| {
                matches!(e, SignatureError::MalformedSignature(_))
            }),
            ("sig1".into(), |e| {
                matches!(e, SignatureError::MalformedSignature(_))
            }),
            ("sig1=abc".into(), |e| {
                matches!(e, SignatureError::MalformedSignature(_))
            }),
            ("sig1=:not base64!:".into(), |e| {
                matches!(e, SignatureError::MalformedSignature(_))
            }),
            ("sig1=:AAAA".into(), |e| {
                matches!(e, SignatureError::MalformedSignature(_))
            }),
            ("sig1=::".into(), |e| {
                matches!(e, SignatureError::MalformedSignature(_))
            }),
            ("sig1=(:AAAA:)".into(), |e| {
                matches!(e, SignatureError::MalformedSignature(_))
            }),
            ("sig1=\"AAAA\"".into(), |e| {
                matches!(e, SignatureError::MalformedSignature(_))
            }),
            (good.replace("sig1", "sig2"), |e| {
                matches!(e, SignatureError::MalformedSignature(_))
            }),
            (format!("{good}, {}", "x".repeat(MAX_SIGNATURE_LEN)), |e| {
                *e == SignatureError::HeaderTooLarge("signature")
            }),
        ];
        for (input, check) in cases {
            let mut req = Req::from_vector(&v);
            req.set("signature", &input);
            let err = req.parse().unwrap_err();
            assert!(check(&err), "{input:?} gave {err:?}");
        }
        // Well-formed but the wrong length: refused at verification.
        let mut req = Req::from_vector(&v);
        req.set("signature", "sig1=:AAAA:");
        assert_eq!(
            req.parse().unwrap().verify(&vector_key(&v)).unwrap_err(),
            SignatureError::InvalidSignature
        );
        // A second signature after sig1 is ignored.
        let mut req = Req::from_vector(&v);
        req.headers.push(("signature".into(), "sig2=:AAAA:".into()));
        req.parse().unwrap().verify(&vector_key(&v)).unwrap();
        let mut req = Req::from_vector(&v);
        req.headers.retain(|(n, _)| n != "signature");
        assert_eq!(
            req.parse().unwrap_err(),
            SignatureError::MissingHeader("signature")
        );

        let digests: Vec<(String, Check)> = vec![
            ("sha-256".into(), |e| {
                matches!(e, SignatureError::MalformedContentDigest(_))
            }),
            ("sha-256=abc".into(), |e| {
                matches!(e, SignatureError::MalformedContentDigest(_))
            }),
            ("sha-256=:%%:".into(), |e| {
                matches!(e, SignatureError::MalformedContentDigest(_))
            }),
            ("sha-512=:AAAA:".into(), |e| {
                *e == SignatureError::UnsupportedDigest
            }),
            ("sha-256=:AAAA:".into(), |e| {
                *e == SignatureError::DigestMismatch
            }),
            (content_digest(b"other"), |e| {
                *e == SignatureError::DigestMismatch
            }),
            (
                format!("sha-256=:{}:", "A".repeat(MAX_CONTENT_DIGEST_LEN)),
                |e| *e == SignatureError::HeaderTooLarge("content-digest"),
            ),
        ];
        for (input, check) in digests {
            let mut req = Req::from_vector(&v);
            req.set("content-digest", &input);
            let err = req.parse().unwrap_err();
            assert!(check(&err), "{input:?} gave {err:?}");
        }
    }

    #[test]
    fn http_signature_invalid_derived_values_are_refused() {
        let v = vector();
        for (field, value) in [
            ("method", ""),
            ("method", "PO ST"),
            ("authority", ""),
            ("authority", "fleet.example.com/evil"),
            ("authority", "a\nb"),
            ("path", "v1/agent"),
            ("path", "/v1\n\"@method\": GET"),
        ] {
            let mut req = Req::from_vector(&v);
            match field {
                "method" => req.method = value.to_owned(),
                "authority" => req.authority = value.to_owned(),
                _ => req.path = value.to_owned(),
            }
            assert!(
                matches!(req.parse(), Err(SignatureError::InvalidComponentValue(_))),
                "{field}={value:?}"
            );
        }
        let mut req = Req::from_vector(&v);
        req.set("content-type", "a\r\nb");
        req.set(
            "signature-input",
            r#"sig1=("@method" "@authority" "@path" "content-digest" "content-type");created=1;keyid="k";nonce="n""#,
        );
        assert_eq!(
            req.parse().unwrap_err(),
            SignatureError::InvalidComponentValue("content-type".to_owned())
        );
    }

    /// Pseudo-random strings built from Structured Field punctuation never panic.
    #[test]
    fn http_signature_head_first_then_the_body_in_pieces() {
        let v = vector();
        let mut req = Req::from_vector(&v);
        req.body = None;
        let headers: Vec<(&str, &str)> = req
            .headers
            .iter()
            .map(|(n, val)| (n.as_str(), val.as_str()))
            .collect();
        let head = RequestHead {
            method: &req.method,
            authority: &req.authority,
            path: &req.path,
            query: req.query.as_deref(),
            headers: &headers,
        };
        let parsed = parse_head(&head).unwrap();
        assert_eq!(parsed.base, v.base);
        parsed.verify(&vector_key(&v)).unwrap();
        // The body as it arrives, in uneven pieces.
        let mut check = parsed.body_check();
        for piece in v.body.chunks(7) {
            check.update(piece).unwrap();
        }
        check.finish().unwrap();
        // One byte different: refused once the body is complete.
        let mut check = parsed.body_check();
        let mut changed = v.body.clone();
        changed[3] ^= 1;
        check.update(&changed).unwrap();
        assert_eq!(check.finish().unwrap_err(), SignatureError::DigestMismatch);
        // A body cut short is as wrong as a changed one.
        let mut check = parsed.body_check();
        check.update(&v.body[..v.body.len() - 1]).unwrap();
        assert_eq!(check.finish().unwrap_err(), SignatureError::DigestMismatch);

        // A signature that does not cover content-digest refuses the body's first byte, before
        // any more is read.
        let mut bare = Req::from_vector(&v);
        bare.body = None;
        bare.headers.retain(|(n, _)| n != "content-digest");
        bare.resign(
            r#"("@method" "@authority" "@path");created=1795000000;keyid="k";nonce="n""#,
            &v.seed,
        );
        let parsed = bare.parse().unwrap();
        let mut check = parsed.body_check();
        check.update(b"").unwrap();
        assert_eq!(
            check.update(b"{").unwrap_err(),
            SignatureError::MissingCoverage("content-digest")
        );
        // Without a body it is complete and fine.
        parsed.body_check().finish().unwrap();
    }

    #[test]
    fn http_signature_fuzz_never_panics() {
        let v = vector();
        let alphabet: Vec<char> = "sig1=()\";:,*?@-.AZaz09+/ \t\\%\u{e9}\u{0}createdkeyidnonce"
            .chars()
            .collect();
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..3000 {
            let len = (next() % 80) as usize;
            let s: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            let mut req = Req::from_vector(&v);
            match next() % 3 {
                0 => req.set("signature-input", &s),
                1 => req.set("signature", &s),
                _ => req.set("content-digest", &s),
            }
            if let Ok(p) = req.parse() {
                let _ = p.verify(&vector_key(&v));
            }
        }
    }
}
