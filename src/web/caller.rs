//! Who is calling: the caller `auth` authenticated (name, role, address, session, owner), as
//! handlers and the page chrome take it from the request.

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::http::request::Parts;

use crate::archive::{Actor, Role};
use crate::web::AppError;

/// The authenticated caller of a request, put there by
/// [`authenticate`](crate::web::auth::authenticate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub role: Role,
    /// The client's address.
    pub source: Option<String>,
    /// Signed in with a session cookie (shows a sign-out button).
    pub session: bool,
    /// The user this caller acts for (a token's owner): what they make is theirs.
    pub owner: Option<String>,
}

impl Caller {
    pub fn actor(&self) -> Actor {
        Actor {
            name: self.name.clone(),
            source: self.source.clone(),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| AppError::Unauthorized("sign in first".into()))
    }
}

/// A public route's caller, when someone signed in is calling.
impl<S: Send + Sync> OptionalFromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Caller>().cloned())
    }
}
