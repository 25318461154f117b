//! The RFC 9421 signature base (§2.5) and the component values it is made of: the one place
//! the protocol builds it, for the signer ([`super::sign`]) and the verifier
//! ([`super::parse_head`]) alike, so the two cannot disagree.

use super::{MAX_COMPONENT_VALUE_LEN, RequestHead, SignatureError};

/// The signature base of a request for the covered `components` (in order) and the
/// serialization of the signature's parameters (`("@method" …);created=…;keyid="…";…`, RFC 9421
/// §2.3): one line `"<component>": <value>` per component, then the `@signature-params` line.
/// A component whose value holds a control character (other than tab) or is longer than
/// [`MAX_COMPONENT_VALUE_LEN`] cannot be signed or verified.
pub fn signature_base(
    req: &RequestHead<'_>,
    components: &[String],
    serialized_params: &str,
) -> Result<String, SignatureError> {
    let mut base = String::new();
    for name in components {
        let value = component_value(req, name)?;
        if value.len() > MAX_COMPONENT_VALUE_LEN
            || value.chars().any(|c| c.is_control() && c != '\t')
        {
            return Err(SignatureError::InvalidComponentValue(name.clone()));
        }
        base.push('"');
        base.push_str(name);
        base.push_str("\": ");
        base.push_str(&value);
        base.push('\n');
    }
    base.push_str("\"@signature-params\": ");
    base.push_str(serialized_params);
    Ok(base)
}

/// All values of a header field (name matched case-insensitively), each trimmed and joined
/// with ", " (RFC 9421 §2.1); `None` when the field is absent. Bounded in total size.
pub(super) fn header_value(
    headers: &[(&str, &str)],
    name: &str,
) -> Result<Option<String>, SignatureError> {
    let mut out: Option<String> = None;
    for (n, v) in headers {
        if !n.eq_ignore_ascii_case(name) {
            continue;
        }
        let v = v.trim_matches([' ', '\t']);
        match &mut out {
            Some(s) => {
                s.push_str(", ");
                s.push_str(v);
            }
            None => out = Some(v.to_owned()),
        }
        if out
            .as_ref()
            .is_some_and(|s| s.len() > MAX_COMPONENT_VALUE_LEN)
        {
            return Err(SignatureError::InvalidComponentValue(name.to_owned()));
        }
    }
    Ok(out)
}

/// The value of one covered component (RFC 9421 §2.1, §2.2).
fn component_value(req: &RequestHead<'_>, name: &str) -> Result<String, SignatureError> {
    let invalid = || SignatureError::InvalidComponentValue(name.to_owned());
    match name {
        "@method" => {
            if req.method.is_empty() || !req.method.bytes().all(is_tchar) {
                return Err(invalid());
            }
            Ok(req.method.to_owned())
        }
        "@authority" => {
            let a = req.authority;
            if a.is_empty()
                || !a
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:[]%".contains(&b))
            {
                return Err(invalid());
            }
            Ok(a.to_ascii_lowercase())
        }
        "@path" => {
            if req.path.is_empty() {
                Ok("/".to_owned())
            } else if req.path.starts_with('/') {
                Ok(req.path.to_owned())
            } else {
                Err(invalid())
            }
        }
        "@query" => Ok(format!("?{}", req.query.unwrap_or_default())),
        field => header_value(req.headers, field)?
            .ok_or_else(|| SignatureError::MissingComponentValue(field.to_owned())),
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
