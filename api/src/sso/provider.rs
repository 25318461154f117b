//! The identity provider as `openidconnect` sees it: the client type with our extra claims
//! (the groups claim's name is the connection's), and a cache of each issuer's discovery
//! document and key set, so a sign-in costs the provider only the code exchange (and userinfo
//! when the ID token has no groups). The key set is fetched again when an ID token names a key
//! (`kid`) it does not hold: providers rotate keys.
//!
//! Every call goes through the one outbound client (`platform::oidc_http`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use chrono::{DateTime, Duration, Utc};
use openidconnect::{
    AdditionalClaims, Client, ClientId, ClientSecret, EmptyExtraTokenFields, EndpointMaybeSet,
    EndpointNotSet, EndpointSet, IdTokenFields, IssuerUrl, JsonWebKeySet, RedirectUrl,
    StandardErrorResponse, StandardTokenResponse, UserInfoClaims,
    core::{
        CoreAuthDisplay, CoreAuthPrompt, CoreErrorResponseType, CoreGenderClaim, CoreJsonWebKey,
        CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm, CoreProviderMetadata,
        CoreRevocableToken, CoreRevocationErrorResponse, CoreTokenIntrospectionResponse,
        CoreTokenType,
    },
};
use platform::outbound::{Outbound, OutboundError};
use serde::{Deserialize, Serialize};

/// How long a discovery document (with its key set) is used before it is read again.
pub const METADATA_TTL: Duration = Duration::hours(1);

/// Claims beyond the standard ones, kept as JSON: the groups claim is named per connection.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct ExtraClaims {
    #[serde(flatten)]
    pub other: HashMap<String, serde_json::Value>,
}

impl AdditionalClaims for ExtraClaims {}

impl ExtraClaims {
    /// The values of claim `name`: an array of strings, or one string; none when absent.
    /// Values that are not strings are skipped.
    pub fn groups(&self, name: &str) -> Option<Vec<String>> {
        match self.other.get(name)? {
            serde_json::Value::Array(items) => Some(
                items
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect(),
            ),
            serde_json::Value::String(one) => Some(vec![one.clone()]),
            _ => None,
        }
    }
}

pub type IdTokenFieldsX = IdTokenFields<
    ExtraClaims,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
pub type IdToken = openidconnect::IdToken<
    ExtraClaims,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
pub type TokenResponse = StandardTokenResponse<IdTokenFieldsX, CoreTokenType>;
pub type UserInfo = UserInfoClaims<ExtraClaims, CoreGenderClaim>;

/// A client of one provider, built from its discovery document.
pub type OidcClient = Client<
    ExtraClaims,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    TokenResponse,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// Why a provider's documents could not be used; the words are shown to the admin who saves
/// a connection (never a secret: the URLs involved are the issuer's public ones).
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("the issuer is not a valid URL")]
    BadIssuer,
    #[error("the discovery document names another issuer ({0})")]
    OtherIssuer(String),
    #[error("the discovery document cannot be read: {0}")]
    Unreadable(String),
    #[error("the identity provider cannot be reached: {0}")]
    Unreachable(String),
}

fn describe(err: openidconnect::DiscoveryError<OutboundError>) -> ProviderError {
    use openidconnect::DiscoveryError as E;
    match err {
        E::Validation(detail) => {
            // openidconnect: "unexpected issuer URI `…` (expected `…`)".
            let named = detail
                .split('`')
                .nth(1)
                .map(str::to_owned)
                .unwrap_or(detail);
            ProviderError::OtherIssuer(named)
        }
        E::Request(outbound) => ProviderError::Unreachable(outbound.to_string()),
        E::Response(status, _, _) => {
            ProviderError::Unreadable(format!("the provider answered HTTP {status}"))
        }
        E::Parse(parse) => {
            ProviderError::Unreadable(format!("not a discovery document (at {})", parse.path()))
        }
        E::UrlParse(_) => ProviderError::BadIssuer,
        other => ProviderError::Unreadable(other.to_string()),
    }
}

struct Cached {
    metadata: Arc<CoreProviderMetadata>,
    fetched_at: DateTime<Utc>,
}

/// Discovery documents and key sets by issuer, shared by every request of the process.
#[derive(Default)]
pub struct Providers {
    cache: Mutex<HashMap<String, Cached>>,
}

impl Providers {
    fn cached(&self, issuer: &str, now: DateTime<Utc>) -> Option<Arc<CoreProviderMetadata>> {
        let cache = self.cache.lock().ok()?;
        cache
            .get(issuer)
            .filter(|c| now - c.fetched_at < METADATA_TTL)
            .map(|c| c.metadata.clone())
    }

    fn store(&self, issuer: &str, metadata: Arc<CoreProviderMetadata>, now: DateTime<Utc>) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(
                issuer.to_owned(),
                Cached {
                    metadata,
                    fetched_at: now,
                },
            );
        }
    }

    /// Reads `issuer`'s discovery document and key set now (the issuer it names must equal
    /// `issuer` exactly) and caches them.
    pub async fn discover(
        &self,
        outbound: &Outbound,
        issuer: &str,
        now: DateTime<Utc>,
    ) -> Result<Arc<CoreProviderMetadata>, ProviderError> {
        let issuer_url = IssuerUrl::new(issuer.to_owned()).map_err(|_| ProviderError::BadIssuer)?;
        let metadata = CoreProviderMetadata::discover_async(issuer_url, outbound)
            .await
            .map_err(describe)?;
        let metadata = Arc::new(metadata);
        self.store(issuer, metadata.clone(), now);
        Ok(metadata)
    }

    /// The cached documents of `issuer`, read again when older than [`METADATA_TTL`].
    pub async fn get(
        &self,
        outbound: &Outbound,
        issuer: &str,
        now: DateTime<Utc>,
    ) -> Result<Arc<CoreProviderMetadata>, ProviderError> {
        match self.cached(issuer, now) {
            Some(metadata) => Ok(metadata),
            None => self.discover(outbound, issuer, now).await,
        }
    }

    /// Fetches `issuer`'s key set again (an ID token named a key it did not hold) and keeps
    /// the rest of the cached document.
    pub async fn refresh_keys(
        &self,
        outbound: &Outbound,
        issuer: &str,
        metadata: &CoreProviderMetadata,
        now: DateTime<Utc>,
    ) -> Result<Arc<CoreProviderMetadata>, ProviderError> {
        let jwks = JsonWebKeySet::<CoreJsonWebKey>::fetch_async(metadata.jwks_uri(), outbound)
            .await
            .map_err(|e| ProviderError::Unreachable(format!("the key set: {e}")))?;
        let refreshed = Arc::new(metadata.clone().set_jwks(jwks));
        self.store(issuer, refreshed.clone(), now);
        Ok(refreshed)
    }
}

/// A client of the provider `metadata` describes, for the connection's credentials.
pub fn client(
    metadata: &CoreProviderMetadata,
    client_id: &str,
    client_secret: String,
    redirect_uri: RedirectUrl,
) -> OidcClient {
    OidcClient::from_provider_metadata(
        metadata.clone(),
        ClientId::new(client_id.to_owned()),
        Some(ClientSecret::new(client_secret)),
    )
    .set_redirect_uri(redirect_uri)
}

/// Signature algorithms an ID token may use: those the provider lists, never `none`.
pub fn allowed_algs(metadata: &CoreProviderMetadata) -> Vec<CoreJwsSigningAlgorithm> {
    metadata
        .id_token_signing_alg_values_supported()
        .iter()
        .filter(|alg| **alg != CoreJwsSigningAlgorithm::None)
        .cloned()
        .collect()
}
