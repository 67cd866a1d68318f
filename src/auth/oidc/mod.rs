//! `--auth oidc`: signing in at an OpenID provider with the authorization code flow and PKCE
//! (the `openidconnect` crate checks the ID token: signature, issuer, audience, expiry,
//! nonce), its HTTP through `support::http` (no redirect followed), and the grants a user's
//! groups give them (`roles`). What a sign-in must remember between leaving for the provider
//! and coming back is a [`Pending`], which the web keeps in the browser. Signing out there
//! too is RP-Initiated Logout 1.0 ([`Oidc::sign_out`]), where the provider offers it.

pub mod roles;

use std::time::Duration;

use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreAuthenticationFlow, CoreErrorResponseType,
    CoreGenderClaim, CoreJsonWebKey, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm,
    CoreRevocableToken, CoreRevocationErrorResponse, CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AccessTokenHash, AdditionalClaims, AuthorizationCode, Client, ClientId, ClientSecret,
    CsrfToken, EmptyExtraTokenFields, EndpointMaybeSet, EndpointNotSet, EndpointSet, IdToken,
    IdTokenFields, IssuerUrl, LogoutRequest, Nonce, OAuth2TokenResponse, PkceCodeChallenge,
    PkceCodeVerifier, PostLogoutRedirectUrl, ProviderMetadataWithLogout, RedirectUrl, Scope,
    StandardErrorResponse, StandardTokenResponse, TokenResponse,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::archive::Role;
use crate::support::http::{exchange_whole, HttpError};
pub use roles::{grants_for, Mapped, RoleMapping};

/// Each request to the provider (discovery, its keys, the token, userinfo) gets this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a provider's answer read: discovery documents and key sets are small.
const MAX_ANSWER: usize = 1024 * 1024;
/// A sign-in that has not come back from the provider within this long is started again.
pub const PENDING_SECS: i64 = 600;
/// Where the provider sends the browser back after signing out: this path of the instance,
/// beside the callback (`…/login/oidc/callback` → `…/signed-out`).
pub const SIGNED_OUT_PATH: &str = "/signed-out";
const CALLBACK_PATH: &str = "/login/oidc/callback";

/// The claims of an ID token or a userinfo answer beyond the standard ones (the crate reads
/// those): the group claim `--oidc-role-claim` names is among them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OtherClaims {
    #[serde(flatten)]
    claims: Map<String, Value>,
}

impl AdditionalClaims for OtherClaims {}

type IdFields = IdTokenFields<
    OtherClaims,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
type Tokens = StandardTokenResponse<IdFields, CoreTokenType>;
type OurIdToken = IdToken<
    OtherClaims,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
type OidcClient = Client<
    OtherClaims,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    Tokens,
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

/// The `--oidc-*` settings.
#[derive(Clone)]
pub struct OidcSettings {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    /// Where the provider sends the browser back: `…/login/oidc/callback` of this instance.
    pub redirect_url: String,
    /// Where it sends the browser back after signing out (`…/signed-out`, registered at the
    /// provider as a post-logout redirect URI); `None`: the redirect URL's, its
    /// `/login/oidc/callback` made `/signed-out`.
    pub post_logout_redirect_url: Option<String>,
    /// Asked for besides `openid`.
    pub scopes: Vec<String>,
    /// The claim that names the user (`preferred_username`, `email`, `sub`, …).
    pub name_claim: String,
    /// The claim that lists the user's groups.
    pub role_claim: String,
    pub roles: Vec<RoleMapping>,
    /// The role of a user in no mapped group; `None`: they may not sign in.
    pub default_role: Option<Role>,
}

impl std::fmt::Debug for OidcSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcSettings")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "***"))
            .field("redirect_url", &self.redirect_url)
            .field("post_logout_redirect_url", &self.post_logout_redirect_url)
            .field("scopes", &self.scopes)
            .field("name_claim", &self.name_claim)
            .field("role_claim", &self.role_claim)
            .field(
                "roles",
                &self.roles.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
            )
            .field("default_role", &self.default_role)
            .finish()
    }
}

/// Why a sign-in at the provider did not end in one here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OidcError {
    /// The provider could not be asked, or answered as no provider should (503: try later).
    #[error("the identity provider {issuer} is unavailable: {reason}")]
    Unavailable { issuer: String, reason: String },
    /// The provider refused the sign-in, or what it sent is not to be believed (401).
    #[error("{0}")]
    Refused(String),
}

/// What a sign-in must remember while the browser is at the provider: the `state` the
/// provider must send back, the nonce its ID token must hold, the PKCE verifier of the
/// challenge it was sent, where to go afterwards, and when it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub state: String,
    pub nonce: String,
    pub verifier: String,
    pub next: String,
    /// Unix seconds.
    pub started: i64,
}

impl Pending {
    pub fn expired(&self, now: i64) -> bool {
        now - self.started > PENDING_SECS || now < self.started - 60
    }
}

/// Who signed in at the provider, and what their groups give them here (`None`: nothing).
#[derive(Clone, PartialEq, Eq)]
pub struct SignedIn {
    pub name: String,
    /// Their groups, as the provider listed them.
    pub groups: Vec<String>,
    pub mapped: Option<Mapped>,
    /// The ID token the provider gave, as it came: kept with the session (on the server) to
    /// sign out at the provider as this sign-in (`id_token_hint`).
    pub id_token: String,
}

impl std::fmt::Debug for SignedIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedIn")
            .field("name", &self.name)
            .field("groups", &self.groups)
            .field("mapped", &self.mapped)
            .field("id_token", &"***")
            .finish()
    }
}

/// How signing out at the provider goes on (RP-Initiated Logout 1.0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignOut {
    /// The browser goes to `url`, the provider's `end_session_endpoint`; it comes back to the
    /// post-logout redirect URL with `state`, which only this browser may know.
    At { url: String, state: String },
    /// The provider's discovery document names no `end_session_endpoint`: its session is
    /// not Lazarus's to end.
    NotOffered,
}

/// The provider Lazarus signs people in at.
#[derive(Debug)]
pub struct Oidc {
    settings: OidcSettings,
    issuer: IssuerUrl,
    redirect: RedirectUrl,
    post_logout: PostLogoutRedirectUrl,
}

/// The crate's HTTP client: ours, which follows no redirect.
async fn http(
    request: openidconnect::HttpRequest,
) -> Result<openidconnect::HttpResponse, HttpError> {
    exchange_whole(request, MAX_ANSWER, REQUEST_TIMEOUT).await
}

/// An error and its causes, as one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let more = e.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = e.source();
    }
    text
}

/// A claim's value by name: the claim so named, else a path through nested objects
/// (`realm_access.roles`).
fn claim<'a>(claims: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    if let Some(value) = claims.get(name) {
        return Some(value);
    }
    let mut parts = name.split('.');
    let mut value = claims.get(parts.next()?)?;
    for part in parts {
        value = value.as_object()?.get(part)?;
    }
    Some(value)
}

/// A group claim's names: a list of strings, or one string.
fn group_names(value: &Value) -> Vec<String> {
    match value {
        Value::String(one) => vec![one.clone()],
        Value::Array(all) => all
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

impl Oidc {
    pub fn new(settings: OidcSettings) -> Result<Oidc, String> {
        let issuer = IssuerUrl::new(settings.issuer.clone())
            .map_err(|e| format!("--oidc-issuer {:?}: {e}", settings.issuer))?;
        let redirect = RedirectUrl::new(settings.redirect_url.clone())
            .map_err(|e| format!("--oidc-redirect-url {:?}: {e}", settings.redirect_url))?;
        if !redirect.url().path().ends_with(CALLBACK_PATH) {
            return Err(format!(
                "--oidc-redirect-url {:?}: Lazarus takes the provider's answer at \
                 /login/oidc/callback: give https://YOUR-HOST/login/oidc/callback",
                settings.redirect_url
            ));
        }
        let post_logout = match &settings.post_logout_redirect_url {
            Some(url) => url.clone(),
            None => {
                let mut url = redirect.url().clone();
                let path = url.path().strip_suffix(CALLBACK_PATH).unwrap_or_default();
                url.set_path(&format!("{path}{SIGNED_OUT_PATH}"));
                url.set_query(None);
                url.to_string()
            }
        };
        let post_logout = PostLogoutRedirectUrl::new(post_logout.clone())
            .ok()
            .filter(|u| u.url().path().ends_with(SIGNED_OUT_PATH))
            .ok_or_else(|| {
                format!(
                    "--oidc-post-logout-redirect-url {post_logout:?}: Lazarus takes the browser \
                     back from signing out at {SIGNED_OUT_PATH}: give \
                     https://YOUR-HOST{SIGNED_OUT_PATH}"
                )
            })?;
        if settings.roles.is_empty() && settings.default_role.is_none() {
            return Err(
                "--auth oidc needs --oidc-role GROUP=ROLE or --oidc-default-role: \
                 without either, nobody may sign in"
                    .into(),
            );
        }
        Ok(Oidc {
            settings,
            issuer,
            redirect,
            post_logout,
        })
    }

    pub fn settings(&self) -> &OidcSettings {
        &self.settings
    }

    /// The issuer, as pages name it.
    pub fn issuer(&self) -> &str {
        self.issuer.as_str()
    }

    fn unavailable(&self, reason: String) -> OidcError {
        OidcError::Unavailable {
            issuer: self.issuer.to_string(),
            reason,
        }
    }

    /// Where the provider sends the browser back after signing out.
    pub fn post_logout_url(&self) -> &str {
        self.post_logout.as_str()
    }

    /// The provider's discovery document and keys, asked for now (so that a rotated key is
    /// known), with its `end_session_endpoint` where it has one.
    async fn discover(&self) -> Result<ProviderMetadataWithLogout, OidcError> {
        ProviderMetadataWithLogout::discover_async(self.issuer.clone(), &http)
            .await
            .map_err(|e| self.unavailable(chain(&e)))
    }

    /// The provider's endpoints and keys, asked for now.
    async fn client(&self) -> Result<OidcClient, OidcError> {
        let metadata = self.discover().await?;
        let client = OidcClient::from_provider_metadata(
            metadata,
            ClientId::new(self.settings.client_id.clone()),
            self.settings.client_secret.clone().map(ClientSecret::new),
        )
        .set_redirect_uri(self.redirect.clone());
        Ok(client)
    }

    /// Where to send the browser to sign in, and what to remember until it comes back.
    pub async fn start(&self, next: String, now: i64) -> Result<(String, Pending), OidcError> {
        let client = self.client().await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for scope in &self.settings.scopes {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        Ok((
            url.to_string(),
            Pending {
                state: state.secret().clone(),
                nonce: nonce.secret().clone(),
                verifier: verifier.secret().clone(),
                next,
                started: now,
            },
        ))
    }

    /// Where to send the browser to end its session at the provider too, the session signed
    /// in with `id_token` (sent as `id_token_hint`; without one the provider may ask whom to
    /// sign out), and the `state` it must come back with.
    pub async fn sign_out(&self, id_token: Option<&str>) -> Result<SignOut, OidcError> {
        let metadata = self.discover().await?;
        let Some(endpoint) = metadata.additional_metadata().end_session_endpoint.clone() else {
            return Ok(SignOut::NotOffered);
        };
        let state = CsrfToken::new_random();
        let mut request = LogoutRequest::from(endpoint)
            .set_client_id(ClientId::new(self.settings.client_id.clone()))
            .set_post_logout_redirect_uri(self.post_logout.clone())
            .set_state(state.clone());
        if let Some(token) = id_token.and_then(|t| t.parse::<OurIdToken>().ok()) {
            request = request.set_id_token_hint(&token);
        }
        Ok(SignOut::At {
            url: request.http_get_url().to_string(),
            state: state.secret().clone(),
        })
    }

    /// Redeems the provider's `code` (with the PKCE verifier), checks the ID token it gives
    /// for the nonce of `pending`, and reads who signed in and their groups — from the ID
    /// token, else from the userinfo endpoint.
    pub async fn finish(&self, pending: &Pending, code: String) -> Result<SignedIn, OidcError> {
        let client = self.client().await?;
        let tokens = client
            .exchange_code(AuthorizationCode::new(code))
            .map_err(|e| self.unavailable(chain(&e)))?
            .set_pkce_verifier(PkceCodeVerifier::new(pending.verifier.clone()))
            .request_async(&http)
            .await
            .map_err(|e| match e {
                openidconnect::RequestTokenError::ServerResponse(refusal) => {
                    OidcError::Refused(format!(
                        "the identity provider did not accept this sign-in ({}{}): sign in again",
                        refusal.error().as_ref(),
                        refusal
                            .error_description()
                            .map(|d| format!(": {d}"))
                            .unwrap_or_default()
                    ))
                }
                openidconnect::RequestTokenError::Parse(e, _) => OidcError::Refused(format!(
                    "the identity provider's token answer is not one: {}",
                    chain(&e)
                )),
                other => self.unavailable(chain(&other)),
            })?;
        let id_token = tokens
            .id_token()
            .ok_or_else(|| OidcError::Refused("the identity provider sent no ID token".into()))?;
        let verifier = client.id_token_verifier();
        let refused = |e: &dyn std::error::Error| {
            OidcError::Refused(format!("the ID token is refused: {}", chain(e)))
        };
        let claims = id_token
            .claims(&verifier, &Nonce::new(pending.nonce.clone()))
            .map_err(|e| refused(&e))?;
        if let Some(expected) = claims.access_token_hash() {
            let alg = id_token.signing_alg().map_err(|e| refused(&e))?;
            let key = id_token.signing_key(&verifier).map_err(|e| refused(&e))?;
            let actual = AccessTokenHash::from_token(tokens.access_token(), alg, key)
                .map_err(|e| refused(&e))?;
            if actual != *expected {
                return Err(OidcError::Refused(
                    "the ID token is refused: its at_hash does not match the access token".into(),
                ));
            }
        }
        let mut all = match serde_json::to_value(claims) {
            Ok(Value::Object(all)) => all,
            _ => Map::new(),
        };
        let (name_claim, role_claim) = (&self.settings.name_claim, &self.settings.role_claim);
        let missing = |all: &Map<String, Value>| {
            claim(all, name_claim).is_none() || claim(all, role_claim).is_none()
        };
        if missing(&all) && client.user_info_url().is_some() {
            let info: openidconnect::UserInfoClaims<OtherClaims, CoreGenderClaim> = client
                .user_info(
                    tokens.access_token().clone(),
                    Some(claims.subject().clone()),
                )
                .map_err(|e| self.unavailable(chain(&e)))?
                .request_async(&http)
                .await
                .map_err(|e| match e {
                    openidconnect::UserInfoError::Request(e) => self.unavailable(chain(&e)),
                    other => OidcError::Refused(format!(
                        "the identity provider's userinfo answer is refused: {}",
                        chain(&other)
                    )),
                })?;
            if let Ok(Value::Object(more)) = serde_json::to_value(&info) {
                for (key, value) in more {
                    all.entry(key).or_insert(value);
                }
            }
        }
        let name = claim(&all, name_claim)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                OidcError::Refused(format!(
                    "the identity provider names nobody in the claim {name_claim:?}: set \
                     --oidc-name-claim to one it sends (preferred_username, email or sub)"
                ))
            })?
            .to_owned();
        crate::auth::check_name(&name).map_err(|e| {
            OidcError::Refused(format!(
                "the {name_claim} {name:?} cannot be a user name here: {e}"
            ))
        })?;
        let groups = claim(&all, role_claim).map(group_names).unwrap_or_default();
        let mapped = grants_for(&self.settings.roles, &groups, self.settings.default_role);
        Ok(SignedIn {
            name,
            groups,
            mapped,
            id_token: id_token.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> OidcSettings {
        OidcSettings {
            issuer: "https://login.example.com/realms/ops".into(),
            client_id: "lazarus".into(),
            client_secret: Some("s3cret-of-the-client".into()),
            redirect_url: "https://lazarus.example.com/login/oidc/callback".into(),
            post_logout_redirect_url: None,
            scopes: vec!["profile".into()],
            name_claim: "preferred_username".into(),
            role_claim: "groups".into(),
            roles: vec!["admins=admin".parse().unwrap()],
            default_role: None,
        }
    }

    #[test]
    fn settings_are_checked_and_the_secret_never_shown() {
        let oidc = Oidc::new(settings()).unwrap();
        assert!(!format!("{oidc:?}").contains("s3cret"), "{oidc:?}");
        let wrong_path = OidcSettings {
            redirect_url: "https://lazarus.example.com/callback".into(),
            ..settings()
        };
        assert!(Oidc::new(wrong_path)
            .unwrap_err()
            .contains("/login/oidc/callback"));
        let nobody = OidcSettings {
            roles: Vec::new(),
            ..settings()
        };
        assert!(Oidc::new(nobody)
            .unwrap_err()
            .contains("--oidc-default-role"));
        let wrong_sign_out = OidcSettings {
            post_logout_redirect_url: Some("https://lazarus.example.com/bye".into()),
            ..settings()
        };
        assert!(Oidc::new(wrong_sign_out)
            .unwrap_err()
            .contains("--oidc-post-logout-redirect-url"));
        let bad_issuer = OidcSettings {
            issuer: "not a url".into(),
            ..settings()
        };
        assert!(Oidc::new(bad_issuer).is_err());
    }

    #[test]
    fn the_signed_out_page_is_beside_the_callback_unless_told() {
        let at = |redirect: &str, told: Option<&str>| {
            Oidc::new(OidcSettings {
                redirect_url: redirect.into(),
                post_logout_redirect_url: told.map(str::to_owned),
                ..settings()
            })
            .unwrap()
            .post_logout_url()
            .to_owned()
        };
        assert_eq!(
            at("https://lazarus.example.com/login/oidc/callback", None),
            "https://lazarus.example.com/signed-out"
        );
        // Behind a proxy under a path, beside the callback there.
        assert_eq!(
            at(
                "https://ops.example.com:8443/lazarus/login/oidc/callback?x=1",
                None
            ),
            "https://ops.example.com:8443/lazarus/signed-out"
        );
        assert_eq!(
            at(
                "https://lazarus.example.com/login/oidc/callback",
                Some("https://other.example.com/signed-out")
            ),
            "https://other.example.com/signed-out"
        );
    }

    #[test]
    fn claims_are_found_by_name_or_path() {
        let claims: Map<String, Value> = serde_json::from_str(
            r#"{"groups": ["a", "b", 3], "role": "ops", "realm_access": {"roles": ["x"]},
                "https://example.com/groups": ["url"]}"#,
        )
        .unwrap();
        let names = |c: &str| claim(&claims, c).map(group_names).unwrap_or_default();
        assert_eq!(names("groups"), ["a", "b"]);
        assert_eq!(names("role"), ["ops"]);
        assert_eq!(names("realm_access.roles"), ["x"]);
        assert_eq!(names("https://example.com/groups"), ["url"]);
        assert!(names("missing").is_empty());
    }

    #[test]
    fn a_pending_sign_in_lasts_ten_minutes() {
        let p = Pending {
            state: "s".into(),
            nonce: "n".into(),
            verifier: "v".into(),
            next: "/".into(),
            started: 1_000,
        };
        assert!(!p.expired(1_000 + PENDING_SECS));
        assert!(p.expired(1_001 + PENDING_SECS));
        assert!(p.expired(900));
    }
}
