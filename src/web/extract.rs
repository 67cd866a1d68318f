//! Request parts as handlers want them — a JSON body, a query string, a form, an id in the
//! path — with one clear answer when they are not what the route expects: a 400 that says
//! what is wrong, or a 404 for an id that cannot exist. A page route answers with an HTML
//! page (or an htmx toast), an `/api` route with JSON.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::archive::JobAction;
use crate::web::html::{is_htmx, PageError};
use crate::web::AppError;

/// A request part that was not what the route expects, answered as the route answers.
#[derive(Debug)]
pub struct Rejected {
    error: AppError,
    /// `Some(htmx)` for a page route.
    page: Option<bool>,
}

impl Rejected {
    fn new(uri: &Uri, headers: &HeaderMap, error: AppError) -> Self {
        let api = uri.path() == "/api" || uri.path().starts_with("/api/");
        Rejected {
            error,
            page: (!api).then(|| is_htmx(headers)),
        }
    }
}

impl IntoResponse for Rejected {
    fn into_response(self) -> Response {
        match self.page {
            Some(htmx) => PageError {
                error: self.error,
                htmx,
            }
            .into_response(),
            None => self.error.into_response(),
        }
    }
}

/// A JSON body.
pub struct AppJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for AppJson<T> {
    type Rejection = Rejected;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (uri, headers) = (request.uri().clone(), request.headers().clone());
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(AppJson(value)),
            Err(e) => Err(Rejected::new(
                &uri,
                &headers,
                AppError::BadRequest(e.body_text()),
            )),
        }
    }
}

/// A form body.
pub struct AppForm<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for AppForm<T> {
    type Rejection = Rejected;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (uri, headers) = (request.uri().clone(), request.headers().clone());
        match axum::Form::<T>::from_request(request, state).await {
            Ok(axum::Form(value)) => Ok(AppForm(value)),
            Err(e) => Err(Rejected::new(
                &uri,
                &headers,
                AppError::BadRequest(e.body_text()),
            )),
        }
    }
}

/// The query string.
pub struct AppQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for AppQuery<T> {
    type Rejection = Rejected;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(AppQuery(value)),
            Err(e) => Err(Rejected::new(
                &parts.uri,
                &parts.headers,
                AppError::BadRequest(e.body_text()),
            )),
        }
    }
}

/// The path parameters, as text.
async fn path_params<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
) -> Result<Vec<String>, Rejected> {
    let params = axum::extract::Path::<Vec<(String, String)>>::from_request_parts(parts, state)
        .await
        .map_err(|e| {
            Rejected::new(
                &parts.uri,
                &parts.headers,
                AppError::NotFound(e.body_text()),
            )
        })?;
    Ok(params.0.into_iter().map(|(_, value)| value).collect())
}

/// Declares an id extractor for the route's first path parameter: the number, and the text
/// as given (for messages); what cannot be an id is a 404 naming the kind of record.
macro_rules! path_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            pub id: i64,
            /// The id as the path gave it.
            pub raw: String,
        }

        impl<S: Send + Sync> FromRequestParts<S> for $name {
            type Rejection = Rejected;

            async fn from_request_parts(
                parts: &mut Parts,
                state: &S,
            ) -> Result<Self, Self::Rejection> {
                let raw = path_params(parts, state).await?.into_iter().next().unwrap_or_default();
                match raw.parse() {
                    Ok(id) => Ok($name { id, raw }),
                    Err(_) => Err(Rejected::new(
                        &parts.uri,
                        &parts.headers,
                        AppError::NotFound(format!(concat!("no ", $what, " with id {:?}"), raw)),
                    )),
                }
            }
        }

        /// Describes the parameter for `/api/openapi.json`.
        impl utoipa::IntoParams for $name {
            fn into_params(
                _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
            ) -> Vec<utoipa::openapi::path::Parameter> {
                let id = concat!("The id of the ", $what, ", as the API gave it.");
                // Text, as the API hands ids out.
                vec![path_parameter("id", id, <String as utoipa::PartialSchema>::schema())]
            }
        }
    };
}

/// A path parameter, described for `/api/openapi.json`.
fn path_parameter(
    name: &str,
    description: &str,
    schema: utoipa::openapi::RefOr<utoipa::openapi::Schema>,
) -> utoipa::openapi::path::Parameter {
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Path)
        .required(utoipa::openapi::Required::True)
        .description(Some(description))
        .schema(Some(schema))
        .build()
}

path_id!(
    /// `{id}` of an archived message.
    MessageId,
    "archived message"
);
path_id!(
    /// `{id}` of a replay job.
    JobId,
    "replay job"
);
path_id!(
    /// `{id}` of a failure group (by cause).
    GroupId,
    "failure group"
);
path_id!(
    /// `{id}` of an API token.
    TokenId,
    "API token"
);

/// `{id}/{action}` of a replay job: start, pause, resume or cancel (checked by the plan).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobActionPath {
    pub id: i64,
    pub action: String,
}

impl utoipa::IntoParams for JobActionPath {
    fn into_params(
        provider: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        let mut params = JobId::into_params(provider);
        let actions =
            serde_json::json!({ "type": "string", "enum": JobAction::ALL.map(JobAction::as_str) });
        let actions = serde_json::from_value(actions).expect("a valid schema");
        params.push(path_parameter(
            "action",
            "What to do with the job.",
            actions,
        ));
        params
    }
}

impl<S: Send + Sync> FromRequestParts<S> for JobActionPath {
    type Rejection = Rejected;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let JobId { id, .. } = JobId::from_request_parts(parts, state).await?;
        let action = path_params(parts, state).await?.into_iter().nth(1);
        Ok(JobActionPath {
            id,
            action: action.unwrap_or_default(),
        })
    }
}
