//! Signing in (`--auth users`): the sign-in page (with `--auth oidc`, its link to the
//! provider; after signing out, what became of the sessions); the password check — admitted
//! by the throttle before anything is hashed, hashed a few at a time off the async threads —
//! the session cookie (`__Host-` and `Secure` over HTTPS, with an absolute lifetime); and what
//! the audit log keeps of it, compactly: a guesser cannot flood it. Signing out is `signout`.

use askama::Template;
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

use crate::archive::Actor;
use crate::auth::{
    check_name, secret_hash, verify_password, AuthMode, AuthSettings, Failure, Refusal,
    LOGIN_WINDOW, MAX_PASSWORD_BYTES,
};
use crate::web::auth::client::client_ip;
use crate::web::auth::peer;
use crate::web::error::{with_retry_after, RETRY_AFTER_SECS};
use crate::web::html::{render, PageError};
use crate::web::nav::Nav;
use crate::web::AppState;

/// The largest sign-in form accepted: a name, a password and where to go next.
pub const MAX_LOGIN_FORM_BYTES: usize = 8 * 1024;

#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    pub nav: Nav,
    pub next: String,
    pub error: Option<String>,
    /// With `--auth oidc`: where signing in at the provider starts (no password form).
    pub provider: Option<String>,
    /// After signing out: which sessions ended, and which may not have.
    pub signed_out: Option<Notice>,
}

/// What the page says above the sign-in, in a box of its own (a warning: in amber).
pub struct Notice {
    pub text: String,
    pub warning: bool,
}

impl LoginPage {
    /// The sign-in page of `settings`' mode, back to `next` afterwards.
    pub fn new(settings: &AuthSettings, next: String, error: Option<String>) -> Self {
        let provider = settings.oidc.as_ref().map(|_| {
            format!(
                "/login/oidc?next={}",
                crate::archive::selection::query_value(&next)
            )
        });
        LoginPage {
            nav: Nav::new(None, settings.mode),
            next,
            error,
            provider,
            signed_out: None,
        }
    }

    /// The page after signing out, saying `notice`.
    pub fn signed_out(settings: &AuthSettings, notice: Notice) -> Self {
        LoginPage {
            signed_out: Some(notice),
            ..LoginPage::new(settings, "/".into(), None)
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

/// Only a path on this site may be returned to after signing in (no open redirect).
pub(crate) fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\')
                && !n.chars().any(|c| c.is_control() || c.is_whitespace()) =>
        {
            n.to_owned()
        }
        _ => "/".to_owned(),
    }
}

/// `GET /login`
pub async fn login_page(
    State(state): State<AppState>,
    axum::extract::Query(query): axum::extract::Query<LoginQuery>,
) -> Response {
    if !state.auth.sessions() {
        return Redirect::to("/").into_response();
    }
    render(&LoginPage::new(
        &state.auth,
        safe_next(query.next.as_deref()),
        None,
    ))
}

/// Never `Debug`: it holds a password.
#[derive(Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    password: String,
    next: Option<String>,
}

/// The audit line of a failure worth one (the first for a name, one that locks).
fn failure_line(name: &str, address: &str, f: &Failure) -> String {
    let minutes = LOGIN_WINDOW.as_secs() / 60;
    let mut line = if f.for_name == 1 {
        format!("failed sign-in as {name:?}")
    } else {
        format!(
            "{} failed sign-ins as {name:?} within {minutes} minutes",
            f.for_name
        )
    };
    if f.locks_name {
        line.push_str(&format!("; sign-in as {name:?} waits {minutes} minutes"));
    }
    if f.locks_address {
        line.push_str(&format!(
            "; {} failed sign-ins from {address} within {minutes} minutes, so sign-ins from it wait",
            f.for_address
        ));
    }
    line
}

/// `POST /login`: a session cookie for a right password; throttled after failures.
pub async fn login(State(state): State<AppState>, request: Request) -> Response {
    let client = client_ip(&state.auth, request.headers(), peer(&request));
    let form: Result<Form<LoginForm>, _> = Form::from_request(request, &state).await;
    let form = match form {
        Ok(Form(form)) => form,
        Err(rejection) => {
            let status = rejection.status();
            return (
                status,
                format!(
                    "send name and password as a form, of at most {MAX_LOGIN_FORM_BYTES} bytes"
                ),
            )
                .into_response();
        }
    };
    let next = safe_next(form.next.as_deref());
    let settings = state.auth.clone();
    let again = |status: StatusCode, error: String| {
        (
            status,
            render(&LoginPage::new(&settings, next.clone(), Some(error))),
        )
            .into_response()
    };
    if state.auth.mode != AuthMode::Users {
        return again(StatusCode::NOT_FOUND, "sign-in is not used here".into());
    }
    // Sizes are checked before anything is looked up, counted or written down.
    let name = form.name.trim().to_owned();
    if let Err(e) = check_name(&name) {
        return again(StatusCode::BAD_REQUEST, e);
    }
    if form.password.len() > MAX_PASSWORD_BYTES {
        return again(
            StatusCode::BAD_REQUEST,
            format!("a password has at most {MAX_PASSWORD_BYTES} bytes"),
        );
    }
    let attempt = match state.throttle.admit(&name, client) {
        Ok(attempt) => attempt,
        Err(Refusal::Locked(wait)) => {
            return again(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "too many failed sign-ins: try again in {} minutes",
                    wait.as_secs().div_ceil(60).max(1)
                ),
            )
        }
        Err(Refusal::Busy) => return with_retry_after(
            again(
                StatusCode::TOO_MANY_REQUESTS,
                "too many sign-ins for this name or address at once: try again in a few seconds"
                    .into(),
            ),
            Some(RETRY_AFTER_SECS),
        ),
    };
    let address = client.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
    let actor = Actor {
        name: name.clone(),
        source: client.map(|ip| ip.to_string()),
    };
    let user = match state.archive.user(&name).await {
        Ok(user) => user,
        Err(e) => return PageError::new(e, &HeaderMap::new()).into_response(),
    };
    let hash = user.as_ref().and_then(|u| u.password_hash.clone());
    let password = form.password;
    // An unknown user costs the same as a wrong password.
    let checked = state
        .hashing
        .run(move || match hash {
            Some(hash) => verify_password(&password, &hash),
            None => {
                let _ = crate::auth::hash_password("a password nobody has, to spend the same time");
                false
            }
        })
        .await;
    let ok = match checked {
        Ok(ok) => ok,
        Err(busy) => {
            let retry = busy.retry_after();
            return with_retry_after(
                again(StatusCode::SERVICE_UNAVAILABLE, busy.to_string()),
                retry,
            );
        }
    };
    if !ok {
        let failure = attempt.failed();
        if failure.worth_a_line() {
            let line = failure_line(&name, &address, &failure);
            let _ = state.archive.record(&actor, "login_failed", &line).await;
        }
        return again(StatusCode::UNAUTHORIZED, "wrong name or password".into());
    }
    let failed_before = attempt.succeeded();
    let secret = crate::auth::new_secret();
    if let Err(e) = state
        .archive
        .create_session(&secret_hash(&secret), &name, None)
        .await
    {
        return PageError::new(e, &HeaderMap::new()).into_response();
    }
    let line = match failed_before {
        0 => "signed in".to_owned(),
        n => format!("signed in, after {n} failed attempts"),
    };
    let _ = state.archive.record(&actor, "login", &line).await;
    let mut response = Redirect::to(&next).into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, session_cookie(&state.auth, &secret));
    response
}

/// The `Set-Cookie` of a new session whose secret is `secret`.
pub(crate) fn session_cookie(settings: &AuthSettings, secret: &str) -> HeaderValue {
    let mut cookie = format!(
        "{}={secret}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        settings.session_cookie(),
        settings.session_max.as_secs()
    );
    if settings.secure_cookies {
        cookie.push_str("; Secure");
    }
    HeaderValue::from_str(&cookie).expect("a cookie is ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_returned_to() {
        assert_eq!(safe_next(Some("/messages?q=a")), "/messages?q=a");
        assert_eq!(safe_next(Some("//evil.example")), "/");
        assert_eq!(safe_next(Some("https://evil.example")), "/");
        assert_eq!(safe_next(Some("/\\evil.example")), "/");
        assert_eq!(safe_next(Some("/\t/evil.example")), "/");
        assert_eq!(safe_next(Some("/a\r\nSet-Cookie: x")), "/");
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn repeated_failures_make_few_lines() {
        let first = Failure {
            for_name: 1,
            for_address: 1,
            locks_name: false,
            locks_address: false,
        };
        assert_eq!(
            failure_line("otto", "10.0.0.1", &first),
            "failed sign-in as \"otto\""
        );
        let lock = Failure {
            for_name: 5,
            for_address: 20,
            locks_name: true,
            locks_address: true,
        };
        let line = failure_line("otto", "10.0.0.1", &lock);
        assert!(
            line.starts_with("5 failed sign-ins as \"otto\" within 15 minutes"),
            "{line}"
        );
        assert!(line.contains("20 failed sign-ins from 10.0.0.1"), "{line}");
    }
}
