//! Who may use each route: every route is declared with the access it needs ([`Routes`]),
//! and a request for a route nobody declared access for is refused (default deny). The table
//! is built with the router, from the same declarations, so the two cannot drift apart.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{on, MethodFilter};
use axum::Router;

use crate::archive::Role;
use crate::web::AppState;

/// What a route needs of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, signed in or not: sign-in, health probes, static assets.
    Public,
    /// A signed-in caller with at least this role on every DLQ: the route shows or changes
    /// the whole archive.
    Role(Role),
    /// A signed-in caller with at least this role on some DLQ: the route shows and changes
    /// only the DLQs on which the caller holds it (its handler leaves the others out).
    OnDlqs(Role),
}

impl Access {
    /// The role it needs, if any.
    pub fn role(self) -> Option<Role> {
        match self {
            Access::Public => None,
            Access::Role(role) | Access::OnDlqs(role) => Some(role),
        }
    }
}

pub const PUBLIC: Access = Access::Public;
/// The whole archive: callers whose rights are of some DLQs only are refused.
pub const VIEWER: Access = Access::Role(Role::Viewer);
pub const OPERATOR: Access = Access::Role(Role::Operator);
pub const ADMIN: Access = Access::Role(Role::Admin);
/// Some DLQs: what the caller's rights reach is shown or changed.
pub const DLQ_VIEWER: Access = Access::OnDlqs(Role::Viewer);
pub const DLQ_OPERATOR: Access = Access::OnDlqs(Role::Operator);

/// The access each declared route needs, by method and route pattern (as axum's
/// `MatchedPath` names it).
#[derive(Debug, Default)]
pub struct AccessTable {
    routes: HashMap<(Method, &'static str), Access>,
    /// Every declared route pattern (with any method).
    patterns: HashSet<&'static str>,
}

impl AccessTable {
    /// What `method` on the route `pattern` needs; `None`: nothing was declared, so nobody
    /// may use it. `HEAD` is answered as `GET` is. A method no declaration names on a
    /// declared route reaches no handler (the router answers 405), so it needs nothing.
    pub fn needed(&self, method: &Method, pattern: &str) -> Option<Access> {
        let method = if method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        match self.routes.get(&(method.clone(), pattern)) {
            Some(access) => Some(*access),
            None if self.patterns.contains(pattern) => Some(Access::Public),
            None => None,
        }
    }
}

impl AccessTable {
    /// Every declared route: method, pattern and the access it needs, by pattern.
    pub fn entries(&self) -> Vec<(Method, &'static str, Access)> {
        let mut all: Vec<_> = self
            .routes
            .iter()
            .map(|((method, path), access)| (method.clone(), *path, *access))
            .collect();
        all.sort_by(|a, b| (a.1, a.0.as_str()).cmp(&(b.1, b.0.as_str())));
        all
    }
}

/// The router being built, with the access table that goes with it.
pub struct Routes {
    router: Router<AppState>,
    table: AccessTable,
}

impl Default for Routes {
    fn default() -> Self {
        Routes {
            router: Router::new(),
            table: AccessTable::default(),
        }
    }
}

impl Routes {
    pub fn get<H, T>(self, access: Access, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.on(Method::GET, access, path, handler)
    }

    pub fn post<H, T>(self, access: Access, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.on(Method::POST, access, path, handler)
    }

    fn on<H, T>(mut self, method: Method, access: Access, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method.clone()).expect("GET and POST filter");
        let previous = self.table.routes.insert((method, path), access);
        self.table.patterns.insert(path);
        assert!(previous.is_none(), "{path} is declared twice");
        self.router = self.router.route(path, on(filter, handler));
        self
    }

    /// The router and its access table.
    pub fn build(self) -> (Router<AppState>, Arc<AccessTable>) {
        (self.router, Arc::new(self.table))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_needs_what_it_was_declared_with_and_others_nothing_is_allowed() {
        let (_, table) = crate::web::routes().build();
        let (get, post) = (Method::GET, Method::POST);
        assert_eq!(table.needed(&get, "/login"), Some(PUBLIC));
        assert_eq!(table.needed(&post, "/login"), Some(PUBLIC));
        assert_eq!(table.needed(&get, "/healthz"), Some(PUBLIC));
        assert_eq!(table.needed(&Method::HEAD, "/healthz"), Some(PUBLIC));
        assert_eq!(table.needed(&get, "/"), Some(DLQ_VIEWER));
        assert_eq!(table.needed(&get, "/api/messages/{id}"), Some(DLQ_VIEWER));
        assert_eq!(table.needed(&get, "/metrics"), Some(DLQ_VIEWER));
        // The broker's DLQs are of the whole instance.
        assert_eq!(table.needed(&get, "/api/dlqs"), Some(VIEWER));
        assert_eq!(
            table.needed(&post, "/api/messages/{id}/replay"),
            Some(DLQ_OPERATOR)
        );
        assert_eq!(table.needed(&post, "/messages/select"), Some(DLQ_OPERATOR));
        assert_eq!(
            table.needed(&post, "/replays/{id}/{action}"),
            Some(DLQ_OPERATOR)
        );
        assert_eq!(table.needed(&get, "/audit"), Some(ADMIN));
        assert_eq!(table.needed(&get, "/api/audit"), Some(ADMIN));
        assert_eq!(table.needed(&post, "/api/admin/tokens"), Some(ADMIN));
        // Not declared: refused, whatever the role.
        assert_eq!(table.needed(&get, "/audit/anything"), None);
        assert_eq!(table.needed(&get, "/api/admin/anything"), None);
        // A method the route does not take reaches no handler: the router's 405, for anyone.
        assert_eq!(
            table.needed(&Method::DELETE, "/api/messages/{id}"),
            Some(PUBLIC)
        );
    }
}
