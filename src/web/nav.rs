//! The page chrome as data (who is signed in, which links they may follow, the warning that
//! nobody signs in), handed to every full page's template: a viewer is never shown a link to
//! a page only admins may open.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::archive::Role;
use crate::auth::AuthMode;
use crate::web::caller::Caller;
use crate::web::AppState;

/// What the header of a page shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nav {
    /// `--auth none`: anyone who reaches the address may do anything.
    pub no_auth: bool,
    /// Who is signed in (not shown in `--auth none`, where everybody is "anonymous").
    pub name: Option<String>,
    pub role: &'static str,
    /// Signed in with a session cookie: they may sign out.
    pub session: bool,
    /// May replay and dismiss: operators and admins (viewers are not offered those actions).
    pub operator: bool,
    /// The audit log and the admin page.
    pub admin: bool,
}

impl Nav {
    pub fn new(caller: Option<&Caller>, mode: AuthMode) -> Self {
        let no_auth = mode == AuthMode::None;
        Nav {
            no_auth,
            name: caller.filter(|_| !no_auth).map(|c| c.name.clone()),
            role: caller.map_or("", |c| c.role.as_str()),
            session: caller.is_some_and(|c| c.session),
            operator: caller.is_some_and(|c| c.role >= Role::Operator),
            admin: caller.is_some_and(|c| c.role >= Role::Admin),
        }
    }
}

impl FromRequestParts<AppState> for Nav {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        Ok(Nav::new(parts.extensions.get::<Caller>(), state.auth.mode))
    }
}
